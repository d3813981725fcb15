"""``teperf bisect GOOD..BAD --cell MODULE/RECIPE``: counters first (every change point), then time down to
single commits, so a commit that moves time but no counter is found too."""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

from teperf.bisect.attribute import attribute, ordered
from teperf.bisect.conclude import conclude, counter_movers, settle, time_shares
from teperf.bisect.counters import MIN_CHANGE, CounterSearch, moved
from teperf.bisect.plan import Range, commit_meta, find_cell, make_plan, plan_lines, resolve_range
from teperf.bisect.progress import Progress
from teperf.bisect.sides import GitSideFactory, SideFactory
from teperf.bisect.timing import TimeSearch, whole_state
from teperf.bundle import Bundle
from teperf.config import Config
from teperf.engine.probe import ForkedProbes
from teperf.errors import TeperfError
from teperf.log import Log, stderr_logger
from teperf.options import SideOptions
from teperf.plan import Case, check_balance
from teperf.records import ProbeRecord


@dataclasses.dataclass(eq=False)
class Bisector(CounterSearch, TimeSearch):
    """One bisect run: its range, cell, side factory and bundle."""

    config: Config
    rng: Range
    case: Case
    factory: SideFactory
    bundle: Bundle
    _: dataclasses.KW_ONLY
    budget_s: float
    confirm: bool
    log: Log
    plan: dict = dataclasses.field(default_factory=dict)
    probes: object = None  # ForkedProbes, or None: each counter probe a fresh interpreter

    def __post_init__(self):
        self.progress = Progress(self.log, self.plan, self.budget_s)
        self.timing_s = 0.0  # seconds spent in compares (what --budget bounds)
        self.compare_s: list[float] = []  # each compare's seconds per pair
        self.clock = time.perf_counter
        self.n_probes = 0  # the counter search's probes and the compares
        self.n_compares = 0
        self.counters: dict[int, dict] = {}  # index -> counters
        self.count_seconds: list[float] = []  # each counter probe's, side making included
        self.measured: dict[tuple[int, int], dict] = {}  # (lo, hi) -> its last compare's row
        self.next_pairs: dict[tuple[int, int], int] = {}
        self.budget_spent = False  # a compare was not started: --budget would have run out

    def _record(self, index: int, what: str, result: str, seconds: float, **fields) -> None:
        commit = self.rng.at(index)
        role = "GOOD" if index == 0 else ("BAD" if index == len(self.rng.commits) else "probe")
        raw = {"kind": "probe", "index": index, "role": role, **commit_meta(commit), "what": what}
        raw.update(result=result, seconds=round(seconds, 2))
        self.bundle.append(ProbeRecord.from_dict({**raw, **fields}))
        self.progress.probe(role, commit.short_sha, what, result, fields.get("detail", ""), seconds)

    def _commit(self, index: int) -> dict:
        return commit_meta(self.rng.at(index))

    def run(self) -> dict:
        good, bad = self.endpoint_counters()
        keys = moved(good, bad)
        if keys:
            good, bad = self.recount(good, bad)
            keys = moved(good, bad)
        result: dict = {"counters_good": good, "counters_bad": bad, "moved_counters": keys}
        n = len(self.rng.commits)
        if keys:
            keys = ordered(keys)
            self.log(f"counters differ between GOOD and BAD ({', '.join(keys)}): every change point")
            changes = self.counter_search(keys, MIN_CHANGE if self.confirm else 0.0)
            found = attribute(changes.segments, self.counters.get, keys, self._commit, n)
            result["counter_changes"] = found["culprits"] + found["opposite"]
            result["counter_totals"] = found["totals"]
            result["counter_unresolved"] = found["unresolved"]
            if not self.confirm:  # counters only: their shares are the answer
                return self._finish(
                    result,
                    mode="counters",
                    status="found" if not found["unresolved"] else "partial",
                    culprits=found["culprits"],
                    opposite_movers=found["opposite"],
                    unresolved=found["unresolved"],
                    totals=found["totals"],
                )
        elif not self.confirm:
            return self._finish(result, mode="counters", status="no change", totals={})
        result["mode"] = "time"
        self.log("GOOD..BAD in time, then both halves of every part that moved")
        endpoint, state = self.timed(0, n, whole_state)  # (row, moved | quiet | undecided | budget)
        if endpoint is None and state != "budget":
            raise TeperfError(
                f"GOOD..BAD could not be compared ({state})",
                f"see the worker logs under {self.bundle.path}/compares",
            )
        result["endpoint"] = endpoint
        if state != "moved":
            if state != "quiet" and endpoint is not None:
                result["settle"] = settle(endpoint, self.config.stats.min_effect_pct, self.compare_s)
            return self._finish(result, status="no change" if state == "quiet" else "inconclusive")
        endpoint = result["endpoint"] = self.measured[(0, n)] = self.refine_endpoint(endpoint)
        parts = self.time_search(endpoint)
        pair_s = max(self.compare_s, default=0.0)
        result.update(time_shares(parts, endpoint, self._commit, self.counters_beside, pair_s))
        result["status"] = (
            "found" if not result["unresolved"] else ("partial" if result["culprits"] else "undecided")
        )
        return self._finish(result)

    def _finish(self, result: dict, **fields) -> dict:
        result.update(fields)
        result["probes"] = self.n_probes
        result["compares"] = self.n_compares
        result["counter_probes"] = len(self.count_seconds)
        result["counter_probe_s"] = (
            round(statistics.median(self.count_seconds), 2) if self.count_seconds else None
        )
        result["timing_s"] = round(self.timing_s, 1)
        result["budget_spent"] = self.budget_spent
        result["compared"] = [
            dict(row, good_index=lo, bad_index=hi) for (lo, hi), row in self.measured.items()
        ]
        if result.get("counter_changes") and result.get("mode") == "time":
            result.update(counter_movers(result, self.measured))
        if result.get("culprits"):
            top = result["culprits"][0]
            result["culprit"], result["parent"] = self._commit(top["index"]), top["parent"]
        return conclude(result)


def quiet_sides(factory, path: Path) -> None:
    """Send what making each probe's sides says (4 lines a probe) to ``path`` instead of stderr."""
    if not hasattr(factory, "log"):
        return

    def log(line: str) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    factory.log = log


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
    """The bundle (kind "bisect") of the commits of GOOD..BAD that moved ``cell``; None with ``plan_only``."""
    log = log or stderr_logger("teperf bisect")
    case = find_cell(config, cell)  # bad input first, before git or workers
    check_balance(config, 2)  # every probe compares two sides: compare's refusal, not minutes of probes
    rng = resolve_range(spec, repo)
    factory = factory or GitSideFactory(SideOptions(repo=str(rng.repo)))
    plan = make_plan(rng, factory, config)
    pin_range = getattr(factory, "pin_range", None)
    if pin_range is not None:
        plan["pinned_strategy"] = pin_range(rng.good.sha, rng.bad.sha)
    for line in plan_lines(rng, case, plan):
        log(line)
    if plan_only:
        return None
    meta = {
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
    started = time.perf_counter()
    result: dict = {}
    with Bundle.session(results_dir, "bisect", meta, command) as bundle:
        bundle.at_end = lambda: {"result": {**result, "wall_s": round(time.perf_counter() - started, 1)}}
        probes = ForkedProbes(config, [case], bundle.path / "workers")
        quiet_sides(factory, bundle.path / "sides.log")  # one line per probe on stderr, the sides' story here
        bisector = Bisector(
            config,
            rng,
            case,
            factory,
            bundle,
            budget_s=budget_s,
            confirm=confirm,
            log=log,
            plan=plan,
            probes=probes,
        )
        try:
            result = bisector.run()
        finally:
            probes.close()
            bisector.progress.close()
    return bundle.path
