"""One process pair: its workers, the cases set up in them and their trials (:class:`PairTrials`), the
records of it all; what a run's pairs share (:class:`RunContext`)."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import defaultdict
from typing import Any, Optional

from teperf.bundle import Bundle
from teperf.config import Config
from teperf.engine.hints import start_hint
from teperf.engine.lanes import LaneStopped
from teperf.engine.spawn import Worker, WorkerError
from teperf.errors import TeperfError
from teperf.plan import Case, Slot, hash_seed, start_order
from teperf.records import (
    CountersRecord,
    FailureRecord,
    RecordError,
    SetupRecord,
    TrialRecord,
    WorkerRecord,
    lost_pairs_text,
)
from teperf.sides import Side
from teperf.worker.provenance import version_key

MAX_RESTARTS_PER_PAIR = 3  # then the rest of the pair is given up (its cells go on in the next pair)
LOST_PAIRS_PER_CELL = 2  # a cell whose worker died or hung in this many pairs is failed
KNOWN_HASHES: dict[str, list] = {}  # compiled files' hashes by path, size, mtime: hashed again if changed
MAX_REMEASURES_PER_COUPLE = 3  # a couple contended this often is left out (summary: "inconclusive (load)")
MAX_FUTILE_REMEASURES = 4  # re-measures in a row that shared the core too: the pair stops re-measuring


class RemeasureBudget:
    """How often one pair may re-measure a couple that shared its core (TrialRecord.contended): ``per_couple``
    times each, ``total`` in all, none once ``futile`` in a row shared it too (a lasting load)."""

    def __init__(
        self, total: int, per_couple: int = MAX_REMEASURES_PER_COUPLE, futile: int = MAX_FUTILE_REMEASURES
    ):
        self.left, self.per_couple, self.futile = total, per_couple, futile
        self.in_a_row = 0  # re-measures in a row that shared the core too

    def take(self, attempt: int, contended: bool) -> bool:
        """Whether the couple just measured (``attempt``; ``contended``: it shared the core) goes again."""
        if attempt > 0:
            self.in_a_row = self.in_a_row + 1 if contended else 0
        if not contended or attempt >= self.per_couple or self.left <= 0 or self.in_a_row >= self.futile:
            return False
        self.left -= 1
        return True


class CellRetries:
    """Per-cell budget of lost pairs, shared by a run's pairs: a worker that dies or hangs may be the
    machine's fault (OOM killer), so the cell loses that pair only, until LOST_PAIRS_PER_CELL are lost."""

    def __init__(self):
        self.failed: dict[int, str] = {}  # case_id -> reason
        self.lost: dict[int, list[int]] = defaultdict(list)  # case_id -> pairs lost

    def fail(self, case_id: int, reason: str) -> None:
        self.failed.setdefault(case_id, reason)

    def lose(self, case_id: int, pair: int, reason: str) -> bool:
        """Charge the cell a lost pair; True when that used up its budget (the cell is now failed)."""
        self.lost[case_id].append(pair)
        if len(self.lost[case_id]) >= LOST_PAIRS_PER_CELL:
            self.fail(case_id, f"{reason} ({lost_pairs_text(self.lost[case_id])})")
            return True
        return False


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What one run's pairs, schedule and workers share, made once (engine/coordinator.py's _Run)."""

    config: Config
    sides: list[Side]
    bundle: Bundle
    lane_cores: list[int] = dataclasses.field(default_factory=list)  # each lane's measuring core
    import_cores: list[int] = dataclasses.field(default_factory=list)  # spare: pairs import, tear down there
    retries: CellRetries = dataclasses.field(default_factory=CellRetries)
    # guards the schedule, the order of records in the bundle and the progress view; worker I/O runs outside
    lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)
    # set: the run is stopping, a dead worker is no lost pair (engine/lanes.py)
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    spawned: list = dataclasses.field(default_factory=list)  # every worker of the run, for a stop to kill
    cache_root: Optional[str] = None  # inductor's caches of this run (compile_cache_spec)
    servers: Any = None  # fork servers (--spawn forkserver, engine/forkserver.py), or None: fresh ones
    packages: tuple = ()  # the packages under test, whose imports each worker reports
    # their versions by version_key, as the run's first worker of each found them (a lookup costs 0.2 s)
    versions: dict = dataclasses.field(default_factory=dict)

    def check_stop(self) -> None:
        """A worker killed because the run is stopping cost no pair: end the pair, record nothing."""
        if self.stop.is_set():
            raise LaneStopped()


class PairTrials:
    """One process pair as a lane measures it: a worker per side (``live``: side index -> Worker) from
    spawn to close, the cases set up in them, their trials and counters, and the records of all of it."""

    def __init__(self, ctx: RunContext, pair: int, cases: list[Case]):
        self.ctx, self.pair = ctx, pair
        self.core = ctx.config.core  # the measuring core: its lane's (set when a lane takes the pair)
        self.lane = 0
        self.cases = {c.id: c for c in cases}
        servers = ctx.servers  # a forked worker has its server's hash seed
        self.seed = servers.seed(pair) if servers is not None else hash_seed(ctx.config.seed, pair)
        self.backends = sorted({c.backend for c in cases})
        self.live: dict[int, Worker] = {}
        self.lost_here: set[int] = set()  # cases whose worker died or hung in this pair
        self.given_up = False  # too many restarts: the rest of this pair is skipped
        self.skipped: dict[int, str] = {c.id: c.skip for c in cases if c.skip}
        self.dropped: set[int] = set()  # settled since this pair was launched ahead: no trials, no warm-up
        self.started_ahead = False  # launched on spare cores before a lane took it (PairSchedule)
        self.launched_at: Optional[float] = None  # time.perf_counter() at launch
        self.ready: dict[int, set] = {}  # side index -> case ids set up in its worker
        self.queued: dict[int, list] = {}  # side index -> case ids whose setup was sent ahead
        self.restarts = 0

    def _runnable_cases(self) -> list[Case]:
        return [c for c in self.cases.values() if self.runnable(c.id)]

    def _wire(self, case: Case) -> dict:
        return case.to_wire(self.ctx.config.device, self.ctx.config.schedule.warmup)

    def _order(self) -> list[int]:
        return start_order(self.pair, len(self.ctx.sides))

    def _spawn(self, index: int, core: int) -> Worker:
        ctx, side = self.ctx, self.ctx.sides[index]
        worker = Worker(
            side,
            core=core,
            device=ctx.config.device,
            backends=self.backends,
            hash_seed=self.seed,
            log_path=ctx.bundle.worker_log(self.pair, side.label),
            cwd=ctx.bundle.path,
            timeout_s=ctx.config.schedule.timeout_s,
            compile_cache=compile_cache_spec(ctx.config, ctx.cache_root, side.label),
            launcher=ctx.servers.launcher(index, self.pair) if ctx.servers is not None else None,
        )
        ctx.spawned.append(worker)
        self.live[index] = worker
        return worker

    def launch(self, import_cores: list[int]) -> None:
        """Start this pair's processes and queue every case's set-up without waiting (side i imports on
        ``import_cores[i]`` while the previous pair measures); ``start`` moves them to the measuring core."""
        self.launched_at = time.perf_counter()
        for index in self._order():
            worker = self._spawn(index, import_cores[index])
            self.queued[index] = []
            for case in self._runnable_cases():
                worker.send({"cmd": "setup", "case": self._wire(case)})
                self.queued[index].append(case.id)

    def start(self) -> None:
        for index in self._order():
            self._start_side(index)
            self._collect_queued(index)
            self._move_to_measuring_core(index)
        # Cases not set up ahead, in the pair's start order: the side that sets a case up second finds its
        # code warm in the shared caches (a first call 7-20 % cheaper), so base must not always go first.
        for case in self._runnable_cases():
            for index in (i for i in self._order() if i in self.live):
                if self.runnable(case.id) and case.id not in self.ready[index]:
                    self._setup(index, case)
        for index in self._order():
            self._record_worker(index)  # after every set-up: the content hash covers the factories' imports

    def runnable(self, case_id: int) -> bool:
        settled = (self.ctx.retries.failed, self.skipped, self.lost_here, self.dropped)
        return all(case_id not in s for s in settled)

    def _collect_queued(self, index: int) -> None:
        for case_id in self.queued.pop(index, []):
            if index not in self.live:
                return
            try:
                reply = self.live[index].receive()
            except WorkerError as exc:  # the fresh worker sets everything up anew
                self._worker_failed(index, self.cases[case_id], exc)
                return
            self._record_setup(index, self.cases[case_id], reply)

    def _move_to_measuring_core(self, index: int) -> None:
        worker = self.live.get(index)
        if worker is None or worker.core == self.core:
            return
        try:
            worker.pin(self.core)
        except WorkerError as exc:
            self._worker_failed(index, None, exc)
            return
        # Caches and branch predictors now belong to the measuring core: warm up there too.
        warmup = self.ctx.config.schedule.warmup
        for case_id in sorted(self.ready[index]):
            if not self.runnable(case_id):
                continue
            reply = self._request(
                index, self.cases[case_id], {"cmd": "warm", "case_id": case_id, "steps": warmup}
            )
            if reply is None:
                return
            if reply.get("type") != "warm":
                self._record_setup(index, self.cases[case_id], reply)

    def _start_side(self, index: int) -> None:
        ctx, side = self.ctx, self.ctx.sides[index]
        try:  # spawned on the measuring core unless launched ahead
            worker = self.live.get(index) or self._spawn(index, self.core)
            worker.wait_ready()
        except WorkerError as exc:
            self.live.pop(index, None)
            ctx.check_stop()
            last = exc.log_tail.strip().splitlines()[-1:] or [""]
            self._record_failure(index, None, str(exc), log_tail=exc.log_tail)
            raise TeperfError(
                f"the {side.label} worker did not start: {exc.fatal or last[0] or exc}",
                start_hint(exc, side, ctx.config, ctx.bundle.worker_log(self.pair, side.label)),
            )
        self.ready[index] = set()

    def _record_worker(self, index: int) -> None:
        """Record the hello of side ``index``'s worker with what it really imported (interpreter, torch, the
        package under test with its content hash): the bundle then proves which code each side ran."""
        worker = self.live.get(index)
        if worker is not None and "imported" not in (worker.hello or {}):
            message = {"cmd": "imported", "packages": list(self.ctx.packages), "known": dict(KNOWN_HASHES)}
            message["versions"] = dict(self.ctx.versions)
            reply = self._request(index, None, message) or {}  # {}: it died, a fresh one was recorded
            if reply.get("type") == "imported":
                imported = worker.hello["imported"] = reply["imported"]
                for facts in (imported.get("packages") or {}).values():
                    facts = facts or {}
                    KNOWN_HASHES.update(facts.get("compiled") or {})
                    if facts.get("imported"):
                        key = version_key(imported.get("prefix"), facts.get("path"))
                        self.ctx.versions[key] = facts.get("version")
            else:  # an older worker, or the hashing failed: the run goes on, the bundle says so
                worker.hello["imported"] = {"error": str(reply.get("error"))}
        if (worker := self.live.get(index)) is not None:
            label = self.ctx.sides[index].label
            record = WorkerRecord(pair=self.pair, side=label, hash_seed=self.seed, hello=worker.hello)
            self.ctx.bundle.append(record)

    def _request(self, index: int, case: Optional[Case], message: dict) -> Optional[dict]:
        """Side ``index``'s reply to ``message``; None when its worker died or hung (handled)."""
        try:
            return self.live[index].request(message)
        except WorkerError as exc:
            self._worker_failed(index, case, exc)
            return None

    def _setup(self, index: int, case: Case) -> None:
        reply = self._request(index, case, {"cmd": "setup", "case": self._wire(case)})
        if reply is not None:
            self._record_setup(index, case, reply)

    def _record_setup(self, index: int, case: Case, reply: dict) -> None:
        label, error = self.ctx.sides[index].label, reply.get("error")
        if reply.get("type") in ("ready", "warm"):
            self.ready[index].add(case.id)
            status, fields = "ready", {"info": reply.get("info", {})}
        elif reply.get("skipped"):
            self.skipped[case.id] = reply.get("error", "")
            status, fields = "skipped", {"error": error}
        else:
            self.ctx.retries.fail(case.id, f"{label}: {error}")
            status, fields = "error", {"error": error}
        self.ctx.bundle.append(
            SetupRecord(pair=self.pair, side=label, case_id=case.id, status=status, **fields)
        )

    def _worker_failed(self, index: int, case: Optional[Case], exc: WorkerError) -> None:
        """The worker died or hung: the case loses this pair; a fresh worker takes over the other cases."""
        ctx = self.ctx
        ctx.check_stop()
        side = ctx.sides[index]
        case_id = case.id if case else None
        final = False
        if case is not None:
            self.lost_here.add(case.id)
            final = ctx.retries.lose(case.id, self.pair, f"{side.label}: {exc}")
        lost = list(ctx.retries.lost.get(case_id, []))
        self._record_failure(index, case_id, str(exc), final=final, lost_pairs=lost, log_tail=exc.log_tail)
        self.live.pop(index).kill()
        self.queued.pop(index, None)
        self.restarts += 1
        if self.restarts > MAX_RESTARTS_PER_PAIR:
            self.given_up = True  # the cells go on in the next pair
            return
        # A fresh worker for this side, on the measuring core, with the cases that still work set up again.
        self._start_side(index)
        for other in self._runnable_cases():
            if index in self.live:
                self._setup(index, other)
        self._record_worker(index)

    def active(self, case_id: int) -> bool:
        return not self.given_up and self.runnable(case_id) and len(self.live) == len(self.ctx.sides)

    def counters(self, case: Case) -> None:
        for index in sorted(self.live):
            if not self.active(case.id):
                return
            reply = self._request(index, case, {"cmd": "counters", "case_id": case.id})
            if reply is None:
                return
            if reply.get("type") == "counters":
                label = self.ctx.sides[index].label
                self.ctx.bundle.append(
                    CountersRecord(pair=self.pair, side=label, case_id=case.id, counters=reply["counters"])
                )

    def trial(self, slot: Slot, case: Case, iters: int, attempt: int = 0) -> Optional[TrialRecord]:
        """One trial of ``case`` on the side of ``slot``; None when it failed (recorded)."""
        index, label = slot.side, self.ctx.sides[slot.side].label
        reply = self._request(index, case, {"cmd": "trial", "case_id": case.id, "iters": iters})
        if reply is None:
            return None
        error = reply.get("error")
        if reply.get("type") == "trial":
            clocks = {k: v for k, v in reply.items() if k not in ("type", "case_id")}
            try:
                return TrialRecord.from_dict(
                    {
                        **dataclasses.asdict(slot),  # round, trial, position, case_id
                        "side": label,  # not its index
                        "pair": self.pair,
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
        self.ctx.retries.fail(case.id, f"{label}: {error}")
        self._record_failure(index, case.id, error)  # final (the default): it would fail again
        return None

    def _record_failure(self, index: int, case_id: Optional[int], error: Optional[str], **fields) -> None:
        label = self.ctx.sides[index].label
        record = FailureRecord(pair=self.pair, side=label, case_id=case_id, error=error, **fields)
        self.ctx.bundle.append(record)

    def close(
        self, retire_core: Optional[int] = None, retired: Optional[list] = None, hurry: bool = False
    ) -> None:
        """End the workers: at once when ``retired`` is given (they are reaped later), else waiting;
        ``hurry`` (the run is stopping) kills them without asking: one may be hung."""
        workers = list(self.live.values())
        self.live.clear()
        if retired is not None:  # first: a Ctrl-C inside retire() must still leave them to the caller's reap
            retired.extend(workers)
        for worker in workers:
            if hurry:
                worker.kill()
            elif retired is None:
                worker.close()
            else:
                worker.retire(retire_core)


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
