"""``--lanes N``: a thread per lane (worker I/O releases the GIL), each measuring on its own physical core."""

from __future__ import annotations

import threading
import time
from typing import Callable

STOP_SWEEP_S = 0.2  # while stopping, how often every worker is killed again (a lane may have spawned one)
STOP_WAIT_S = 15.0  # then lane threads still running are abandoned (daemon threads; their workers are killed)


class LaneStopped(Exception):
    """The run is stopping (Ctrl-C, SIGTERM, another lane's error): a lane ends its pair without recording."""


def run_lanes(
    n: int, lane: Callable[[int], None], stop: threading.Event, kill_all: Callable[[], None]
) -> None:
    """Run ``lane(i)`` for i < n, each in its own thread. A lane's first error (or Ctrl-C/SIGTERM) sets
    ``stop``, ``kill_all`` ends every worker until the lanes have ended, and the error is raised here."""
    errors: list[BaseException] = []
    returned: list[int] = []
    done = threading.Event()  # a lane thread that ran out of pairs waits for this before it ends

    def body(i: int) -> None:
        try:
            lane(i)
        except LaneStopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)
            stop.set()
        finally:
            returned.append(i)
        # A worker dies with the thread that started it (PR_SET_PDEATHSIG): it may measure on another lane.
        done.wait()

    threads = [
        threading.Thread(target=body, args=(i,), name=f"teperf-lane{i}", daemon=True) for i in range(n)
    ]
    try:
        for t in threads:
            t.start()
        while len(returned) < n and not stop.is_set():
            stop.wait(STOP_SWEEP_S)  # interruptible: Ctrl-C and SIGTERM land here
    except BaseException:
        stop.set()
        _stop_lanes(threads, done, kill_all)
        raise
    if stop.is_set():
        _stop_lanes(threads, done, kill_all)
        if errors:
            raise errors[0]
    done.set()
    for t in threads:
        t.join()


def _stop_lanes(threads: list[threading.Thread], done: threading.Event, kill_all: Callable[[], None]) -> None:
    done.set()
    deadline = time.monotonic() + STOP_WAIT_S
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        kill_all()  # again: a lane may have started a worker since the last sweep
        for t in threads:
            t.join(STOP_SWEEP_S / len(threads))
    kill_all()
