"""SIGTERM (`timeout`, CI cancellation, `kill`) and SIGHUP (a closed terminal or ssh session) end a run like
Ctrl-C: workers stopped, samples kept, the bundle marked interrupted, the run directory removed."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

# the signals that stop a run as Ctrl-C does (SIGINT itself is Python's KeyboardInterrupt)
STOPPING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: a KeyboardInterrupt, so every Ctrl-C path handles it; ``signum`` sets the
    exit status (143, 129) and what is said."""

    signum = signal.SIGTERM

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__()
        self.signum = signum


def _raise_terminated(signum, frame):
    raise Terminated(signum)


@contextmanager
def terminate_as_interrupt():
    """While inside, SIGTERM and SIGHUP raise :class:`Terminated` (in the main thread only: only it has
    handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in STOPPING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
