"""Messages between coordinator and worker: one JSON object per line.

Commands go to the worker's stdin; replies come on the fd that was its stdout at start-up (fd 1 then
points at stderr, so prints from measured code cannot corrupt the stream). Each command but quit gets
one reply (Session.handle): {"type": "ready" | "trial" | "counters" | ..., "case_id", ...}, or
{"type": "error", "case_id", "error"} ("skipped": true for a recipe that cannot run here). Unsolicited,
once after start-up: {"type": "hello", **environment facts}. A setup's case: Case.to_wire."""

from __future__ import annotations

import json


def encode(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes | str) -> dict:
    return json.loads(line)
