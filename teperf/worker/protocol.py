"""Messages between coordinator and worker, one JSON object per line: commands on the worker's stdin, one
reply each but quit (Session.handle) on the fd that was its stdout at start-up (fd 1 then points at stderr,
so prints from measured code cannot corrupt the stream); a {"type": "hello"} once after start-up."""

from __future__ import annotations

import json


def encode(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes | str) -> dict:
    return json.loads(line)
