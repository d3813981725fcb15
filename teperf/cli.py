"""The ``teperf`` command: parses, calls the library, prints. Each subcommand is the ``command`` of a
module under ``teperf/commands/``."""

from __future__ import annotations

import errno
import importlib
import os
import select
import signal
import sys
import threading

import click

from teperf import __version__
from teperf.engine.signals import STOPPING, _raise_terminated
from teperf.errors import EXIT_USAGE, TeperfError, exit_status_for_signal, stopped_by
from teperf.safe_text import for_terminal

# module name under teperf.commands -> registered in this order
COMMAND_MODULES = tuple(
    "run compare bisect report explain counters doctor cache nightly history dashboard import_".split()
)


class ReaderGone(Exception):
    """Our output's reader closed the pipe (head, a closed terminal): not an error of the run."""


class _Group(click.Group):
    def invoke(self, ctx):
        # click's main turns a broken pipe into exit 1, the code of a failed cell, with no word: taken first
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if exc.errno == errno.EPIPE and _output_closed():
                raise ReaderGone from exc
            raise
        except SystemExit as exc:  # rich's console exits 1 on a broken pipe of its own (on_broken_pipe)
            if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):
                raise ReaderGone from exc
            raise


def _output_closed() -> bool:
    """Whether stdout or stderr is a pipe nobody reads any more (not, say, a worker's pipe that broke)."""
    poll = select.poll()
    for stream in (sys.stdout, sys.stderr):
        try:
            poll.register(stream.fileno(), 0)  # errors are reported whatever the mask
        except (OSError, ValueError, AttributeError):  # not a file (a test's capture)
            continue
    return any(event & (select.POLLERR | select.POLLHUP) for _fd, event in poll.poll(0))


def _quiet_output() -> None:
    """Nothing more can be said, and nothing must be left for Python's flush at exit to fail on (Python's
    own advice for EPIPE: point the descriptors at /dev/null)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError, AttributeError):
            pass


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="teperf")
def cli():
    """Host-overhead benchmarks for TransformerEngine modules: paired, interleaved, honest."""


for _name in COMMAND_MODULES:
    cli.add_command(importlib.import_module(f"teperf.commands.{_name}").command)


# click >= 8.2 raises this (a usage error) for a group called without a subcommand
NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv=None) -> None:
    # Ctrl-C is a KeyboardInterrupt again, and SIGTERM one too (Terminated, exit 143), whatever the step
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in STOPPING:  # SIGTERM, SIGHUP: Terminated (exit 143, 129)
            signal.signal(signum, _raise_terminated)
    try:
        cli.main(args=argv, prog_name="teperf", standalone_mode=False)
    except ReaderGone:  # `teperf report B | head -1`: what was read is all that was wanted
        _quiet_output()
        sys.exit(0)
    except TeperfError as exc:
        click.echo(for_terminal(f"teperf: error: {exc.one_line()}"), err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # a path teperf cannot make, read or write (/sys, /proc, a full disk)
        where = f" {exc.filename}" if exc.filename else ""
        fix = "give a path you can read and write (a directory of your own)"
        click.echo(for_terminal(f"teperf: error: cannot use{where}: {exc.strerror or exc}; {fix}"), err=True)
        sys.exit(EXIT_USAGE)
    except (click.exceptions.Abort, KeyboardInterrupt) as stop:  # Ctrl-C outside a measurement (a git build)
        cause = stop.__cause__ or stop.__context__  # click turns a KeyboardInterrupt (Terminated) into Abort
        signum = getattr(stop, "signum", None) or getattr(cause, "signum", signal.SIGINT)
        click.echo(f"teperf: {stopped_by(signum)}", err=True)
        sys.exit(exit_status_for_signal(signum))
    except NO_ARGS_IS_HELP as exc:  # bare `teperf`, `teperf cache`: the help asked for, not an error
        click.echo(exc.ctx.get_help())
        sys.exit(0)
    except click.ClickException as exc:
        # a usage error knows its subcommand: point at that command's help, where the missing option is
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "teperf"
        click.echo(for_terminal(f"teperf: error: {exc.format_message()} (see {where} --help)"), err=True)
        sys.exit(EXIT_USAGE if exc.exit_code == 2 else exc.exit_code)
