"""Integration: ``teperf bisect`` on fixture histories, through the real CLI and real workers.

One history plants 5 Python calls per step in one commit of twenty (found by
counters, exactly, with a commit that does not import on the way: skipped);
the other plants a 3 ms busy-wait per step with no counter change (found by
paired timing). The figures (probes, wall time) are printed: pytest -s.
"""

from __future__ import annotations

import json
import math

from conftest import run_cli
from gitfixture import HISTORY_CONFIG, make_history

# Small: the 3 ms spin is ~10x the step; what is tested is the search, not the engine's precision.
SCHEDULE = ["--processes", "3", "--rounds", "1", "--trials", "2", "--iters", "5", "--warmup", "3"]


def bisect(history, tmp_path, *args):
    (tmp_path / "bisect.toml").write_text(HISTORY_CONFIG)
    env = {"PYTHONPATH": str(history.site), "TEPERF_CACHE": str(tmp_path / "cache")}
    res = run_cli(
        "bisect",
        "good..bad",
        "--cell",
        "MLP/fp32",
        "--repo",
        history.repo,
        "--package",
        "mypkg",
        "--config",
        tmp_path / "bisect.toml",
        *SCHEDULE,
        *args,
        "--format",
        "json",
        "--results-dir",
        tmp_path / "results",
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout), res.stderr, env


def test_counters_find_the_commit_that_adds_python_calls(tmp_path):
    history = make_history(tmp_path / "fx", n=20, culprit=13, extra_calls=5, broken=(10,))
    out, stderr, env = bisect(history, tmp_path)
    meta, result = out["meta"], out["meta"]["result"]
    assert "expected probes: 5 (ceil(log2 20))" in stderr and "tier per commit: path 20" in stderr
    assert meta["kind"] == "bisect" and meta["status"] == "complete"
    assert result["mode"] == "counters" and result["status"] == "found"
    assert result["culprit"]["sha"] == history.culprit
    assert result["parent"]["sha"] == history.shas[12]
    assert result["probes"] <= math.ceil(math.log2(20)) + 2
    assert result["moved_counters"] == ["python_calls"]
    assert result["counters_after"]["python_calls"] - result["counters_before"]["python_calls"] == 5
    assert result["counters_after"]["aten_ops"] == result["counters_before"]["aten_ops"]
    again = [
        (p["role"], p["counters"]["python_calls"]) for p in out["probes"] if p["what"] == "counters again"
    ]
    calls = result["counters_good"]["python_calls"], result["counters_bad"]["python_calls"]
    assert again == [("GOOD", calls[0]), ("BAD", calls[1])]
    skipped = [p for p in out["probes"] if p["result"] == "skip"]
    assert [p["sha"] for p in skipped] == [history.shas[10]] and "NameError" in skipped[0]["detail"]
    assert out["confirm"]["rows"][0]["module"] == "MLP"  # the culprit against its parent, the normal engine
    print(f"\ncounters bisect: {result['probes']} probes, {result['wall_s']} s")

    bundle = next((tmp_path / "results").iterdir())
    res = run_cli("report", bundle, "--format", "markdown", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"culprit: {history.culprit[:7]}" in res.stdout and "confirming compare" in res.stdout
    before = result["counters_before"]["python_calls"]
    # markdown output escapes HTML, so the arrow reads "-&gt;" there
    assert f"python_calls {before} -&gt; {before + 5} (+5)" in res.stdout


def test_timing_finds_the_commit_that_adds_a_busy_wait(tmp_path):
    history = make_history(tmp_path / "fx", n=8, culprit=5, spin_ns=3_000_000)
    out, stderr, _ = bisect(history, tmp_path)
    result = out["meta"]["result"]
    assert result["mode"] == "timing" and result["moved_counters"] == []
    assert result["status"] == "found" and result["culprit"]["sha"] == history.culprit, out["probes"]
    assert result["probes"] <= math.ceil(math.log2(8)) + 1
    assert result["confirm"]["row"]["verdict"] == "slower"
    assert result["counters_after"] == result["counters_before"]  # the spin adds no Python call
    timed = [p for p in out["probes"] if p["what"] == "timing"]
    assert all(p["bundle"].startswith("compares/") for p in timed)
    print(f"\ntiming bisect: {result['probes']} probes, {result['wall_s']} s")
