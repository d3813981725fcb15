"""One JSON object per line: commands on the worker's stdin, one reply each but quit (Session.handle) on the
fd that was its stdout at start-up (fd 1 is stderr then: prints cannot corrupt it); a "hello" at start-up."""

from __future__ import annotations

import json


def encode(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()
