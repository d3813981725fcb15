"""Progress lines on stderr ("teperf: building ...") for the library's long steps: the one logger,
and the type every ``log=`` parameter takes (tests pass ``lines.append``)."""

from __future__ import annotations

import sys
from typing import Callable

Log = Callable[[str], None]


def stderr_logger(prefix: str = "teperf") -> Log:
    return lambda message: print(f"{prefix}: {message}", file=sys.stderr, flush=True)


stderr_log = stderr_logger()
