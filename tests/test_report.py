"""teperf report: the formats a bundle is rendered in, and how the command ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


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
