"""A worker leaves without the interpreter's teardown (teperf.worker.__main__.leave), yet loses nothing:
its exit status, what it printed (buffered or not) and what its atexit handlers do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_leave_keeps_status_output_and_atexit(tmp_path):
    done = tmp_path / "atexit-ran"
    code = f"""
import atexit, sys
from teperf.worker.__main__ import leave
atexit.register(lambda: open({str(done)!r}, "w").write("yes"))
sys.stdout.write("buffered out")
sys.stderr.write("buffered err")
leave(3)
print("never")
"""
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 3
    assert res.stdout == "buffered out" and res.stderr == "buffered err"
    assert done.read_text() == "yes"
