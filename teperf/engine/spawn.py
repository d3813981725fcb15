"""Starting one worker process for a side (``python -m teperf.worker`` in its interpreter, pinned,
single-threaded, with the pair's hash seed, stderr to a log in the bundle) and talking to it."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from teperf.errors import TeperfError
from teperf.sides import Side
from teperf.worker.protocol import encode

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the driver's teperf package
_worker_code: dict[str, str] = {}
_worker_code_lock = threading.Lock()
RETIRE_PIN_TIMEOUT_S = 10.0  # a worker quitting after its pair answers in milliseconds
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


class WorkerError(RuntimeError):
    """The worker died, hung or answered nonsense. ``log_tail`` holds the end of its stderr;
    ``fatal``/``fix`` are the worker's own words when it could not start (e.g. no CUDA)."""

    def __init__(
        self,
        message: str,
        log_tail: str = "",
        fatal: str | None = None,
        fix: str | None = None,
        exit_code: int | None = None,
        timed_out: bool = False,
    ):
        super().__init__(message)
        self.log_tail, self.fatal, self.fix = log_tail, fatal, fix
        self.exit_code = exit_code  # negative: killed by that signal
        self.timed_out = timed_out


def exit_text(code: int) -> str:
    """'exited with status 3' / 'was killed by SIGKILL (signal 9)'."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (signal {-code})"
    return f"exited with status {code}"


def check_python(python: str) -> None:
    if os.path.sep in python or python.startswith("."):
        ok = os.path.isfile(python) and os.access(python, os.X_OK)
    else:
        ok = shutil.which(python) is not None
    if not ok:
        fix = "point --python/--base-python/--head-python at a python executable"
        raise TeperfError(f"interpreter {python!r} does not exist or is not executable", fix)


def remove_at_exit(root: str) -> None:
    """Remove a temporary directory at exit; a second Ctrl-C meanwhile leaves it, not a traceback."""
    with contextlib.suppress(KeyboardInterrupt):
        shutil.rmtree(root, ignore_errors=True)


def worker_code_dir() -> str:
    """teperf's worker code alone, for the workers' PYTHONPATH: the directory above the installed package
    is the driver's site-packages, whose torch a side would import before its own."""
    with _worker_code_lock:
        if "dir" not in _worker_code:
            root = tempfile.mkdtemp(prefix="teperf-worker-code-")
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            (Path(root) / "teperf").mkdir()
            shutil.copy2(PACKAGE_DIR / "__init__.py", Path(root) / "teperf" / "__init__.py")
            shutil.copytree(PACKAGE_DIR / "worker", Path(root) / "teperf" / "worker", ignore=ignore)
            atexit.register(remove_at_exit, root)
            _worker_code["dir"] = root
        return _worker_code["dir"]


def worker_env(side: Side, hash_seed: int) -> dict:
    env = {**os.environ, **side.env, **dict.fromkeys(THREAD_VARS, "1")}
    env["PYTHONHASHSEED"] = str(hash_seed)
    env["PYTHONUNBUFFERED"] = "1"
    env["TEPERF_COORDINATOR_PID"] = str(os.getpid())  # the worker's watchdog ends it when we are gone
    # teperf's worker code (nothing else of the driver) before a PYTHONPATH the user set (the worker puts
    # the side's directories first)
    env["PYTHONPATH"] = os.pathsep.join(
        [worker_code_dir()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    return env


@contextlib.contextmanager
def _closing(*fds: int):
    """Close the child's pipe ends here once it has them (or failed to start)."""
    try:
        yield
    finally:
        for fd in fds:
            os.close(fd)


def _pin(proc, core: int) -> None:
    """Pins a just-started child to ``core`` from the parent, microseconds after its fork (its interpreter's
    start would often run on the measuring core). Not a preexec_fn: the coordinator has threads."""
    pid = getattr(proc, "pid", None)
    if pid is None or not hasattr(os, "sched_setaffinity"):
        return
    with contextlib.suppress(OSError):  # the worker pins itself on init and says so if it cannot
        os.sched_setaffinity(pid, {core})


class Worker:
    """A worker process: started at once; ``wait_ready`` collects its hello (it has imported torch)."""

    def __init__(
        self,
        side: Side,
        *,
        core: int,
        device: str,
        backends: list[str],
        hash_seed: int,
        log_path: Path,
        cwd: Path,
        timeout_s: float,
        compile_cache: dict | None = None,
        launcher=None,
    ):
        """``launcher(fds, popen)``: the process on ``fds`` (its stdin, stdout and stderr), from a fork server
        or ``popen()``; it closes the pipe ends ``fds[:2]`` here once the process has them."""
        check_python(side.python)
        self.side, self.core, self.timeout_s, self.device = side, core, timeout_s, device
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "ab")
        self._buffer = b""
        self._t0 = time.perf_counter()
        self.hello: dict | None = None
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        self.stdin, self.stdout = os.fdopen(w_in, "wb"), os.fdopen(r_out, "rb")
        env = worker_env(side, hash_seed)

        def popen() -> subprocess.Popen:
            # also a fork server's fallback, so a fresh interpreter is pinned however it was started
            proc = subprocess.Popen(
                [side.python, "-m", "teperf.worker"],
                stdin=r_in,
                stdout=w_out,
                stderr=self._log,
                env=env,
                # A neutral cwd: `python -m` puts it first on sys.path, where a checkout would shadow the
                # package.
                cwd=str(cwd),
                start_new_session=True,  # Ctrl-C reaches the coordinator only
            )
            _pin(proc, core)
            return proc

        try:
            if launcher is not None:
                self.proc = launcher((r_in, w_out, self._log.fileno()), popen)
            else:
                with _closing(r_in, w_out):
                    self.proc = popen()
        except OSError as exc:
            for stream in (self._log, self.stdin, self.stdout):
                stream.close()
            raise WorkerError(f"cannot start {side.python} for {side.label}: {exc.strerror or exc}")
        self.send(
            {
                "cmd": "init",
                "core": core,
                "sys_path": list(side.sys_path),
                "device": device,
                "backends": backends,
                "compile_cache": compile_cache,
            }
        )

    @property
    def forked(self) -> bool:
        """Whether this worker came from a fork server (--spawn forkserver), not a fresh interpreter."""
        return bool(getattr(self.proc, "forked", False))

    def wait_ready(self) -> dict:
        """Wait for the hello (the worker has imported torch and is listening)."""
        if self.hello is None:
            waited = time.perf_counter()
            forked = self.forked  # waits for a pending fork's start (its server may still import): untimed
            hello = self.receive()
            if hello.get("type") == "fatal":
                raise WorkerError(
                    f"worker for {self.side.label}: {hello.get('error')}",
                    self.log_tail(),
                    hello.get("error"),
                    hello.get("fix"),
                )
            if hello.get("type") != "hello":
                raise self._failed(f"sent {hello!r} instead of hello")
            hello["start_s"] = round(time.perf_counter() - self._t0, 3)
            hello["forked"] = forked
            hello["waited_s"] = round(time.perf_counter() - waited, 3)
            self.hello = hello
        return self.hello

    def pin(self, core: int, timeout_s: float | None = None) -> None:
        reply = self.request({"cmd": "pin", "core": core}, timeout_s)
        if reply.get("type") != "pinned":
            raise self._failed(f"could not move to core {core}: {reply.get('error')}")
        self.hello["affinity"] = reply["affinity"]
        self.hello["imported_on_core"] = self.core
        self.core = core

    def log_tail(self) -> str:
        try:
            if not self._log.closed:
                self._log.flush()
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-15:])

    def _failed(self, what: str, **kwargs) -> WorkerError:
        """'worker for <side> <what>', with the end of its log."""
        return WorkerError(f"worker for {self.side.label} {what}", self.log_tail(), **kwargs)

    def send(self, message: dict) -> None:
        try:
            self.stdin.write(encode(message))
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._failed(f"is gone (exit {self.proc.poll()})")

    def receive(self, timeout_s: float | None = None) -> dict:
        """The next reply line; WorkerError if the worker dies or takes longer than the timeout."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        fd = self.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise self._failed(f"did not answer within {timeout_s:g} s (killed)", timed_out=True)
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.proc.wait()
                raise getattr(self.proc, "error", None) or self._failed(exit_text(code), exit_code=code)
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            raise self._failed(f"wrote a malformed line: {line[:200]!r}")

    def request(self, message: dict, timeout_s: float | None = None) -> dict:
        self.send(message)
        return self.receive(timeout_s)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Quit and wait (up to 10 s) for the process to end."""
        self.retire(None)
        self.reap()

    def retire(self, core: int | None) -> None:
        """Quit without waiting, on ``core`` first: the CUDA teardown runs off the measuring core."""
        if self.hello is None:  # still importing: nothing worth a clean exit
            self.kill()
        if self.alive():
            try:
                if core is not None and core != self.core:
                    self.pin(core, timeout_s=min(self.timeout_s, RETIRE_PIN_TIMEOUT_S))
                self.send({"cmd": "quit"})
            except WorkerError:
                self.kill()

    def reap(self, timeout_s: float = 10.0) -> None:
        """Wait for the worker to end; closing its stdin first ends one that never got its quit."""
        with contextlib.suppress(OSError):
            self.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self._log.close()

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        for stream in (self.stdin, self._log):
            with contextlib.suppress(OSError):  # a pipe whose reader is gone
                stream.close()
