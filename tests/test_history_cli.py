"""teperf import / history / dashboard through the real CLI entry point (in-process)."""

from __future__ import annotations

import io
import json
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import synthetic_history as synthetic
from conftest import run_in_process

from teperf import cli
from teperf.history.store import HistoryStore
from teperf.records import Row

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
        return types.SimpleNamespace(meta=meta, rows=rows)

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
