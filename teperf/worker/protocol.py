"""Messages between coordinator and worker: one JSON object per line.

The coordinator writes commands to the worker's stdin; the worker answers on
the file descriptor that was its stdout at start-up (it then points fd 1 at
stderr, so prints from measured code cannot corrupt the stream).

Commands (coordinator -> worker), each answered by exactly one reply:

  {"cmd": "setup", "case": CASE}           -> {"type": "ready", "case_id", "info"}
                                              | {"type": "error", "case_id", "error", "skipped": bool}
  {"cmd": "trial", "case_id", "iters"}     -> {"type": "trial", "case_id", **CLOCK_FIELDS}
                                              (+ "compiles": graphs dynamo compiled in the timed loop, once
                                              dynamo is loaded)
                                              | {"type": "error", ...}
  {"cmd": "counters", "case_id"}           -> {"type": "counters", "case_id", "counters": {...}}
  {"cmd": "profile", "case_id", "iters"}   -> {"type": "profile", "case_id", "functions": [...]}
  {"cmd": "imported", "packages": [...]}  -> {"type": "imported", "imported": {...}}
                                              (interpreter, torch, each package's version, path and
                                              content hash: teperf.worker.provenance)
  {"cmd": "quit"}                          -> (no reply; the worker exits 0)

Unsolicited, once after start-up: {"type": "hello", **environment facts}.

CASE is a dict with keys id, backend, module, recipe, shape, dtype, mode,
device, warmup, factory, kwargs (see teperf.plan.Case.to_wire).
"""

from __future__ import annotations

import json

# Per trial, all integers in nanoseconds except iters.
CLOCK_FIELDS = (
    "iters",
    "process_cpu_ns",  # CPU time of all threads of the process (headline)
    "thread_cpu_ns",  # CPU time of the main thread only
    "wall_ns",  # wall time of the timed loop (without the final synchronize)
    "sync_ns",  # how long the final synchronize waited (0 on CPU)
    "gpu_ns",  # CUDA-event time from first launch to last, or None on CPU
)


def encode(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes | str) -> dict:
    return json.loads(line)
