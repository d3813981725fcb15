"""Integration: first-call and recompile costs of the reference modules under torch.compile,
in real worker processes on the CPU (inductor compiles C++ with the system compiler)."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import run_cli
from schedules import schedule

CASES = ["--modules", "Linear", "--modes", "eager,compile", "--shape", "8,2,32"]
SMALL = [*CASES, *schedule(2, 10, 2, processes=2)]
# One pair: each compile worker's cold start (a torch import, then inductor's first C++ builds, about 15 s of
# CPU) is most of this test's cost. A worker's cold directory is its own (worker/compile_cache.py: a fresh
# temporary directory per worker), so base's and head's two workers already show that no two share one; a
# second pair only repeated that. Sharing one directory across pairs is the warm test's (2 pairs).
ONE_PAIR = [*CASES, *schedule(2, 10, 2, processes=1)]


def _records(bundle: Path, kind: str) -> list[dict]:
    return [
        r for r in map(json.loads, (bundle / "records.jsonl").read_text().splitlines()) if r["kind"] == kind
    ]


def _setups(bundle: Path, mode: str) -> list[dict]:
    meta = json.loads((bundle / "meta.json").read_text())
    ids = {c["id"] for c in meta["cases"] if c["mode"] == mode}
    return [r for r in _records(bundle, "setup") if r["case_id"] in ids and r["status"] == "ready"]


def test_cold_compare_pairs_first_calls_and_recompiles(results_dir):
    res = run_cli(
        "compare",
        "--base-python",  # A/A of torch's built-ins (path sides would import nothing)
        sys.executable,
        "--head-python",
        sys.executable,
        *ONE_PAIR,
        "--no-counters",
        "--format",
        "json",
        "--results-dir",
        results_dir,
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    eager, comp = data["rows"]
    assert comp["mode"] == "compile" and comp["first_call_n_pairs"] == 1
    for key in ("first_call_base_ms", "first_call_head_ms", "recompile_base_ms", "recompile_head_ms"):
        assert comp[key] > 0, key
    assert eager["first_call_base_ms"] > 0 and eager["recompile_base_ms"] is None
    (bundle,) = list(results_dir.iterdir())
    compiles = _setups(bundle, "compile")
    assert {(r["pair"], r["side"]) for r in compiles} == {(0, "base"), (0, "head")}
    caches = [r["info"]["first_call"]["cache"] for r in compiles]
    # cold: a fresh, empty directory per worker (pair and side), which the first call filled
    assert all(c["mode"] == "cold" and c["files_before"] == 0 and c["files_after"] > 0 for c in caches)
    assert len({c["dir"] for c in caches}) == 2
    for r in compiles:
        info = r["info"]
        assert info["graphs"] >= 1 and info["first_call"]["cores"]
        assert info["recompile"]["graphs"] >= 1 and "autocast" in info["recompile"]["what"]
        assert info["switch_back"]["process_cpu_ns"] > 0
    for r in _setups(bundle, "eager"):
        assert "recompile" not in r["info"] and r["info"]["first_call"]["process_cpu_ns"] > 0
    (cache,) = _records(bundle, "compile_cache")
    assert not os.path.exists(cache["dir"])  # the run's cache directory is gone afterwards
    md = run_cli("report", bundle, "--format", "markdown")
    assert md.returncode == 0 and "**one-time costs**" in md.stdout and "| recompile |" in md.stdout
    table = run_cli("report", bundle)
    assert "one-time costs" in table.stdout
    rows = list(csv.DictReader(io.StringIO(run_cli("report", bundle, "--format", "csv").stdout)))
    assert float(rows[1]["first_call_head_ms"]) == pytest.approx(comp["first_call_head_ms"])


def test_warm_run_reads_a_prefilled_cache_and_gives_the_break_even(results_dir):
    res = run_cli("run", *SMALL, "--compile-cache", "warm", "--format", "json", "--results-dir", results_dir)
    assert res.returncode == 0, res.stderr
    eager, comp = json.loads(res.stdout)["rows"]
    assert comp["first_call_base_ms"] > 0 and comp["saving_per_step_us"] is not None
    assert comp["break_even_steps"] == "never" or comp["break_even_steps"] >= 0
    (bundle,) = list(results_dir.iterdir())
    prewarm = _records(bundle, "prewarm")
    assert [r["status"] for r in prewarm] == ["ready"] and prewarm[0]["info"]["first_call"]["cache"][
        "files_before"
    ] == 0
    caches = [r["info"]["first_call"]["cache"] for r in _setups(bundle, "compile")]
    assert len(caches) == 2
    # warm: both pairs read the one directory the pre-warm filled, and found every graph there (issue 22)
    assert all(c["mode"] == "warm" and c["files_before"] > 0 for c in caches)
    assert all(c["fxgraph_hit"] > 0 and c["fxgraph_miss"] == 0 for c in caches), caches
    assert prewarm[0]["info"]["first_call"]["cache"]["fxgraph_miss"] > 0
    assert any(
        "2 of 2 compile first calls found every graph" in n for n in json.loads(res.stdout)["onetime_notes"]
    )
    assert (
        len({c["dir"] for c in caches})
        == 1
        == len({prewarm[0]["info"]["first_call"]["cache"]["dir"], caches[0]["dir"]})
    )
