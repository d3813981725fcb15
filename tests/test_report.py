"""teperf report and the renderers on stored bundles: a run still going elsewhere or interrupted, escaping,
a narrow terminal, a failed cell's own column, base-only counters, a budget that measured nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_in_process

BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


def _compare_bundle(tmp_path, module="Linear", **meta_fields):
    """A small compare bundle on disk (two pairs of one cell), no workers."""
    from test_faults import _bundle, _lines, _meta, _trial

    recs = [
        _trial(s, p, t, 1000 + t + (30 if s == "head" else 0))
        for p in (0, 1)
        for t in (0, 1)
        for s in ("base", "head")
    ]
    return _bundle(tmp_path, {**_meta(module=module), **meta_fields}, _lines(recs))


def test_report_of_a_bundle_running_on_another_host(tmp_path, capsys):
    from conftest import run_in_process

    path = _compare_bundle(
        tmp_path, status="running", coordinator={"pid": 4242, "hostname": "elsewhere-7", "start_ticks": 1}
    )
    code, out, _ = run_in_process(["report", str(path), "--format", "json"], capsys)
    note = next(n for n in json.loads(out)["notes"] if n.startswith("run status"))
    assert "running on elsewhere-7, pid 4242" in note and "so far" in note and "stopped" not in note


def test_markdown_keeps_link_syntax_literal(tmp_path):
    from teperf.render import render
    from teperf.summary import summarize

    text = render(summarize(_compare_bundle(tmp_path, module="[x](https://evil.invalid)")), "markdown")
    assert "\\[x\\](https://evil.invalid)" in text
    assert "[x](" not in text.replace("\\[x\\](", "")


def test_a_long_module_name_keeps_its_end_on_a_narrow_terminal(tmp_path):
    import io

    from rich.console import Console

    from teperf.render import render
    from teperf.summary import summarize

    name = "VeryLongModuleNameThatDoesNotFitIntoTheColumn_EndsHere"
    buf = io.StringIO()
    render(summarize(_compare_bundle(tmp_path, module=name)), "table", console=Console(file=buf, width=80))
    flat = "".join(line.strip(" │┃|") for line in buf.getvalue().splitlines())
    assert "EndsHere" in flat.replace(" ", "")


def _copy(tmp_path, name="v1-compare-counters") -> Path:
    path = tmp_path / name
    shutil.copytree(BUNDLES / name, path)
    return path


def test_an_interrupted_run_marks_cells_short_of_their_pairs_partial(tmp_path, capsys):
    path = _copy(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    meta["status"] = "interrupted"
    meta["config"]["schedule"]["processes"] = 6  # the bundle holds 3 pairs of each cell
    (path / "meta.json").write_text(json.dumps(meta))
    code, out, err = run_in_process(["report", str(path), "--format", "json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert rows and all(
        r["status"] == "partial" and r["n_pairs"] == 3 and "interrupted" in r["error"] for r in rows
    )
    notes = json.loads(out)["notes"]
    assert any("3 of 6 pairs; the run was interrupted" in n for n in notes), notes


def test_base_only_counters_in_a_compare_are_labelled_as_counts():
    from teperf.render import counters_text

    counts = {"py_calls": 120, "aten_ops": 30}
    assert counters_text({"base": counts, "head": None}, compare=True).startswith(
        "base only (counts, not changes)"
    )
    assert (
        counters_text({"base": counts, "head": None}) == "py_calls 120, aten_ops 30"
    )  # a run: its own counts


def test_a_failed_run_cell_says_why_in_its_own_column(capsys):
    code, out, err = run_in_process(
        ["report", str(BUNDLES / "v1-run-failures"), "--format", "markdown"], capsys
    )
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("| module"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert "why" in columns
    skipped = next(line for line in out.splitlines() if "skipped" in line)
    cells = [c.strip() for c in skipped.strip("|").split("|")]
    assert cells[columns.index("between pairs")] == "" and "compute capability" in cells[columns.index("why")]


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


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_a_reader_that_stops_reading_is_not_a_failed_cell(fmt):
    # issue 59: `teperf report B | head -1` exited 1 (a failed cell's code) and said nothing; Unix tools
    # end quietly when their reader is gone
    proc = subprocess.Popen(
        [sys.executable, "-m", "teperf", "report", str(BUNDLES / "v1-compare-counters"), "--format", fmt],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # before it writes anything: every write finds the pipe closed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


def test_the_comment_format_of_a_bundle(capsys):
    from conftest import run_in_process

    code, out, err = run_in_process(
        ["report", str(BUNDLES / "v1-compare-counters"), "--format", "comment"], capsys
    )
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert (
        lines[0] == "**teperf: 1 slower: LayerNormLinear/bf16 slower +18.7% (base a3114ed .. head 0080b93)**"
    )
    assert lines[2].startswith("| module | recipe | base | head |") and "| slower |" in lines[4]
    assert "<details>" in out and out.rstrip().endswith("</details>")
    assert "- LayerNormLinear/bf16: +20 py calls, 0 aten ops, 0 kernels" in out  # the counters
    assert "- head: 0080b93df5, 'teperf bisect fixture 4" in out  # what each side ran


def test_a_bundle_that_says_bisect_but_names_no_commits_is_refused(tmp_path, capsys):
    # issue 59: it rendered "range None..None"
    import json
    import shutil

    from conftest import one_error, run_in_process

    path = tmp_path / "b"
    shutil.copytree(BUNDLES / "v1-compare-counters", path)
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "kind": "bisect"}))
    one_error(*run_in_process(["report", str(path)], capsys), "says it is a bisect", "names no GOOD..BAD")
