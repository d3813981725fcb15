"""``python -m teperf`` and the ``teperf`` command. Ctrl-C, SIGTERM or SIGHUP while teperf still imports (half
a second on a busy machine, before cli.main takes the signals over) ends it with one line, 130 / 143 / 129."""

import os
import signal
import sys


def _stop_early(signum, frame):
    how = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    try:
        print(f"teperf: {how}", file=sys.stderr)
    except OSError:  # a closed terminal (SIGHUP)
        pass
    os._exit(128 + signum)


def main():
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_early)
    from teperf.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
