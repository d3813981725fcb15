"""A newcomer's fourth pass (what teperf says after something went wrong): one test per item.
Fast: stored bundles, config and CLI parsing; no worker starts."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT, one_error, run_in_process

BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


def _cut(tmp_path, name="v2-compare-compile-cpu", keep=60):
    """A copy of a complete bundle whose records.jsonl was cut short after the run (meta says complete)."""
    dst = tmp_path / "cut"
    shutil.copytree(BUNDLES / name, dst)
    lines = (dst / "records.jsonl").read_text().splitlines(keepends=True)
    (dst / "records.jsonl").write_text("".join(lines[:keep]))
    assert json.loads((dst / "meta.json").read_text())["status"] == "complete"
    return dst


# --- 2: a records.jsonl cut short is partial, in the report and for import ----------------------------


def test_a_cut_short_records_file_makes_its_cells_partial_with_a_note(tmp_path, capsys):
    from teperf.summary import summarize

    summary = summarize(_cut(tmp_path))
    assert {r.status for r in summary.rows} == {"partial"}
    assert any(n.startswith("partial ") and "1 of 3 pairs" in n for n in summary.notes), summary.notes


def test_import_keeps_a_cut_short_bundle_out_of_the_history_without_include_partial(tmp_path, capsys):
    bundle = str(_cut(tmp_path))
    hist = str(tmp_path / "h")
    code, out, err = run_in_process(["import", bundle, "--history", hist, "--sha", "abc1234"], capsys)
    assert code == 0 and "0 bundles added" in out and "cells partial" in err, (out, err)
    argv = ["import", bundle, "--history", hist, "--sha", "abc1234", "--include-partial"]
    code, out, err = run_in_process(argv, capsys)
    assert code == 0 and "1 bundle added" in out, (out, err)


# --- 4: a path teperf cannot use (/proc, /sys) is one line, not a traceback ---------------------------


def test_an_unusable_special_path_is_one_line(capsys):
    argv = ["dashboard", "--history", str(ROOT / "tests" / "fixtures" / "history-v1"), "--out", "/proc/site"]
    code, out, err = run_in_process(argv, capsys)
    one_error(code, out, err, "cannot write --out /proc/site", "a directory you can write")
    assert "/proc/.site." not in err, err  # the hidden directory the site is built in is not what was given


# --- 1: a failed cell is no "tree changed" warning; its error is said ----------------------------------


def _imported(files: int, digest: str) -> dict:
    pkg = {"imported": True, "version": None, "path": "/x/demo_blocks", "files": files, "hash": digest}
    torch = {"imported": True, "version": "2.13.0", "path": "/t", "files": None, "hash": None}
    return {"python": "3.11.7", "torch": torch, "packages": {"demo_blocks": pkg, "torch": torch}}


def _failed_cell_bundle(tmp_path):
    """v2-compare's workers with what they imported; pair 2's base failed its last set-up (a factory
    raised), so it loaded one file of its package instead of two."""
    dst = tmp_path / "failed"
    shutil.copytree(BUNDLES / "v2-compare-compile-cpu", dst)
    out = []
    for line in (dst / "records.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "worker":
            broken = (rec["pair"], rec["side"]) == (2, "base")
            digest = "aaaa" if broken else {"base": "bbbb", "head": "cccc"}[rec["side"]]
            rec["hello"]["imported"] = _imported(1 if broken else 2, digest)
        if rec["kind"] == "setup" and (rec["pair"], rec["side"], rec["case_id"]) == (2, "base", 0):
            rec.update(status="error", info=None, error="ValueError: the factory raised")
        out.append(json.dumps(rec))
    (dst / "records.jsonl").write_text("\n".join(out) + "\n")
    return dst


def test_a_failed_set_up_is_not_read_as_a_tree_that_changed(tmp_path):
    from teperf.summary import summarize

    summary = summarize(_failed_cell_bundle(tmp_path))
    assert summary.code_problems == []
    assert any("the factory raised" in (r.error or "") for r in summary.incomplete_rows)


# --- 11: a min effect past 100 % is refused (1e9 read every change as "no change") --------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--min-effect", "1e9"],
        ["run", "--min-effect-once", "101"],
        ["dashboard", "--history", "x", "--out", "y", "--min-effect", "1e9"],
    ],
)
def test_a_min_effect_past_100_percent_is_refused(argv, capsys):
    one_error(*run_in_process(argv, capsys), "between 0 and 100")


# --- 3: a shape no machine holds, a schedule of days ---------------------------------------------------


def test_a_shape_of_too_many_elements_is_refused_even_when_the_factory_makes_its_inputs():
    from teperf.errors import TeperfError
    from teperf.memory import check_memory
    from teperf.plan import Case

    shape = (99999999999999999999, 2, 64)
    case = Case(0, "factory", "Block", "fp32", shape, "float32", "eager", factory="m:make", inputs="m:inp")
    with pytest.raises(TeperfError, match="needs at least"):
        check_memory([case], "cpu", available=2**34)


def test_a_schedule_of_many_hours_says_how_long_it_takes(capsys):
    from teperf.config import build_config
    from teperf.plan import check_duration

    check_duration(build_config({}, {"processes": 100000}), 3, 2)
    err = capsys.readouterr().err
    assert "takes about" in err and "days" in err and "--budget" in err, err
    check_duration(build_config({}, {"processes": 8}), 3, 2)
    assert capsys.readouterr().err == ""


# --- 8: the same module, recipe, mode or shape named twice ---------------------------------------------


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"modules": ["Linear", "Linear"]}, "--modules names Linear twice"),
        ({"recipes": ["fp32", "fp32"]}, "--recipes names fp32 twice"),
        ({"modes": ["eager", "eager"]}, "--modes names eager twice"),
        ({"shapes": [[8, 2, 64], [8, 2, 64]]}, "--shape names 8,2,64 twice"),
    ],
)
def test_a_cell_named_twice_is_refused(overrides, words):
    from teperf.config import build_config
    from teperf.errors import TeperfError

    with pytest.raises(TeperfError, match=words):
        build_config({}, overrides)


def test_the_shipped_configs_name_each_cell_once():
    from teperf.config import load_config

    for name in ["default", "demo", "nightly", "pr-thread", "te-model"]:
        load_config(name)


# --- 12: two runs on one machine do not measure on each other's core ----------------------------------

_CLAIM = "import sys, teperf.cpus as c; print(c.check_core(None), flush=True); sys.stdin.read()"


def test_a_second_run_pins_to_a_core_the_first_did_not_claim(tmp_path, monkeypatch):
    import subprocess
    import sys

    from teperf import cpus, doctor

    if len(cpus.available_cores()) < 2:
        pytest.skip("needs two usable cores")
    monkeypatch.setenv("TEPERF_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(cpus, "_CLAIMS", {})
    first = subprocess.Popen([sys.executable, "-c", _CLAIM], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        taken = int(first.stdout.readline())
        assert taken == cpus.available_cores()[-1]
        assert cpus.claimed_by_others() == {taken: str(first.pid)}
        mine = cpus.check_core(None)
        assert mine != taken and mine in cpus.available_cores()
        assert taken not in cpus.spare_cores([mine])  # nor are its pairs started on the other's core
        check = doctor.check_runnable(taken)
        assert check.status == "warn" and f"another teperf run (pid {first.pid})" in check.detail
    finally:
        first.communicate(b"")
    assert cpus.claimed_by_others() == {}  # its claim ended with it


def test_the_doctor_does_not_count_this_runs_own_workers_as_load():
    import os
    import subprocess
    import sys

    from teperf import doctor

    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    assert os.getppid() not in doctor._descendants(pids)

    child = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    try:
        assert child.pid in doctor._descendants(pids + [child.pid])
    finally:
        child.communicate(b"\n")


# --- 7 and 10: one path side alone; --strategy env with two interpreters ------------------------------


def test_one_path_side_alone_is_refused_naming_the_other(capsys):
    base = str(ROOT / "examples" / "planted" / "base")
    one_error(
        *run_in_process(["compare", "--config", "demo", "--base-path", base], capsys), "without --head-path"
    )


def test_strategy_env_is_taken_with_two_interpreters(tmp_path, capsys):
    argv = ["compare", "--strategy", "env", "--base-python", str(tmp_path / "a" / "python")]
    code, out, err = run_in_process([*argv, "--head-python", str(tmp_path / "b" / "python")], capsys)
    one_error(code, out, err, "does not exist")  # it got as far as the interpreters
    assert "only applies" not in err


# --- 6: bisect refuses an unbalanced schedule up front, as compare does -------------------------------


def test_bisect_refuses_an_odd_schedule_before_any_probe(tmp_path, capsys):
    argv = ["bisect", "v1..v2", "--cell", "Linear/fp32", "--config", "demo", "--rounds", "1", "--trials", "3"]
    code, out, err = run_in_process([*argv, "--repo", str(tmp_path / "nope")], capsys)
    one_error(code, out, err, "an odd number of couples per pair")


# --- 5: a budget too short for any pair says so, not "check the module factories" ---------------------


def test_a_budget_that_measured_nothing_says_raise_the_budget(tmp_path, capsys):
    from teperf.commands._common import measure_and_report
    from teperf.config import build_config
    from teperf.options import MeasureOptions

    dst = tmp_path / "b"
    shutil.copytree(BUNDLES / "v2-compare-compile-cpu", dst)
    lines = (dst / "records.jsonl").read_text().splitlines(keepends=True)
    (dst / "records.jsonl").write_text("".join(ln for ln in lines if '"kind":"trial"' not in ln))
    meta = json.loads((dst / "meta.json").read_text())
    meta["config"]["schedule"]["budget_s"] = 1.0
    (dst / "meta.json").write_text(json.dumps(meta))
    measure = MeasureOptions(config=build_config({}, {}), fmt="json")
    with pytest.raises(SystemExit) as stop:
        measure_and_report(lambda *a, **k: dst, measure)
    err = capsys.readouterr().err
    assert stop.value.code == 1 and "within the 1 s budget" in err and "raise --budget" in err, err
    assert "module factories" not in err


# --- 9: explain's change and its interval agree; a loaded machine is said -----------------------------


def test_explain_shows_the_interval_around_its_own_centre():
    from teperf.explain.diff import FunctionDelta
    from teperf.explain.render import render_text, summary

    # the summed profiles moved +103.4 us; the repeats' mean change is +110.0 +- 106.6: settled
    d = FunctionDelta(
        "m.py", "f", "/m.py", 1, base_own_us=10.0, head_own_us=113.4, in_base=True, in_head=True
    )
    d.own_mean_us, d.own_hw_us = 110.0, 106.6
    assert summary([d]) == "+110.0 us +-106.6 us in f (m.py:1)"
    (row,) = [ln for ln in render_text([d]).splitlines() if ln.endswith(" f  m.py:1")]
    assert "+110.0 us" in row, row


def test_explain_says_when_the_machine_is_busy(monkeypatch):
    from teperf import doctor
    from teperf.explain import capture

    busy = doctor.Check("load", "warn", "load average 6.05 on 2 usable cores: the machine is busy")
    monkeypatch.setattr(doctor, "check_load", lambda: busy)
    monkeypatch.setattr(doctor, "check_runnable", lambda core: doctor.Check("runnable", "ok", ""))
    assert "the machine is busy" in capture.machine_load(1) and "own times include" in capture.machine_load(1)
    monkeypatch.setattr(doctor, "check_load", lambda: doctor.Check("load", "ok", ""))
    assert capture.machine_load(1) == ""


# --- the pass: a special file as the cache directory ---------------------------------------------------


def test_cache_list_refuses_a_device_as_its_directory(capsys):
    one_error(*run_in_process(["cache", "list", "--cache-dir", "/dev/null"], capsys), "a file is in the way")


# --- the pass: Ctrl-C or SIGTERM while teperf still imports -------------------------------------------

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


def test_a_results_dir_that_cannot_be_made_names_no_file_in_the_way(tmp_path):
    from teperf.bundle import Bundle
    from teperf.errors import TeperfError

    with pytest.raises(TeperfError) as refused:
        Bundle.create("/proc/teperf-results", "run", {})
    assert "move the file away" not in str(refused.value)
    (tmp_path / "f").write_text("")
    with pytest.raises(TeperfError, match="move the file away"):
        Bundle.create(tmp_path / "f", "run", {})


def test_sigterm_in_a_command_exits_143_though_click_made_it_an_abort(monkeypatch, capsys):

    from teperf.commands import doctor
    from teperf.engine.signals import Terminated

    def stop(*a, **k):
        raise Terminated()

    monkeypatch.setattr(doctor.command, "callback", stop)
    code, out, err = run_in_process(["doctor"], capsys)
    assert code == 143 and err.strip() == "teperf: terminated (SIGTERM)", (code, err)
