"""SIGTERM (`timeout`, CI cancellation, `kill`) ends a run like Ctrl-C: workers stopped, samples kept."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: a KeyboardInterrupt, so every Ctrl-C path handles it; ``signum`` sets the exit."""

    signum = signal.SIGTERM


def _raise_terminated(signum, frame):
    raise Terminated()


@contextmanager
def terminate_as_interrupt():
    """While inside, SIGTERM raises :class:`Terminated` (in the main thread only: only it has handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
