"""``python -m teperf.worker.forkserver FD`` (teperf.engine.forkserver): imports torch and the package under
test once, never touches CUDA, and forks a worker per request on the pipes sent (SCM_RIGHTS). On socket FD:
  coordinator -> server: {"cmd": "init", "sys_path", "preload"}; {"cmd": "fork"} + 3 fds; {"cmd": "quit"}
  server -> coordinator: {"type": "ready", "pid", "import_s"} | {"type": "fatal", "error"};
                         {"type": "forked", "pid"}; {"type": "exit", "pid", "status"} (unsolicited)"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback

MAX_MESSAGE = 1 << 16


def _send(sock, lock, message: dict) -> None:
    with lock:
        sock.send(json.dumps(message).encode())


def _reaper(sock, lock, children: set, changed: threading.Condition) -> None:
    """Reap every child and say how it ended (the coordinator cannot wait for a grandchild)."""
    while True:
        with changed:
            while not children:
                changed.wait()
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.01)
            continue
        with changed:
            children.discard(pid)
            changed.notify_all()
        with contextlib.suppress(OSError):
            _send(sock, lock, {"type": "exit", "pid": pid, "status": os.waitstatus_to_exitcode(raw)})


def _child(fds: list, sock) -> None:
    """In the forked child: become a worker on the pipes the coordinator sent. Never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):  # stdin, stdout, the log as stderr
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        sock.close()
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the worker's command stream, for good
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
        os.environ["TEPERF_FORKED"] = str(os.getppid())
        from teperf.worker.__main__ import main

        code = main()
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code or 0)


def main() -> int:
    sock = socket.socket(fileno=int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator owns Ctrl-C
    from teperf.worker.__main__ import _alive, die_with_parent

    die_with_parent()  # with the coordinator, even a SIGKILLed one
    if not _alive(os.environ.get("TEPERF_COORDINATOR_PID")):
        return 1
    lock = threading.Lock()
    init = json.loads(sock.recv(MAX_MESSAGE) or b"{}")
    sys.path[0:0] = list(init.get("sys_path") or [])
    started = time.perf_counter()
    try:
        for name in init.get("preload") or []:
            importlib.import_module(name)
        import torch

        if torch.cuda.is_initialized():  # a forked child cannot use its parent's CUDA context
            raise RuntimeError(f"importing {', '.join(init.get('preload') or [])} initialized CUDA")
    except BaseException as exc:
        traceback.print_exc()
        _send(sock, lock, {"type": "fatal", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    _send(
        sock, lock, {"type": "ready", "pid": os.getpid(), "import_s": round(time.perf_counter() - started, 3)}
    )
    children: set = set()
    changed = threading.Condition()
    threading.Thread(target=_reaper, args=(sock, lock, children, changed), daemon=True).start()
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 3)
        except OSError:
            data, fds = b"", []
        message = json.loads(data) if data else {"cmd": "quit"}  # EOF: the coordinator is gone
        if message.get("cmd") != "fork" or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            break
        with changed:  # holding it keeps the reaper out of waitpid between fork and bookkeeping
            pid = os.fork()
            if pid == 0:
                _child(fds, sock)
            children.add(pid)
            changed.notify_all()
        for fd in fds:
            os.close(fd)
        _send(sock, lock, {"type": "forked", "pid": pid})
    with changed:  # quit: the children measure on; leave when the last one has ended
        while children:
            changed.wait(1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
