"""Integration: ``teperf bisect`` on fixture histories, through the real CLI and real workers.

One history plants 5 Python calls per step in one commit of twenty (found by
counters, exactly, with a commit that does not import on the way: skipped);
one plants three counter changes, one of them the other way (each found,
attributed by share); one plants a 3 ms busy-wait per step with no counter
change (found by paired timing), and one two busy-waits at two commits (both
steps found). The figures (probes, wall time) are printed: pytest -s.
"""

from __future__ import annotations

import json
import math

from conftest import run_cli
from gitfixture import HISTORY_CONFIG, make_history

# Small: the 3 ms spin is ~10x the step; what is tested is the search, not the engine's precision.
SCHEDULE = ["--processes", "3", "--rounds", "1", "--trials", "2", "--iters", "5", "--warmup", "3"]


def bisect(history, tmp_path, *args, rc=0):
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
    assert res.returncode == rc, res.stderr
    return json.loads(res.stdout), res.stderr, env


def test_counters_find_the_commit_that_adds_python_calls(tmp_path):
    history = make_history(tmp_path / "fx", n=20, culprit=13, extra_calls=5, broken=(10,))
    out, stderr, env = bisect(history, tmp_path)
    meta, result = out["meta"], out["meta"]["result"]
    assert (
        "expected probes: 5 per change point (ceil(log2 20))" in stderr
        and "tier per commit: path 20" in stderr
    )
    assert "(no build of this package measured yet" in stderr and "measured: a counter probe takes" in stderr
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
    assert [c["sha"] for c in out["culprits"]] == [history.culprit] and out["opposite_movers"] == []
    assert out["culprits"][0]["share"] == 1.0 and out["explained"] is True
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


def test_counters_name_every_change_point_biggest_share_first(tmp_path):
    # Python calls: +4 at 3, -2 at 6, +10 at 9 (with a 3 ms busy-wait, so that time moves with it)
    steps = {3: {"extra_calls": 4}, 6: {"extra_calls": 2}, 9: {"extra_calls": 12, "spin_ns": 3_000_000}}
    history = make_history(tmp_path / "fx", n=12, steps=steps)
    out, stderr, _ = bisect(history, tmp_path)
    result = out["meta"]["result"]
    assert result["mode"] == "counters" and result["status"] == "found"
    assert [(c["sha"], c["deltas"]["python_calls"]) for c in out["culprits"]] == [
        (history.shas[9], 10),
        (history.shas[3], 4),
    ]
    assert [c["share"] for c in out["culprits"]] == [round(10 / 12, 4), round(4 / 12, 4)]
    assert [(c["sha"], c["deltas"]["python_calls"]) for c in out["opposite_movers"]] == [
        (history.shas[6], -2)
    ]
    assert result["culprit"]["sha"] == history.shas[9]  # the biggest share, not the first change
    assert result["probes"] <= 3 * math.ceil(math.log2(12))
    # GOOD..BAD in time, then commit 9 (83 % of the calls) against its parent: enough
    assert [p["what"] for p in out["probes"] if p["what"] in ("timing", "confirm")] == ["timing", "confirm"]
    assert (
        result["endpoint"]["verdict"] == "slower"
        and out["culprits"][0]["confirm"]["row"]["verdict"] == "slower"
    )
    assert result["coverage"]["confirmed"] == [history.shas[9][:7]] and result["coverage"]["covered_pct"] > 50
    assert out["explained"] is True and "1 moved the other way (-17%)" in out["answer"]
    print(f"\nthree counter changes: {result['probes']} probes, {result['wall_s']} s; {out['answer']}")


def test_timing_finds_two_busy_wait_steps(tmp_path):
    steps = {2: {"spin_ns": 2_000_000}, 5: {"spin_ns": 6_000_000}}
    history = make_history(tmp_path / "fx", n=6, steps=steps)
    out, stderr, _ = bisect(history, tmp_path)
    result = out["meta"]["result"]
    assert result["mode"] == "timing" and result["status"] == "found", out["probes"]
    assert [c["sha"] for c in out["culprits"]] == [history.shas[5], history.shas[2]], out["probes"]
    assert out["opposite_movers"] == []
    # commit 5 (about 2/3 of the delta) against its parent, then commit 2 unless 5 alone seemed to carry 80 %
    confirmed = [c["confirm"]["row"]["verdict"] for c in out["culprits"] if "confirm" in c]
    assert confirmed in (["slower"], ["slower", "slower"]), out["probes"]
    assert 30 < result["coverage"]["covered_pct"] < 150 and out["explained"] is True
    print(f"\ntiming, two steps: {result['probes']} probes, {result['wall_s']} s; {out['answer']}")
