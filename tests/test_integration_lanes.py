"""Integration: `--lanes 2` with real CPU workers (two pairs measure at once, each on its own
physical core), with --precision, with a worker that dies (lost-pair retry), and SIGTERM.

Needs two physical cores this process may use; skipped otherwise (the reason says how many there are).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from conftest import PLANTED, ROOT, rows_by_module, run_cli
from schedules import schedule
from test_integration_engine import FAULTY, flaky_config
from test_integration_signals import _children, _wait_for_hang, _wait_gone, stuck_config

from teperf.cpus import available_cores, physical_cores, smt_siblings

PHYSICAL = len(physical_cores(available_cores()))
pytestmark = [
    pytest.mark.skipif(
        PHYSICAL < 2, reason=f"--lanes 2 needs 2 physical cores; this process may use {PHYSICAL}"
    ),
    pytest.mark.alone,  # two lanes measure on two cores: no other test beside them
]

QUICK = (*schedule(2, 10, 5), "--no-counters", "--lanes", "2")
PLANTED_SCHEDULE = (*schedule(4, 20, 5), "--no-counters", "--lanes", "2")


def _records(results) -> tuple[dict, list[dict]]:
    (bundle,) = list(results.iterdir())
    meta = json.loads((bundle / "meta.json").read_text())
    return meta, [json.loads(line) for line in (bundle / "records.jsonl").read_text().splitlines()]


def _check_lanes(records: list[dict]) -> dict:
    """Every pair ran on one lane, its trials on that lane's core; two lanes on two physical cores."""
    pairs = {r["pair"]: (r["lane"], r["core"]) for r in records if r["kind"] == "pair"}
    for r in records:
        if r["kind"] == "trial":
            assert (r["lane"], r["core"]) == pairs[r["pair"]]
    cores = dict(pairs.values())
    assert sorted(cores) == [0, 1]
    assert cores[0] not in smt_siblings(cores[1]) and cores[0] != cores[1]
    return pairs


@pytest.mark.statistical  # the planted +100 us on a ~60 us MLP step is many times the noise
def test_two_lanes_measure_pairs_at_once_and_report_breaks_them_down(results_dir):
    res = run_cli(
        "compare",
        "--config",
        "demo",
        "--base-path",
        PLANTED / "base",
        "--head-path",
        PLANTED / "head",
        "--processes",
        "4",  # two a lane; the sign asserted below, not the verdict, needs no more (+100 us on a ~60 us step)
        *PLANTED_SCHEDULE,
        "--max-contended",  # load's own verdict is tests/test_load.py's: here, whatever the VM's load
        "100",
        "--format",
        "json",
        "--results-dir",
        results_dir,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    rows = rows_by_module(res.stdout)
    assert all(r["n_pairs"] == 4 for r in rows.values())
    # the sign of an enormous planted change (head's code ran), not a verdict: the verdicts' rates are
    # benchmarks/calibration.py's (lanes kind)
    assert rows["MLP"]["delta_us"] > 0, rows["MLP"]
    meta, records = _records(results_dir)
    pairs = _check_lanes(records)
    assert len(pairs) == 4 and meta["config"]["lanes"] == 2 and len(meta["host"]["lane_cores"]) == 2
    # the two lanes' pairs overlapped in time: each lane's first trial came before the other's last
    spans = {}
    for r in records:
        if r["kind"] == "trial":
            lo, hi = spans.get(r["lane"], (r["t"], r["t"]))
            spans[r["lane"]] = (min(lo, r["t"]), max(hi, r["t"]))
    assert spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]
    assert not _children_left()

    (bundle,) = list(results_dir.iterdir())
    rep = run_cli("report", bundle, "--by-lane", "--format", "json")
    assert rep.returncode == 0, rep.stderr
    by = {(r["module"], r["lane"]): r for r in json.loads(rep.stdout)["lanes"]}
    assert {lane for _, lane in by} == {0, 1, "all"}
    assert by[("MLP", 0)]["n_pairs"] + by[("MLP", 1)]["n_pairs"] == by[("MLP", "all")]["n_pairs"] == 4


def _children_left() -> list[int]:
    import os

    return _children(os.getpid())


# An A/A cell's 3 pairs on a loaded VM can spread past the target (CI, 2026-12-01: settled at 5 pairs under
# +-90 %): where it stops is asserted when it stopped for precision; how often it does is calibration's job.
def test_precision_with_two_lanes_stops_on_width(tmp_path, results_dir):
    cfg = tmp_path / "wide.toml"
    cfg.write_text('modules = ["Linear"]\nshapes = [[8, 64]]\n[schedule]\nmin_pairs = 3\n')
    res = run_cli(
        "compare",
        "--config",
        cfg,
        "--base-python",  # A/A of torch's built-ins (path sides would import nothing)
        sys.executable,
        "--head-python",
        sys.executable,
        *QUICK,
        "--precision",
        "100",
        "--budget",
        "5m",
        "--format",
        "json",
        "--results-dir",
        results_dir,
        timeout=400,
    )
    assert res.returncode == 0, res.stderr
    meta, records = _records(results_dir)
    stop = next(r for r in records if r["kind"] == "stop")
    assert stop["reason"] in ("precision reached", "budget"), stop
    n_pairs = rows_by_module(res.stdout)["Linear"]["n_pairs"]
    assert n_pairs >= 3  # never before min_pairs
    if stop["reason"] == "precision reached" and stop["pairs"] == 3:
        # settled at min_pairs; a pair the other lane had started by then still counts
        assert n_pairs <= 3 + 1
    _check_lanes(records)


def test_a_worker_that_dies_on_one_lane_costs_its_pair_only(tmp_path, results_dir):
    pkg = tmp_path / "side"
    pkg.mkdir()
    (pkg / "faulty_blocks.py").write_text(FAULTY)
    cfg = flaky_config(tmp_path, processes=4)
    res = run_cli(
        "compare",
        "--config",
        cfg,
        "--base-path",
        pkg,
        "--head-path",
        pkg,
        *QUICK,
        "--format",
        "json",
        "--results-dir",
        results_dir,
        timeout=300,
    )
    assert res.returncode == 1, res.stderr  # partial: one pair lost
    rows = rows_by_module(res.stdout)
    assert rows["Ok"]["status"] == "ok" and rows["Ok"]["n_pairs"] == 4
    assert rows["Flaky"]["status"] == "partial" and rows["Flaky"]["n_pairs"] == 3, rows["Flaky"]
    _, records = _records(results_dir)
    (lost,) = [r for r in records if r["kind"] == "failure"]
    assert lost["final"] is False and "exited with status 3" in lost["error"]
    _check_lanes(records)


def test_sigterm_stops_both_lanes_and_leaves_no_worker(tmp_path):
    pkg, cfg, marker = stuck_config(tmp_path, processes=4)
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
            *QUICK,
            "--format",
            "json",
            "--results-dir",
            results,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        hanging = _wait_for_hang(proc, marker)
        workers = _children(proc.pid)
        assert hanging in workers
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)  # far below the 600 s timeout: hung workers are killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "terminated" in err
    assert json.loads(out)["meta"]["status"] == "interrupted"
    meta, records = _records(results)
    assert meta["status"] == "interrupted"
    assert not [r for r in records if r["kind"] == "failure"]  # workers killed by the stop are no lost pairs
    assert _wait_gone(workers, seconds=10) == []
