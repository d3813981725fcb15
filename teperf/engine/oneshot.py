"""One worker outside the measured pairs (probes, the counters gate, explain, the compile-cache prewarm)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

from teperf.engine.spawn import Worker
from teperf.plan import Case, hash_seed
from teperf.sides import Side


class StepFailed(Exception):
    """The worker answered a request with an error (it is still alive): ``what`` failed, and why."""

    def __init__(self, what: str, reply: dict):
        self.what, self.error, self.skipped = what, reply.get("error"), bool(reply.get("skipped"))
        super().__init__(f"{what} failed: {self.error}")


class OneShot(Worker):
    """A worker outside the measured pairs and the requests the one-shot jobs make of it."""

    warmup = 1  # the set-up's warm-up steps: one_worker's config says

    ready = Worker.wait_ready  # the worker's hello, once it has imported torch

    def _ask(self, what: str, message: dict, answer: str) -> dict:
        reply = self.request(message)
        if reply.get("type") != answer:
            raise StepFailed(what, reply)
        return reply

    def setup(self, case: Case) -> dict:
        return self._ask("set-up", {"cmd": "setup", "case": case.to_wire(self.device, self.warmup)}, "ready")

    def counters(self, case: Case) -> dict:
        return self._ask("counting", {"cmd": "counters", "case_id": case.id}, "counters")["counters"]

    def profile(self, case: Case, iters: int) -> list:
        message = {"cmd": "profile", "case_id": case.id, "iters": int(iters)}
        return self._ask("profiling", message, "profile")["functions"]

    def imported(self, packages: list[str]) -> Optional[dict]:
        reply = self.request({"cmd": "imported", "packages": packages})
        return reply["imported"] if reply.get("type") == "imported" else None


def one_worker(
    config,
    side: Side,
    log_dir: Path,
    *,
    backends: list[str],
    core: Optional[int] = None,
    log_name: Optional[str] = None,
    **worker_args,
) -> contextlib.closing[OneShot]:
    """A worker of ``side`` in ``log_dir``, started at once so that several import side by side (ready())."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    worker = OneShot(
        side,
        core=config.core if core is None else core,
        device=config.device,
        backends=backends,
        hash_seed=hash_seed(config.seed, 0),
        log_path=log_dir / (log_name or f"{side.label}.log"),
        cwd=log_dir,
        timeout_s=config.schedule.timeout_s,
        **worker_args,
    )
    worker.warmup = config.schedule.warmup
    return contextlib.closing(worker)
