"""Integration: ``teperf bisect`` on fixture histories, through the real CLI and real workers.

One history plants 5 Python calls per step in one commit of twenty (found by
counters, exactly, with a commit that does not import on the way: skipped);
one plants three counter changes, one of them with a busy-wait (each found by
counters, the busy-wait's commit named by time); one 60 cheap Python calls and
later a CPU-time spin (the spin named first by time); one two busy-waits at two
commits (both steps found, ranked by time). The figures are printed: pytest -s.
The spins are many times the step: what is tested is the search, not the
engine's precision; the load rule is off (--max-contended 100), as a verdict
under load is the calibration suite's concern.
"""

from __future__ import annotations

import json
import math

from conftest import run_cli
from gitfixture import HISTORY_CONFIG, make_history
from schedules import FORKED, schedule

# Small: a 1 ms spin is ~8x the step; what is tested is the search, not the engine's precision. Each
# compare's workers fork from a server per side (FORKED: 2 torch imports a compare, not 6); that a forked
# worker imports its own commit's tree is test_a_forked_probe_counts_what_a_fresh_worker_counts's.
SCHEDULE = [
    *schedule(2, 5, 3, processes=3),
    *FORKED,
    *("--max-contended", "100"),
]


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
    out, stderr, env = bisect(history, tmp_path, "--no-confirm")
    meta, result = out["meta"], out["meta"]["result"]
    assert (
        "counters: 5 probes per change point (ceil(log2 20))" in stderr
        and "tier per commit: path 20" in stderr
    )
    # the sides' story (what differs between two commits) goes to sides.log, not one per probe on stderr
    assert not [line for line in stderr.splitlines() if "file differs" in line or "files differ" in line]
    assert meta["kind"] == "bisect" and meta["status"] == "complete"
    assert result["mode"] == "counters" and result["status"] == "found"
    assert result["culprit"]["sha"] == history.culprit
    assert result["parent"]["sha"] == history.shas[12]
    assert result["moved_counters"] == ["python_calls"]
    culprit = out["culprits"][0]
    assert culprit["after"]["python_calls"] - culprit["before"]["python_calls"] == 5
    assert culprit["after"]["aten_ops"] == culprit["before"]["aten_ops"]
    again = [
        (p["role"], p["counters"]["python_calls"]) for p in out["probes"] if p["what"] == "counters again"
    ]
    calls = result["counters_good"]["python_calls"], result["counters_bad"]["python_calls"]
    assert again == [("GOOD", calls[0]), ("BAD", calls[1])]
    skipped = [p for p in out["probes"] if p["result"] == "skip"]
    assert [p["sha"] for p in skipped] == [history.shas[10]] and "NameError" in skipped[0]["detail"]
    assert [c["sha"] for c in out["culprits"]] == [history.culprit] and out["opposite_movers"] == []
    assert out["culprits"][0]["share"] == 1.0 and out["explained"] is True
    assert not [p for p in out["probes"] if p["what"] == "timing"]
    probe_s = result["counter_probe_s"]
    print(f"\ncounters bisect: {len(out['probes'])} probes, median {probe_s} s, {result['wall_s']} s")

    bundle = next((tmp_path / "results").iterdir())
    assert "differ" in (bundle / "sides.log").read_text()  # "1 file differs" / "N files differ"
    res = run_cli("report", bundle, "--format", "markdown", env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"{history.culprit[:7]}" in res.stdout and "100% of the counter change" in res.stdout


def test_time_finds_the_commit_that_adds_a_busy_wait(tmp_path):
    history = make_history(tmp_path / "fx", n=8, culprit=5, spin_ns=1_000_000)
    out, stderr, _ = bisect(history, tmp_path)
    result = out["meta"]["result"]
    assert result["mode"] == "time" and result["moved_counters"] == []
    assert result["status"] == "found" and result["culprit"]["sha"] == history.culprit, out["probes"]
    top = out["culprits"][0]
    assert top["verdict"] == "slower" and top["counters"] == {}  # the spin adds no Python call
    assert top["row"]["bundle"].startswith("compares/") and 0.5 < top["share"] < 1.5
    timed = [p for p in out["probes"] if p["what"] == "timing"]
    assert all(p["bundle"].startswith("compares/") for p in timed)
    assert len(timed) <= 1 + 2 * math.ceil(math.log2(8)) + 2  # two measured again at most
    print(f"\ntime bisect: {len(timed)} compares, {result['wall_s']} s; {out['answer']}")


def test_counters_name_every_change_point_and_time_names_the_costly_one(tmp_path):
    # Python calls: +4 at 3, -2 at 6, +10 at 9 (with a 1 ms busy-wait, so that time moves with it)
    steps = {3: {"extra_calls": 4}, 6: {"extra_calls": 2}, 9: {"extra_calls": 12, "spin_ns": 1_000_000}}
    history = make_history(tmp_path / "fx", n=12, steps=steps)
    out, stderr, _ = bisect(history, tmp_path)
    result = out["meta"]["result"]
    assert result["mode"] == "time" and result["status"] == "found"
    assert [(c["sha"], c["deltas"]["python_calls"]) for c in result["counter_changes"]] == [
        (history.shas[9], 10),
        (history.shas[3], 4),
        (history.shas[6], -2),
    ]
    assert [c["sha"] for c in out["culprits"]] == [history.shas[9]], out["probes"]
    assert out["culprits"][0]["counters"]["python_calls"] == 10
    assert out["explained"] is True
    print(f"\nthree counter changes: {result['probes']} compares, {result['wall_s']} s; {out['answer']}")


def test_a_spin_is_named_before_a_commit_of_cheap_python_calls(tmp_path):
    """The bisect-by-time issue's case: 60 cheap calls at commit 2, then a 1 ms CPU-time spin at 6."""
    steps = {2: {"extra_calls": 60}, 6: {"spin_ns": 1_000_000}}
    history = make_history(tmp_path / "fx", n=8, steps=steps)
    out, stderr, _ = bisect(history, tmp_path)
    result = out["meta"]["result"]
    assert [c["sha"] for c in result["counter_changes"]] == [history.shas[2]]  # calls moved only there
    assert out["culprits"][0]["sha"] == history.shas[6], out["probes"]
    assert out["culprits"][0]["counters"] == {} and out["culprits"][0]["share"] > 0.5
    print(f"\ncalls, then a spin: {result['probes']} compares, {result['wall_s']} s; {out['answer']}")


def test_time_finds_two_busy_wait_steps(tmp_path):
    steps = {2: {"spin_ns": 500_000}, 5: {"spin_ns": 1_500_000}}  # +0.5 ms, then +1 ms
    history = make_history(tmp_path / "fx", n=6, steps=steps)
    out, stderr, _ = bisect(history, tmp_path)
    result = out["meta"]["result"]
    assert result["mode"] == "time" and result["status"] == "found", out["probes"]
    assert [c["sha"] for c in out["culprits"]] == [history.shas[5], history.shas[2]], out["probes"]
    assert out["opposite_movers"] == [] and out["explained"] is True
    shares = [c["share"] for c in out["culprits"]]
    assert shares[0] > shares[1] > 0.1 and 0.7 < sum(shares) < 1.3
    print(f"\ntime, two steps: {result['probes']} compares, {result['wall_s']} s; {out['answer']}")


def test_a_forked_probe_counts_what_a_fresh_worker_counts(tmp_path, monkeypatch):
    """Counter probes fork from a server that imported torch and the package's dependencies, never the
    package itself: each commit's fork imports its own tree and counts what a fresh worker counts."""
    from teperf.bisect.plan import find_cell
    from teperf.bisect.sides import GitSideFactory
    from teperf.config import load_config
    from teperf.engine.probe import ForkedProbes, count_case
    from teperf.options import SideOptions

    history = make_history(tmp_path / "fx", n=4, culprit=2, extra_calls=7)
    (tmp_path / "bisect.toml").write_text(HISTORY_CONFIG)
    monkeypatch.setenv("PYTHONPATH", str(history.site))
    config = load_config(str(tmp_path / "bisect.toml"))
    case = find_cell(config, "MLP/fp32")
    factory = GitSideFactory(SideOptions(repo=str(history.repo), package="mypkg"), log=lambda line: None)
    good, bad = factory.sides(history.shas[0], history.shas[4])
    probes = ForkedProbes(config, [case], tmp_path / "workers")
    try:
        forked = [
            probes.count(side, case, tmp_path / "workers" / f"{side.label}.log") for side in (good, bad)
        ]
        (server,) = probes.servers.values()
        assert server is not None and server.alive() and not probes.failed
    finally:
        probes.close()
    fresh = [count_case(config, side, case, tmp_path / f"fresh-{side.label}.log") for side in (good, bad)]
    assert forked == fresh
    assert forked[1]["python_calls"] - forked[0]["python_calls"] == 7
