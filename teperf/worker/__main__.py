"""Worker entry point: ``python -m teperf.worker`` (started by teperf.engine.spawn).

The protocol stream, core, thread counts and sys.path are set before torch is imported, so that what
torch does at import already runs on the chosen core with one thread."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import sys
import threading
import time
import traceback

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WATCHDOG_PERIOD_S = 1.0


def _alive(pid: str | None) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError):  # no pid: started by hand or by a test, nobody to watch
        pass
    return True


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); whether it took."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _die_with_coordinator(channel) -> None:
    """Never outlive the coordinator, even a SIGKILLed one: the kernel kills us with the parent (Linux),
    a watchdog thread catches what that misses (a parent gone before prctl, another OS, nobody reading
    our replies). Stdin closing is no sign: a client may send every command and close it at once."""
    parent = os.getppid()  # the coordinator, or a wrapper script it started us through
    armed = die_with_parent()
    if os.getppid() != parent or parent == 1 or not _alive(os.environ.get("TEPERF_COORDINATOR_PID")):
        os._exit(1)  # it died before prctl took effect
    # With the kernel watching the parent, the thread need not wake during trials at all.
    period_ms = -1 if armed else WATCHDOG_PERIOD_S * 1000

    def watch():
        poller = select.poll()
        poller.register(channel.fileno(), select.POLLERR)  # on a pipe's write end: the reader is gone
        while True:
            events = poller.poll(period_ms)
            if events or os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="teperf-watchdog", daemon=True).start()


def main() -> int:
    # The protocol owns the original stdout; prints from measured code go to stderr.
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # The coordinator owns Ctrl-C: it stops the run and keeps the samples.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_coordinator(channel)
    from teperf.worker.protocol import encode

    inbox = sys.stdin.buffer
    init = json.loads(inbox.readline())
    core = init.get("core")
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(core)})
    sys.path[0:0] = list(init.get("sys_path") or [])
    # before torch: inductor reads its compile-thread count when it is imported
    from teperf.worker.compile_cache import CompileCache

    compile_cache = CompileCache(init.get("compile_cache"))
    started = time.perf_counter()
    from teperf.worker.session import Session, StartError

    try:
        session = Session(
            device=init.get("device", "cpu"), backends=init.get("backends") or [], compile_cache=compile_cache
        )
    except StartError as exc:  # told to the coordinator in words, with the fix
        channel.write(encode({"type": "fatal", "error": str(exc), "fix": exc.fix}))
        return 1
    hello = session.hello()
    hello.update(type="hello", core=core, import_s=round(time.perf_counter() - started, 3), pid=os.getpid())
    channel.write(encode(hello))
    for line in inbox:
        message = json.loads(line)
        if message.get("cmd") == "quit":
            break
        try:
            reply = session.handle(message)
        except Exception as exc:  # one failing case must not end the pair
            traceback.print_exc()
            error = describe_failure(exc)
            reply = {"type": "error", "case_id": message.get("case_id"), "error": error}
        channel.write(encode(reply))
    session.close()
    return 0


def describe_failure(exc: BaseException) -> str:
    """What a failed case reports: the first error of the chain, where the measured code raised it (TE's
    file and line), then the error that ended the case if it is another. A failed CUDA-graph capture ends
    with "operation failed due to a previous error during capture"; the cause is the first error."""
    chain = [exc]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and nxt not in chain:
        chain.append(nxt)
    root = chain[-1]
    text = _message(root)
    frames = traceback.extract_tb(root.__traceback__)
    own = (
        [f for f in frames if "transformer_engine" in f.filename]
        or _user_code_frames("\n".join(map(str, chain)))
        or [f for f in frames if "/torch/" not in f.filename and "/teperf/worker/" not in f.filename]
    )
    if own:
        where = own[-1].filename.replace(os.sep, "/")
        where = (
            where[where.find("transformer_engine/") :]
            if "transformer_engine/" in where
            else os.path.basename(where)
        )
        text = f"{text.splitlines()[0]} (at {where}:{own[-1].lineno} in {own[-1].name})" + "".join(
            "\n" + line for line in text.splitlines()[1:]
        )
    if root is not exc:
        text += f"\nthen {_message(exc).splitlines()[0]}"
    return text


def _message(exc: BaseException) -> str:
    """``Type: message``, without the "from user code:" traceback dynamo appends to a message (its TE line
    goes into the location instead) and without the colon of an empty message."""
    message = re.split(r"\n\s*from user code:", str(exc))[0].strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _user_code_frames(message: str) -> list[traceback.FrameSummary]:
    """TE's frames that dynamo names in its message ("from user code:"): its own traceback holds only
    dynamo's frames, so a failed compile would otherwise point into torch."""
    return [
        traceback.FrameSummary(m[1], int(m[2]), m[3])
        for m in re.finditer(r'File "([^"]*transformer_engine[^"]*)", line (\d+), in (\S+)', message)
    ]


def leave(code: int) -> None:
    """End the process without the module teardown (unloading torch cost 0.8 s of CPU, taken from the
    pairs starting beside it); atexit handlers run and streams are flushed first."""
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(AttributeError, OSError, ValueError):
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    leave(main())
