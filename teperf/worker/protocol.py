"""Messages between coordinator and worker: one JSON object per line.

Commands go to the worker's stdin; replies come on the fd that was its stdout at start-up (fd 1 then
points at stderr, so prints from measured code cannot corrupt the stream). Each command gets one reply:

  {"cmd": "setup", "case": CASE}           -> {"type": "ready", "case_id", "info"}
                                              | {"type": "error", "case_id", "error", "skipped": bool}
  {"cmd": "trial", "case_id", "iters"}     -> {"type": "trial", "case_id", **clocks.time_loop's fields}
                                              (+ "compiles" once dynamo is loaded) | {"type": "error", ...}
  {"cmd": "counters", "case_id"}           -> {"type": "counters", "case_id", "counters": {...}}
  {"cmd": "profile", "case_id", "iters"}   -> {"type": "profile", "case_id", "functions": [...]}
  {"cmd": "imported", "packages": [...]}  -> {"type": "imported", "imported": {...}} (provenance.py)
  {"cmd": "quit"}                          -> (no reply; the worker exits 0)

Unsolicited, once after start-up: {"type": "hello", **environment facts}. CASE: teperf.plan.Case.to_wire.
"""

from __future__ import annotations

import json


def encode(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes | str) -> dict:
    return json.loads(line)
