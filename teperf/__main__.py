"""``python -m teperf`` and the ``teperf`` command. Ctrl-C or SIGTERM while teperf still imports (half a
second on a busy machine, before cli.main takes the signals over) ends it with one line, 130 / 143."""

import os
import signal
import sys


def _stop_early(signum, frame):
    print(
        "teperf: interrupted" if signum == signal.SIGINT else "teperf: terminated (SIGTERM)", file=sys.stderr
    )
    os._exit(128 + signum)


def main():
    signal.signal(signal.SIGINT, _stop_early)
    signal.signal(signal.SIGTERM, _stop_early)
    from teperf.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
