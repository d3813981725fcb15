"""Walks the schedule: fresh worker pairs -> set-up -> interleaved trials -> bundle.

The coordinator never imports torch. It owns the workers of one pair at a
time, streams every record to the bundle as it arrives, and keeps going when
one case fails: an error the case raises fails it at once; a worker that dies
or hangs costs the case its pair only (:class:`CellRetries`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict, deque
from typing import Callable, Optional

from teperf.bundle import Bundle
from teperf.config import Config
from teperf.engine.adaptive import Adaptive
from teperf.engine.hints import start_hint
from teperf.engine.lanes import LaneStopped, assign_lanes, run_lanes, spare_cores
from teperf.engine.spawn import Worker, WorkerError
from teperf.errors import TeperfError
from teperf.plan import Case, Slot, hash_seed, pair_slots, start_order
from teperf.provenance import packages_under_test
from teperf.records import (
    CompileCacheRecord,
    CountersRecord,
    FailureRecord,
    PairRecord,
    PrewarmRecord,
    RecordError,
    ServerRecord,
    SetupRecord,
    TrialRecord,
    WorkerRecord,
    lost_pairs_text,
)
from teperf.sides import Side

MAX_RESTARTS_PER_PAIR = 3  # then the rest of the pair is given up (its cells go on in the next pair)
LOST_PAIRS_PER_CELL = 2  # a cell whose worker died or hung in this many pairs is failed
# Compiled files' content hashes by real path (with size, mtime and inode): a worker re-hashes a
# 100+ MB library only when it changed (teperf.worker.provenance).
KNOWN_HASHES: dict[str, list] = {}
MAX_REMEASURES_PER_COUPLE = 3  # a couple contended this often is left out (summary: "inconclusive (load)")
MAX_FUTILE_REMEASURES = 4  # re-measures in a row that shared the core too: the pair stops re-measuring
MAX_AUTO_PRESTART = 8  # more importers at once mostly contend for memory bandwidth
Progress = Callable[[int, str], None]  # (steps just measured, what is running)


class RemeasureBudget:
    """How often one pair may measure a couple again after it shared its core (wall time well above CPU
    time, TrialRecord.contended): ``per_couple`` times each, ``total`` times in all, and no more once
    ``futile`` re-measures in a row shared it too (a load that lasts, not a spell: more costs time only)."""

    def __init__(
        self, total: int, per_couple: int = MAX_REMEASURES_PER_COUPLE, futile: int = MAX_FUTILE_REMEASURES
    ):
        self.left, self.per_couple, self.futile = total, per_couple, futile
        self.in_a_row = 0  # re-measures in a row that shared the core too

    def take(self, attempt: int, contended: bool) -> bool:
        """Whether the couple just measured (its ``attempt``-th time; ``contended``: it shared the core)
        is measured again; counts it."""
        if attempt > 0:
            self.in_a_row = self.in_a_row + 1 if contended else 0
        if not contended or attempt >= self.per_couple or self.left <= 0 or self.in_a_row >= self.futile:
            return False
        self.left -= 1
        return True


class CellRetries:
    """Per-cell budget of lost pairs, shared by all pairs of a run.

    An error the case itself raises (a factory or forward that raises) fails the
    cell at once: it would raise again. A worker that dies or hangs may be the
    machine's fault (OOM killer, a stuck driver): the cell loses that pair only
    and the next pair measures it again, until it has lost ``limit`` pairs."""

    def __init__(self, limit: int = LOST_PAIRS_PER_CELL):
        self.limit = limit
        self.failed: dict[int, str] = {}  # case_id -> reason
        self.lost: dict[int, list[int]] = defaultdict(list)  # case_id -> pairs lost

    def fail(self, case_id: int, reason: str) -> None:
        self.failed.setdefault(case_id, reason)

    def lose(self, case_id: int, pair: int, reason: str) -> bool:
        """Charge the cell a lost pair; True when that used up its budget (the cell is now failed)."""
        self.lost[case_id].append(pair)
        if len(self.lost[case_id]) >= self.limit:
            self.fail(case_id, f"{reason} ({lost_pairs_text(self.lost[case_id])})")
            return True
        return False

    def runnable(self, case_id: int) -> bool:
        return case_id not in self.failed


class PairRunner:
    """The workers of one process pair (one per side) and the cases set up in them."""

    def __init__(
        self,
        config: Config,
        sides: list[Side],
        cases: list[Case],
        bundle: Bundle,
        pair: int,
        retries: CellRetries,
        cache_root: Optional[str] = None,
        stop: Optional[threading.Event] = None,
        spawned: Optional[list] = None,
        servers=None,
    ):
        self.config = config
        self.servers = servers  # fork servers (--spawn forkserver), or None: fresh interpreters
        self.core = config.core  # the measuring core: its lane's (set when a lane takes the pair)
        self.lane = 0
        self.stop = stop  # set: the run is stopping, a dead worker is no lost pair (engine/lanes.py)
        self.spawned = spawned if spawned is not None else []  # every worker of the run, for a stop to kill
        self.sides = sides
        self.cases = {c.id: c for c in cases}
        self.bundle = bundle
        self.pair = pair
        # A forked worker has its server's hash seed: that of its generation's first pair.
        self.seed = servers.seed(pair) if servers is not None else hash_seed(config.seed, pair)
        self.retries = retries
        self.lost_here: set[int] = set()  # cases whose worker died or hung in this pair
        self.given_up = False  # too many restarts: the rest of this pair is skipped
        self.skipped: dict[int, str] = {c.id: c.skip for c in cases if c.skip}
        self.dropped: set[int] = set()  # settled since this pair was launched ahead: no trials, no warm-up
        self.workers: dict[int, Worker] = {}
        self.ready: dict[int, set] = {}  # side index -> case ids set up in its worker
        self.queued: dict[int, list] = {}  # side index -> case ids whose setup was sent ahead
        self.restarts = 0
        self.backends = sorted({c.backend for c in cases})
        self.cache_root = cache_root
        self.packages = packages_under_test(config, sides)

    def _runnable_cases(self) -> list[Case]:
        return [c for c in self.cases.values() if self.runnable(c.id)]

    def _wire(self, case: Case) -> dict:
        return case.to_wire(self.config.device, self.config.schedule.warmup)

    def launch(self, import_cores: list[int]) -> None:
        """Start this pair's processes and queue every case's set-up, without waiting:
        they import torch, build and warm up on spare cores (side i on
        ``import_cores[i]``) while the previous pair measures; ``start`` moves
        them to the measuring core and warms up again."""
        for index in start_order(self.pair, len(self.sides)):
            worker = self.workers[index] = self._spawn(index, import_cores[index])
            self.queued[index] = []
            for case in self._runnable_cases():
                worker.send({"cmd": "setup", "case": self._wire(case)})
                self.queued[index].append(case.id)

    def start(self) -> None:
        for index in start_order(self.pair, len(self.sides)):
            self._start_side(index)
            self._collect_queued(index)
            self._move_to_measuring_core(index)
        # Cases not set up ahead (a cold pair, or a side restarted above).
        for case in self._runnable_cases():
            for index in sorted(self.workers):
                if self.runnable(case.id) and case.id not in self.ready[index]:
                    self._setup(index, case)
        for index in start_order(self.pair, len(self.sides)):
            # after every set-up: the factories' imports are what the content hash must cover
            self._describe_imports(index)
            self._record_worker(index)

    def runnable(self, case_id: int) -> bool:
        return (
            self.retries.runnable(case_id)
            and case_id not in self.skipped
            and case_id not in self.lost_here
            and case_id not in self.dropped
        )

    def _collect_queued(self, index: int) -> None:
        for case_id in self.queued.pop(index, []):
            if index not in self.workers:
                return
            try:
                reply = self.workers[index].receive()
            except WorkerError as exc:
                self._worker_failed(
                    index, self.cases[case_id], exc
                )  # the fresh worker sets everything up anew
                return
            self._record_setup(index, self.cases[case_id], reply)

    def _move_to_measuring_core(self, index: int) -> None:
        worker = self.workers.get(index)
        if worker is None or worker.core == self.core:
            return
        try:
            worker.pin(self.core)
        except WorkerError as exc:
            self._worker_failed(index, None, exc)
            return
        # Caches and branch predictors now belong to the measuring core: warm up there too.
        for case_id in sorted(self.ready[index]):
            if not self.runnable(case_id):
                continue
            try:
                reply = worker.request(
                    {"cmd": "warm", "case_id": case_id, "steps": self.config.schedule.warmup}
                )
            except WorkerError as exc:
                self._worker_failed(index, self.cases[case_id], exc)
                return
            if reply.get("type") != "warm":
                self._record_setup(index, self.cases[case_id], reply)

    def _spawn(self, index: int, core: int) -> Worker:
        side = self.sides[index]
        worker = Worker(
            side,
            core=core,
            device=self.config.device,
            backends=self.backends,
            hash_seed=self.seed,
            log_path=self.bundle.worker_log(self.pair, side.label),
            cwd=self.bundle.path,
            timeout_s=self.config.schedule.timeout_s,
            compile_cache=compile_cache_spec(self.config, self.cache_root, side.label),
            launcher=self.servers.launcher(index, self.pair) if self.servers is not None else None,
        )
        self.spawned.append(worker)
        return worker

    def _start_side(self, index: int) -> None:
        side = self.sides[index]
        try:
            worker = self.workers.get(index) or self._spawn(index, self.core)
            self.workers[index] = worker
            worker.wait_ready()
        except WorkerError as exc:
            self.workers.pop(index, None)
            self._check_stop()
            last = exc.log_tail.strip().splitlines()[-1:] or [""]
            self.bundle.append(
                FailureRecord(
                    pair=self.pair, side=side.label, case_id=None, error=str(exc), log_tail=exc.log_tail
                )
            )
            raise TeperfError(
                f"the {side.label} worker did not start: {exc.fatal or last[0] or exc}",
                start_hint(exc, side, self.config, self.bundle.worker_log(self.pair, side.label)),
            )
        self.ready[index] = set()

    def _describe_imports(self, index: int) -> None:
        """Ask the worker what it really imported (interpreter, torch, the package under test with
        its content hash) and keep it in its hello: the bundle then proves which code each side ran."""
        worker = self.workers.get(index)
        if worker is None or "imported" in (worker.hello or {}):
            return
        try:
            reply = worker.request(
                {"cmd": "imported", "packages": self.packages, "known": dict(KNOWN_HASHES)}
            )
        except WorkerError as exc:
            self._worker_failed(index, None, exc)
            return
        if reply.get("type") == "imported":
            worker.hello["imported"] = reply["imported"]
            for facts in (reply["imported"].get("packages") or {}).values():
                KNOWN_HASHES.update((facts or {}).get("compiled") or {})
        else:  # an older worker, or the hashing failed: the run goes on, the bundle says so
            worker.hello["imported"] = {"error": str(reply.get("error"))}

    def _record_worker(self, index: int) -> None:
        worker = self.workers.get(index)
        if worker is not None:
            self.bundle.append(
                WorkerRecord(
                    pair=self.pair, side=self.sides[index].label, hash_seed=self.seed, hello=worker.hello
                )
            )

    def _setup(self, index: int, case: Case) -> None:
        try:
            reply = self.workers[index].request({"cmd": "setup", "case": self._wire(case)})
        except WorkerError as exc:
            self._worker_failed(index, case, exc)
            return
        self._record_setup(index, case, reply)

    def _record_setup(self, index: int, case: Case, reply: dict) -> None:
        side = self.sides[index]

        def record(status: str, **fields) -> SetupRecord:
            return SetupRecord(pair=self.pair, side=side.label, case_id=case.id, status=status, **fields)

        if reply.get("type") in ("ready", "warm"):
            self.ready[index].add(case.id)
            self.bundle.append(record("ready", info=reply.get("info", {})))
        elif reply.get("skipped"):
            self.skipped[case.id] = reply.get("error", "")
            self.bundle.append(record("skipped", error=reply.get("error")))
        else:
            self.retries.fail(case.id, f"{side.label}: {reply.get('error')}")
            self.bundle.append(record("error", error=reply.get("error")))

    def _worker_failed(self, index: int, case: Optional[Case], exc: WorkerError) -> None:
        """The worker died or hung: the case loses this pair (and is failed once it has lost
        too many); a fresh worker for the side takes over the other cases."""
        self._check_stop()
        side = self.sides[index]
        case_id = case.id if case else None
        reason = f"{side.label}: {exc}"
        final = False
        if case is not None:
            self.lost_here.add(case.id)
            final = self.retries.lose(case.id, self.pair, reason)
        self.bundle.append(
            FailureRecord(
                pair=self.pair,
                side=side.label,
                case_id=case_id,
                error=str(exc),
                final=final,
                lost_pairs=list(self.retries.lost.get(case_id, [])),
                log_tail=exc.log_tail,
            )
        )
        self.workers.pop(index).kill()
        self.queued.pop(index, None)
        self.restarts += 1
        if self.restarts > MAX_RESTARTS_PER_PAIR:
            self.given_up = True  # the cells go on in the next pair
            return
        # A fresh worker for this side, on the measuring core, with the cases that still work set up again.
        self._start_side(index)
        for other in self._runnable_cases():
            if index in self.workers:
                self._setup(index, other)
        self._describe_imports(index)
        self._record_worker(index)

    def _check_stop(self) -> None:
        """A worker killed because the run is stopping cost no pair: end this pair, record nothing."""
        if self.stop is not None and self.stop.is_set():
            raise LaneStopped()

    def active(self, case_id: int) -> bool:
        return not self.given_up and self.runnable(case_id) and len(self.workers) == len(self.sides)

    def counters(self, case: Case) -> None:
        for index, worker in sorted(self.workers.items()):
            if not self.active(case.id):
                return
            try:
                reply = worker.request({"cmd": "counters", "case_id": case.id})
            except WorkerError as exc:
                self._worker_failed(index, case, exc)
                return
            if reply.get("type") == "counters":
                self.bundle.append(
                    CountersRecord(
                        pair=self.pair,
                        side=self.sides[index].label,
                        case_id=case.id,
                        counters=reply["counters"],
                    )
                )

    def trial(self, slot: Slot, case: Case, iters: int, attempt: int = 0) -> Optional[TrialRecord]:
        """One trial of ``case`` on the side of ``slot``, as its record; None when it failed (recorded).
        ``attempt``: how many times its couple was measured before (it shared its core then)."""
        index, label = slot.side, self.sides[slot.side].label
        try:
            reply = self.workers[index].request({"cmd": "trial", "case_id": case.id, "iters": iters})
        except WorkerError as exc:
            self._worker_failed(index, case, exc)
            return None
        error = reply.get("error")
        if reply.get("type") == "trial":
            clocks = {k: v for k, v in reply.items() if k not in ("type", "case_id")}
            try:
                return TrialRecord.from_dict(
                    {
                        "pair": self.pair,
                        "round": slot.round,
                        "trial": slot.trial,
                        "side": label,
                        "position": slot.position,
                        "case_id": case.id,
                        "hash_seed": self.seed,
                        "t": round(time.time(), 3),
                        "lane": self.lane,
                        "core": self.core,
                        "attempt": attempt,
                        **clocks,
                    }
                )
            except RecordError as exc:  # a worker of another teperf version, say
                error = f"the worker sent a trial this teperf cannot read: {exc}"
        self.retries.fail(case.id, f"{label}: {error}")
        self.bundle.append(
            FailureRecord(pair=self.pair, side=label, case_id=case.id, error=error, final=True)
        )
        return None

    def close(
        self, retire_core: Optional[int] = None, retired: Optional[list] = None, hurry: bool = False
    ) -> None:
        """End this pair's workers: at once when ``retired`` is given (they are reaped later), else
        waiting; ``hurry`` (the run is stopping) kills them without asking: one may be hung."""
        workers = list(self.workers.values())
        self.workers.clear()
        if hurry:
            for worker in workers:
                worker.kill()
            return
        if retired is None:
            for worker in workers:
                worker.close()
            return
        # Handed over before retiring: a Ctrl-C inside retire() (it talks to the
        # worker) must still leave every worker to the caller's reap, or one outlives us.
        retired.extend(workers)
        for worker in workers:
            worker.retire(retire_core)


def lane_cores(config: Config) -> list[int]:
    """The measuring core of each lane (config.core first), one per physical core."""
    return assign_lanes(config.lanes, config.core)


def import_cores_for(config: Config, lanes: Optional[list[int]] = None) -> list[int]:
    """Cores where upcoming pairs may start while the lanes measure: no measuring core, and none of
    their SMT siblings while other cores are left; empty when every core measures (then no prestart)."""
    return spare_cores(lane_cores(config) if lanes is None else lanes)


def prestart_depth(config: Config, n_import_cores: int, n_sides: int, max_pairs: Optional[int] = None) -> int:
    """Pairs kept started ahead. Auto: one spare core per worker (a fresh TE pair
    takes 20-35 s to import and set up, far longer than a short pair measures, so
    the pipeline must be deep to keep up), at least one pair where any core is spare."""
    if n_import_cores == 0:
        return 0
    if config.prestart is not None:
        return min(config.prestart, n_import_cores)
    max_pairs = config.schedule.processes if max_pairs is None else max_pairs
    return min(MAX_AUTO_PRESTART, max(1, n_import_cores // max(1, n_sides)), max_pairs - 1)


def compile_cache_spec(config: Config, cache_root: Optional[str], label: str) -> Optional[dict]:
    """What a worker is told about inductor's cache (teperf/worker/compile_cache.py): cold, its own
    fresh one; warm, this side's directory of the run, filled before the first pair."""
    if cache_root is None:
        return None
    spec = {
        "mode": config.compile_cache,
        "process_warmup_dir": os.path.join(cache_root, "process-warmup"),
        "parent": cache_root,
    }
    if config.compile_cache == "warm":
        spec["dir"] = os.path.join(cache_root, "warm", label)
    return spec


def prewarm_compile_cache(
    config: Config, sides: list[Side], cases: list[Case], bundle: Bundle, cache_root: str
) -> None:
    """--compile-cache warm: before the first pair, one throwaway worker per side sets up every
    compile case once, so that its directory holds what that case compiles; every pair then
    measures the cached path (a user's second run). Its setups are kept as "prewarm" records."""
    todo = [c for c in cases if c.mode == "compile" and not c.skip]
    cores = import_cores_for(config) or [config.core]
    workers: dict[int, Worker] = {}
    try:
        for index, side in enumerate(sides):
            workers[index] = worker = Worker(
                side,
                core=cores[index % len(cores)],
                device=config.device,
                backends=sorted({c.backend for c in cases}),
                hash_seed=hash_seed(config.seed, 0),
                log_path=bundle.path / "workers" / f"prewarm-{side.label}.log",
                cwd=bundle.path,
                timeout_s=config.schedule.timeout_s,
                compile_cache=compile_cache_spec(config, cache_root, side.label),
            )
            for case in todo:  # queued now: both sides compile side by side
                worker.send({"cmd": "setup", "case": case.to_wire(config.device, 1)})
        for index, worker in workers.items():
            worker.wait_ready()
            for case in todo:
                reply = worker.receive()
                bundle.append(
                    PrewarmRecord(
                        side=sides[index].label,
                        case_id=case.id,
                        status=reply.get("type"),
                        info=reply.get("info"),
                        error=reply.get("error"),
                    )
                )
    except WorkerError as exc:  # the pairs then meet a partly filled cache, which the records show
        bundle.append(PrewarmRecord(status="error", error=str(exc)))
    finally:
        for worker in workers.values():
            worker.close()


class _Run:
    """What the lanes of one run share. ``lock`` guards the schedule (``plan``), the pairs started
    ahead, the order of records in the bundle and the progress view; worker I/O runs outside it."""

    def __init__(
        self,
        config: Config,
        sides: list[Side],
        cases: list[Case],
        bundle: Bundle,
        progress: Optional[Progress],
        plan: Adaptive,
        cache_root: Optional[str] = None,
    ):
        self.config, self.sides, self.bundle, self.progress, self.plan = config, sides, bundle, progress, plan
        self.cache_root = cache_root  # inductor's caches of this run (compile_cache_spec)
        self.cases = cases
        self.by_id = {c.id: c for c in cases}
        self.retries = CellRetries()
        self.lock = threading.RLock()
        self.stop = threading.Event()
        self.lane_cores = lane_cores(config)
        self.import_cores = import_cores_for(config, self.lane_cores)
        self.depth = prestart_depth(config, len(self.import_cores), len(sides), plan.max_pairs)
        self.retire_core = self.import_cores[-1] if self.import_cores else None
        self.upcoming: deque[PairRunner] = deque()  # pairs started ahead, numbered from ``taken`` on
        self.retired: list[Worker] = []  # quit, still tearing down on a spare core
        self.spawned: list[Worker] = []  # every worker this run started: what a stop kills
        self.taken = 0  # pairs handed to a lane so far
        self.next_launch = 1
        self.servers = None
        if config.schedule.spawn == "forkserver":
            from teperf.engine.forkserver import ServerPool

            cores = self.import_cores or self.lane_cores
            self.servers = ServerPool(
                config,
                sides,
                preload_modules(config, cases, sides),
                bundle.path / "workers",
                bundle.path,
                lambda i: cores[i % len(cores)],
                plan.max_pairs,
            )

    def runner(self, pair: int, case_ids: list[int]) -> PairRunner:
        return PairRunner(
            self.config,
            self.sides,
            [self.by_id[c] for c in case_ids],
            self.bundle,
            pair,
            self.retries,
            self.cache_root,
            self.stop,
            self.spawned,
            self.servers,
        )

    def take(self, lane: int) -> Optional[tuple[PairRunner, list[int]]]:
        """The next pair for ``lane`` (None: the schedule is done); launches the pairs ahead."""
        with self.lock:
            if self.stop.is_set():
                raise LaneStopped()
            pair = self.taken
            todo = self.plan.next_pair(pair, self.retries.failed)
            if not todo:
                return None
            self.taken += 1
            # A pair launched ahead set up every case open then; the ones settled since get no trials.
            ahead = bool(self.upcoming) and self.upcoming[0].pair == pair
            runner = self.upcoming.popleft() if ahead else self.runner(pair, todo)
            runner.core, runner.lane = self.lane_cores[lane], lane
            runner.dropped.update(set(runner.cases) - set(todo))
            try:
                self._launch_ahead()
            except BaseException:
                runner.close(hurry=True)
                raise
            return runner, todo

    def _launch_ahead(self) -> None:
        # Launch the pairs ahead before this one starts, so that they import while it starts
        # too: launched after it, pair 1 of a TE run waited 11-14 s for its set-up.
        # The first pair of each lane starts cold on its own lane's core, idle until then; the spare
        # cores start the pairs after those.
        self.next_launch = max(self.next_launch, self.taken, len(self.lane_cores))
        n_sides = len(self.sides)
        while len(self.upcoming) < self.depth and self.plan.may_launch(self.next_launch):
            ahead = self.runner(self.next_launch, self.plan.open_cases(self.retries.failed))
            self.upcoming.append(ahead)  # closed on any error, half-launched or not
            self.next_launch += 1
            try:
                # One spare core per worker, in turn; shared where cores are few.
                ahead.launch(
                    [
                        self.import_cores[(ahead.pair * n_sides + i) % len(self.import_cores)]
                        for i in range(n_sides)
                    ]
                )
            except (TeperfError, WorkerError):
                self.upcoming.pop().close()  # that pair starts cold when its turn comes
                self.next_launch -= 1
                break

    def lane(self, lane: int) -> None:
        """Measure pairs on ``lane`` until the schedule is done."""
        while True:
            taken = self.take(lane)
            if taken is None:
                return
            runner, todo = taken
            try:
                self.measure(runner, todo)
            except BaseException:
                # Stopping (Ctrl-C, SIGTERM, an error): every sample is on disk, so end the
                # workers at once rather than ask them, which waits on a hung one.
                runner.close(hurry=True)
                raise
            quitting: list[Worker] = []
            runner.close(self.retire_core, quitting)
            with self.lock:
                self.retired.extend(quitting)
                if len(self.retired) > 8:  # keep few exiting processes around
                    for worker in self.retired[:-4]:
                        worker.reap()
                    del self.retired[:-4]

    def _tick(self, steps: int, text: str) -> None:
        if self.progress:
            self.progress(steps, text)

    def measure(self, runner: PairRunner, todo: list[int]) -> None:
        """Start one pair on its lane's core and run its trials, each on disk as it lands."""
        config, plan, sides, pair = self.config, self.plan, self.sides, runner.pair
        t0 = time.perf_counter()
        runner.start()
        start_s = time.perf_counter() - t0
        with self.lock:
            self.bundle.append(
                PairRecord(
                    pair=pair,
                    hash_seed=runner.seed,
                    start_s=round(start_s, 3),
                    lane=runner.lane,
                    core=runner.core,
                )
            )
        # Counted once, outside the timed trials. Not in the first pair when there
        # are more: there one side meets a cold torch.compile cache, the other a warm one.
        if config.counters and pair == min(1, plan.max_pairs - 1):
            for case in self.cases:
                if case.id in runner.cases:
                    runner.counters(case)
        slots = list(pair_slots(config, todo, pair, len(sides)))
        # A loaded machine may at most double a pair's trials with re-measures.
        remeasures = RemeasureBudget(len(slots) // len(sides))
        for start in range(0, len(slots), len(sides)):
            couple = slots[start : start + len(sides)]  # the trials that run next to each other
            attempt = 0
            while True:
                records = self._couple(runner, couple, attempt)
                if records is None:
                    return self._pair_done(runner, todo, t0, start_s)  # the budget is spent
                if not remeasures.take(attempt, any(r.contended(config.device) for r in records)):
                    break
                attempt += 1
        self._pair_done(runner, todo, t0, start_s)

    def _couple(self, runner: PairRunner, couple: list[Slot], attempt: int) -> Optional[list[TrialRecord]]:
        """Measure one couple; its records (a failed trial has none); None when the budget is spent."""
        plan, iters, pair = self.plan, self.config.schedule.iters, runner.pair
        records = []
        for slot in couple:
            if self.stop.is_set():
                raise LaneStopped()
            case = self.by_id[slot.case_id]
            with self.lock:
                out_of_time = slot.position == 0 and plan.out_of_time()
            if out_of_time:
                return None  # stop between couples, keep what is on disk
            record = runner.trial(slot, case, iters, attempt) if runner.active(case.id) else None
            with self.lock:
                if record is None:
                    self._tick(iters, "")
                    continue
                self.bundle.append(record)
                plan.add_trial(
                    pair,
                    case.id,
                    slot.round,
                    slot.trial,
                    slot.side,
                    record.to_dict(),
                    attempt=attempt,
                    contended=record.contended(self.config.device),
                )
                records.append(record)
                # after the sample is on disk: a redraw must not stand between
                of = f"/{plan.max_pairs}" if plan.target is None else ""
                on = f" lane {runner.lane + 1}" if len(self.lane_cores) > 1 else ""
                again = f" (re-measure {attempt})" if attempt else ""
                self._tick(iters, f"pair {pair + 1}{of}{on} {case.key}{again}")
        return records

    def _pair_done(self, runner: PairRunner, todo: list[int], t0: float, start_s: float) -> None:
        with self.lock:
            self.plan.pair_done(
                runner.pair,
                time.perf_counter() - t0 - start_s,
                len(todo),
                skipped=runner.skipped,
                failed=self.retries.failed,
                start_s=start_s,
            )

    def kill_all(self) -> None:
        """SIGKILL every worker of the run (lane threads may still hold their pipes: they see EOF)."""
        for worker in list(self.spawned):
            if worker.alive():
                worker.proc.kill()

    def end(self, stopping: bool) -> None:
        """After the lanes: close what is left. ``stopping``: kill at once, a worker may be hung."""
        if stopping:
            for worker in self.spawned:
                worker.kill()
            if self.servers is not None:
                self.servers.close(stopping=True)
            return
        for ahead in self.upcoming:  # started ahead for a pair the run no longer needs (it stopped early)
            ahead.close()

    def close_servers(self) -> None:
        """Quit the fork servers (each leaves once its children have) and record what they did."""
        if self.servers is None:
            return
        for worker in self.retired:
            worker.reap()
        self.retired.clear()
        self.servers.close()
        for event in self.servers.events:
            self.bundle.append(ServerRecord(**event))


def run_schedule(
    config: Config,
    sides: list[Side],
    cases: list[Case],
    bundle: Bundle,
    progress: Optional[Progress] = None,
    adaptive: Optional[Adaptive] = None,
) -> dict:
    """Measure every case on every side. Returns {case_id: reason} for failed cases.
    ``adaptive`` decides how many pairs and which cases each measures (default: the fixed schedule);
    a failed cell drops out of it, a cell that lost a pair is measured again by the next one.
    With ``config.lanes`` > 1 that many pairs measure at once, one per lane (engine/lanes.py)."""
    cache_root = None
    if any(c.mode == "compile" and not c.skip for c in cases):
        cache_root = tempfile.mkdtemp(prefix="teperf-compile-")
        bundle.append(CompileCacheRecord(mode=config.compile_cache, dir=cache_root))
    try:
        if cache_root is not None and config.compile_cache == "warm":
            prewarm_compile_cache(config, sides, cases, bundle, cache_root)
        return _run_pairs(config, sides, cases, bundle, progress, adaptive, cache_root)
    finally:
        if cache_root is not None:
            shutil.rmtree(cache_root, ignore_errors=True)


def _run_pairs(
    config: Config,
    sides: list[Side],
    cases: list[Case],
    bundle: Bundle,
    progress: Optional[Progress],
    adaptive: Optional[Adaptive],
    cache_root: Optional[str],
) -> dict:
    plan = adaptive or Adaptive(config, cases, len(sides))
    run = _Run(config, sides, cases, bundle, progress, plan, cache_root)
    plan.start()
    try:
        if len(run.lane_cores) == 1:
            run.lane(0)  # in this thread, as before lanes existed
        else:
            run_lanes(len(run.lane_cores), run.lane, run.stop, run.kill_all)
        run.end(stopping=False)
        bundle.append(plan.stop_record())
    except BaseException:
        run.end(stopping=True)
        raise
    finally:
        for worker in run.retired:
            worker.reap()
        run.close_servers()
    return run.retries.failed


def preload_modules(config: Config, cases: list[Case], sides: list[Side]) -> list[str]:
    """What a fork server imports before it forks: torch, teperf's worker, each backend in use and
    the packages under test (a package whose import initializes CUDA makes the server refuse)."""
    names = ["torch", "teperf.worker.session", "teperf.worker.runner", "teperf.worker.counters"]
    backends = {c.backend for c in cases}
    names += [f"teperf.worker.backends.{'torch_ref' if b == 'torch' else b}" for b in sorted(backends)]
    if "te" in backends:
        names.append("transformer_engine.pytorch")
    names += [p for p in packages_under_test(config, sides) if p not in ("torch", "transformer_engine")]
    return list(dict.fromkeys(names))
