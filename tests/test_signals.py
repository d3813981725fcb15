"""Ctrl-C and SIGTERM around the CLI: while teperf imports, inside a lazy import mid-run, in a command, in
bisect, during the exit clean-up: exit 130 or 143 with one line, no traceback. (A signal into a run whose
worker hangs: test_integration_signals.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import PLANTED, ROOT, run_in_process

# A Ctrl-C that lands inside `from scipy import special` during a run: an import hook raises
# KeyboardInterrupt at the point of scipy's import where that left scipy broken for good
# ("Module 'scipy' has no attribute '_lib'"), as a Ctrl-C at that moment does; after the real
# (tiny) run, a plain Ctrl-C.
CTRL_C_IN_IMPORT = textwrap.dedent(
    """
    import sys
    import teperf.api

    loaded_before = "scipy.special" in sys.modules

    class CtrlC:
        armed = False
        def find_spec(self, name, path=None, target=None):
            if self.armed and name == "scipy._lib._ccallback":
                self.armed = False  # one Ctrl-C
                raise KeyboardInterrupt
            return None

    hook = CtrlC()
    sys.meta_path.insert(0, hook)
    measure = teperf.api.run_schedule

    def run_schedule(*args):
        sys.stderr.write(f"scipy.special loaded when measuring starts: {'scipy.special' in sys.modules}\\n")
        hook.armed = True
        measure(*args)
        hook.armed = False
        raise KeyboardInterrupt

    teperf.api.run_schedule = run_schedule
    sys.stderr.write(f"scipy.special loaded at start: {loaded_before}\\n")
    from teperf.cli import main
    main(sys.argv[1:])
    """
)


@pytest.mark.real_worker
def test_ctrl_c_inside_a_lazy_import_still_gives_130_and_the_table(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CTRL_C_IN_IMPORT,
            "compare",
            "--config",
            "demo",  # its factories import from the paths (the default's built-ins would be refused)
            "--base-path",
            str(PLANTED / "base"),
            "--head-path",
            str(PLANTED / "base"),
            "--modules",
            "Linear",
            "--processes",
            "2",
            "--rounds",
            "1",
            "--trials",
            "2",
            "--iters",
            "5",
            "--warmup",
            "2",
            "--prestart",
            "0",
            "--no-counters",
            "--format",
            "json",
            "--results-dir",
            str(tmp_path / "results"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "scipy.special loaded at start: False" in proc.stderr  # else the test proves nothing
    assert "scipy.special loaded when measuring starts: True" in proc.stderr
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    printed = json.loads(proc.stdout)
    assert printed["meta"]["status"] == "interrupted"
    assert printed["rows"][0]["n_pairs"] == 2  # the summary's statistics ran


def test_a_second_ctrl_c_during_the_exit_clean_up_prints_no_traceback(tmp_path, monkeypatch):
    import atexit

    from teperf.engine import spawn

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    registered = []
    monkeypatch.setattr(atexit, "register", lambda fn, *args: registered.append((fn, args)))
    monkeypatch.setattr(spawn, "_worker_code", {})
    root = spawn.worker_code_dir()
    ((fn, args),) = registered
    monkeypatch.setattr(shutil, "rmtree", interrupted)
    fn(*args)  # no KeyboardInterrupt out of the atexit callback
    monkeypatch.undo()
    shutil.rmtree(root)


_SIGNAL_WHILE_IMPORTING = """
import os, signal, sys
import teperf.__main__ as entry
class KillOnImport:  # importing teperf.cli sends this process the signal, as a Ctrl-C during the imports
    def find_spec(self, name, path=None, target=None):
        if name == "teperf.cli":
            os.kill(os.getpid(), getattr(signal, sys.argv[1]))
sys.meta_path.insert(0, KillOnImport())
entry.main()
"""


@pytest.mark.parametrize("sig, code, line", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "SIGTERM")])
def test_a_signal_while_teperf_imports_is_one_line(sig, code, line):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _SIGNAL_WHILE_IMPORTING, sig], capture_output=True, text=True
    )
    assert proc.returncode == code and proc.stderr.count("\n") == 1 and line in proc.stderr, proc.stderr


def test_the_cli_takes_sigterm_as_an_interrupt(capsys):
    import signal

    from teperf.engine.signals import _raise_terminated

    run_in_process(["--version"], capsys)
    assert signal.getsignal(signal.SIGTERM) is _raise_terminated
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_sigterm_in_a_command_exits_143_though_click_made_it_an_abort(monkeypatch, capsys):

    from teperf.commands import doctor
    from teperf.engine.signals import Terminated

    def stop(*a, **k):
        raise Terminated()

    monkeypatch.setattr(doctor.command, "callback", stop)
    code, out, err = run_in_process(["doctor"], capsys)
    assert code == 143 and err.strip() == "teperf: terminated (SIGTERM)", (code, err)


def test_sigterm_into_bisect_exits_143_as_its_help_says(tmp_path, monkeypatch, capsys):
    import signal

    from gitfixture import HISTORY_CONFIG

    from teperf.bisect import runner
    from teperf.bundle import Bundle
    from teperf.errors import Interrupted

    def stopped(config, spec, cell, **kwargs):  # SIGTERM while it measured: Bundle.session's Interrupted
        bundle = Bundle.create(tmp_path / "r", "bisect", {"kind": "bisect", "commits": [], "plan": {}})
        bundle.close()
        bundle.update_meta(status="interrupted")
        raise Interrupted(bundle.path, signal.SIGTERM)

    monkeypatch.setattr(runner, "bisect", stopped)
    (tmp_path / "c.toml").write_text(HISTORY_CONFIG)
    argv = ["bisect", "good..bad", "--cell", "MLP/fp32", "--config", str(tmp_path / "c.toml")]
    code, out, err = run_in_process(argv, capsys)
    assert code == 143 and err.startswith("teperf: terminated (SIGTERM); the bundle keeps"), (code, err)
