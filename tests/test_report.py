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
