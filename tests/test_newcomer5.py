"""The fifth newcomer pass (issue 46, 2026-12-05 b): each wrong or misleading answer it found, one test.
Fast: stored bundles changed one way, the CLI in this process; no worker starts."""

from __future__ import annotations

import fcntl
import json
import shutil
import tarfile

from conftest import ROOT, one_error, run_in_process

SRC = ROOT / "tests" / "fixtures" / "bundles" / "v2-compare-compile-cpu"


def _copy(tmp_path, name="b"):
    dst = tmp_path / name
    shutil.copytree(SRC, dst)
    return dst


def _edit_meta(bundle, **changes):
    meta = json.loads((bundle / "meta.json").read_text())
    meta.update(changes)
    (bundle / "meta.json").write_text(json.dumps(meta))


def test_a_trial_with_a_negative_time_is_an_unreadable_line_not_a_traceback(tmp_path):
    from teperf.summary import summarize

    bundle = _copy(tmp_path)
    lines = (bundle / "records.jsonl").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if '"kind":"trial"' in ln)
    trial = json.loads(lines[i])
    trial["process_cpu_ns"] = -trial["process_cpu_ns"]  # ln() of it raised 'math domain error'
    lines[i] = json.dumps(trial)
    (bundle / "records.jsonl").write_text("\n".join(lines) + "\n")
    notes = summarize(bundle).notes
    assert any("skipped 1 unreadable line" in n for n in notes), notes


def test_records_written_twice_count_each_trial_once(tmp_path):
    from teperf.summary.parse import parse

    bundle = _copy(tmp_path)
    text = (bundle / "records.jsonl").read_text()
    once = parse(bundle).total_trials
    (bundle / "records.jsonl").write_text(text + text)
    twice = parse(bundle)
    assert twice.total_trials == once and twice.skipped_lines == len(text.strip().splitlines())


def test_a_schema_newer_than_the_release_that_wrote_it_reads_as_damage_not_as_an_upgrade(tmp_path, capsys):
    from teperf import __version__

    bundle = _copy(tmp_path)
    _edit_meta(bundle, schema=99, teperf_version=__version__)  # it told to read it with this very release
    code, out, err = run_in_process(["report", str(bundle)], capsys)
    one_error(code, out, err, "is damaged", "schema 99")
    assert "or newer" not in err, err


def test_a_meta_json_saved_with_a_bom_reads(tmp_path, capsys):
    bundle = _copy(tmp_path)
    (bundle / "meta.json").write_bytes(b"\xef\xbb\xbf" + (bundle / "meta.json").read_bytes())
    code, out, err = run_in_process(["report", str(bundle)], capsys)
    assert code == 0 and "MLP" in out, err


def test_a_key_of_the_wrong_type_in_meta_json_names_the_type_plainly(tmp_path, capsys):
    bundle = _copy(tmp_path)
    _edit_meta(bundle, sides=["base", "head"])
    code, out, err = run_in_process(["report", str(bundle)], capsys)
    one_error(code, out, err, "sides is list, not dict")


def test_a_bundle_kept_as_an_archive_says_unpack_it(tmp_path, capsys):
    archive = tmp_path / "bundle.tar.xz"  # how results/evidence keeps bundles
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(SRC, arcname="b")
    for argv in (["report"], ["explain"], ["import", "--history", str(tmp_path / "h")]):
        code, out, err = run_in_process([*argv, str(archive)], capsys)
        one_error(code, out, err, "is an archive", "tar -xf")


def test_explain_refuses_a_core_this_machine_lacks_before_it_looks_at_the_sides(capsys):
    bundle = ROOT / "tests" / "fixtures" / "bundles" / "v1-compare-counters"  # its sides are long gone
    code, out, err = run_in_process(["explain", str(bundle), "--core", "999"], capsys)
    one_error(code, out, err, "core 999 is not available")


def test_doctor_claims_no_core(tmp_path, monkeypatch, capsys):
    from teperf import doctor

    monkeypatch.setenv("TEPERF_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(doctor, "all_checks", lambda core, pythons: [])
    code, out, err = run_in_process(["doctor"], capsys)
    assert code == 0 and not (tmp_path / "teperf-cores").exists(), (out, err)


def test_a_run_that_finds_every_core_claimed_says_whose_core_it_shares(tmp_path, monkeypatch, capsys):
    from teperf import cpus

    monkeypatch.setenv("TEPERF_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(cpus, "available_cores", lambda: [0, 1])
    monkeypatch.setattr(cpus, "_SHARED", [])
    (tmp_path / "teperf-cores").mkdir()
    held = []
    for core, pid in ((0, "111"), (1, "222")):  # two other runs (another open file: flock refuses this one)
        f = open(tmp_path / "teperf-cores" / f"core{core}", "w")
        f.write(pid), f.flush(), fcntl.flock(f, fcntl.LOCK_EX)
        held.append(f)
    try:
        assert cpus.check_core(None) == 1
    finally:
        [f.close() for f in held]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "every core is claimed" in err, err
    assert "pid 222" in err and "--core" in err, err


def test_a_config_given_as_a_pipe_is_read_not_called_missing(tmp_path):
    import os

    from teperf.config import resolve_config

    text = (ROOT / "teperf" / "configs" / "demo.toml").read_text()
    read, write = os.pipe()  # what a shell's --config <(...) passes: /dev/fd/N, a pipe
    os.write(write, text.encode()), os.close(write)
    try:
        assert resolve_config(f"/dev/fd/{read}")[1] == text
    finally:
        os.close(read)


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


def test_a_meta_json_that_is_a_broken_link_or_a_directory_is_damage_not_no_bundle(tmp_path, capsys):
    broken, folder = _copy(tmp_path, "broken"), _copy(tmp_path, "folder")
    (broken / "meta.json").unlink()
    (broken / "meta.json").symlink_to(tmp_path / "nowhere")
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()
    for bundle in (broken, folder):
        code, out, err = run_in_process(["report", str(bundle)], capsys)
        one_error(code, out, err, "meta.json is a broken link or a directory", "damaged")


def test_counters_update_into_a_place_it_cannot_write_names_the_file_asked_for():
    from pathlib import Path

    import pytest

    from teperf.counters.gate import CheckResult, _update
    from teperf.errors import TeperfError

    result = CheckResult(path=Path("/proc/cnt.toml"), side="run", made_with={}, cells=[], not_in_config=[])
    with pytest.raises(TeperfError, match=r"cannot write /proc/cnt.toml: ") as refused:
        _update(result, None)
    assert ".cnt.toml.tmp" not in str(refused.value)


def test_a_results_directory_or_a_file_of_a_bundle_is_answered_with_the_bundle_to_pass(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    _copy(results, "20261205-a"), _copy(results, "20261205-b")
    code, out, err = run_in_process(["report", str(results)], capsys)
    one_error(code, out, err, f"e.g. the last: {results / '20261205-b'}")
    code, out, err = run_in_process(["import", str(results / "20261205-a" / "meta.json")], capsys)
    one_error(code, out, err, f"pass the bundle's directory: {results / '20261205-a'}")


def test_an_absolute_package_dir_is_named_as_given_not_with_its_root_cut_off(tmp_path, capsys):
    from test_newcomer3 import _planted_repo

    repo = _planted_repo(tmp_path)
    argv = ["compare", "HEAD~1..HEAD", "--repo", str(repo), "--config", "demo", "--plan"]
    code, out, err = run_in_process([*argv, "--package-dir", str(tmp_path / "elsewhere")], capsys)
    assert code == 2 and f"--package-dir {tmp_path / 'elsewhere'} is in neither" in err, err
