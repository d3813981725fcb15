"""Walks the schedule: fresh worker pairs -> set-up -> interleaved trials -> bundle (never importing torch).
The lanes take pairs from a PairSchedule (engine/prestart.py); _Run keeps every worker process."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from typing import Callable, Optional

from teperf.bundle import Bundle
from teperf.config import Config
from teperf.cpus import assign_lanes, say_shared_core, spare_cores
from teperf.engine.adaptive import Adaptive
from teperf.engine.forkserver import ServerPool, preload_modules
from teperf.engine.lanes import LaneStopped, run_lanes
from teperf.engine.oneshot import one_worker
from teperf.engine.pair import PairTrials, RemeasureBudget, RunContext, compile_cache_spec
from teperf.engine.prestart import PairSchedule
from teperf.engine.spawn import Worker, WorkerError
from teperf.plan import Case, Slot, packages_under_test, pair_slots
from teperf.records import CompileCacheRecord, PairRecord, PrewarmRecord, ServerRecord, TrialRecord
from teperf.sides import Side

Progress = Callable[[int, str], None]  # (steps just measured, what is running)
RETIRED_MAX = 16  # workers still exiting before a lane waits for the oldest (each holds a CUDA context)


def lane_cores(config: Config) -> list[int]:
    """The measuring core of each lane (config.core first), one per physical core."""
    return assign_lanes(config.lanes, config.core)


class _Run:
    """One run: its lanes measure the pairs the schedule hands them (``ctx.lock``: RunContext). It keeps
    every worker process from spawn to reap, and the fork servers of --spawn forkserver."""

    def __init__(
        self,
        config: Config,
        sides: list[Side],
        cases: list[Case],
        bundle: Bundle,
        progress: Optional[Progress],
        stop_rule: Adaptive,
        cache_root: Optional[str] = None,
    ):
        self.config, self.stop_rule, self.bundle, self.progress = config, stop_rule, bundle, progress
        self.by_id = {c.id: c for c in cases}
        self.lane_cores = lane_cores(config)
        import_cores = spare_cores(self.lane_cores)
        packages = tuple(packages_under_test(config, sides))
        self.servers = None
        if config.schedule.spawn == "forkserver":
            cores = import_cores or self.lane_cores
            self.servers = ServerPool(
                config,
                sides,
                preload_modules(cases, packages),
                bundle.path / "workers",
                bundle.path,
                lambda i: cores[i % len(cores)],
                stop_rule.max_pairs,
            )
        self.ctx = RunContext(
            config,
            sides,
            bundle,
            self.lane_cores,
            import_cores,
            cache_root=cache_root,
            servers=self.servers,
            packages=packages,
        )
        self.lock, self.stop = self.ctx.lock, self.ctx.stop
        self.retired: list[Worker] = []  # quit, still tearing down on a spare core
        self.schedule = PairSchedule(self.ctx, stop_rule, self.runner)

    def prewarm(self, cases: list[Case]) -> None:
        """--compile-cache warm: before the first pair, a throwaway worker per side sets up every compile
        case once, so that every pair measures the cached path (a user's second run)."""
        config, bundle, sides = self.config, self.bundle, self.ctx.sides
        todo = [c for c in cases if c.mode == "compile" and not c.skip]
        cores = self.ctx.import_cores or [config.core]
        try:
            with contextlib.ExitStack() as stack:
                workers = []
                for index, side in enumerate(sides):
                    worker = one_worker(
                        config,
                        side,
                        bundle.path / "workers",
                        backends=sorted({c.backend for c in cases}),
                        core=cores[index % len(cores)],
                        log_name=f"prewarm-{side.label}.log",
                        compile_cache=compile_cache_spec(config, self.ctx.cache_root, side.label),
                    )
                    workers.append(stack.enter_context(worker))
                    for case in todo:  # queued now: both sides compile side by side
                        workers[-1].send({"cmd": "setup", "case": case.to_wire(config.device, 1)})
                for side, worker in zip(sides, workers):
                    worker.wait_ready()
                    for case in todo:
                        reply = worker.receive()
                        fields = {key: reply.get(key) for key in ("info", "error")}
                        status = reply.get("type")
                        bundle.append(
                            PrewarmRecord(side=side.label, case_id=case.id, status=status, **fields)
                        )
        except WorkerError as exc:  # the pairs then meet a partly filled cache, which the records show
            bundle.append(PrewarmRecord(status="error", error=str(exc)))

    def retire(self, runner: PairTrials) -> None:
        """End a measured pair's workers without waiting: they tear down on a spare core. Reaps those that
        ended outside the lanes' lock; only past RETIRED_MAX still exiting does this lane wait."""
        quitting: list[Worker] = []
        # In turn over the spare cores: at 20 pairs a minute, 40 CUDA teardowns would overload one core.
        cores = self.ctx.import_cores
        runner.close(cores[-1 - runner.pair % len(cores)] if cores else None, quitting)
        with self.lock:
            self.retired.extend(quitting)
            done = [w for w in self.retired if not w.alive()]
            self.retired = [w for w in self.retired if w.alive()]
            if len(self.retired) > RETIRED_MAX:  # too many still exiting: wait for the oldest
                done += self.retired[:-RETIRED_MAX]
                del self.retired[:-RETIRED_MAX]
        for worker in done:
            worker.reap()

    def kill_all(self) -> None:
        """SIGKILL every worker of the run (lane threads may still hold their pipes: they see EOF)."""
        for worker in list(self.ctx.spawned):
            if worker.alive():
                worker.proc.kill()

    def kill_everything(self) -> None:
        """The run is stopping: kill at once, a worker may be hung."""
        for worker in self.ctx.spawned:
            worker.kill()
        if self.servers is not None:
            self.servers.close(stopping=True)

    def close(self) -> None:
        for worker in self.retired:
            worker.reap()
        self.retired.clear()
        if self.servers is not None:
            self.servers.close()
            for event in self.servers.events:
                self.bundle.append(ServerRecord(**event))

    def runner(self, pair: int, case_ids: list[int]) -> PairTrials:
        return PairTrials(self.ctx, pair, [self.by_id[c] for c in case_ids])

    def lane(self, lane: int) -> None:
        while (taken := self.schedule.take(lane)) is not None:
            runner, todo = taken
            try:
                self.measure(runner, todo)
            except BaseException:
                # Stopping: every sample is on disk; asking the workers to quit would wait on a hung one.
                runner.close(hurry=True)
                raise
            self.retire(runner)

    def measure(self, runner: PairTrials, todo: list[int]) -> None:
        """Start one pair on its lane's core and run its trials, each on disk as it lands."""
        config, stop_rule, n_sides, pair = self.config, self.stop_rule, len(self.ctx.sides), runner.pair
        t0 = time.perf_counter()
        runner.start()
        start_s = time.perf_counter() - t0
        record = PairRecord(
            pair=pair, hash_seed=runner.seed, start_s=round(start_s, 3), lane=runner.lane, core=runner.core
        )
        with self.lock:
            self.bundle.append(record)
        # Counted once, outside the trials; not in the first pair, where one side meets a cold compile cache.
        if config.counters and pair == min(1, stop_rule.max_pairs - 1):
            for case in runner.cases.values():  # in case order, as the stopping rule hands them out
                runner.counters(case)
        slots = list(pair_slots(config, todo, pair, n_sides, stop_rule.schedule_for(pair)))
        # A loaded machine may at most double a pair's trials with re-measures.
        remeasures = RemeasureBudget(len(slots) // n_sides)
        for start in range(0, len(slots), n_sides):
            couple = slots[start : start + n_sides]  # the trials that run next to each other
            attempt = 0
            while (records := self._couple(runner, couple, attempt)) is not None:
                if not remeasures.take(attempt, any(r.contended(config.device) for r in records)):
                    break
                attempt += 1
            else:
                break  # the budget is spent: no more couples
        self.schedule.pair_done(runner, todo, t0, start_s)

    def _couple(self, runner: PairTrials, couple: list[Slot], attempt: int) -> Optional[list[TrialRecord]]:
        """Measure one couple; its records (a failed trial has none); None when the budget is spent."""
        stop_rule, iters, pair = self.stop_rule, self.config.schedule.iters, runner.pair
        records = []
        for slot in couple:
            if self.stop.is_set():
                raise LaneStopped()
            case = self.by_id[slot.case_id]
            if slot.position == 0 and self.schedule.out_of_time():
                return None  # stop between couples, keep what is on disk
            record = runner.trial(slot, case, iters, attempt) if runner.active(case.id) else None
            with self.lock:
                if record is None:
                    self._tick(iters, "")
                    continue
                self.bundle.append(record)
                stop_rule.add_trial(record, slot, record.contended(self.config.device))
                records.append(record)
                # after the sample is on disk: a redraw must not stand between
                of = f"/{stop_rule.max_pairs}" if stop_rule.target is None and not stop_rule.auto else ""
                on = f" lane {runner.lane + 1}" if len(self.lane_cores) > 1 else ""
                again = f" (re-measure {attempt})" if attempt else ""
                self._tick(iters, f"pair {pair + 1}{of}{on} {case.key}{again} · {self.schedule.line()}")
        return records

    def _tick(self, steps: int, text: str) -> None:
        if self.progress:
            self.progress(steps, text)


def run_schedule(
    config: Config,
    sides: list[Side],
    cases: list[Case],
    bundle: Bundle,
    progress: Optional[Progress] = None,
    adaptive: Optional[Adaptive] = None,
) -> dict:
    """Measure every case on every side; {case_id: reason} for failed cases. ``adaptive`` decides how
    many pairs and which cases each measures (default: the fixed schedule)."""
    # every worker's inductor directory lies in it, so that a killed worker's is removed with it too (an
    # eager cell may compile after all: one TE check left 18 such directories in /tmp)
    say_shared_core()
    cache_root = tempfile.mkdtemp(prefix="teperf-compile-")
    compiles = any(c.mode == "compile" and not c.skip for c in cases)
    if compiles:
        bundle.append(CompileCacheRecord(mode=config.compile_cache, dir=cache_root))
    try:
        stop_rule = adaptive or Adaptive(config, cases, len(sides))
        run = _Run(config, sides, cases, bundle, progress, stop_rule, cache_root)
        try:
            if compiles and config.compile_cache == "warm":
                run.prewarm(cases)
            stop_rule.start()
            if len(run.lane_cores) == 1:
                run.lane(0)  # in this thread, as before lanes existed
            else:
                run_lanes(len(run.lane_cores), run.lane, run.stop, run.kill_all)
            run.schedule.close_upcoming()
            bundle.append(dataclasses.replace(stop_rule.stop_record(), prestart=run.schedule.figures()))
        except BaseException:
            run.kill_everything()  # a worker may be hung
            raise
        finally:
            run.close()
        return run.schedule.retries.failed
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
