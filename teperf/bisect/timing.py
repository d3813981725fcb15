"""Bisect's search in time: both halves of every part that moved, each a paired compare (api.compare).
Trials last at least MIN_TRIAL_S, as pyperf calibrates its loops: on the CPU short trials made the spread."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, Optional

from teperf import stats
from teperf.bisect import search as bsearch
from teperf.bisect.plan import Probe
from teperf.bisect.sides import ProbeSkipped
from teperf.config import Config
from teperf.errors import TeperfError
from teperf.provenance import code_identity
from teperf.verdicts import load_text

MIN_STEP_SHARE = 0.1  # the search looks for steps of at least this share of GOOD..BAD's delta
MAX_DOUBLINGS = 2  # an undecided part is measured again with 2x, then 4x the pairs, then left undecided
# ... while it could change the answer (could_change): x-transformers on a quiet VM spent 700 s of
# 1,003 s measuring again parts that could not
MOST = 0.5  # "explained": the commits named carry at least this share of GOOD..BAD's delta
MIN_TRIAL_S = 0.1  # the parts' trials last at least this long (GOOD..BAD's step time sets their steps)
ROW_KEEP = tuple(
    """status verdict verdict_cause base_us head_us delta_us delta_pct ci_low_pct ci_high_pct ci_low_us
    ci_high_us n_pairs contended_pct load_bound_pct""".split()
)


class _PartRowReads:
    @classmethod
    def of(cls, row, **more) -> PartRow:
        """From a summary Row (teperf.records.Row)."""
        return cls(**{name: getattr(row, name) for name in ROW_KEEP}, error=row.error, **more)

    @classmethod
    def from_dict(cls, raw: Optional[dict]) -> PartRow:
        return cls(**{k: v for k, v in (raw or {}).items() if k in PART_FIELDS})

    def to_dict(self) -> dict:
        out = {name: getattr(self, name) for name in PART_FIELDS[:-2]}  # not tier and error
        if out["left"] is None:
            del out["left"]
        return out


# A part's compare as bisect keeps it: the figures of its summary Row it reads (ROW_KEEP), typed, then whether
# both ends imported identical code, its bundle, what was decided, ``left`` ("budget" or "answer": why it was
# left undecided), what the head side was built with and the error. ``to_dict`` is its object in the answer.
PART_FIELDS = (*ROW_KEEP, "same_code", "bundle", "state", "left", "tier", "error")
PartRow = dataclasses.make_dataclass(
    "PartRow", [(name, Any, None) for name in PART_FIELDS], bases=(_PartRowReads,), frozen=True, kw_only=True
)


def part_state(row: PartRow, step_us: float) -> str:
    """moved (the interval excludes zero, the delta is ``step_us`` or more) | small (it excludes zero, the
    delta is smaller: not searched, but reported) | quiet (no step that large in the interval) | undecided."""
    delta, low, high = row.delta_us, row.ci_low_us, row.ci_high_us
    if delta is None or low is None or high is None:
        return "undecided"
    if low > 0 or high < 0:
        return "moved" if abs(delta) >= step_us else "small"
    return "quiet" if max(abs(low), abs(high)) < step_us else "undecided"


def same_code(imported: dict) -> bool:
    """Whether a compare's two sides imported identical code: python, torch and the package's files hash
    the same (a docs-only commit). Its delta is noise by construction; no number of pairs can move it."""
    ids = [code_identity(facts) for facts in imported.values()]
    if len(ids) != 2 or ids[0] is None or ids[0] != ids[1]:
        return False
    return any(name != "torch" for name, _ in ids[0][2])  # torch alone is named by version, not hashed


def whole_state(row: PartRow) -> str:
    """GOOD..BAD's state: quiet when its verdict is no change, moved when its interval excludes zero."""
    return "quiet" if row.verdict == "no change" else part_state(row, 0.0)


def ci_text(row: PartRow) -> str:
    """' [low, high]' of a compare's row in us, or '' where it has no interval."""
    return "" if row.ci_low_us is None else f" [{row.ci_low_us:+.1f}, {row.ci_high_us:+.1f}]"


def row_text(row: PartRow) -> str:
    if row.delta_pct is None:
        return str(row.error or row.status)
    cause = f" ({row.verdict_cause})" if row.verdict_cause else ""
    if row.load_bound_pct is not None:  # the interval holds what load could add (verdicts.loaded)
        cause = f" ({load_text(row.contended_pct, row.load_bound_pct)})"
    return f"{row.delta_us or 0:+.1f} us{ci_text(row)} ({row.delta_pct:+.1f}%) {row.verdict}{cause}"


def pairs_to_settle(row: PartRow, step_us: float, alpha: float = 0.05) -> Optional[int]:
    """The pairs that would settle an undecided part (exclude zero, or fit under the step size), from its
    measured spread (stats.pairs_to_settle)."""
    low, high, pairs = row.ci_low_us, row.ci_high_us, row.n_pairs
    if low is None or high is None or not pairs or pairs < 2:
        return None
    delta = abs(row.delta_us or 0.0)
    return stats.pairs_to_settle((high - low) / 2, pairs, max(delta, step_us - delta), alpha)  # >= step / 2


def could_change(
    parts: list, found: list, total_us: float, step_us: float, max_pairs: int, pairs_left: float, alpha=0.05
):
    """Of the undecided ``parts``, those whose next compares could change the answer, given those ``found``:
    all while no culprit is named, or while each settles within ``max_pairs`` and all within ``pairs_left``
    (the answer could become "explained"); else those that settle within ``max_pairs`` and either reach,
    GOOD..BAD's way, past the smallest named culprit's delta or read a step's delta themselves."""
    sign = 1 if total_us >= 0 else -1
    wanted = "slower" if sign > 0 else "faster"
    named = [sign * p.row.delta_us for p in found if p.status == "step" and p.row.verdict == wanted]
    needed = [pairs_to_settle(p.row, step_us, alpha) for p in parts]
    settles = [n is not None and n <= max_pairs for n in needed]
    if not named or (all(settles) and _cost(parts, needed) <= pairs_left):
        return parts

    def changes(part) -> bool:
        low, high, delta = (sign * v for v in (part.row.ci_low_us, part.row.ci_high_us, part.row.delta_us))
        return max(low, high) > min(named) or delta >= step_us

    return [p for p, ok in zip(parts, settles) if ok and changes(p)]


def _cost(parts: list, needed: list[int]) -> int:
    """Pairs the compares that would settle ``parts`` take: each doubles its last (they do not pool)."""
    total = 0
    for part, want in zip(parts, needed):
        pairs = part.row.n_pairs
        while pairs < want:
            pairs *= 2
            total += pairs
    return total


@dataclasses.dataclass(eq=False)
class TimeSearch:
    """The timing half of a bisect (teperf.bisect.runner), over its Probe, within ``budget_s``."""

    probe: Probe
    budget_s: float
    timing_s: float = 0.0  # seconds spent in compares (what --budget bounds)
    compare_s: list = dataclasses.field(default_factory=list)  # each compare's seconds per pair
    n_compares: int = 0
    measured: dict = dataclasses.field(default_factory=dict)  # (lo, hi) -> its last compare's row
    next_pairs: dict = dataclasses.field(default_factory=dict)  # (lo, hi) -> its next compare's pairs
    budget_spent: bool = False  # a compare was not started: --budget would have run out
    trial_iters: int = 0  # steps a trial of the next compare: the config's, the parts' (refine_endpoint)

    def __post_init__(self):
        self.trial_iters = self.probe.config.schedule.iters

    def compare(self, base: int, head: int, config: Config):
        """A paired compare of two commits of the range through the normal engine -> (row, bundle path)."""
        from teperf import api

        base_side, head_side = self.probe.sides(base, head)
        path = api.compare(
            config,
            base_side,
            head_side,
            results_dir=str(self.probe.bundle.path / "compares"),
            cases=[self.probe.case],
            command=["teperf", "bisect", "(probe)"],
        )
        summary = api.summarize(path)
        tier = head_side.description.get("strategy")
        return PartRow.of(summary.rows[0], tier=tier, same_code=same_code(summary.imported)), path

    def _compare_once(self, base: int, head: int, processes: int):
        """One compare with ``processes`` pairs -> (row, bundle path, seconds) or (None, why not, seconds)."""
        sched = self.probe.config.schedule
        # an adaptive (--precision) compare gets what is left of --budget
        left = max(self.budget_s - self.timing_s, 1.0) if sched.precision_pct is not None else None
        # its own pairs (fixed) unless --precision: --budget is the bisect's, not this compare's
        kind = sched.kind if sched.precision_pct is not None else "fixed"
        sched = dataclasses.replace(
            sched, processes=processes, iters=self.trial_iters, budget_s=left, kind=kind
        )
        config = dataclasses.replace(self.probe.config, schedule=sched, counters=False)
        t0 = self.probe.clock()
        try:
            row, path = self.compare(base, head, config)
        except ProbeSkipped as exc:
            return None, exc.reason, 0.0
        except TeperfError as exc:
            return None, exc.one_line(), 0.0
        seconds = self.probe.clock() - t0
        self.timing_s += seconds
        self.compare_s.append(seconds / processes)
        if row.status not in ("ok", "partial"):
            return None, f"{row.status}: {row.error}", seconds
        return row, path, seconds

    @property
    def first_pairs(self) -> int:
        """Pairs of a part's first compare: the config's (a confirming verdict needs 3 of them)."""
        return self.probe.config.schedule.processes

    def timed(self, base: int, head: int, decide: Callable[[PartRow], str], once=False):
        """Compare base..head and ``decide`` from its row, again with twice the pairs while "undecided"
        and --budget allow -> (row, decision), (None, "skip") or (row or None, "budget"; the row says
        left: budget). ``once``: one compare, then "again" where another may follow from there."""
        first = self.first_pairs
        processes = self.next_pairs.get((base, head), first) if once else first
        kept = self.measured.get((base, head)) if once else None
        while processes <= first * 2**MAX_DOUBLINGS:
            # what is left of --budget, by the pace so far
            if self.timing_s + processes * max(self.compare_s, default=0.0) > self.budget_s:
                self.budget_spent = True
                if kept is not None:
                    kept = self.measured[(base, head)] = dataclasses.replace(kept, left="budget")
                return kept, "budget"
            row, path, seconds = self._compare_once(base, head, processes)
            if row is None:
                self.probe.record(head, "timing", "skip", seconds, detail=path, base_index=base)
                return None, "skip"
            decided = decide(row)
            rel = str(Path(path).relative_to(self.probe.bundle.path))
            self.probe.n_probes += 1
            self.n_compares += 1
            self.probe.record(
                head,
                "timing",
                decided,
                seconds,
                detail=f"{self.probe.rng.at(base).short_sha}.. {row_text(row)}",
                bundle=rel,
                base_index=base,
                processes=processes,
                iters=self.trial_iters,
                tier=row.tier,
                delta_pct=row.delta_pct,
                ci_low_pct=row.ci_low_pct,
                ci_high_pct=row.ci_high_pct,
                verdict=row.verdict,
            )
            kept = dataclasses.replace(row, bundle=rel, state=decided, n_pairs=row.n_pairs or processes)
            self.measured[(base, head)] = kept
            if decided != "undecided":
                return kept, decided
            processes = self.next_pairs[(base, head)] = processes * 2
            if once and processes <= first * 2**MAX_DOUBLINGS:
                return kept, "again"
        return kept, "undecided"

    def refine_endpoint(self, endpoint: PartRow) -> PartRow:
        """Sets the parts' trial length (MIN_TRIAL_S); where it is longer than the config's, GOOD..BAD is
        measured again with it, so that each share's denominator is as precise as its numerator."""
        ends = (endpoint.base_us, endpoint.head_us)
        fastest = min((v for v in ends if v and v > 0), default=0)
        iters = self.trial_iters
        self.trial_iters = max(iters, math.ceil(MIN_TRIAL_S * 1e6 / fastest)) if fastest else iters
        if self.trial_iters == iters:
            return endpoint
        row, state = self.timed(0, len(self.probe.rng.commits), whole_state)
        return row if state == "moved" else endpoint

    def time_search(self, endpoint: PartRow) -> list[bsearch.Part]:
        """Every step in time of GOOD..BAD (whose ``endpoint`` row moved), and the parts left."""
        step_us = MIN_STEP_SHARE * abs(endpoint.delta_us)

        def decide(lo: int, hi: int, row: PartRow) -> str:
            if row.same_code:  # no change in the package: settled, whatever the noise read
                return "identical"
            state = part_state(row, step_us)
            if state == "moved" and hi - lo == 1 and row.verdict_cause == "load":
                return "undecided"  # a step's own verdict confirms it: measured again, the load may pass
            return state

        def compare(lo: int, hi: int):
            row, state = self.timed(lo, hi, lambda r: decide(lo, hi, r), once=True)
            if state == "undecided" and row is not None and part_state(row, step_us) == "moved":
                state = "moved"  # still under load: a step, its verdict inconclusive (load), no share
            if state == "moved" and hi - lo == 1:
                self.probe.progress.steps += 1
            return row, state

        def worth(parts: list[bsearch.Part], found: list[bsearch.Part]) -> list[bsearch.Part]:
            pair_s = max(self.compare_s, default=0.0)
            left = (self.budget_s - self.timing_s) / pair_s if pair_s else math.inf
            most = self.first_pairs * 2**MAX_DOUBLINGS
            alpha = self.probe.config.stats.alpha
            return could_change(parts, found, endpoint.delta_us, step_us, most, left, alpha)

        return bsearch.find_steps(len(self.probe.rng.commits), endpoint, compare, worth)
