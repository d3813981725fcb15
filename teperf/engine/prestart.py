"""Pairs started ahead on spare cores: how many (:func:`prestart_depth`); the lanes' :class:`PairSchedule`."""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from typing import Callable, Optional

from teperf.config import Config
from teperf.engine.adaptive import Adaptive
from teperf.engine.lanes import LaneStopped
from teperf.engine.pair import PairTrials, RunContext
from teperf.engine.spawn import WorkerError
from teperf.errors import TeperfError

MAX_AUTO_PRESTART = 16  # pairs: a bound for many-core hosts before the first pairs tell start vs measure


def prestart_depth(
    config: Config,
    n_import_cores: int,
    n_sides: int,
    max_pairs: Optional[int] = None,
    lanes: int = 1,
    start_s: Optional[float] = None,
    measure_s: Optional[float] = None,
) -> int:
    """Pairs kept started ahead (docs/measuring.md): lanes * ceil(start_s / measure_s) starting and one per
    lane ready, but at most one spare core per worker (two importers on one core each take twice as long)."""
    if n_import_cores == 0:
        return 0
    if config.prestart is not None:
        return min(config.prestart, n_import_cores)
    max_pairs = config.schedule.processes if max_pairs is None else max_pairs
    by_cores = min(MAX_AUTO_PRESTART, max(1, n_import_cores // max(1, n_sides)))
    need = lanes * (math.ceil(start_s / max(measure_s, 0.1)) + 1) if start_s and measure_s else by_cores
    return max(0, min(by_cores, need, max_pairs - 1))


class PairSchedule:
    """Which pair a lane measures next and what (the stop rule's, or one started ahead); under ``lock``."""

    def __init__(
        self, ctx: RunContext, stop_rule: Adaptive, new_runner: Callable[[int, list[int]], PairTrials]
    ):
        self.config, self.stop_rule, self.retries = ctx.config, stop_rule, ctx.retries
        self.new_runner = new_runner
        self.lane_cores, self.import_cores, self.n_sides = ctx.lane_cores, ctx.import_cores, len(ctx.sides)
        self.lock, self.stop = ctx.lock, ctx.stop
        self.upcoming: deque[PairTrials] = deque()  # pairs started ahead, numbered from ``taken`` on
        self.taken = 0  # pairs handed to a lane so far
        self.next_launch = 1
        self.started = self.measured = 0  # pairs whose workers were spawned; pairs measured
        self.cold_starts: list[float] = []  # seconds a pair nobody started ahead took to start
        self.ahead_starts: list[float] = []  # seconds from launch to ready of each pair started ahead
        self.measure_times: list[float] = []  # seconds each pair measured
        self.lane_wait_s = 0.0  # lanes waiting for pairs started ahead to be ready
        self.depth = self.max_depth = self._depth()

    def _depth(self) -> int:
        start = statistics.median(self.cold_starts) if self.cold_starts else None
        measure = statistics.median(self.measure_times) if self.measure_times else None
        return prestart_depth(
            self.config, len(self.import_cores), self.n_sides, self.stop_rule.max_pairs, len(self.lane_cores),
            start, measure,
        )  # fmt: skip

    def line(self) -> str:
        """The live line's part about the pipeline of pairs."""
        return f"pairs started {self.started}, waiting {len(self.upcoming)}, measured {self.measured}"

    def figures(self) -> dict:
        """What the stop record keeps about prestart (bench-spawn and the GPU scripts read it)."""
        return {
            "depth": self.depth,
            "max_depth": self.max_depth,
            "spare_cores": len(self.import_cores),
            "started": self.started,
            "measured": self.measured,
            "lane_wait_s": round(self.lane_wait_s, 3),
            "start_s": round(statistics.median(self.cold_starts), 3) if self.cold_starts else None,
            "measure_s": round(statistics.median(self.measure_times), 3) if self.measure_times else None,
        }

    def take(self, lane: int) -> Optional[tuple[PairTrials, list[int]]]:
        """The next pair for ``lane`` (None: the schedule is done); launches the pairs ahead."""
        with self.lock:
            if self.stop.is_set():
                raise LaneStopped()
            pair = self.taken
            ahead = bool(self.upcoming) and self.upcoming[0].pair == pair
            todo = self.stop_rule.next_pair(pair, self.retries.failed, self._start_left(ahead))
            if not todo:
                return None
            self.taken += 1
            # A pair launched ahead set up every case open then; the ones settled since get no trials.
            runner = self.upcoming.popleft() if ahead else self.new_runner(pair, todo)
            runner.core, runner.lane = self.lane_cores[lane], lane
            runner.dropped.update(set(runner.cases) - set(todo))
            if not ahead:
                self.started += 1
                runner = self._launch_cold(runner, lane, todo)
            runner.started_ahead = ahead
            try:
                self._launch_ahead()
            except BaseException:
                runner.close(hurry=True)
                raise
            return runner, todo

    def _start_left(self, ahead: bool) -> Optional[float]:
        """Seconds the next pair will likely wait for its workers (None before a pair has started): a
        pair started ahead, the typical launch-to-ready less the time it has had; else a cold start. The
        budget check needs it: a lane that took the last pair 15 s before its workers were ready ran the
        H100's 5-minute budget to 5.2."""
        launched = self.upcoming[0].launched_at if ahead else None
        starts = self.ahead_starts if launched is not None and self.ahead_starts else self.cold_starts
        if not starts:
            return None
        age = time.perf_counter() - launched if launched is not None else 0.0
        return max(0.0, statistics.median(starts) - age)

    def _launch_cold(self, runner: PairTrials, lane: int, todo: list[int]) -> PairTrials:
        """A pair nobody started ahead, its sides importing at once on spare cores where there are enough."""
        if len(self.import_cores) < self.n_sides * (len(self.lane_cores) + 1):
            return runner
        try:
            runner.launch(self._spare(lane))
            return runner
        except (TeperfError, WorkerError):
            runner.close(hurry=True)
            return self.new_runner(runner.pair, todo)  # it starts cold, one side after the other

    def _launch_ahead(self) -> None:
        # Before this pair starts, so that they import while it starts too (each lane's first starts cold).
        self.next_launch = max(self.next_launch, self.taken, len(self.lane_cores))
        self.depth = self._depth()
        self.max_depth = max(self.max_depth, self.depth)
        while len(self.upcoming) < self.depth and self.stop_rule.may_launch(self.next_launch):
            ahead = self.new_runner(self.next_launch, self.stop_rule.open_cases(self.retries.failed))
            self.upcoming.append(ahead)  # closed on any error, half-launched or not
            try:
                ahead.launch(self._spare(ahead.pair))
            except (TeperfError, WorkerError):
                self.upcoming.pop().close()  # that pair starts cold when its turn comes
                break
            self.next_launch += 1
            self.started += 1

    def _spare(self, k: int) -> list[int]:
        """The k-th group of spare cores, one per side, in turn (shared where cores are few)."""
        cores, n = self.import_cores, self.n_sides
        return [cores[(k * n + i) % len(cores)] for i in range(n)]

    def out_of_time(self) -> bool:
        with self.lock:
            return self.stop_rule.out_of_time()

    def pair_done(self, runner: PairTrials, todo: list[int], t0: float, start_s: float) -> None:
        """Tell the stop_rule the pair is done (started at ``t0``, its workers took ``start_s`` to start)."""
        with self.lock:
            self.measured += 1
            self.measure_times.append(time.perf_counter() - t0 - start_s)
            if runner.started_ahead:
                self.lane_wait_s += start_s
                if runner.launched_at is not None:
                    self.ahead_starts.append(t0 + start_s - runner.launched_at)
            else:
                self.cold_starts.append(start_s)
            self.stop_rule.pair_done(
                runner.pair,
                self.measure_times[-1],
                len(todo),
                skipped=runner.skipped,
                failed=self.retries.failed,
                start_s=start_s,
                ahead=runner.started_ahead,
            )

    def close_upcoming(self) -> None:
        # Pairs the run no longer needs: killed, not asked to quit (each CUDA teardown waited for in turn).
        for ahead in self.upcoming:
            ahead.close(hurry=True)
