"""``--explain`` of ``teperf history --changes`` and ``teperf nightly``: bisect each change point of this
machine that the history store has not explained yet, and store what each bisect found."""

from __future__ import annotations

import time

from teperf.bisect.report import load
from teperf.bisect.runner import DEFAULT_BISECT_BUDGET_S as DEFAULT_BUDGET_S
from teperf.bisect.runner import bisect
from teperf.bisect.sides import GitSideFactory
from teperf.errors import TeperfError
from teperf.history.analysis import analyze
from teperf.history.explain import change_points, failed, pending, record, remote_url
from teperf.history.store import HistoryStore
from teperf.log import Log
from teperf.nightly import local_machine


def explain_changes(history_url, sides, measure, log: Log, total_s=None, clock=time.monotonic) -> list:
    """Bisect and record every change point of this machine not yet explained; returns the records. Each
    bisect gets --budget (default 30m); ``total_s`` (what a backfill's --budget left) bounds them all, the
    rest waiting for the next run. A Ctrl-C leaves the change points explained so far stored."""
    config = measure.config
    machine, _ = local_machine(config.device)
    store = HistoryStore(history_url)
    todo = pending(change_points(analyze(store.read())), store.explanations(), machine)
    remote = remote_url(sides.repo)
    each_s = config.schedule.budget_s or DEFAULT_BUDGET_S
    if total_s is not None:
        each_s = min(each_s, DEFAULT_BUDGET_S)  # a backfill's --budget is all of it, not each bisect's
    start, done = clock(), []
    for n, point in enumerate(todo, 1):
        left_s = None if total_s is None else total_s - (clock() - start)
        if left_s is not None and left_s <= 0:
            log(f"explain: the budget is spent; {len(todo) - n + 1} change point(s) left for the next run")
            break
        log(
            f"explain [{n}/{len(todo)}] {point.spec}: {point.found.direction} "
            f"{point.found.delta_us:+.1f} us between {point.good_sha[:10]} and {point.bad_sha[:10]}"
        )
        try:
            path = bisect(
                config,
                f"{point.good_sha}..{point.bad_sha}",
                point.spec,
                factory=GitSideFactory(sides),
                repo=sides.repo,
                results_dir=measure.results_dir,
                budget_s=each_s if left_s is None else min(each_s, left_s),
                command=["teperf", "history", "--explain"],
            )
            rec = record(point, load(path)[0].get("result") or {}, str(path), remote)
        except TeperfError as exc:
            rec = failed(point, exc.one_line())
        store.add_explanation(rec)
        done.append(rec)
        log(f"explain [{n}/{len(todo)}] {point.spec}: {rec.answer}")
    log(f"explain: {len(done)} change point(s) bisected")
    return done
