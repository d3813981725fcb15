"""The one exception type that the CLI turns into a one-line message and exit 2, and the
exit statuses a CI can rely on (docs/usage.md, "Exit status")."""

import signal
from pathlib import Path

EXIT_CELLS_FAILED = 1  # a cell failed or ended partial; the table says which and why
EXIT_USAGE = 2  # bad input, refused before (or instead of) measuring


def exit_status_for_signal(signum: int) -> int:
    """130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP, as shells report them."""
    return 128 + int(signum)


def stopped_by(signum: int) -> str:
    """How a stop is said: "interrupted" (Ctrl-C), "terminated (SIGTERM)", "terminated (SIGHUP)"."""
    if signum == signal.SIGINT:
        return "interrupted"
    try:
        return f"terminated ({signal.Signals(signum).name})"
    except ValueError:
        return f"terminated (signal {signum})"


class TeperfError(Exception):
    """A problem the user can fix. ``problem`` says what is wrong, ``fix`` what to do."""

    exit_code = 2

    def __init__(self, problem: str, fix: str = ""):
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.problem.strip().replace("\n", " ")
        if self.fix:
            text += f"; {self.fix.strip()}"
        return text


class DiskFull(TeperfError):
    """The disk filled up during a run; ``path`` is the bundle, which keeps what was written before."""

    exit_code = EXIT_CELLS_FAILED  # measured, then failed: not bad input

    def __init__(self, path: Path, exc: OSError):
        self.path = path
        super().__init__(
            f"the disk filled up while teperf wrote {exc.filename or path} ({exc.strerror or exc})",
            f"free space (df -h {path}) and run again; {path} keeps what was measured until then",
        )


class Interrupted(Exception):
    """Ctrl-C, SIGTERM or SIGHUP during a run; ``path`` is the bundle, which keeps every finished trial."""

    def __init__(self, path: Path, signum: int = signal.SIGINT):
        super().__init__(str(path))
        self.path = path
        self.signum = signum
