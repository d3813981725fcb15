"""Integration: --spawn forkserver (issue 23) with real servers and forked workers on the CPU.

The planted change reads as with fresh workers, each generation of servers has its own hash
seed, a server that dies is started again and counted, and Ctrl-C or a SIGKILLed coordinator
leave no server or forked worker behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PLANTED, ROOT, rows_by_module, run_cli
from test_integration_signals import _children, _wait_for_hang, _wait_gone, stuck_config


@pytest.mark.statistical  # the planted +100 us is many times the noise; A/A rates: benchmarks/calibration.py
def test_forked_workers_find_the_planted_slowdown(results_dir):
    res = run_cli(
        "compare",
        "--config", "demo",
        "--base-path", PLANTED / "base",
        "--head-path", PLANTED / "head",
        "--spawn", "forkserver",
        "--server-pairs", "2",
        # 4 generations of 2: the interval's unit is the generation (3 degrees of freedom)
        "--processes", "8",
        "--trials", "4",
        "--iters", "30",
        "--warmup", "10",
        "--max-contended", "100",  # load's own verdict is tests/test_load.py's
        "--format", "json",
        "--results-dir", results_dir,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = rows_by_module(res.stdout)
    assert rows["MLP"]["verdict"] == "slower" and 60 < rows["MLP"]["delta_us"] < 250
    assert rows["Linear"]["verdict"] is not None and rows["LayerNormLinear"]["verdict"] is not None
    (bundle,) = list(results_dir.iterdir())
    records = [json.loads(line) for line in (bundle / "records.jsonl").read_text().splitlines()]
    servers = [r for r in records if r["kind"] == "server"]
    assert sorted((s["side"], s["generation"]) for s in servers if s["event"] == "started") == [
        ("base", 0), ("base", 1), ("base", 2), ("base", 3), ("head", 0), ("head", 1), ("head", 2), ("head", 3)
    ]  # fmt: skip
    assert len({s["hash_seed"] for s in servers}) == 4  # one seed per generation, shared by its sides
    assert rows["MLP"]["ci_basis"] == "generations"
    workers = [r for r in records if r["kind"] == "worker"]
    assert workers and all(w["hello"]["forked"] for w in workers)
    seed_of = {s["generation"]: s["hash_seed"] for s in servers}
    for w in workers:
        assert w["hash_seed"] == seed_of[w["pair"] // 2] == int(w["hello"]["hash_seed"])
    assert _wait_gone([s["pid"] for s in servers], seconds=30) == []


def test_a_server_that_dies_is_started_again_and_counted(tmp_path):
    from teperf.config import build_config
    from teperf.engine.forkserver import ServerPool
    from teperf.engine.spawn import Worker
    from teperf.sides import Side

    config = build_config({"schedule": {"spawn": "forkserver", "server_pairs": 2}}, {})
    side = Side(label="base", python=sys.executable)
    pool = ServerPool(config, [side], ["torch"], tmp_path, tmp_path, lambda i: None, max_pairs=2)
    try:

        def worker(pair):
            return Worker(
                side,
                core=None,
                device="cpu",
                backends=["torch"],
                hash_seed=pool.seed(pair),
                log_path=tmp_path / f"w{pair}.log",
                cwd=tmp_path,
                timeout_s=120,
                launcher=pool.launcher(0, pair),
            )

        first = worker(0)
        assert first.wait_ready()["forked"] and first.forked
        first.close()
        (server,) = pool.all
        server.proc.kill()
        server.proc.wait()
        second = worker(1)  # the same generation: its server is gone, a new one takes over
        assert second.wait_ready()["pid"] != first.hello["pid"] and second.forked
        second.close()
        assert pool.restarts == 1 and len(pool.all) == 2
        assert [e["event"] for e in pool.events] == ["started", "died", "started"]
    finally:
        pool.close(stopping=True)


def _start_stuck(tmp_path, extra=()):
    pkg, cfg, marker = stuck_config(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "teperf", "compare",
            "--config", cfg, "--base-path", pkg, "--head-path", pkg,
            "--no-counters", "--prestart", "0", "--spawn", "forkserver",
            "--format", "json", "--results-dir", tmp_path / "results", *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    return proc, _wait_for_hang(proc, marker)


def _forkservers(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            if b"teperf.worker.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


def test_ctrl_c_leaves_no_server_or_forked_worker(tmp_path):
    proc, hanging = _start_stuck(tmp_path)
    try:
        everything = _children(proc.pid)
        assert hanging in everything and _forkservers(everything)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert json.loads(out)["meta"]["status"] == "interrupted"
        assert _wait_gone(everything, seconds=20) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_sigkilled_coordinator_leaves_no_server_or_forked_worker(tmp_path):
    proc, hanging = _start_stuck(tmp_path)
    everything = _children(proc.pid)
    assert hanging in everything and _forkservers(everything)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _wait_gone(everything, seconds=60) == []
