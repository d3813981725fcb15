"""``teperf bisect GOOD..BAD --cell MODULE/RECIPE``: the library side.

1. Counters at GOOD and BAD (one worker run each). If a counter differs,
   every change point of it between them (search.find_changes: a segment
   whose ends differ is split until each change sits on one commit), on
   exact equality, one worker run per probe (teperf.engine.probe).
2. GOOD..BAD's change attributed to those commits (attribute.py): each
   one's counter deltas and share, biggest first; those that moved the other
   way apart. GOOD..BAD and the biggest culprits, each against its parent,
   are then compared in time through the normal engine (api.compare, the
   configured schedule, counters on) until the culprits confirmed carry most
   of the change or ``budget_s`` runs out: how much of GOOD..BAD's timing
   delta the confirmed ones cover.
3. No counter differs: GOOD..BAD is compared in time first (direction and
   size of the change); then every step in time, each probe compared against
   GOOD: it differs from a segment end when their intervals do not overlap.
   A probe that overlaps both ends is measured again with twice the pairs
   while ``budget_s`` lasts, else that segment stops with its commits left.
   Each step found is confirmed against its parent, as in 2.

``result["explained"]``: True when the commits named carry the change in its
direction, False when they do not (only opposite movers, no decisive step),
None when there is nothing to explain; ``result["answer"]`` says it in a line.

A probe whose commit cannot be made runnable, or whose worker fails, is
skipped (``git bisect skip``). Everything goes into a bundle of kind
"bisect": meta.json (range, cell, plan, result) and one "probe" record per
probe in records.jsonl; each timing compare is a nested bundle under
``compares/``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from teperf import __version__
from teperf.api import Interrupted
from teperf.bisect import search as bsearch
from teperf.bisect import sides as git
from teperf.bisect.attribute import attribute, ordered
from teperf.bisect.sides import TE_PACKAGE, ProbeSkipped, SideFactory, made_with, tier_seconds
from teperf.bundle import Bundle, now_iso
from teperf.config import Config
from teperf.errors import TeperfError
from teperf.explain import counters_diff
from teperf.log import Log, stderr_logger
from teperf.plan import Case, expand
from teperf.records import ProbeRecord

WORKER_SECONDS = {"cpu": 4.0, "cuda": 40.0}  # start, import, set up, count: for the plan's estimate
STEP_US = {"cpu": 500.0, "cuda": 600.0}  # a guess at one fwd+bwd step, for the plan's estimate


@dataclasses.dataclass(frozen=True)
class Range:
    repo: Path
    good: git.Commit
    bad: git.Commit
    commits: list  # first-parent commits after GOOD up to BAD, oldest first (Commit)

    def at(self, index: int) -> git.Commit:
        """0 is GOOD, len(commits) is BAD."""
        return self.good if index == 0 else self.commits[index - 1]


def resolve_range(spec: str, repo: str) -> Range:
    root = git.repo_root(repo)
    parsed = git.parse_spec(spec)
    if parsed.mode != "range" or not parsed.base or not parsed.head:
        raise TeperfError(
            f"bisect needs GOOD..BAD, got {spec!r}", "give two refs, e.g. teperf bisect v2.15..v2.16"
        )
    good = git.resolve(root, parsed.base, what="GOOD ref")
    bad = git.resolve(root, parsed.head, what="BAD ref")
    if good == bad:
        raise TeperfError(
            f"{spec}: GOOD and BAD are the same commit ({good[:10]}), the range is empty",
            "give a BAD that comes after GOOD",
        )
    try:
        git.run_git(root, "merge-base", "--is-ancestor", good, bad)
    except git.GitFailed:
        raise TeperfError(
            f"{parsed.base} ({good[:10]}) is not an ancestor of {parsed.head} ({bad[:10]})",
            "give GOOD..BAD with GOOD older than BAD on its history (swap them?)",
        ) from None
    shas = git.run_git(root, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
    if not shas:
        raise TeperfError(f"{spec}: no commits between GOOD and BAD", "give a BAD that comes after GOOD")
    if git.run_git(root, "rev-parse", f"{shas[0]}^1") != good:
        raise TeperfError(
            f"{parsed.base} ({good[:10]}) is not on the first-parent history of {parsed.head}",
            "give a GOOD on BAD's main line (e.g. the merge-base: git merge-base GOOD BAD)",
        )
    commits = [git.commit_info(root, sha, sha[:10]) for sha in shas]
    bad_commit = dataclasses.replace(commits[-1], ref=parsed.head)
    return Range(root, git.commit_info(root, good, parsed.base), bad_commit, commits)


def find_cell(config: Config, cell: str) -> Case:
    from teperf.explain import find_case

    cases = expand(config)
    wanted = find_case({"cases": [c.to_meta() for c in cases]}, cell, where="the config")
    case = next(c for c in cases if c.id == wanted["id"])
    if case.skip:
        raise TeperfError(f"cell {cell} cannot run: {case.skip}", "pick another --cell or --shape")
    return dataclasses.replace(case, id=0)


def commit_meta(commit: git.Commit) -> dict:
    return {"sha": commit.sha, "short_sha": commit.short_sha, "subject": commit.subject, "date": commit.date}


def compare_seconds(config: Config) -> float:
    s = config.schedule
    steps = s.processes * s.rounds * s.trials * s.iters * 2 + s.processes * 2 * s.warmup * 2
    return steps * STEP_US.get(config.device, 500.0) / 1e6 + s.processes * 1.0 + WORKER_SECONDS[config.device]


COMPILED_TIERS = ("extension", "build")


def distinct_builds(rng: Range, factory: SideFactory) -> int:
    """How many different builds the range holds: commits whose compiled inputs equal their parent's share
    one (the extension and build caches are keyed by those inputs), so only a compiled change starts a new one."""
    builds = 1  # GOOD's
    previous = rng.good.sha
    for commit in rng.commits:
        builds += factory.tier(previous, commit.sha) in COMPILED_TIERS
        previous = commit.sha
    return builds


def side_seconds(factory: SideFactory, tier: str) -> tuple[float, str]:
    """(seconds, basis) of making one commit runnable in ``tier``: the factory's own figure for its package
    (measured builds of it in the cache, else a default for it), TE's figures for a factory without one."""
    seconds = getattr(factory, "seconds", None)
    return seconds(tier) if seconds else tier_seconds(TE_PACKAGE, tier, cache_dir="/nonexistent")


BASIS_TEXT = {
    "measured": "the slowest build of this package in the cache",
    "TE": "TE's builds on the H200",
    "default": "no build of this package measured yet; replaced by measured times after GOOD and BAD",
}


def make_plan(rng: Range, factory: SideFactory, config: Config) -> dict:
    tiers: dict[str, int] = {}
    for commit in rng.commits:
        tier = factory.tier(rng.good.sha, commit.sha)
        tiers[tier] = tiers.get(tier, 0) + 1
    shown = {made_with(factory, t): n for t, n in tiers.items()}  # said as made
    n = len(rng.commits)
    probes = bsearch.expected_probes(n)
    per_tier = {tier: side_seconds(factory, tier) for tier in tiers}
    worst = max(tiers, key=lambda t: per_tier[t][0])
    side_s, basis = per_tier[worst]
    compiled = worst in COMPILED_TIERS
    # GOOD, BAD and each probe need a side; a compiled one is built once per distinct set of inputs
    sides = 2 + probes
    distinct = distinct_builds(rng, factory) if compiled else sides
    builds = min(sides, distinct)
    making_s = builds * side_s
    confirm_s = compare_seconds(config)
    worker_s = WORKER_SECONDS[config.device]
    # each further change point: its probes (and their builds, while new compiled inputs are left) and a confirm
    further_builds = min(probes, max(distinct - builds, 0)) if compiled else probes
    return {
        "commits": n,
        "expected_probes": probes,
        "tiers": shown,
        "builds": builds,
        "side_s": round(side_s, 1),
        "seconds_basis": basis,
        # counters at 2 + probes commits and GOOD, BAD once more; GOOD..BAD and the culprit in time
        "counters_s": round(making_s + (sides + 2) * worker_s + 2 * confirm_s),
        "per_change_s": round(further_builds * side_s + probes * worker_s + confirm_s),
        "timing_s": round(making_s + (1 + probes) * confirm_s + confirm_s),
    }


def plan_lines(rng: Range, case: Case, plan: dict) -> list[str]:
    tiers = ", ".join(f"{k} {v}" for k, v in sorted(plan["tiers"].items()))
    p = plan["expected_probes"]
    return [
        f"{rng.good.short_sha}..{rng.bad.short_sha}: {plan['commits']} first-parent commits; cell {case.key}",
        f"expected probes: {p} per change point (ceil(log2 {plan['commits']})), k change points about "
        f"k x {p}, plus GOOD and BAD; tier per commit: {tiers}"
        + (
            f"; {plan['builds']} builds at most (commits with the same compiled inputs share one)"
            if any(t in (*COMPILED_TIERS, "core") for t in plan["tiers"])
            else ""
        ),
        f"expected time: about {plan['counters_s']} s if a counter moved at one commit (one worker run per "
        f"probe, then GOOD..BAD and the culprit compared in time), +{plan['per_change_s']} s per further "
        f"change point; about {plan['timing_s']} s if only time moved (one compare per probe); "
        f"{plan.get('side_s')} s to make a side ({BASIS_TEXT.get(plan.get('seconds_basis'), '?')})",
    ]


class Bisector:
    """One bisect run: its range, cell, side factory and bundle."""

    def __init__(
        self,
        config: Config,
        rng: Range,
        case: Case,
        factory: SideFactory,
        bundle: Bundle,
        *,
        budget_s: float,
        confirm: bool,
        log: Log,
        plan: dict | None = None,
    ):
        self.config = config
        self.plan = plan or {}
        self.rng = rng
        self.case = case
        self.factory = factory
        self.bundle = bundle
        self.budget_s = budget_s
        self.confirm_wanted = confirm
        self.log = log
        self.timing_s = 0.0  # seconds spent in timing compares (what --budget bounds)
        self.clock = time.perf_counter
        self.n_probes = 0
        self.counters: dict[int, dict] = {}  # index -> counters
        self.estimates: dict[int, tuple] = {}  # index -> (delta %, CI low %, CI high %) against GOOD
        self.pairs: dict[int, tuple] = {}  # index -> (processes, seconds) of its last compare against GOOD
        self.rows: dict[int, dict] = {}  # index -> the row of its last compare against GOOD
        self.count_seconds: list[float] = []  # each counter probe's, side making included

    # -- probes ---------------------------------------------------------------

    def _record(self, index: int, what: str, result: str, seconds: float, **fields) -> None:
        commit = self.rng.at(index)
        role = "GOOD" if index == 0 else ("BAD" if index == len(self.rng.commits) else "probe")
        self.bundle.append(
            ProbeRecord.from_dict(
                {
                    "kind": "probe",
                    "index": index,
                    "role": role,
                    **commit_meta(commit),
                    "what": what,
                    "result": result,
                    "seconds": round(seconds, 2),
                    **fields,
                }
            )
        )
        detail = fields.get("detail", "")
        self.log(
            f"{role} {commit.short_sha} {what}: {result}{' - ' + detail if detail else ''} ({seconds:.1f} s)"
        )

    def side(self, index: int):
        """The side of commit ``index`` (paired with GOOD, so its tier covers both)."""
        good = self.rng.good.sha
        sha = self.rng.at(index).sha
        return self.factory.sides(good, sha)[0 if index == 0 else 1]

    def count(self, index: int, what: str = "counters") -> Optional[dict]:
        """Counters of commit ``index``, or None (the probe is recorded as skipped)."""
        from teperf.engine.probe import ProbeFailed, count_case

        t0 = time.perf_counter()
        commit = self.rng.at(index)
        try:
            side = self.side(index)
            log_path = self.bundle.path / "workers" / f"{index:03d}-{commit.short_sha}-{what[-5:]}.log"
            counters = count_case(self.config, side, self.case, log_path)
        except (ProbeSkipped, ProbeFailed) as exc:
            self._record(
                index,
                what,
                "skip",
                time.perf_counter() - t0,
                detail=exc.reason,
                tier=self.factory.tier(self.rng.good.sha, commit.sha),
            )
            return None
        self.counters[index] = counters
        self.count_seconds.append(time.perf_counter() - t0)
        self._record(
            index,
            what,
            "measured",
            time.perf_counter() - t0,
            counters=counters,
            tier=side.description.get("strategy"),
        )
        return counters

    def compare(self, base: int, head: int, config: Config, bounded: bool = True):
        """A paired compare of two commits of the range through the normal engine -> (row, bundle path).
        ``bounded``: part of the timing search, which --budget bounds as a whole."""
        from teperf import api

        base_side, head_side = self.factory.sides(self.rng.at(base).sha, self.rng.at(head).sha)
        # --budget bounds the whole search; an adaptive (--precision) compare gets what is left of it
        if bounded:
            left = None
            if config.schedule.precision_pct is not None:
                left = max(self.budget_s - self.timing_s, 1.0)
            config = dataclasses.replace(config, schedule=dataclasses.replace(config.schedule, budget_s=left))
        path = api.compare(
            config,
            base_side,
            head_side,
            results_dir=str(self.bundle.path / "compares"),
            cases=[self.case],
            command=["teperf", "bisect", "(probe)"],
        )
        row = dict(api.summarize(path).rows[0], tier=head_side.description.get("strategy"))
        return row, path

    # -- counters -------------------------------------------------------------

    def endpoint_counters(self) -> tuple[dict, dict]:
        n = len(self.rng.commits)
        got = []
        for index in (0, n):
            counters = self.count(index)
            if counters is None:
                record = list(self.bundle.records())[-1]
                which = "GOOD" if index == 0 else "BAD"
                raise TeperfError(
                    f"{which} {self.rng.at(index).short_sha} cannot be measured: {record.detail}",
                    f"pick a {which} that builds and imports (worker logs: {self.bundle.path}/workers)",
                )
            got.append(counters)
        return got[0], got[1]

    def recount(self, good: dict, bad: dict) -> tuple[dict, dict]:
        """GOOD and BAD once more, each in a fresh worker, before searching on a difference. Code that
        torch.compile builds makes a few more Python calls in the process that compiled it than when it
        came from inductor's cache (teperf/worker/counters.py): the first run of an endpoint may have been
        that one. The second count is the one every later probe of the same code will see."""
        n = len(self.rng.commits)
        again = []
        for index, first in ((0, good), (n, bad)):
            second = self.count(index, "counters again")
            if second is None:
                second = first
            elif second != first:
                which = "GOOD" if index == 0 else "BAD"
                self.log(
                    f"{which}'s counters changed in a second fresh worker "
                    f"({counters_diff(first, second)}; a cold compile cache in the first?): "
                    "the search uses the second"
                )
            again.append(second)
        return again[0], again[1]

    def reestimate(self) -> None:
        """The plan again from what GOOD's and BAD's counter probes took here (side making included):
        the first plan's figures per side are guesses (TE's, or a default for other packages)."""
        if not self.count_seconds or not self.plan:
            return
        probe_s = sum(self.count_seconds) / len(self.count_seconds)
        probes = self.plan.get("expected_probes", 0)
        confirm_s = compare_seconds(self.config)
        measured = {
            "probe_s": round(probe_s, 1),
            "counters_s": round((probes + 2) * probe_s + 2 * confirm_s),
            "per_change_s": round(probes * probe_s + confirm_s),
        }
        self.plan = {**self.plan, "measured": measured}
        self.bundle.update_meta(plan=self.plan)
        self.log(
            f"measured: a counter probe takes {probe_s:.0f} s here; about {measured['counters_s']} s more "
            f"for one change point, +{measured['per_change_s']} s per further one"
        )

    def reestimate_timing(self) -> None:
        """The timing search's time from what GOOD..BAD's compare took here (its last one, at the pairs a
        probe starts with or more)."""
        n = len(self.rng.commits)
        if not self.plan or n not in self.pairs:
            return
        compare_s = self.pairs[n][1]
        probes = self.plan.get("expected_probes", 0)
        measured = {**(self.plan.get("measured") or {}), "compare_s": round(compare_s, 1)}
        measured["timing_s"] = round((probes + 1) * compare_s)  # the probes of one step and its confirm
        self.plan = {**self.plan, "measured": measured}
        self.bundle.update_meta(plan=self.plan)
        self.log(
            f"measured: a timing compare takes {compare_s:.0f} s here; about {measured['timing_s']} s more for "
            "one step (its probes and its confirm), as much per further step"
        )

    def counter_search(self, keys: list[str]) -> bsearch.Changes:
        """Every change point of ``keys`` between GOOD and BAD (counted already): exact equality."""

        def differ(a: dict, b: dict) -> bool:
            return any(a.get(k) != b.get(k) for k in keys)

        def probe(index: int, lo: int, hi: int):
            self.n_probes += 1
            counters = self.count(index)
            if counters is None:
                return "skip"
            return differ(self.counters[lo], counters), differ(counters, self.counters[hi])

        return bsearch.find_changes(len(self.rng.commits), probe)

    # -- timing ---------------------------------------------------------------

    def _compare_once(self, base: int, head: int, processes: int):
        """One timing compare of base..head with ``processes`` pairs -> (row, bundle path, seconds), or
        (None, why not, seconds); its seconds count against --budget."""
        sched = dataclasses.replace(self.config.schedule, processes=processes)
        config = dataclasses.replace(self.config, schedule=sched)
        t0 = self.clock()
        try:
            row, path = self.compare(base, head, config)
        except ProbeSkipped as exc:
            return None, exc.reason, 0.0
        except TeperfError as exc:
            return None, exc.one_line(), 0.0
        seconds = self.clock() - t0
        self.timing_s += seconds
        if row.get("status") not in ("ok", "partial"):
            return None, f"{row.get('status')}: {row.get('error')}", seconds
        if base == 0:
            self.pairs[head] = (processes, seconds)
            self.rows[head] = row
        return row, path, seconds

    def _record_timing(self, head: int, result: str, seconds: float, row: dict, path, processes: int) -> None:
        self._record(
            head,
            "timing",
            result,
            seconds,
            detail=_row_text(row),
            tier=row.get("tier"),
            bundle=str(Path(path).relative_to(self.bundle.path)),
            delta_pct=row.get("delta_pct"),
            ci_low_pct=row.get("ci_low_pct"),
            ci_high_pct=row.get("ci_high_pct"),
            verdict=row.get("verdict"),
            processes=processes,
        )

    def _affordable(self, index: int, seconds: float) -> bool:
        """Whether measuring ``index`` again with twice the pairs (~2 x ``seconds``) fits in --budget."""
        if self.timing_s + 2 * seconds <= self.budget_s:
            return True
        self.log(
            f"{self.rng.at(index).short_sha}: undecided, and measuring twice the pairs "
            f"(~{2 * seconds:.0f} s) would exceed --budget {self.budget_s:g} s"
        )
        return False

    def timed(
        self, base: int, head: int, decide: Callable[[dict], str], again: bool = True
    ) -> tuple[Optional[dict], str]:
        """Compare base..head and ``decide`` from its row; measure again with twice the pairs while that
        is "undecided" and the budget allows. Returns (the last row, the decision), or (None, why not)."""
        processes = self.config.schedule.processes
        while True:
            row, path, seconds = self._compare_once(base, head, processes)
            if row is None:
                return None, path
            decided = decide(row)
            self._record_timing(head, decided, seconds, row, path, processes)
            if decided != "undecided" or not again:
                return row, decided
            if not self._affordable(head, seconds):
                return row, "undecided"
            processes *= 2

    def endpoint_timing(self, again: bool = True) -> tuple[Optional[dict], str]:
        """GOOD..BAD in time: (endpoint fields, decision: "bad" there is a change, "good" none, or
        "undecided"); (None, why) when it could not be compared. ``again``: an undecided one is measured
        again with twice the pairs while --budget lasts (the timing search needs to know there is a step;
        after a counter search, GOOD..BAD's delta is what the culprits' are set against, once)."""

        def whole(row: dict) -> str:
            return {"slower": "bad", "faster": "bad", "no change": "good"}.get(
                row.get("verdict"), "undecided"
            )

        n = len(self.rng.commits)
        row, decided = self.timed(0, n, whole, again)
        if row is None:
            return None, decided
        endpoint = _endpoint(row)
        endpoint["decided"] = decided
        return endpoint, decided

    def timing_search(self) -> tuple[Optional[bsearch.Changes], dict]:
        """Every step in time between GOOD and BAD. Each probe is compared against GOOD, which puts it at
        (delta, CI) on one scale with every other probe (GOOD at exactly 0, BAD at GOOD..BAD's). A probe
        differs from a segment end when their intervals do not overlap (and are MIN_STEP_SHARE of GOOD..BAD
        apart); it is like an end when it differs from the other one and lies on that end's side of the
        middle. Otherwise the widest interval in the way (the probe's or an end's) is measured again with
        twice the pairs while --budget lasts, then the segment stops undecided."""
        n = len(self.rng.commits)
        endpoint, decided = self.endpoint_timing()
        if endpoint is None:
            raise TeperfError(
                f"GOOD..BAD could not be compared: {decided}",
                f"see the worker logs under {self.bundle.path}/compares",
            )
        if decided != "bad":
            return None, endpoint
        self.reestimate_timing()
        self.estimates = {0: (0.0, 0.0, 0.0), n: _estimate(endpoint)}
        # two compares against GOOD also differ by the machine's drift between them, which their intervals
        # do not hold: a step smaller than this is left in the unexplained part
        resolution = MIN_STEP_SHARE * abs(endpoint["delta_pct"])

        def classify(index: int, lo: int, hi: int) -> str:
            """good: like lo; bad: like hi; between: a step on each side; or undecided. Like an end: apart
            from the other one and on its side of the segment's middle (as one bisection step decides)."""
            here, a, b = self.estimates[index], self.estimates[lo], self.estimates[hi]
            if here[1] is None or here[2] is None:
                return "undecided"
            off_lo, off_hi = _apart(here, a, resolution), _apart(here, b, resolution)
            if off_lo and off_hi:
                return "between"
            sign = 1 if b[0] >= a[0] else -1
            middle = sign * (a[0] + b[0]) / 2
            low, high = sorted((sign * here[1], sign * here[2]))
            if off_lo and low > middle:
                return "bad"
            if off_hi and high < middle:
                return "good"
            return "undecided"

        def width(index: int) -> float:
            return self.estimates[index][2] - self.estimates[index][1]

        def probe(index: int, lo: int, hi: int):
            self.n_probes += 1
            processes = self.config.schedule.processes
            row, path, seconds = self._compare_once(0, index, processes)
            if row is None:
                self._record(index, "timing", "skip", seconds, detail=path)
                return "skip"
            self.estimates[index] = _estimate(row)
            recorded = False
            while True:
                decided = classify(index, lo, hi)
                if not recorded:
                    self._record_timing(index, decided, seconds, row, path, processes)
                elif decided != "undecided":  # decided by an end measured again: the probe's compare stands
                    self._record(
                        index,
                        "timing",
                        decided,
                        0.0,
                        detail="with the ends measured again",
                        bundle=str(Path(path).relative_to(self.bundle.path)),
                    )
                if decided != "undecided":
                    return decided in ("bad", "between"), decided in ("good", "between")
                # measure again the widest interval that leaves it undecided: the probe's, or an end's that it
                # overlaps (GOOD's is exact); an end measured again serves every segment it bounds
                here = self.estimates[index]
                overlapped = [e for e in (lo, hi) if e != 0 and not _apart(here, self.estimates[e])]
                target = max([index, *overlapped], key=width)
                pairs, took = self.pairs[target]
                if not self._affordable(target, took):
                    return "undecided"
                again = self._compare_once(0, target, 2 * pairs)
                if again[0] is None:
                    return "undecided"
                self.estimates[target] = _estimate(again[0])
                if target == index:
                    (row, path, seconds), processes, recorded = again, 2 * pairs, False
                else:
                    self._record_timing(target, "measured again", again[2], again[0], again[1], 2 * pairs)
                    recorded = True

        changes = bsearch.find_changes(n, probe)
        if self.rows.get(n) is not None:  # BAD measured again on the way: the narrower figures
            endpoint.update(_endpoint(self.rows[n]))
        return changes, endpoint

    # -- the whole run ----------------------------------------------------------

    def run(self) -> dict:
        good, bad = self.endpoint_counters()
        keys = moved(good, bad)
        if keys:
            good, bad = self.recount(good, bad)
            keys = moved(good, bad)
        self.reestimate()
        result: dict = {"counters_good": good, "counters_bad": bad, "moved_counters": keys}
        if keys:
            result["mode"] = "counters"
            keys = ordered(keys)
            self.log(
                f"counters differ between GOOD and BAD ({', '.join(keys)}): every change point, "
                "on exact equality"
            )
            changes = self.counter_search(keys)
            found = attribute(changes.segments, self.counters.get, keys, self._commit, len(self.rng.commits))
            if self.confirm_wanted:
                endpoint, why = self.endpoint_timing(again=False)
                result["endpoint"] = endpoint or {"error": why}
        else:
            result["mode"] = "timing"
            self.log("no counter differs between GOOD and BAD: every step in paired timings")
            changes, result["endpoint"] = self.timing_search()
            if changes is None:  # GOOD..BAD is no change, or could not be told from it within the budget
                good_end = result["endpoint"]["decided"] == "good"
                result.update(status="no change" if good_end else "inconclusive", probes=self.n_probes)
                return conclude(result)
            found = attribute(
                changes.segments, self._time_at, ["time_pct"], self._commit, len(self.rng.commits)
            )
        result.update(
            status=_status(changes),
            probes=self.n_probes,
            culprits=found["culprits"],
            opposite_movers=found["opposite"],
            unresolved=found["unresolved"],
            totals=found["totals"],
        )
        self._single_culprit_fields(result)
        if self.confirm_wanted and result["culprits"]:
            self.confirm_culprits(result)
        return conclude(result)

    def _commit(self, index: int) -> dict:
        return commit_meta(self.rng.at(index))

    def _time_at(self, index: int) -> Optional[dict]:
        return {"time_pct": self.estimates[index][0]} if index in self.estimates else None

    def _single_culprit_fields(self, result: dict) -> None:
        """The fields of one answer (the biggest culprit, or the first segment left), as before there
        were several: culprit, parent, good_index, bad_index, counters_before/after, candidates."""
        if result["culprits"]:
            top = result["culprits"][0]
            result.update(good_index=top["index"] - 1, bad_index=top["index"])
            result["culprit"] = self._commit(top["index"])
            result["parent"] = top["parent"]
            if result["mode"] == "counters":
                result["counters_before"], result["counters_after"] = top["before"], top["after"]
        elif result["unresolved"]:
            left = next((u for u in result["unresolved"] if u["direction"] >= 0), result["unresolved"][0])
            result.update(good_index=left["good_index"], bad_index=left["bad_index"])
            result["candidates"] = left["candidates"]
        if "good_index" in result:
            result["last_good"] = self._commit(result["good_index"])

    def confirm_culprits(self, result: dict) -> None:
        """Each culprit against its parent in time, biggest share first, until those confirmed carry
        CONFIRM_SHARE of the change; after the first, only while --budget lasts."""
        carried, last_s = 0.0, 0.0
        for i, entry in enumerate(result["culprits"]):
            if i and carried >= CONFIRM_SHARE:
                break
            if i and self.timing_s + last_s > self.budget_s:
                self.log(
                    f"{entry['short_sha']} and later culprits not confirmed: ~{last_s:.0f} s more would exceed "
                    f"--budget {self.budget_s:g} s"
                )
                result["confirm_stopped"] = "budget"
                break
            t0 = self.clock()
            entry["confirm"] = self.confirm(entry["index"])
            last_s = self.clock() - t0
            self.timing_s += last_s
            carried += entry["share"]
        first = result["culprits"][0].get("confirm")
        if first:  # the biggest culprit's, which the report renders in full; its counters next to its timing
            result["confirm"] = first
            row = first.get("row") or {}
            counters = row.get("counters") or {}
            if counters.get("base") and counters.get("head"):
                result["counters_before"], result["counters_after"] = counters["base"], counters["head"]

    def confirm(self, index: int) -> dict:
        t0 = time.perf_counter()
        config = dataclasses.replace(self.config, counters=True)
        try:
            row, path = self.compare(index - 1, index, config, bounded=False)
        except TeperfError as exc:  # ProbeSkipped is not one: the culprit's sides were made before
            self._record(index, "confirm", "failed", time.perf_counter() - t0, detail=exc.one_line())
            return {"error": exc.one_line()}
        except ProbeSkipped as exc:
            self._record(index, "confirm", "failed", time.perf_counter() - t0, detail=exc.reason)
            return {"error": exc.reason}
        rel = str(Path(path).relative_to(self.bundle.path))
        self._record(
            index,
            "confirm",
            row.get("verdict") or str(row.get("status")),
            time.perf_counter() - t0,
            detail=_row_text(row),
            bundle=rel,
            tier=row.get("tier"),
        )
        keep = (
            "status",
            "verdict",
            "base_us",
            "head_us",
            "delta_us",
            "delta_pct",
            "ci_low_pct",
            "ci_high_pct",
            "ci_low_us",
            "ci_high_us",
            "counters",
            "error",
        )
        return {"bundle": rel, "row": {k: row.get(k) for k in keep}}


MIN_STEP_SHARE = 0.1  # the timing search looks for steps of at least this share of GOOD..BAD's delta
CONFIRM_SHARE = 0.8  # confirm in time the biggest culprits until they carry this share of the change


def _status(changes: bsearch.Changes) -> str:
    """found: every change point on one commit; partial: some; else why none was (skipped, undecided)."""
    if not changes.left:
        return "found"
    return "partial" if changes.found else changes.left[0].status


def _direction(result: dict) -> int:
    end = result.get("endpoint") or {}
    if result.get("mode") == "timing" or not result.get("totals"):
        delta = end.get("delta_pct") or 0
    else:
        delta = next(iter(result["totals"].values()))
    return 1 if delta > 0 else (-1 if delta < 0 else 0)


def _confirmed(entry: dict, direction: int) -> Optional[bool]:
    """Whether the culprit's paired compare against its parent moved time as GOOD..BAD did; None: not run."""
    confirm = entry.get("confirm")
    if not confirm:
        return None
    verdict = (confirm.get("row") or {}).get("verdict")
    return verdict == ("slower" if direction > 0 else "faster")


def coverage(result: dict) -> Optional[dict]:
    """How much of GOOD..BAD's timing delta the confirmed culprits' own deltas add up to."""
    end = result.get("endpoint") or {}
    total_us = end.get("delta_us")
    time_dir = 1 if (end.get("delta_pct") or 0) > 0 else -1
    tried = [e for e in result.get("culprits") or [] if e.get("confirm")]
    if not tried or not total_us:
        return None
    confirmed = [e for e in tried if _confirmed(e, time_dir)]
    covered_us = sum((e["confirm"].get("row") or {}).get("delta_us") or 0.0 for e in confirmed)
    return {
        "tried": [e["short_sha"] for e in tried],
        "confirmed": [e["short_sha"] for e in confirmed],
        "confirmed_us": round(covered_us, 2),
        "endpoint_us": round(total_us, 2),
        "covered_pct": round(100.0 * covered_us / total_us, 1),
        "unexplained_pct": round(max(0.0, 100.0 - 100.0 * covered_us / total_us), 1),
    }


def conclude(result: dict) -> dict:
    """``explained`` (True, False, or None when there is nothing to explain) and ``answer``, one line."""
    status, mode = result.get("status"), result.get("mode")
    end = result.get("endpoint") or {}
    if status == "no change":
        result.update(
            explained=None, answer="no change: no counter differs and GOOD..BAD is no change in time"
        )
        return result
    if status == "inconclusive":
        result.update(
            explained=False,
            answer="unexplained: no counter differs, and whether GOOD..BAD changed in time could not be "
            "told within --budget",
        )
        return result
    result["coverage"] = coverage(result)
    direction = _direction(result)
    culprits = result.get("culprits") or []
    if mode == "timing":  # a step is decisive when its own compare agrees, or was not run
        named = [e for e in culprits if _confirmed(e, direction) is not False]
    else:
        named = culprits
    skipped = [u for u in result.get("unresolved") or [] if u["status"] == "skipped" and u["direction"] > 0]
    opposite = result.get("opposite_movers") or []
    if mode == "counters":
        totals = result.get("totals") or {}  # empty when BAD lacks the counters that moved
        key = next(iter(totals), None)
        what = f"GOOD..BAD's {totals[key]:+g} {key}" if key else "GOOD..BAD's counter change"
    else:
        what = f"GOOD..BAD's {end.get('delta_pct', 0):+.1f}% in time"
    against = (
        f"; {len(opposite)} moved the other way ({sum(e['share'] for e in opposite):.0%})" if opposite else ""
    )
    if named or skipped:
        share = sum(e["share"] for e in named)
        text = (
            f"explained: {len(named)} commit(s) carry {share:.0%} of {what}"
            + (f", biggest {named[0]['short_sha']} ({named[0]['share']:.0%})" if named else "")
            + (f"; {len(skipped)} change(s) among commits that cannot be measured" if skipped else "")
            + against
        )
        cover = result["coverage"]
        if cover:
            text += (
                f"; confirmed in time: {len(cover['confirmed'])} of {len(cover['tried'])} checked, covering "
                f"{cover['covered_pct']:.0f}% of GOOD..BAD's {cover['endpoint_us']:+.1f} us"
            )
        result.update(explained=True, answer=text)
        return result
    if mode == "counters":
        why = f"every commit found moved the other way ({len(opposite)})" if opposite else "no change point"
    else:
        why = "no decisive step" + (
            f" ({len(culprits)} found by the search, none confirmed by its own compare)" if culprits else ""
        )
    left = result.get("unresolved") or []
    if left:
        why += f"; {len(left)} segment(s) not narrowed ({left[0]['status']})"
    result.update(explained=False, answer=f"unexplained: {why} for {what}")
    return result


def _endpoint(row: dict) -> dict:
    keep = ("verdict", "delta_pct", "ci_low_pct", "ci_high_pct", "delta_us", "base_us", "head_us")
    return {k: row.get(k) for k in keep}


def _estimate(row: dict) -> tuple:
    return row.get("delta_pct"), row.get("ci_low_pct"), row.get("ci_high_pct")


def _apart(a: tuple, b: tuple, resolution: float = 0.0) -> bool:
    """Whether two (delta, low, high) estimates' intervals do not overlap, and their deltas are at least
    ``resolution`` apart."""
    return (a[1] > b[2] or b[1] > a[2]) and abs(a[0] - b[0]) >= resolution


def moved(good: dict, bad: dict) -> list[str]:
    """The counters measured at GOOD that BAD has different."""
    return [k for k in sorted(set(good) | set(bad)) if good.get(k) is not None and good.get(k) != bad.get(k)]


def _row_text(row: dict) -> str:
    if row.get("delta_pct") is None:
        return str(row.get("error") or row.get("status"))
    ci = ""
    if row.get("ci_low_pct") is not None:
        ci = f" CI [{row['ci_low_pct']:+.1f}, {row['ci_high_pct']:+.1f}%]"
    return f"{row['delta_pct']:+.1f}%{ci} {row.get('verdict')}"


def bisect(
    config: Config,
    spec: str,
    cell: str,
    *,
    factory: SideFactory | None = None,
    repo: str = ".",
    results_dir: str | None = None,
    budget_s: float = 1800.0,
    confirm: bool = True,
    command: list[str] | None = None,
    log: Log | None = None,
    plan_only: bool = False,
) -> Path | None:
    """Find the commit of GOOD..BAD that moved ``cell``; return the bundle (kind "bisect").

    ``factory`` makes the sides (default: git sides of ``repo`` with ``--strategy auto``).
    ``plan_only``: say the plan and stop (None: no bundle).
    """
    log = log or stderr_logger("teperf bisect")
    case = find_cell(config, cell)  # bad input first, before git or workers
    rng = resolve_range(spec, repo)
    factory = factory or git.GitSideFactory(repo=str(rng.repo))
    plan = make_plan(rng, factory, config)
    pin_range = getattr(factory, "pin_range", None)
    if pin_range is not None:
        plan["pinned_strategy"] = pin_range(rng.good.sha, rng.bad.sha)
    for line in plan_lines(rng, case, plan):
        log(line)
    if plan_only:
        return None
    meta = {
        "teperf_version": __version__,
        "kind": "bisect",
        "command": command if command is not None else sys.argv,
        "started_at": now_iso(),
        "finished_at": None,
        "spec": spec,
        "repo": str(rng.repo),
        "cell": case.key,
        "case": case.to_meta(),
        "config": config.to_dict(),
        "good": commit_meta(rng.good),
        "bad": commit_meta(rng.bad),
        "commits": [commit_meta(c) for c in rng.commits],
        "plan": plan,
        "budget_s": budget_s,
    }
    bundle = Bundle.create(results_dir, "bisect", meta)
    started = time.perf_counter()
    status, error, result = "complete", None, {}
    try:
        result = Bisector(
            config, rng, case, factory, bundle, budget_s=budget_s, confirm=confirm, log=log, plan=plan
        ).run()
    except (KeyboardInterrupt, Interrupted):
        status = "interrupted"
        raise Interrupted(bundle.path) from None
    except TeperfError as exc:
        status, error = "failed", exc.one_line()
        raise
    except Exception as exc:
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        bundle.close()
        result["wall_s"] = round(time.perf_counter() - started, 1)
        bundle.update_meta(status=status, error=error, finished_at=now_iso(), result=result)
    return bundle.path
