"""Worker entry point: ``python -m teperf.worker`` (started by teperf.engine.spawn).

Order matters: take the protocol stream, pin the core, set thread counts and
sys.path, and only then import torch, so that everything torch does at import
already runs on the chosen core with one thread.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback


def _open_channel():
    # The protocol owns the original stdout; prints from measured code go to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def main() -> int:
    channel = _open_channel()
    # The coordinator owns Ctrl-C: it stops the run and keeps the samples.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from teperf.worker.protocol import decode, encode

    inbox = sys.stdin.buffer
    init = decode(inbox.readline())
    core = init.get("core")
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(core)})
    sys.path[0:0] = list(init.get("sys_path") or [])
    started = time.perf_counter()
    from teperf.worker.session import Session

    session = Session(device=init.get("device", "cpu"), backends=init.get("backends") or [])
    hello = session.hello()
    hello.update(type="hello", core=core, import_s=round(time.perf_counter() - started, 3), pid=os.getpid())
    channel.write(encode(hello))
    for line in inbox:
        message = decode(line)
        if message.get("cmd") == "quit":
            break
        try:
            reply = session.handle(message)
        except Exception as exc:  # one failing case must not end the pair
            traceback.print_exc()
            reply = {"type": "error", "case_id": message.get("case_id"), "error": f"{type(exc).__name__}: {exc}"}
        channel.write(encode(reply))
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
