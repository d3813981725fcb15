from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "examples" / "planted"
# the tests' default core is the last one, whatever teperf runs claim on this machine (teperf.cpus)
os.environ.setdefault("TEPERF_RUNTIME_DIR", tempfile.mkdtemp(prefix="teperf-test-claims-"))


def run_cli(*args, cwd=None, timeout=600, env=None):
    """Run the real `teperf` CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "teperf", *map(str, args)],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def run_in_process(argv, capsys):
    """The real CLI entry point in this process: (exit status, stdout, stderr)."""
    from teperf import cli

    code = 0
    try:
        cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def rows_by_module(stdout: str) -> dict:
    data = json.loads(stdout)
    return {r["module"]: r for r in data["rows"]}


@pytest.fixture
def results_dir(tmp_path):
    return tmp_path / "results"
