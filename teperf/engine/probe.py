"""One worker, one case, one question: the exact step counters of a side (``teperf bisect``'s probe).

Counters repeat exactly, so a probe needs no pairing, no schedule and no
statistics: start the side's worker pinned to the measuring core, set the
case up, ask for ``counters``, quit.
"""

from __future__ import annotations

from pathlib import Path

from teperf.config import Config
from teperf.engine.spawn import Worker, WorkerError
from teperf.plan import Case, hash_seed
from teperf.sides import Side


class ProbeFailed(Exception):
    """The side could not be counted (its worker did not start, the case did not set up); one line."""

    def __init__(self, reason: str, log_tail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail


def count_case(config: Config, side: Side, case: Case, log_path: Path) -> dict:
    """The counters of one fwd+bwd step of ``case`` on ``side`` (teperf.worker.counters)."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        worker = Worker(
            side,
            core=config.core,
            device=config.device,
            backends=[case.backend],
            hash_seed=hash_seed(config.seed, 0),
            log_path=log_path,
            cwd=log_path.parent,
            timeout_s=config.schedule.timeout_s,
        )
    except WorkerError as exc:
        raise ProbeFailed(str(exc), exc.log_tail) from None
    try:
        worker.wait_ready()
        reply = worker.request({"cmd": "setup", "case": case.to_wire(config.device, config.schedule.warmup)})
        if reply.get("type") != "ready":
            raise ProbeFailed(f"set-up failed: {reply.get('error')}", worker.log_tail())
        reply = worker.request({"cmd": "counters", "case_id": case.id})
        if reply.get("type") != "counters":
            raise ProbeFailed(f"counting failed: {reply.get('error')}", worker.log_tail())
        return reply["counters"]
    except WorkerError as exc:
        raise ProbeFailed(str(exc), exc.log_tail) from None
    finally:
        worker.close()
