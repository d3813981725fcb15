"""Integration: Ctrl-C, SIGTERM and SIGKILL of a real `teperf compare` while a worker hangs.

The run must stop without waiting for --timeout, print what was measured, mark the
bundle, exit 130/143, and leave no worker behind; a SIGKILLed coordinator's workers
must end by themselves, and `report`/`import` must see the bundle as interrupted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

STUCK = '''
import os, time
import torch.nn as nn

class Stuck(nn.Linear):
    """Hangs after `after` forwards and writes its pid to the marker file first."""
    calls = 0
    def __init__(self, marker, after):
        super().__init__(64, 64)
        self.marker, self.after = marker, after
    def forward(self, x):
        Stuck.calls += 1
        if Stuck.calls > self.after:
            with open(self.marker, "a") as f:
                f.write(f"{os.getpid()}\\n")
            time.sleep(3600)
        return super().forward(x)

def make_stuck(marker, after):
    return Stuck(marker, after)

def make_ok():
    return nn.Linear(64, 64)
'''


def stuck_config(tmp_path, processes: int = 2):
    """(side dir, config, marker) of cells Ok and Stuck, whose worker hangs after 4 forwards (timeout 600
    s)."""
    pkg = tmp_path / "side"
    pkg.mkdir()
    (pkg / "stuck_blocks.py").write_text(STUCK)
    marker = tmp_path / "hanging.pid"
    cfg = tmp_path / "stuck.toml"
    cfg.write_text(
        textwrap.dedent(f'''
        shapes = [[4, 64]]
        [modules.Ok]
        factory = "stuck_blocks:make_ok"
        [modules.Stuck]
        factory = "stuck_blocks:make_stuck"
        kwargs = {{ marker = "{marker}", after = 4 }}
        [schedule]
        processes = {processes}
        rounds = 1
        trials = 2
        iters = 5
        warmup = 2
        timeout_s = 600
    ''')
    )
    return pkg, cfg, marker


@pytest.fixture
def stuck_run(tmp_path):
    """Start `teperf compare` whose Stuck cell hangs in its second trial (timeout 600 s)."""
    pkg, cfg, marker = stuck_config(tmp_path)
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "teperf",
            "compare",
            "--config",
            cfg,
            "--base-path",
            pkg,
            "--head-path",
            pkg,
            "--no-counters",
            "--prestart",
            "0",
            "--format",
            "json",
            "--results-dir",
            results,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell that runs pytest in the background ignores SIGINT, and children inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        hanging = _wait_for_hang(proc, marker)
        yield proc, results, hanging
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for_hang(proc, marker: Path) -> int:
    deadline = time.monotonic() + 240  # a generous bound on start-up, not a figure of the product
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text().strip():
            return int(marker.read_text().split()[0])
        if proc.poll() is not None:
            pytest.fail(f"teperf ended before the worker hung: {proc.communicate()}")
        time.sleep(0.2)
    pytest.fail("the worker never reached its hang")


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (workers start their own session, but stay children)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        todo += kids
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; only its exit status waits to be collected


def _wait_gone(pids, seconds=60) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def _bundle(results: Path) -> Path:
    (bundle,) = list(results.iterdir())
    return bundle


# SIGHUP: a closed terminal or ssh session, handled as SIGTERM (issue 59: it left the bundle "running")
@pytest.mark.parametrize(
    "signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]
)
def test_signal_stops_a_run_whose_worker_hangs(stuck_run, signum, status):
    proc, results, hanging = stuck_run
    workers = _children(proc.pid)
    assert hanging in workers
    proc.send_signal(signum)
    # far below the 600 s --timeout: the hung worker is killed, not waited for
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    said = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    assert "Traceback" not in err and said in err
    printed = json.loads(out)  # what was measured is printed
    assert printed["meta"]["status"] == "interrupted"
    assert {r["module"] for r in printed["rows"]} == {"Ok", "Stuck"}
    meta = json.loads((_bundle(results) / "meta.json").read_text())
    assert meta["status"] == "interrupted"
    assert _wait_gone(workers, seconds=10) == []


def test_workers_die_with_a_sigkilled_coordinator(stuck_run, tmp_path):
    proc, results, hanging = stuck_run
    workers = _children(proc.pid)
    assert hanging in workers
    proc.kill()
    proc.wait()
    assert _wait_gone(workers) == []
    bundle = _bundle(results)
    assert json.loads((bundle / "meta.json").read_text())["status"] == "running"  # never got to say otherwise
    report = run_cli("report", bundle, "--format", "json")
    assert report.returncode == 0, report.stderr
    meta = json.loads(report.stdout)["meta"]
    assert (meta["status"], meta["status_detail"]) == ("interrupted", "coordinator gone")
    table = run_cli("report", bundle, "--format", "markdown")
    assert "interrupted (coordinator gone)" in table.stdout
    assert (
        "| pairs |" in table.stdout and "/2 |" in table.stdout
    )  # on how many of the 2 pairs each cell rests
    history = tmp_path / "history"
    refused = run_cli("import", bundle, "--history", history)
    assert refused.returncode == 0 and "skipped" in refused.stderr
    taken = run_cli("import", bundle, "--history", history, "--include-partial")
    assert taken.returncode == 0 and "1 bundle added" in taken.stdout, taken.stderr


def test_a_live_coordinators_bundle_still_reads_running(tmp_path):
    from teperf.bundle import coordinator_facts, coordinator_gone
    from teperf.records import BundleMeta

    gone = lambda raw: coordinator_gone(BundleMeta.from_dict(raw))  # noqa: E731

    meta = {"status": "running", "coordinator": coordinator_facts()}
    assert not gone(meta)  # this very process
    assert not gone({**meta, "status": "complete"})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert gone({**meta, "coordinator": {**meta["coordinator"], "pid": dead.pid, "start_ticks": None}})
    assert not gone({**meta, "coordinator": {**meta["coordinator"], "hostname": "elsewhere"}})
