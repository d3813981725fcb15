"""teperf import / history / dashboard through the real CLI entry point (in-process)."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import synthetic_history as synthetic
from conftest import ROOT, one_error, run_in_process

from teperf import cli
from teperf.history.store import HistoryStore
from teperf.records import BundleMeta, Row

run = run_in_process


@pytest.fixture
def store(tmp_path):
    st = HistoryStore(tmp_path / "history")
    synthetic.write(
        st,
        synthetic.Plan(
            commits=30, steps={("LayerNormLinear", "fp32", 18): 8.0}, subjects={18: "Slow <script>x</script>"}
        ),
    )
    return st


def test_history_table_csv_json(store, capsys):
    code, out, err = run(["history", "--history", store.url, "--module", "Linear", "--format", "csv"], capsys)
    assert code == 0, err
    df = pd.read_csv(io.StringIO(out))
    assert len(df) == 30 and set(df.module) == {"Linear"}
    assert list(df.sha) == [synthetic.sha_of(i) for i in range(30)]  # series order
    code, out, _ = run(
        ["history", "--history", store.url, "--recipe", "fp32", "--format", "json", "--last", "3"], capsys
    )
    rows = json.loads(out)
    assert len(rows) == 3 * 3 and {r["sha"] for r in rows} == {synthetic.sha_of(i) for i in (27, 28, 29)}
    code, out, _ = run(["history", "--history", store.url, "--module", "LayerNormMLP"], capsys)
    assert code == 0 and "LayerNormMLP" in out and synthetic.sha_of(29)[:10] in out


def test_history_changes(store, capsys):
    code, out, _ = run(["history", "--history", store.url, "--changes", "--format", "json"], capsys)
    assert code == 0
    changes = json.loads(out)
    assert [
        (c["module"], c["kind"], c["direction"], c["first_bad_sha"], c["last_good_sha"]) for c in changes
    ] == [("LayerNormLinear", "step", "slower", synthetic.sha_of(18), synthetic.sha_of(17))]


def test_history_errors_are_one_line(tmp_path, store, capsys):
    code, _, err = run(["history", "--history", str(tmp_path / "empty")], capsys)
    assert code == 2 and err.count("\n") == 1 and "no history" in err
    code, _, err = run(["history", "--history", store.url, "--machine", "nosuch"], capsys)
    assert code == 2 and "matches no machine" in err


def test_a_dangling_history_symlink_is_named_as_one(tmp_path, capsys):
    # issue 59: it read "File exists"
    from conftest import one_error

    (tmp_path / "link").symlink_to(tmp_path / "gone")
    bundle = str(Path(__file__).parent / "fixtures" / "bundles" / "v1-compare-counters")
    for argv in (["import", bundle], ["history"]):
        code, out, err = run([*argv, "--history", str(tmp_path / "link")], capsys)
        one_error(code, out, err, "is a symbolic link to", "which does not exist", "mkdir -p")


def test_dashboard_command(store, tmp_path, capsys):
    out_dir = tmp_path / "site"
    code, out, err = run(["dashboard", "--history", store.url, "--out", str(out_dir)], capsys)
    assert code == 0, err
    assert "1 change" in out and "1 slower" in out
    assert (out_dir / "index.html").exists() and (out_dir / "assets" / "plotly.min.js").exists()
    assert synthetic.sha_of(18)[:10] in (out_dir / "regressions.html").read_text()
    code, _, err = run(
        ["dashboard", "--history", store.url, "--out", str(out_dir), "--min-effect", "-1"], capsys
    )
    assert code == 2


def test_a_ref_the_history_does_not_have_is_refused_naming_those_it_has(store, tmp_path, capsys):
    # issue 59: dashboard --ref nosuchbranch called a full history empty and exited 0
    from conftest import one_error

    refs = sorted(store.read()["ref"].dropna().unique())
    for argv in (["dashboard", "--out", str(tmp_path / "site")], ["history"]):
        code, out, err = run([*argv, "--history", store.url, "--ref", "nosuchbranch"], capsys)
        one_error(code, out, err, "--ref nosuchbranch matches no row of the history", f"({', '.join(refs)})")
    assert not (tmp_path / "site").exists()
    code, _, err = run(
        ["dashboard", "--history", store.url, "--out", str(tmp_path / "s"), "--ref", refs[0]], capsys
    )
    assert code == 0, err


def test_dashboard_refuses_an_out_dir_it_did_not_build(store, tmp_path, capsys):
    out_dir = tmp_path / "docs"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("keep me")
    code, _, err = run(["dashboard", "--history", store.url, "--out", str(out_dir)], capsys)
    assert code == 2 and err.count("\n") == 1 and "is not a teperf dashboard" in err
    assert (out_dir / "notes.txt").read_text() == "keep me"


def test_import_adds_bundles_once(tmp_path, monkeypatch, capsys):
    from teperf import api

    def fake_summarize(path):
        meta = {
            "teperf_version": "0.1.0",
            "started_at": "2025-05-01T00:00:00+00:00",
            "status": "complete",
            "sides": {"run": {"label": "run", "python": sys.executable}},
            "host": {"hostname": "h", "cpu_model": "CPU X"},
            "workers": {"run": {"torch": "2.13.0"}},
        }
        if "partial" in str(path):
            meta["status"] = "interrupted"
        rows = [
            Row(
                module="Linear",
                recipe="fp32",
                shape="8x2x256",
                dtype="float32",
                mode="eager",
                status="ok",
                base_us=123.0,
                n_pairs=3,
            )
        ]
        return types.SimpleNamespace(meta=BundleMeta.from_dict(meta), rows=rows)

    monkeypatch.setattr(api, "summarize", fake_summarize)
    hist = tmp_path / "h"
    code, out, err = run(
        [
            "import",
            str(tmp_path / "b1"),
            "--history",
            str(hist),
            "--sha",
            "9" * 40,
            "--subject",
            "An imported <i>run</i>",
            "--commit-date",
            "2025-04-30T10:00:00Z",
        ],
        capsys,
    )
    assert code == 0, err
    assert "1 bundle added" in out
    df = HistoryStore(hist).read()
    assert (
        len(df) == 1
        and df.sha[0] == "9" * 40
        and df.host_us[0] == 123.0
        and df.subject[0] == "An imported <i>run</i>"
    )
    code, out, _ = run(
        [
            "import",
            str(tmp_path / "b1"),
            "--history",
            str(hist),
            "--sha",
            "9" * 40,
            "--subject",
            "An imported <i>run</i>",
            "--commit-date",
            "2025-04-30T10:00:00Z",
        ],
        capsys,
    )
    assert "already in the history" in out and len(HistoryStore(hist).read()) == 1
    code, out, err = run(["import", str(tmp_path / "partial"), "--history", str(hist)], capsys)
    assert "skipped" in err and len(HistoryStore(hist).read()) == 1
    code, _, err = run(["import", str(tmp_path / "b1"), "--history", str(hist), "--subject", "x"], capsys)
    assert code == 2 and "--sha" in err
    code, _, err = run(["import", str(tmp_path / "b1"), "--history", str(hist), "--shard", "3/2"], capsys)
    assert code == 2


@pytest.mark.real_worker
def test_history_of_a_bundle_without_commits(tmp_path, capsys):
    """A --base-path compare has no sha, subject or commit date: history must still print it."""
    from conftest import PLANTED, run_cli
    from schedules import TINY

    res = tmp_path / "res"
    proc = run_cli(
        "compare",
        "--base-path",
        PLANTED / "base",
        "--head-path",
        PLANTED / "base",
        "--config",
        "demo",
        *TINY,  # one pair: what history prints of it is the subject, not its timing
        "--no-counters",
        "--results-dir",
        res,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    hist = tmp_path / "h"
    code, out, err = run(["import", *map(str, res.iterdir()), "--history", str(hist)], capsys)
    assert code == 0, err
    code, out, err = run(["history", "--history", str(hist)], capsys)
    assert code == 0, err
    assert "Linear fp32" in out and "MLP fp32" in out
    code, out, err = run(["history", "--history", str(hist), "--last", "1", "--changes"], capsys)
    assert code == 0, err


def test_import_refuses_a_commit_date_that_is_not_a_date(tmp_path, capsys):
    hist = tmp_path / "h"
    code, _, err = run(
        [
            "import",
            str(tmp_path / "b1"),
            "--history",
            str(hist),
            "--sha",
            "9" * 40,
            "--commit-date",
            "notadate",
        ],
        capsys,
    )
    assert code == 2 and err.count("\n") == 1 and "--commit-date 'notadate'" in err
    assert not hist.exists() or HistoryStore(hist).read().empty


@pytest.mark.parametrize("last", ["0", "-1"])
def test_history_last_must_be_positive(store, capsys, last):
    code, out, err = run(["history", "--history", store.url, "--last", last], capsys)
    assert code == 2 and "--last" in err and not out


def test_import_of_a_non_bundle_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "notabundle").mkdir()
    code, _, err = run(["import", str(tmp_path / "notabundle"), "--history", str(tmp_path / "h")], capsys)
    assert code == 2 and "not a teperf bundle" in err and err.count("\n") == 1


def test_commands_are_registered():
    assert {"nightly", "history", "dashboard", "import"} <= set(cli.cli.commands)


BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


def test_dashboard_of_a_file_is_refused(tmp_path, capsys):
    from conftest import run_in_process

    not_a_store = tmp_path / "passwd"
    not_a_store.write_text("root:x:0:0::/root:/bin/sh\n")
    code, _, err = run_in_process(
        ["dashboard", "--history", str(not_a_store), "--out", str(tmp_path / "site")], capsys
    )
    assert code == 2 and "is a file, not a history store" in err
    assert not (tmp_path / "site").exists()


def _copy(tmp_path, name="v1-compare-counters") -> Path:
    path = tmp_path / name
    shutil.copytree(BUNDLES / name, path)
    return path


def test_history_changes_and_nights_together_are_refused(tmp_path, capsys):
    one_error(
        *run_in_process(["history", "--history", str(tmp_path), "--changes", "--nights"], capsys), "--nights"
    )


def _import(path, hist, capsys, *extra):
    return run_in_process(["import", str(path), "--history", str(hist), *extra], capsys)


def test_an_unreadable_history_file_is_one_teperf_line(tmp_path, capsys):
    hist = tmp_path / "h"
    code, out, err = _import(_copy(tmp_path), hist, capsys, "--sha", "a" * 40)
    assert code == 0, err
    (hist / "20990101T000000Z_x_nosha_s1of1_deadbeef.parquet").write_bytes(b"PAR1 cut short")
    code, out, err = run_in_process(["history", "--history", str(hist)], capsys)
    assert code == 0 and "Warning" not in err and "store.py" not in err
    assert err.count("\n") == 1 and err.startswith("teperf: warning: skipped an unreadable history file")


def test_the_same_bundle_imported_twice_is_added_once_and_sha_names_a_commitless_one(tmp_path, capsys):
    from teperf.history.store import HistoryStore

    hist, path = tmp_path / "h", _copy(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    for side in meta["sides"].values():
        side.pop("sha", None)  # as a --base-path compare's
    (path / "meta.json").write_text(json.dumps(meta))
    code, out, err = _import(path, hist, capsys)
    assert code == 0 and "1 bundle added" in out and "no commit recorded" in out and "--sha" in out
    code, out, err = _import(Path(os.path.relpath(path)), hist, capsys, "--sha", "b" * 40)
    assert code == 0 and "1 bundle added" in out and "no commit recorded" not in out
    assert list(HistoryStore(hist).read()["sha"].unique()) == ["b" * 40]  # replaced, not added beside it
    code, out, err = _import(path, hist, capsys, "--sha", "b" * 40)
    assert code == 0 and "already in the history" in out and len(HistoryStore(hist).files()) == 1


def test_the_history_table_shows_the_load_cause(tmp_path, capsys):
    from test_history_store import make_meta, make_row, summary

    from teperf.history.store import HistoryStore

    HistoryStore(tmp_path / "h").add_summary(
        summary(make_meta(), [make_row(verdict="inconclusive", verdict_cause="load")]), bundle="x"
    )
    code, out, err = run_in_process(["history", "--history", str(tmp_path / "h")], capsys)
    assert code == 0 and "inconclusive (load)" in out, (out, err)


@pytest.mark.parametrize(
    "flag, value", [("--budget", "5m"), ("--config", "demo"), ("--results-dir", "somewhere")]
)
def test_history_refuses_the_explain_options_without_explain(flag, value, tmp_path, capsys):
    argv = ["history", "--history", str(ROOT / "tests" / "fixtures" / "history-v1"), flag, value]
    one_error(*run_in_process(argv, capsys), f"{flag} is for --explain", "--changes --explain")


@pytest.mark.parametrize("sha", ["not a sha!", "", "abc", "v1.0", "a" * 65])
def test_import_refuses_a_sha_that_is_no_commit_hash(sha, tmp_path, capsys):
    bundle = str(BUNDLES / "v1-compare-counters")
    argv = ["import", bundle, "--history", str(tmp_path / "h"), "--sha", sha]
    one_error(*run_in_process(argv, capsys), "is not a commit hash", "git rev-parse")
    assert not (tmp_path / "h").exists()


def _cut(tmp_path, name="v2-compare-compile-cpu", keep=60):
    """A copy of a complete bundle whose records.jsonl was cut short after the run (meta says complete)."""
    dst = tmp_path / "cut"
    shutil.copytree(BUNDLES / name, dst)
    lines = (dst / "records.jsonl").read_text().splitlines(keepends=True)
    (dst / "records.jsonl").write_text("".join(lines[:keep]))
    assert json.loads((dst / "meta.json").read_text())["status"] == "complete"
    return dst


def test_import_keeps_a_cut_short_bundle_out_of_the_history_without_include_partial(tmp_path, capsys):
    bundle = str(_cut(tmp_path))
    hist = str(tmp_path / "h")
    code, out, err = run_in_process(["import", bundle, "--history", hist, "--sha", "abc1234"], capsys)
    assert code == 0 and "0 bundles added" in out and "cells partial" in err, (out, err)
    argv = ["import", bundle, "--history", hist, "--sha", "abc1234", "--include-partial"]
    code, out, err = run_in_process(argv, capsys)
    assert code == 0 and "1 bundle added" in out, (out, err)


def test_an_unusable_special_path_is_one_line(capsys):
    argv = ["dashboard", "--history", str(ROOT / "tests" / "fixtures" / "history-v1"), "--out", "/proc/site"]
    code, out, err = run_in_process(argv, capsys)
    one_error(code, out, err, "cannot write --out /proc/site", "a directory you can write")
    assert "/proc/.site." not in err, err  # the hidden directory the site is built in is not what was given
