"""Walks the schedule: fresh worker pairs -> set-up -> interleaved trials -> bundle.

The coordinator never imports torch. It owns the workers of one pair at a
time, streams every record to the bundle as it arrives, and keeps going when
one case fails (the case is marked failed; the others go on).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from teperf.bundle import Bundle
from teperf.config import Config, available_cores
from teperf.engine.spawn import Worker, WorkerError
from teperf.errors import TeperfError
from teperf.plan import Case, hash_seed, pair_slots, start_order
from teperf.sides import Side

MAX_RESTARTS_PER_PAIR = 3
Progress = Callable[[int, str], None]  # (steps just measured, what is running)


class PairRunner:
    """The workers of one process pair (one per side) and the cases set up in them."""

    def __init__(self, config: Config, sides: list[Side], cases: list[Case], bundle: Bundle, pair: int, failed: dict):
        self.config = config
        self.sides = sides
        self.cases = {c.id: c for c in cases}
        self.bundle = bundle
        self.pair = pair
        self.seed = hash_seed(config.seed, pair)
        self.failed = failed  # case_id -> reason; shared across pairs
        self.skipped: dict[int, str] = {c.id: c.skip for c in cases if c.skip}
        self.workers: dict[int, Worker] = {}
        self.restarts = 0
        self.backends = sorted({c.backend for c in cases})

    def launch(self, import_core: int) -> None:
        """Start this pair's processes without waiting for them (they import torch
        on ``import_core``; ``start`` moves them to the measuring core)."""
        for index in start_order(self.pair, len(self.sides)):
            self.workers[index] = self._spawn(index, import_core)

    def start(self) -> None:
        for index in start_order(self.pair, len(self.sides)):
            self._start_side(index)
        for case in self.cases.values():
            self._setup_everywhere(case)

    def _spawn(self, index: int, core: int) -> Worker:
        side = self.sides[index]
        return Worker(
            side,
            core=core,
            device=self.config.device,
            backends=self.backends,
            hash_seed=self.seed,
            log_path=self.bundle.worker_log(self.pair, side.label),
            cwd=self.bundle.path,
            timeout_s=self.config.schedule.timeout_s,
        )

    def _start_side(self, index: int) -> None:
        side = self.sides[index]
        try:
            worker = self.workers.get(index) or self._spawn(index, self.config.core)
            worker.wait_ready(self.config.core)
        except WorkerError as exc:
            self.workers.pop(index, None)
            last = exc.log_tail.strip().splitlines()[-1:] or [""]
            self.bundle.append({"kind": "failure", "pair": self.pair, "side": side.label, "case_id": None, "error": str(exc), "log_tail": exc.log_tail})
            raise TeperfError(
                f"the {side.label} worker did not start: {last[0] or exc}",
                f"see {self.bundle.worker_log(self.pair, side.label)}; check that {side.python} can import torch",
            )
        self.workers[index] = worker
        self.bundle.append({"kind": "worker", "pair": self.pair, "side": side.label, "hash_seed": self.seed, "hello": worker.hello})

    def _setup_everywhere(self, case: Case) -> None:
        for index in sorted(self.workers):
            if case.id in self.failed or case.id in self.skipped:
                return
            self._setup(index, case)

    def _setup(self, index: int, case: Case) -> None:
        side = self.sides[index]
        wire = case.to_wire(self.config.device, self.config.schedule.warmup)
        try:
            reply = self.workers[index].request({"cmd": "setup", "case": wire})
        except WorkerError as exc:
            self._worker_failed(index, case, exc)
            return
        record = {"kind": "setup", "pair": self.pair, "side": side.label, "case_id": case.id}
        if reply.get("type") == "ready":
            self.bundle.append({**record, "status": "ready", "info": reply.get("info", {})})
        elif reply.get("skipped"):
            self.skipped[case.id] = reply.get("error", "")
            self.bundle.append({**record, "status": "skipped", "error": reply.get("error")})
        else:
            self.failed[case.id] = f"{side.label}: {reply.get('error')}"
            self.bundle.append({**record, "status": "error", "error": reply.get("error")})

    def _worker_failed(self, index: int, case: Optional[Case], exc: WorkerError) -> None:
        side = self.sides[index]
        case_id = case.id if case else None
        if case is not None:
            self.failed[case.id] = f"{side.label}: {exc}"
        self.bundle.append({"kind": "failure", "pair": self.pair, "side": side.label, "case_id": case_id, "error": str(exc), "log_tail": exc.log_tail})
        self.workers.pop(index).kill()
        self.restarts += 1
        if self.restarts > MAX_RESTARTS_PER_PAIR:
            raise TeperfError(f"the {side.label} worker failed {self.restarts} times in pair {self.pair}: {exc}", f"see {self.bundle.worker_log(self.pair, side.label)}")
        # A fresh worker for this side, with the cases that still work set up again.
        self._start_side(index)
        for other in self.cases.values():
            if other.id not in self.failed and other.id not in self.skipped:
                self._setup(index, other)

    def active(self, case_id: int) -> bool:
        return case_id not in self.failed and case_id not in self.skipped and len(self.workers) == len(self.sides)

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
                self.bundle.append({"kind": "counters", "pair": self.pair, "side": self.sides[index].label, "case_id": case.id, "counters": reply["counters"]})

    def trial(self, index: int, case: Case, iters: int) -> Optional[dict]:
        try:
            reply = self.workers[index].request({"cmd": "trial", "case_id": case.id, "iters": iters})
        except WorkerError as exc:
            self._worker_failed(index, case, exc)
            return None
        if reply.get("type") != "trial":
            self.failed[case.id] = f"{self.sides[index].label}: {reply.get('error')}"
            self.bundle.append({"kind": "failure", "pair": self.pair, "side": self.sides[index].label, "case_id": case.id, "error": reply.get("error"), "log_tail": ""})
            return None
        return reply

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()


def import_core_for(config: Config) -> Optional[int]:
    """A core other than the measuring one, where the next pair may import torch
    while this pair measures; None on a one-core machine (then no prestart)."""
    others = [c for c in available_cores() if c != config.core]
    return others[0] if others else None


def run_schedule(config: Config, sides: list[Side], cases: list[Case], bundle: Bundle, progress: Optional[Progress] = None) -> dict:
    """Measure every case on every side. Returns {case_id: reason} for failed cases."""
    failed: dict[int, str] = {}
    iters = config.schedule.iters
    import_core = import_core_for(config) if config.prestart else None
    upcoming: Optional[PairRunner] = None
    for pair in range(config.schedule.processes):
        runner = upcoming or PairRunner(config, sides, cases, bundle, pair, failed)
        upcoming = None
        try:
            t0 = time.perf_counter()
            runner.start()
            bundle.append({"kind": "pair", "pair": pair, "hash_seed": runner.seed, "start_s": round(time.perf_counter() - t0, 3)})
            if import_core is not None and pair + 1 < config.schedule.processes:
                # Hide the next pair's interpreter start and torch import behind this pair's trials.
                upcoming = PairRunner(config, sides, cases, bundle, pair + 1, failed)
                try:
                    upcoming.launch(import_core)
                except TeperfError:
                    upcoming.close()
                    upcoming = None
            if config.counters and pair == 0:
                for case in cases:
                    runner.counters(case)
            by_id = {c.id: c for c in cases}
            for slot in pair_slots(config, [c.id for c in cases], pair, len(sides)):
                case = by_id[slot.case_id]
                if not runner.active(case.id):
                    if progress:
                        progress(iters, "")
                    continue
                reply = runner.trial(slot.side, case, iters)
                if progress:
                    progress(iters, f"pair {pair + 1}/{config.schedule.processes} {case.key}")
                if reply is None:
                    continue
                reply.pop("type", None)
                reply.pop("case_id", None)
                bundle.append(
                    {
                        "kind": "trial",
                        "pair": pair,
                        "round": slot.round,
                        "trial": slot.trial,
                        "side": sides[slot.side].label,
                        "position": slot.position,
                        "case_id": case.id,
                        "hash_seed": runner.seed,
                        "t": round(time.time(), 3),
                        **reply,
                    }
                )
        except BaseException:
            if upcoming is not None:
                upcoming.close()
            raise
        finally:
            runner.close()
    return failed
