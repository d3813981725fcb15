"""teperf bisect without workers: the search, the range checks, bad input through the CLI."""

from __future__ import annotations

import pytest
from conftest import run_cli
from gitfixture import HISTORY_CONFIG, make_history

from teperf.bisect import search
from teperf.bisect.runner import resolve_range
from teperf.errors import TeperfError
from teperf.records import ProbeRecord


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 20, 76])
def test_search_finds_every_culprit_within_ceil_log2_probes(n):
    for culprit in range(1, n + 1):
        judged = []

        def judge(i, judged=judged, culprit=culprit):
            judged.append(i)
            return "bad" if i >= culprit else "good"

        bracket = search.search(n, judge)
        assert bracket.found and bracket.bad == culprit and bracket.good == culprit - 1
        assert len(judged) == len(bracket.probed) <= search.expected_probes(n)


def test_search_skips_unmeasurable_commits_and_tries_a_neighbour():
    n, culprit, broken = 20, 13, {10, 11}
    judged = []

    def judge(i):
        judged.append(i)
        return "skip" if i in broken else ("bad" if i >= culprit else "good")

    bracket = search.search(n, judge)
    assert bracket.found and bracket.bad == culprit
    # the middle, skipped: its nearest neighbour (lower first), then the new middle
    assert judged[:3] == [10, 9, 14]
    assert len(judged) <= search.expected_probes(n) + len(broken)


def test_search_reports_the_bracket_when_every_commit_between_is_skipped_or_undecided():
    bracket = search.search(4, lambda i: "skip")
    assert bracket.status == "skipped" and (bracket.good, bracket.bad) == (0, 4)
    bracket = search.search(8, lambda i: "good" if i <= 4 else "undecided")
    assert bracket.status == "undecided" and bracket.good == 4 and bracket.bad == 8
    with pytest.raises(ValueError):
        search.search(4, lambda i: "maybe")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    root = tmp_path_factory.mktemp("bisect")
    (root / "bisect.toml").write_text(HISTORY_CONFIG)
    return make_history(root, n=6, culprit=3, extra_calls=2)


def test_range_is_the_first_parent_history(history):
    rng = resolve_range("good..bad", str(history.repo))
    assert [c.sha for c in rng.commits] == history.shas[1:]  # the merged side branches' commits are not in it
    assert rng.good.sha == history.shas[0] and rng.bad.sha == history.shas[-1] and rng.bad.ref == "bad"


@pytest.mark.parametrize(
    "spec, words",
    [
        ("bad..good", "is not an ancestor of"),
        ("good..good", "the range is empty"),
        ("good...bad", "needs GOOD..BAD"),
        ("good..nope", "does not name a commit"),
    ],
)
def test_bad_ranges_are_one_line_errors(history, spec, words):
    with pytest.raises(TeperfError, match=words):
        resolve_range(spec, str(history.repo))


def test_a_side_branch_commit_as_good_is_refused(history):
    with pytest.raises(TeperfError, match="first-parent history"):
        resolve_range("side4..bad", str(history.repo))


@pytest.mark.parametrize(
    "args, words",
    [
        (["bad..good", "--cell", "MLP/fp32"], "is not an ancestor of"),
        (["good..good", "--cell", "MLP/fp32"], "the range is empty"),
        (["good..bad", "--cell", "Attention/fp32"], "no cell 'Attention/fp32'"),
        (["good..bad", "--cell", "MLP/fp32", "--budget", "0"], "must be a positive duration"),
    ],
)
def test_bad_input_exits_2_with_one_line(history, tmp_path, args, words):
    res = run_cli(
        "bisect",
        *args,
        "--repo",
        history.repo,
        "--package",
        "mypkg",
        "--config",
        history.repo.parent / "bisect.toml",
        "--results-dir",
        tmp_path / "r",
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], res.stderr
    assert not (tmp_path / "r").exists()  # nothing measured, no bundle


# ---------------------------------------------------------- the timing search, with synthetic compares


def _run_fake(tmp_path, monkeypatch, delta_of, budget_s=100.0):
    """A Bisector over 8 fake commits whose counters never differ and whose compare against GOOD gives
    delta_of(head index) -> (delta %, CI low %, CI high %) or None (the commit does not build)."""
    from teperf.bisect.runner import Bisector, Range
    from teperf.bisect.sides import Commit, ProbeSkipped
    from teperf.bundle import Bundle
    from teperf.config import build_config
    from teperf.engine import probe
    from teperf.plan import expand
    from teperf.sides import Side

    commits = [
        Commit(
            sha=f"{i:040x}", short_sha=f"{i:07x}", subject=f"commit {i}", date="2026-11-30T00:00:00", ref=""
        )
        for i in range(9)
    ]
    rng = Range(repo=tmp_path, good=commits[0], bad=commits[8], commits=commits[1:])
    config = build_config({"modules": ["Linear"]}, {"processes": 2})

    class Factory:
        def sides(self, base_sha, head_sha):
            if delta_of(int(head_sha, 16)) is None:
                raise ProbeSkipped("build failed (planted)")
            return Side("base", "python3"), Side("head", "python3")

        def tier(self, base_sha, head_sha):
            return "overlay"

    class Fake(Bisector):
        now = 0.0

        def compare(self, base, head, config, bounded=True):
            self.factory.sides(self.rng.at(base).sha, self.rng.at(head).sha)
            self.now += 5.0 * config.schedule.processes  # what the compare took
            delta, low, high = delta_of(head)
            verdict = "slower" if low > 0 else ("no change" if high - low < 20 else "noisy")
            return {
                "status": "ok",
                "delta_pct": delta,
                "ci_low_pct": low,
                "ci_high_pct": high,
                "verdict": verdict,
            }, self.bundle.path / "compares" / f"c{head}"

    bundle = Bundle.create(tmp_path / "results", "bisect", {"kind": "bisect", "commits": [], "plan": {}})
    monkeypatch.setattr(probe, "count_case", lambda *a, **k: {"python_calls": 10, "aten_ops": 5})
    try:
        fake = Fake(
            config,
            rng,
            expand(config)[0],
            Factory(),
            bundle,
            budget_s=budget_s,
            confirm=False,
            log=lambda line: None,
        )
        fake.clock = lambda: fake.now  # seconds pass as compares run, and only then
        result = fake.run()
    finally:
        bundle.close()
    return result, [r.to_dict() for r in bundle.records() if isinstance(r, ProbeRecord)]


def test_timing_search_decides_from_the_interval_against_half_the_delta(tmp_path, monkeypatch):
    result, probes = _run_fake(
        tmp_path, monkeypatch, lambda i: (100.0, 90.0, 110.0) if i >= 5 else (1.0, -4.0, 6.0)
    )
    assert result["mode"] == "timing" and result["status"] == "found"
    assert result["culprit"]["short_sha"] == "0000005"
    assert result["endpoint"]["threshold_pct"] == 50.0
    assert [p["index"] for p in probes if p["what"] == "timing"] == [8, 4, 6, 5]


def test_timing_search_skips_a_commit_that_does_not_build(tmp_path, monkeypatch):
    def history(culprit):
        return lambda i: None if i == 4 else ((100.0, 90.0, 110.0) if i >= culprit else (1.0, -4.0, 6.0))

    result, probes = _run_fake(tmp_path / "a", monkeypatch, history(6))
    assert result["status"] == "found" and result["culprit"]["short_sha"] == "0000006"
    assert [(p["index"], p["result"]) for p in probes if p["what"] == "timing"][1:] == [
        (4, "skip"),
        (3, "good"),
        (5, "good"),
        (6, "bad"),
    ]
    # the culprit next to the commit that does not build: git bisect's answer, one of the two
    result, _ = _run_fake(tmp_path / "b", monkeypatch, history(5))
    assert result["status"] == "skipped"
    assert [c["short_sha"] for c in result["candidates"]] == ["0000004", "0000005"]


def test_an_undecided_probe_is_measured_again_then_stops_with_the_bracket(tmp_path, monkeypatch):
    from teperf.bisect.report import headline

    straddles = (50.0, 20.0, 80.0)  # across the line at half of GOOD..BAD's +100 %
    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        lambda i: straddles if i == 4 else ((100.0, 90.0, 110.0) if i >= 5 else (1.0, -4.0, 6.0)),
        budget_s=45.0,
    )
    assert result["status"] == "undecided" and (result["good_index"], result["bad_index"]) == (0, 8)
    fours = [p for p in probes if p["index"] == 4]
    assert [(p["result"], p["processes"]) for p in fours] == [("undecided", 2), ("undecided", 4)]
    lines = headline({"result": result, "status": "complete", "good": {}, "bad": {}, "plan": {}})
    assert any("not narrowed to one commit" in line and "within --budget" in line for line in lines), lines


def test_no_change_between_good_and_bad_ends_the_run(tmp_path, monkeypatch):
    result, probes = _run_fake(tmp_path / "a", monkeypatch, lambda i: (0.5, -3.0, 4.0))
    assert result["status"] == "no change" and result["probes"] == 0
    assert [p["index"] for p in probes if p["what"] == "timing"] == [8]
    # an interval that can tell nothing, however many pairs: measured again while the budget lasts, then stop
    result, probes = _run_fake(tmp_path / "b", monkeypatch, lambda i: (5.0, -30.0, 40.0), budget_s=60.0)
    assert result["status"] == "inconclusive" and result["probes"] == 0
    assert [p["processes"] for p in probes if p["what"] == "timing"] == [2, 4]


def test_plan_counts_one_build_per_distinct_set_of_compiled_inputs():
    """Only a commit that changes compiled inputs against its parent starts a new build; the others reuse it."""
    from teperf.bisect.runner import Range, distinct_builds, make_plan
    from teperf.bisect.sides import Commit
    from teperf.config import build_config

    commits = [
        Commit(sha=f"{i:040x}", short_sha=f"{i:07x}", subject=f"commit {i}", date="", ref="")
        for i in range(9)
    ]
    csrc = {3, 6}  # these commits change the extension's C++; the others only .py files

    class Factory:
        def tier(self, base_sha, head_sha):
            base, head = int(base_sha, 16), int(head_sha, 16)
            return "extension" if any(base < c <= head for c in csrc) else "overlay"

    rng = Range(repo=".", good=commits[0], bad=commits[8], commits=commits[1:])
    assert distinct_builds(rng, Factory()) == 3  # GOOD's, then one from commit 3, one from commit 6
    config = build_config({"modules": ["Linear"]}, {"processes": 2})
    plan = make_plan(rng, Factory(), config)
    assert plan["expected_probes"] == 3 and plan["builds"] == 3
    csrc.update(range(1, 9))  # every commit changes the C++: each side GOOD, BAD and 3 probes is built
    assert make_plan(rng, Factory(), config)["builds"] == 5
