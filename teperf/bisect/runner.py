"""``teperf bisect GOOD..BAD --cell MODULE/RECIPE``: counters first (every change point), then time down to
single commits, so a commit that moves time but no counter is found too."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable, Optional

from teperf.bisect.attribute import attribute, ordered
from teperf.bisect.conclude import conclude, counter_movers, settle, time_shares
from teperf.bisect.counters import MIN_CHANGE, CounterSearch, moved
from teperf.bisect.plan import Probe, Range, commit_meta, find_cell, make_plan, plan_lines, resolve_range
from teperf.bisect.progress import Progress
from teperf.bisect.sides import GitSideFactory, SideFactory
from teperf.bisect.timing import PartRow, TimeSearch, whole_state
from teperf.bundle import Bundle
from teperf.config import Config
from teperf.engine.probe import ForkedProbes
from teperf.errors import TeperfError
from teperf.log import Log, stderr_logger
from teperf.options import SideOptions
from teperf.plan import Case, check_balance
from teperf.provenance import check_sides_used
from teperf.sides.gitrepo import repo_root

DEFAULT_BISECT_BUDGET_S = 1800.0  # a bisect (each one of a backfill) without --budget


class Bisector:
    """One bisect run: the counter search, then the time search, each over the run's one Probe. ``counts``
    and ``times``: the searches' classes (a replay or a test gives its own)."""

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
        probes=None,  # ForkedProbes, or None: each counter probe a fresh interpreter
        counts=CounterSearch,
        times=TimeSearch,
    ):
        self.progress = Progress(log, plan or {}, budget_s)
        self.probe = Probe(config, rng, case, factory, bundle, self.progress, log)
        self.counts, self.times = counts(self.probe, probes), times(self.probe, budget_s)
        self.confirm = confirm
        self.endpoint: Optional[PartRow] = None  # GOOD..BAD's compare, once measured

    def run(self) -> dict:
        counts, times, probe = self.counts, self.times, self.probe
        good, bad = counts.endpoint_counters()
        keys = moved(good, bad)
        if keys:
            good, bad = counts.recount(good, bad)
            keys = moved(good, bad)
        result: dict = {"counters_good": good, "counters_bad": bad, "moved_counters": keys}
        n = len(probe.rng.commits)
        if keys:
            keys = ordered(keys)
            probe.log(f"counters differ between GOOD and BAD ({', '.join(keys)}): every change point")
            changes = counts.counter_search(keys, MIN_CHANGE if self.confirm else 0.0)
            found = attribute(changes.segments, counts.counters.get, keys, probe.commit, n)
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
        probe.log("GOOD..BAD in time, then both halves of every part that moved")
        endpoint, state = times.timed(0, n, whole_state)  # (row, moved | quiet | undecided | budget)
        self.endpoint = endpoint
        if endpoint is None and state != "budget":
            raise TeperfError(
                f"GOOD..BAD could not be compared ({state})",
                f"see the worker logs under {probe.bundle.path}/compares",
            )
        result["endpoint"] = endpoint and endpoint.to_dict()
        if state != "moved":
            if state != "quiet" and endpoint is not None:
                stats = probe.config.stats
                result["settle"] = settle(endpoint, stats.min_effect_pct, times.compare_s, stats.alpha)
            return self._finish(result, status="no change" if state == "quiet" else "inconclusive")
        endpoint = self.endpoint = times.measured[(0, n)] = times.refine_endpoint(endpoint)
        result["endpoint"] = endpoint.to_dict()
        parts = times.time_search(endpoint)
        pair_s = max(times.compare_s, default=0.0)
        alpha = probe.config.stats.alpha
        result.update(time_shares(parts, endpoint, probe.commit, counts.counters_beside, pair_s, alpha))
        result["status"] = (
            "found" if not result["unresolved"] else ("partial" if result["culprits"] else "undecided")
        )
        return self._finish(result)

    def _finish(self, result: dict, **fields) -> dict:
        counts, times = self.counts, self.times
        result.update(fields)
        result["probes"] = self.probe.n_probes
        result["compares"] = times.n_compares
        seconds = counts.count_seconds
        result["counter_probes"] = len(seconds)
        result["counter_probe_s"] = round(statistics.median(seconds), 2) if seconds else None
        result["timing_s"] = round(times.timing_s, 1)
        result["budget_spent"] = times.budget_spent
        result["compared"] = [
            dict(row.to_dict(), good_index=lo, bad_index=hi) for (lo, hi), row in times.measured.items()
        ]
        if result.get("counter_changes") and result.get("mode") == "time":
            result.update(counter_movers(result, times.measured, self.endpoint))
        if result.get("culprits"):
            top = result["culprits"][0]
            result["culprit"], result["parent"] = self.probe.commit(top["index"]), top["parent"]
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
    budget_s: float = DEFAULT_BISECT_BUDGET_S,
    confirm: bool = True,
    command: list[str] | None = None,
    log: Log | None = None,
    plan_only: bool = False,
    on_plan: Callable[[dict], None] | None = None,
) -> Path | None:
    """The bundle (kind "bisect") of the commits of GOOD..BAD that moved ``cell``; None with ``plan_only``.
    ``on_plan`` gets the plan as data before anything is measured (``--plan --format json``)."""
    log = log or stderr_logger("teperf bisect")
    case = find_cell(config, cell)  # bad input first, before git or workers
    check_balance(config, 2)  # every probe compares two sides: compare's refusal, not minutes of probes
    if factory is None or isinstance(factory, GitSideFactory):  # torch's own modules: no commit moves them
        repo_root(repo)  # a --repo that is not one is said first
        check_sides_used(config, spec, git=True)
    rng = resolve_range(spec, repo)
    factory = factory or GitSideFactory(SideOptions(repo=str(rng.repo)))
    plan = make_plan(rng, factory, config)
    pin_range = getattr(factory, "pin_range", None)
    if pin_range is not None:
        plan["pinned_strategy"] = pin_range(rng.good.sha, rng.bad.sha)
    lines = plan_lines(rng, case, plan)
    for line in lines:
        log(line)
    if on_plan is not None:
        commits = [commit_meta(c) for c in rng.commits]
        bounds = {"good": commit_meta(rng.good), "bad": commit_meta(rng.bad), "commits": commits}
        on_plan({"spec": spec, "cell": case.key, **bounds, "plan": plan, "lines": lines})
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
