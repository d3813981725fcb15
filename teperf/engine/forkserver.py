"""Workers forked from a server per side (``--spawn forkserver``): under a second to start, not 10 s of
importing torch and TE. Forks share the hash seed and address-space layout, so each side's server is
replaced every ``server_pairs`` pairs with its own PYTHONHASHSEED: the generations sample that."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Optional, Sequence

from teperf.config import Config
from teperf.engine.spawn import WorkerError, _closing, _pin, check_python, worker_env
from teperf.plan import Case, hash_seed, pairs_per_server, server_generation
from teperf.sides import Side

REPLY_TIMEOUT_S = 60.0
EXIT_REPORT_WAIT_S = 2.0  # after the child is gone, how long the server may take to say how it ended


class ServerError(WorkerError):
    """The server could not start or stopped answering; the pair's worker starts fresh instead."""


class ForkedProcess:
    """The part of ``subprocess.Popen`` the Worker uses, for a child of the fork server."""

    forked = True  # what Worker.forked reads

    def __init__(self, pid: int, server: "ForkServer"):
        self.pid, self.server = pid, server
        self.returncode: Optional[int] = None
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfd: the server's exit report alone says it ended
            self._pidfd = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            code = self.server.exit_status(self.pid)
            gone = self._pidfd is not None and select.select([self._pidfd], [], [], 0)[0]
            if code is None and gone:  # ended; its status is on the way from the server
                code = self.server.exit_status(self.pid, wait_s=EXIT_REPORT_WAIT_S)
                if code is None:
                    code = -signal.SIGKILL if self.pid in self.server.killed_pids else -1
            if code is not None:
                self.returncode = code
                if self._pidfd is not None:
                    os.close(self._pidfd)
                    self._pidfd = None
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
            if self._pidfd is not None:
                left = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
                select.select([self._pidfd], [], [], left)
            else:
                self.server.exit_status(self.pid, wait_s=0.5)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            self.server.killed_pids.add(self.pid)
            with contextlib.suppress(OSError):
                if self._pidfd is not None and hasattr(signal, "pidfd_send_signal"):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)  # never a recycled pid
                else:
                    os.kill(self.pid, signal.SIGKILL)


class ForkServer:
    """One server process: started with the side's environment and hash seed, preloads, forks."""

    def __init__(
        self,
        side: Side,
        *,
        seed: int,
        preload: list[str],
        log_path: Path,
        cwd: Path,
        core: Optional[int],
        timeout_s: float,
        run_in=None,
    ):
        """``run_in(fn)``: where the process is started (ServerPool: one long-lived thread, since
        PR_SET_PDEATHSIG fires when the *thread* that started it ends)."""
        check_python(side.python)
        self.side, self.seed = side, seed
        self._lock = threading.Lock()  # one fork request at a time
        self._replies: queue.Queue = queue.Queue()
        self._exits: dict[int, int] = {}
        self.killed_pids: set[int] = set()  # forks this side killed (an exit without report: SIGKILL)
        self._exited = threading.Condition()
        self.closed = False
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = open(log_path, "ab")
        env = worker_env(side, seed)
        t0 = time.perf_counter()
        try:
            self.proc = (run_in or (lambda fn: fn()))(
                lambda: subprocess.Popen(
                    [side.python, "-m", "teperf.worker.forkserver", str(child.fileno())],
                    pass_fds=(child.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=self._log,
                    stderr=self._log,
                    env=env,
                    cwd=str(cwd),
                    start_new_session=True,  # Ctrl-C reaches the coordinator only
                )
            )
        except OSError as exc:
            raise ServerError(f"cannot start a fork server for {side.label}: {exc}")
        finally:
            child.close()
        if core is not None:  # import on a spare core; each child moves to its own core at its init
            _pin(self.proc, core)
        threading.Thread(target=self._read, name=f"teperf-forkserver-{side.label}", daemon=True).start()
        self._send({"cmd": "init", "sys_path": list(side.sys_path), "preload": preload})
        hello = self._reply(timeout_s)
        if hello.get("type") != "ready":
            self.kill()
            raise ServerError(f"the {side.label} fork server could not start: {hello.get('error', hello)}")
        self.pid = self.proc.pid
        self.import_s = hello.get("import_s")
        self.start_s = round(time.perf_counter() - t0, 3)

    def _send(self, message: dict, fds: tuple = ()) -> None:
        data = json.dumps(message).encode()
        try:
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.send(data)
        except OSError as exc:
            raise ServerError(f"the {self.side.label} fork server is gone ({exc})")

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                self._replies.put({"type": "gone"})
                with self._exited:
                    self._exited.notify_all()
                return
            message = json.loads(data)
            if message.get("type") == "exit":
                with self._exited:
                    self._exits[message["pid"]] = int(message["status"])
                    self._exited.notify_all()
            else:
                self._replies.put(message)

    def _reply(self, timeout_s: float) -> dict:
        try:
            return self._replies.get(timeout=timeout_s)
        except queue.Empty:
            return {"type": "timeout", "error": f"no answer within {timeout_s:g} s"}

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, fds) -> ForkedProcess:
        """A new worker process on ``fds`` (its stdin, stdout and stderr)."""
        with self._lock:
            if self.closed or not self.alive():
                raise ServerError(f"the {self.side.label} fork server is gone")
            self._send({"cmd": "fork"}, fds)
            reply = self._reply(REPLY_TIMEOUT_S)
        if reply.get("type") != "forked":
            raise ServerError(f"the {self.side.label} fork server did not fork: {reply.get('error', reply)}")
        return ForkedProcess(reply["pid"], self)

    def exit_status(self, pid: int, wait_s: float = 0.0) -> Optional[int]:
        with self._exited:
            if pid not in self._exits and wait_s > 0:
                self._exited.wait_for(lambda: pid in self._exits or not self.alive(), wait_s)
            return self._exits.get(pid)

    def quit(self) -> None:
        """No more forks; the server leaves once its children have ended (they measure on)."""
        with self._lock:
            if not self.closed:
                self.closed = True
                with contextlib.suppress(ServerError):
                    self._send({"cmd": "quit"})

    def kill(self) -> None:
        self.closed = True
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.sock.close()
        self._log.close()

    def reap(self, timeout_s: float = 30.0) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout_s)
        self.kill()


def _started(slot: Future) -> Optional[ForkServer]:
    """A slot's server once it has started (None while it imports, or where it failed)."""
    return slot.result() if slot.done() and slot.exception() is None else None


def preload_modules(cases: list[Case], packages: Sequence[str] = ()) -> list[str]:
    """What a fork server imports before it forks: torch, teperf's worker, each backend in use and
    the packages under test (a package whose import initializes CUDA makes the server refuse)."""
    names = ["torch", "teperf.worker.session", "teperf.worker.runner", "teperf.worker.counters"]
    backends = {c.backend for c in cases}
    names += [f"teperf.worker.backends.{'torch_ref' if b == 'torch' else b}" for b in sorted(backends)]
    if "te" in backends:
        names.append("transformer_engine.pytorch")
    names += [p for p in packages if p not in ("torch", "transformer_engine")]
    return list(dict.fromkeys(names))


class ServerPool:
    """The fork servers of one run: per side, a generation of ``every`` pairs each with its own
    hash seed (that of its first pair, so generation 0 draws what a fresh first pair would)."""

    def __init__(
        self,
        config: Config,
        sides: list[Side],
        preload: list[str],
        log_dir: Path,
        cwd: Path,
        core_for,
        max_pairs: int,
    ):
        self.config, self.sides, self.preload = config, sides, preload
        self.every = pairs_per_server(config.schedule)
        self.log_dir, self.cwd, self.core_for = Path(log_dir), Path(cwd), core_for
        self.max_pairs = max_pairs  # no server is started ahead for a generation past it
        self.lock = threading.Lock()
        self.slots: dict[tuple[int, int], Future] = {}  # (side index, generation) -> its server
        self.all: list[ForkServer] = []
        self.restarts = 0  # servers that died and were started again
        self.failed: Optional[str] = None  # a server could not start: the run's workers start fresh
        self.closed = False
        self.events: list[dict] = []  # what the bundle records (started, died, failed)
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="teperf-forkserver-starter")

    def seed(self, pair: int) -> int:
        return self.generation_seed(server_generation(self.config.schedule, pair))

    def generation_seed(self, generation: int) -> int:
        """The PYTHONHASHSEED of a generation's server and its forks: its first pair's."""
        return hash_seed(self.config.seed, generation * self.every)

    def launcher(self, index: int, pair: int):
        """``launch(fds, popen)`` (Worker's launcher): side ``index``'s worker of ``pair``, forked from
        the generation's server in the background, or started fresh where that fails."""
        if self.failed is not None:
            return None
        generation = server_generation(self.config.schedule, pair)

        def fork(fds):
            try:
                server = self._server(index, generation)
            except ServerError:
                return None  # recorded; this worker and the run's next ones start fresh
            try:
                return server.fork(fds)
            except ServerError:
                if server.alive() and not server.closed:
                    raise
                if not server.alive():  # killed for memory, a crash: one new server for it, counted
                    self._event("died", index, generation, server, error=f"exit {server.proc.poll()}")
                try:
                    return self.replace(index, generation, server).fork(fds)
                except ServerError:
                    return None

        # a fresh fallback starts in the long-lived starter thread too (PR_SET_PDEATHSIG)
        return lambda fds, popen: PendingFork(lambda: fork(fds) or self._in_starter(popen), fds)

    def _server(self, index: int, generation: int, ahead: bool = True) -> ForkServer:
        """This side's server of ``generation``, started on first use (once, whoever asks first);
        ``ahead``: then start the next generation's too, so that it has imported when its turn comes."""
        key = (index, generation)
        with self.lock:
            if self.closed:
                raise ServerError("the run is over")
            slot = self.slots.get(key)
            owner = slot is None
            if owner:
                slot = self.slots[key] = Future()
        if not owner:
            return slot.result()
        side = self.sides[index]
        try:
            server = ForkServer(
                side,
                seed=self.generation_seed(generation),
                preload=self.preload,
                log_path=self.log_dir / f"forkserver-{side.label}-g{generation:03d}.log",
                cwd=self.cwd,
                core=self.core_for(generation * len(self.sides) + index),
                timeout_s=self.config.schedule.timeout_s,
                run_in=self._in_starter,
            )
        except ServerError as exc:
            self.failed = str(exc)
            self._event("failed", index, generation, None, error=str(exc))
            slot.set_exception(exc)
            raise
        with self.lock:
            self.all.append(server)
            # Older generations of this side fork no more; each leaves when its children have.
            for (i, g), old in list(self.slots.items()):
                if i == index and g < generation - 1 and _started(old) is not None:
                    old.result().quit()
                    del self.slots[(i, g)]
            closed = self.closed
        if closed:  # the run ended while this one imported
            server.kill()
        self._event("started", index, generation, server)
        slot.set_result(server)
        if ahead and not closed and (generation + 1) * self.every < self.max_pairs:
            threading.Thread(target=self._ahead, args=(index, generation + 1), daemon=True).start()
        return server

    def _in_starter(self, fn):
        """Run ``fn`` (a Popen) in the pool's one starter thread, which outlives the servers (PDEATHSIG)."""
        return self._starter.submit(fn).result()

    def _ahead(self, index: int, generation: int) -> None:
        with contextlib.suppress(ServerError):  # recorded; its pairs start fresh
            self._server(index, generation, ahead=False)

    def replace(self, index: int, generation: int, dead: ForkServer) -> ForkServer:
        """A new server for a generation whose server died (counted)."""
        with self.lock:
            slot = self.slots.get((index, generation))
            if slot is not None and _started(slot) is dead:
                del self.slots[(index, generation)]
                self.restarts += not dead.alive()
        return self._server(index, generation, ahead=False)

    def _event(
        self, what: str, index: int, generation: int, server: Optional[ForkServer], error=None
    ) -> None:
        self.events.append(
            {
                "event": what,
                "side": self.sides[index].label,
                "generation": generation,
                "hash_seed": self.generation_seed(generation),
                **{key: getattr(server, key, None) for key in ("pid", "start_s", "import_s")},
                "error": error,
            }
        )

    def close(self, stopping: bool = False) -> None:
        """End every server: ``stopping`` kills at once (and their children die with them)."""
        with self.lock:
            self.closed = True
        for server in list(self.all):
            if stopping:
                server.kill()
            else:
                server.quit()
        if not stopping:
            for server in list(self.all):
                server.reap()
        self._starter.shutdown(wait=False)  # its thread ends: the servers have


class PendingFork:
    """A worker on its way from a fork server, as a ``Popen``: ``start()`` runs in a thread of its own, so
    launching a pair ahead never holds up the lanes. What the Worker writes waits in its pipe; its first read
    ends once the pipe ends ``fds[:2]`` are closed here (the process has them, or never started)."""

    def __init__(self, start, fds):
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._proc = None
        self.error: Optional[WorkerError] = None  # why it never started (the Worker raises it)
        self._killed = False
        threading.Thread(target=self._run, args=(start, fds), name="teperf-fork", daemon=True).start()

    def _run(self, start, fds) -> None:
        try:
            with _closing(*fds[:2]):
                proc = start()
        except BaseException as exc:
            proc = None
            self.error = (
                exc if isinstance(exc, WorkerError) else WorkerError(f"the worker did not start: {exc}")
            )
        with self._lock:
            self._proc = proc
            if proc is not None and self._killed:
                proc.kill()
        self._done.set()

    @property
    def forked(self) -> bool:
        self._done.wait()  # the hello may come before start() returned
        return getattr(self._proc, "forked", False)

    def poll(self) -> Optional[int]:
        if not self._done.is_set():
            return -signal.SIGKILL if self._killed else None
        return self._proc.poll() if self._proc is not None else 1

    def wait(self, timeout: Optional[float] = None) -> int:
        if self._killed and not self._done.is_set():
            return -signal.SIGKILL  # killed on arrival by _run
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired("pending fork", timeout)
        return self._proc.wait(timeout) if self._proc is not None else 1

    def kill(self) -> None:
        with self._lock:
            if self._proc is None:
                self._killed = True
                return
        self._proc.kill()
