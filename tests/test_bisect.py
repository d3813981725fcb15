"""teperf bisect without workers: the search, the range checks, bad input through the CLI."""

from __future__ import annotations

import json

import pytest
from conftest import one_error, run_cli, run_in_process
from gitfixture import HISTORY_CONFIG, make_history

from teperf.bisect import search
from teperf.bisect.plan import resolve_range
from teperf.errors import TeperfError
from teperf.records import ProbeRecord


def _probe_of(value_of):
    """A probe over planted values: which of (lo, i) and (i, hi) have different ends."""

    def probe(i, lo, hi):
        v = value_of(i)
        if v in ("skip", "undecided"):
            return v
        return value_of(lo) != v, v != value_of(hi)

    return probe


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 20, 76])
def test_one_change_is_found_within_ceil_log2_probes(n):
    for culprit in range(1, n + 1):
        changes = search.find_changes(n, _probe_of(lambda i, c=culprit: i >= c))
        assert [(s.good, s.bad, s.status) for s in changes.segments] == [(culprit - 1, culprit, "found")]
        assert len(changes.probed) <= search.expected_probes(n)


@pytest.mark.parametrize(
    "n, steps",
    [
        (20, {3: 5, 9: 2, 15: 30}),  # up, down, up
        (76, {1: 4, 2: 9, 40: 1, 75: 7, 76: 8}),  # neighbours, and the last commit
        (439, {57: 436, 130: 430, 201: 448, 330: 516, 400: 627}),  # x-transformers' counters, roughly
    ],
)
def test_every_change_point_is_found_in_about_k_log2_n_probes(n, steps):
    changes = search.find_changes(n, _probe_of(_steps(0, steps)))
    assert all(s.found for s in changes.segments)
    assert [s.bad for s in changes.segments] == sorted(steps)
    assert len(changes.probed) <= len(steps) * search.expected_probes(n)
    assert len(set(changes.probed)) == len(changes.probed)  # no commit probed twice


def test_a_change_that_a_later_one_undoes_inside_one_segment_is_not_looked_for():
    # +1 at 2, -1 at 3: the segment (0, 4) has equal ends on its left half after the first split
    changes = search.find_changes(8, _probe_of(lambda i: (1 if 2 <= i < 3 else 0) + (5 if i >= 7 else 0)))
    assert [s.bad for s in changes.segments] == [7]


def test_search_skips_unmeasurable_commits_and_tries_a_neighbour():
    n, culprit, broken = 20, 13, {10, 11}
    judged = []

    def value(i):
        judged.append(i)
        return "skip" if i in broken else i >= culprit

    changes = search.find_changes(n, _probe_of(lambda i: value(i) if 0 < i < n else i >= culprit))
    assert [(s.bad, s.status) for s in changes.segments] == [(culprit, "found")]
    # the middle, skipped: its nearest neighbour (lower first), then the new middle
    assert judged[:3] == [10, 9, 14]
    assert len(changes.probed) <= search.expected_probes(n) + len(broken)


def test_search_reports_the_segments_left_when_commits_are_skipped_or_undecided():
    changes = search.find_changes(4, lambda i, lo, hi: "skip")
    assert [(s.good, s.bad, s.status) for s in changes.segments] == [(0, 4, "skipped")]
    changes = search.find_changes(8, _probe_of(lambda i: i > 4 if i <= 4 or i == 8 else "undecided"))
    assert [(s.good, s.bad, s.status) for s in changes.segments] == [(4, 8, "undecided")]
    # one change found, another left: both reported, in index order
    changes = search.find_changes(8, _probe_of(lambda i: "skip" if i in (5, 6) else (i >= 2) + (i >= 6) * 10))
    assert [(s.good, s.bad, s.status) for s in changes.segments] == [(1, 2, "found"), (4, 7, "skipped")]
    with pytest.raises(ValueError):
        search.find_changes(4, lambda i, lo, hi: "maybe")


def test_attribution_orders_culprits_by_share_and_lists_opposite_movers_apart():
    from teperf.bisect.attribute import attribute

    calls = {0: 411, 3: 436, 4: 430, 7: 448, 8: 516, 9: 627}  # measured at the change points' ends
    aten = {0: 50, 3: 50, 4: 50, 7: 56, 8: 56, 9: 56}
    segments = [search.Segment(lo, hi, "found") for lo, hi in ((0, 3), (3, 4), (4, 7), (7, 8), (8, 9))]
    # (0, 3) is not one commit: a segment left undecided
    segments[0] = search.Segment(0, 3, "undecided")
    out = attribute(
        segments,
        lambda i: {"python_calls": calls[i], "aten_ops": aten[i]},
        ["python_calls", "aten_ops"],
        lambda i: {"short_sha": f"c{i}", "subject": f"commit {i}", "date": "", "sha": f"c{i}"},
        9,
    )
    assert out["totals"] == {"python_calls": 216, "aten_ops": 6}
    assert [(e["short_sha"], e["deltas"].get("python_calls")) for e in out["culprits"]] == [
        ("c9", 111),
        ("c8", 68),
        ("c7", 18),
    ]
    assert out["culprits"][0]["share"] == round(111 / 216, 4)
    assert out["culprits"][2]["shares"]["aten_ops"] == 1.0
    assert [(e["short_sha"], e["share"]) for e in out["opposite"]] == [("c4", round(-6 / 216, 4))]
    assert [(u["status"], [c["short_sha"] for c in u["candidates"]]) for u in out["unresolved"]] == [
        ("undecided", ["c1", "c2", "c3"])
    ]
    # equal shares of the first key: the next key breaks the tie
    calls.update({3: 421, 4: 431})  # c3 and c4: +10 Python calls each
    aten.update({3: 51, 4: 53})  # c3 +1, c4 +2 ATen ops
    out = attribute(
        [search.Segment(2, 3, "found"), search.Segment(3, 4, "found")],
        lambda i: {"python_calls": calls.get(i, 411), "aten_ops": aten.get(i, 50)},
        ["python_calls", "aten_ops"],
        lambda i: {"short_sha": f"c{i}", "subject": "", "date": "", "sha": f"c{i}"},
        4,
    )
    assert [e["short_sha"] for e in out["culprits"]] == ["c4", "c3"]


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


def test_reversed_and_diverged_ranges_get_the_fix_that_helps(history):
    # issue 59: both were told "(swap them?)", which cannot help diverged refs
    from gitfixture import git

    with pytest.raises(TeperfError) as info:
        resolve_range("bad..good", str(history.repo))
    assert info.value.fix == "swap them: teperf bisect good..bad"
    tree = git(history.repo, "rev-parse", "good^{tree}")
    off = git(history.repo, "commit-tree", tree, "-p", "good", "-m", "diverged")  # no ref, no checkout
    with pytest.raises(TeperfError) as info:
        resolve_range(f"{off}..bad", str(history.repo))
    assert "swap" not in info.value.fix and f"$(git merge-base {off} bad)..bad" in info.value.fix


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


# ---------------------------------------------------------- the run, with synthetic counters and compares


def _run_fake(
    tmp_path,
    monkeypatch,
    time_of,
    *,
    n=8,
    counters_of=None,
    half=lambda base, head, processes: 5.0,
    budget_s=1000.0,
    confirm=True,
    verdict_of=None,
    iters=100_000,
    row_of=None,
    same_code=None,
):
    """A Bisector over n fake commits: time_of(i) is commit i's step in us (None: it does not build),
        counters_of(i) its counters (default: the same everywhere), half(base, head, processes) the half-width
        of a compare's interval in us. A compare takes 5 s per pair of processes, on a fake clock. Trials of
    ``iters`` steps are already longer than MIN_TRIAL_S (no second GOOD..BAD) unless it is lowered.
    row_of(t_base, t_head): the compare's summary row instead of one made from ``half``.
    same_code(base, head): whether the two sides imported identical code (TimeSearch.compare's same_code)."""
    from teperf.bisect.runner import Bisector, Range
    from teperf.bisect.sides import ProbeSkipped
    from teperf.bisect.timing import PartRow, TimeSearch
    from teperf.bundle import Bundle
    from teperf.config import build_config
    from teperf.engine import probe
    from teperf.plan import expand
    from teperf.sides import Side
    from teperf.sides.gitrepo import Commit

    counters_of = counters_of or (lambda i: {"python_calls": 10, "aten_ops": 5})
    commits = [
        Commit(
            sha=f"{i:040x}", short_sha=f"{i:07x}", subject=f"commit {i}", date="2026-11-30T00:00:00", ref=""
        )
        for i in range(n + 1)
    ]
    rng = Range(repo=tmp_path, good=commits[0], bad=commits[n], commits=commits[1:])
    config = build_config({"modules": ["Linear"]}, {"processes": 2, "iters": iters})

    class Factory:
        def sides(self, base_sha, head_sha):
            base, head = int(base_sha, 16), int(head_sha, 16)
            if time_of(head) is None or time_of(base) is None:
                raise ProbeSkipped("build failed (planted)")
            return Side("base", "python3", description={"index": base}), Side(
                "head", "python3", description={"index": head}
            )

        def tier(self, base_sha, head_sha):
            return "overlay"

    clock = {"now": 0.0}

    class Fake(TimeSearch):
        def compare(self, base, head, config):
            self.probe.sides(base, head)
            clock["now"] += 5.0 * config.schedule.processes  # what the compare took
            t_base, t_head = time_of(base), time_of(head)
            delta = t_head - t_base
            w = half(base, head, config.schedule.processes)
            low, high = delta - w, delta + w
            verdict = "slower" if low > 0 else ("faster" if high < 0 else "inconclusive")
            cause = None
            if verdict_of is not None:
                verdict = verdict_of(base, head, verdict)
                if verdict.endswith(" (load)"):
                    verdict, cause = verdict.removesuffix(" (load)"), "load"
            row = {
                "status": "ok",
                "delta_pct": 100.0 * delta / t_base,
                "ci_low_pct": 100.0 * low / t_base,
                "ci_high_pct": 100.0 * high / t_base,
                "verdict": verdict,
                "verdict_cause": cause,
                "base_us": t_base,
                "head_us": t_head,
                "delta_us": delta,
                "ci_low_us": low,
                "ci_high_us": high,
            }
            if row_of is not None:
                row = row_of(t_base, t_head).to_dict()  # a probe's row: the summary's, as compare() keeps it
            if same_code is not None:
                row["same_code"] = same_code(base, head)
            return PartRow.from_dict(row), self.probe.bundle.path / "compares" / f"c{base}-{head}"

    bundle = Bundle.create(tmp_path / "results", "bisect", {"kind": "bisect", "commits": [], "plan": {}})
    monkeypatch.setattr(
        probe, "count_case", lambda config, side, *a, **k: dict(counters_of(side.description["index"]))
    )
    try:
        fake = Bisector(
            config,
            rng,
            expand(config)[0],
            Factory(),
            bundle,
            budget_s=budget_s,
            confirm=confirm,
            log=lambda line: None,
            times=Fake,
        )
        fake.probe.clock = lambda: clock["now"]  # seconds pass as compares run, and only then
        result = fake.run()
    finally:
        bundle.close()
    return result, [r.to_dict() for r in bundle.records() if isinstance(r, ProbeRecord)]


def _steps(start, steps):
    """i -> the value at commit i: ``start``, then each step's value from its commit on."""
    return lambda i: max([(at, v) for at, v in steps.items() if at <= i], default=(0, start))[1]


def _timed(probes):
    return [(p.get("base_index"), p["index"], p["result"]) for p in probes if p["what"] == "timing"]


def test_time_search_finds_one_step_by_halving_the_parts_that_moved(tmp_path, monkeypatch):
    result, probes = _run_fake(tmp_path, monkeypatch, _steps(100.0, {5: 200.0}))
    assert result["mode"] == "time" and result["status"] == "found"
    # GOOD..BAD, then both halves of each part that moved, down to commit 5 against its parent 4
    assert [(lo, hi, r) for lo, hi, r in _timed(probes)] == [
        (0, 8, "moved"),
        (0, 4, "quiet"),
        (4, 8, "moved"),
        (4, 6, "moved"),
        (6, 8, "quiet"),
        (4, 5, "moved"),
        (5, 6, "quiet"),
    ]
    assert [(e["short_sha"], e["share"], e["share_ci"]) for e in result["culprits"]] == [
        ("0000005", 1.0, [0.95, 1.05])
    ]
    assert result["culprit"]["short_sha"] == "0000005" and result["parent"]["short_sha"] == "0000004"
    assert result["culprits"][0]["counters"] == {}  # none moved: counted at 4 and 5
    assert result["rest"] == {"delta_us": 0.0, "share": 0.0} and result["steps_within_interval"] is True
    assert result["explained"] is True and result["answer"].startswith("explained: 1 commit(s) carry 100%")


def test_a_cheap_call_step_and_a_costly_spin_are_ranked_by_time_not_by_calls(tmp_path, monkeypatch):
    """Commit 2 adds 60 Python calls that cost 12 us, commit 6 a 150 us spin that moves no counter."""
    calls = _steps(100, {2: 160})
    time_of = _steps(500.0, {2: 512.0, 6: 662.0})
    result, probes = _run_fake(
        tmp_path, monkeypatch, time_of, counters_of=lambda i: {"python_calls": calls(i)}, half=lambda *a: 4.0
    )
    assert [e["short_sha"] for e in result["counter_changes"]] == ["0000002"]  # the counters' answer
    # the spin first with most of the change; the calls' 12 us are under the step size (10 % of 162 us)
    assert [(e["short_sha"], e["share"]) for e in result["culprits"]] == [("0000006", round(150 / 162, 4))]
    assert result["culprits"][0]["counters"] == {}  # the spin moved no counter
    assert result["rest"] == {"delta_us": 12.0, "share": round(12 / 162, 4)}


def test_a_step_below_the_step_size_is_left_in_the_rest(tmp_path, monkeypatch):
    # +3 us at 1 (under 10 % of GOOD..BAD's 103 us: not looked for), +30 at 3, +70 at 6
    result, probes = _run_fake(
        tmp_path, monkeypatch, _steps(100.0, {1: 103.0, 3: 133.0, 6: 203.0}), half=lambda *a: 2.0
    )
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006", "0000003"]
    assert [e["share"] for e in result["culprits"]] == [round(70 / 103, 4), round(30 / 103, 4)]
    assert result["rest"] == {"delta_us": 3.0, "share": round(1 - 100 / 103, 4)}
    assert result["steps_within_interval"] is False  # 100 us of steps, GOOD..BAD 103 +- 2
    from teperf.bisect.report import headline

    lines = headline({"result": result, "status": "complete", "good": {}, "bad": {}, "plan": {}})
    assert any(line.startswith("culprits by time, biggest share first (2):") for line in lines), lines
    assert any(line.startswith("unexplained: +3.0 us (3% of GOOD..BAD)") for line in lines), lines


def test_a_step_whose_own_verdict_is_inconclusive_carries_no_share(tmp_path, monkeypatch):
    # the compare of commit 6 against 5 has an interval clear of zero, but its verdict says inconclusive
    result, _ = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {3: 140.0, 6: 200.0}),
        verdict_of=lambda base, head, v: "inconclusive" if (base, head) == (5, 6) else v,
    )
    assert [e["short_sha"] for e in result["culprits"]] == ["0000003"]
    assert [e["short_sha"] for e in result["unconfirmed"]] == ["0000006"]
    assert result["rest"]["delta_us"] == 60.0 and result["rest"]["share"] == 0.6


def test_a_step_under_load_is_measured_again_and_confirmed_once_the_load_passes(tmp_path, monkeypatch):
    loaded = {"left": 1}  # the first compare of commit 6 against 5 ran on a contended core

    def verdict_of(base, head, v):
        if (base, head) == (5, 6) and loaded["left"]:
            loaded["left"] -= 1
            return "inconclusive (load)"
        return v

    result, probes = _run_fake(tmp_path, monkeypatch, _steps(100.0, {6: 200.0}), verdict_of=verdict_of)
    assert [(lo, hi, r) for lo, hi, r in _timed(probes) if (lo, hi) == (5, 6)] == [
        (5, 6, "undecided"),
        (5, 6, "moved"),
    ]
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006"]


def test_a_step_still_under_load_stays_a_step_without_a_share(tmp_path, monkeypatch):
    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {6: 200.0}),
        verdict_of=lambda base, head, v: "inconclusive (load)" if (base, head) == (5, 6) else v,
    )
    assert len([1 for lo, hi, _ in _timed(probes) if (lo, hi) == (5, 6)]) == 3  # 1x, 2x, 4x the pairs
    assert not result["culprits"] and [e["short_sha"] for e in result["unconfirmed"]] == ["0000006"]


def test_a_bisect_on_a_busy_machine_names_the_38_pct_commit_with_its_share(tmp_path, monkeypatch):
    """Issue 43: every compare's couples all shared their core (a hog on it, both sides alike); each row is
    the summary's of a seeded bundle, so the load rule is the one compare and nightly apply."""
    from test_load import _busy

    from teperf.summary import summarize

    made = iter(range(1000))

    def row_of(t_base, t_head):
        path = _busy(tmp_path / f"c{next(made)}", change=t_head / t_base, level=t_base, pairs=12).path
        row = summarize(path).rows[0]
        assert row.contended_pct == 100 and row.load_bound_pct is not None
        return row

    result, probes = _run_fake(tmp_path, monkeypatch, _steps(170.0, {6: 234.6}), n=10, row_of=row_of)
    assert [(lo, hi) for lo, hi, r in _timed(probes) if r == "moved"][-1] == (5, 6)
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006"] and not result["unconfirmed"]
    assert result["culprits"][0]["verdict"] == "slower"
    assert result["culprits"][0]["share"] == pytest.approx(1.0, abs=0.05)
    assert result["explained"] is True
    assert all("(load: 100% contended, bias up to " in p["detail"] for p in probes if p["what"] == "timing")
    from teperf.bisect.conclude import endpoint_text  # the answer's GOOD..BAD line says the load too

    assert "slower (load: 100% contended, bias up to " in endpoint_text(result["endpoint"])
    lines, _ = _report(result, tmp_path)
    assert "  GOOD..BAD read under load: the shares rest on that reading" in lines, lines


def test_a_step_the_other_way_is_an_opposite_mover(tmp_path, monkeypatch):
    result, _ = _run_fake(tmp_path, monkeypatch, _steps(100.0, {2: 200.0, 7: 160.0}))
    assert [(e["short_sha"], e["share"]) for e in result["culprits"]] == [("0000002", round(100 / 60, 4))]
    assert [(e["short_sha"], e["share"]) for e in result["opposite_movers"]] == [
        ("0000007", round(-40 / 60, 4))
    ]
    assert result["rest"]["delta_us"] == 0.0 and "1 moved the other way" in result["answer"]


def test_time_search_skips_a_commit_that_does_not_build(tmp_path, monkeypatch):
    def history(culprit):
        step = _steps(100.0, {culprit: 200.0})
        return lambda i: None if i == 4 else step(i)

    result, probes = _run_fake(tmp_path / "a", monkeypatch, history(6))
    assert result["status"] == "found" and result["culprit"]["short_sha"] == "0000006"
    assert (0, 4, "skip") in _timed(probes) and (3, 8, "moved") in _timed(probes)
    # the culprit next to the commit that does not build: git bisect's answer, one of the two
    result, _ = _run_fake(tmp_path / "b", monkeypatch, history(5))
    assert result["status"] == "undecided" and result["explained"] is False
    assert [c["short_sha"] for c in result["unresolved"][0]["candidates"]] == ["0000004", "0000005"]


def test_an_undecided_part_is_measured_again_with_twice_the_pairs(tmp_path, monkeypatch):
    # 0..4 holds +40 of GOOD..BAD's +100 us; first measured +-60, then +-30 with twice the pairs
    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {3: 140.0, 6: 200.0}),
        half=lambda base, head, processes: (120.0 / processes) if (base, head) == (0, 4) else 5.0,
    )
    fours = [(p["result"], p["processes"]) for p in probes if p["what"] == "timing" and p["index"] == 4]
    assert fours[:2] == [("undecided", 2), ("moved", 4)]
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006", "0000003"]


def test_budget_ends_the_search_with_what_is_known(tmp_path, monkeypatch):
    from teperf.bisect.report import headline

    # each compare takes 10 s on the fake clock; 35 s: GOOD..BAD and one pair of halves
    result, probes = _run_fake(tmp_path, monkeypatch, _steps(100.0, {5: 200.0}), budget_s=35.0)
    assert len(_timed(probes)) == 3
    assert result["status"] == "undecided" and result["unresolved"][0]["status"] == "budget"
    assert (result["unresolved"][0]["good_index"], result["unresolved"][0]["bad_index"]) == (4, 8)
    lines = headline({"result": result, "status": "complete", "good": {}, "bad": {}, "plan": {}})
    assert any(
        "not narrowed to one commit (+100.0 us [" in line and "--budget was spent" in line for line in lines
    )


def test_no_change_between_good_and_bad_ends_the_run(tmp_path, monkeypatch):
    result, probes = _run_fake(
        tmp_path / "a", monkeypatch, lambda i: 100.0, verdict_of=lambda b, h, v: "no change"
    )
    assert result["status"] == "no change" and result["probes"] == 1 and result["explained"] is None
    # an interval that can tell nothing, however many pairs: measured again while the budget lasts, then stop
    result, probes = _run_fake(
        tmp_path / "b",
        monkeypatch,
        _steps(100.0, {8: 105.0}),
        half=lambda *a: 35.0,
        budget_s=60.0,
    )
    assert result["status"] == "inconclusive" and result["explained"] is False
    assert [p["processes"] for p in probes if p["what"] == "timing"] == [2, 4]


def _calls(steps):
    calls = _steps(100, steps)
    return lambda i: {"python_calls": calls(i), "aten_ops": 40 + (i >= 7)}


def test_no_confirm_names_the_commits_that_moved_the_counters(tmp_path, monkeypatch):
    # Python calls: +5 at 2, -2 at 5, +10 at 7 (GOOD 100, BAD 113)
    counters_of = _calls({2: 105, 5: 103, 7: 113})
    result, probes = _run_fake(tmp_path, monkeypatch, lambda i: 100.0, counters_of=counters_of, confirm=False)
    assert result["mode"] == "counters" and result["status"] == "found"
    assert result["moved_counters"] == ["aten_ops", "python_calls"]
    assert [(e["short_sha"], e["deltas"]) for e in result["culprits"]] == [
        ("0000007", {"python_calls": 10, "aten_ops": 1}),
        ("0000002", {"python_calls": 5}),
    ]
    assert [e["share"] for e in result["culprits"]] == [round(10 / 13, 4), round(5 / 13, 4)]
    assert [(e["short_sha"], e["share"]) for e in result["opposite_movers"]] == [
        ("0000005", round(-2 / 13, 4))
    ]
    assert not [p for p in probes if p["what"] == "timing"]  # no time measured
    assert result["answer"].startswith("explained by counters (no time measured)")


def test_counters_and_time_both_answer(tmp_path, monkeypatch):
    counters_of = _calls({2: 105, 5: 103, 7: 113})
    time_of = lambda i: 100.0 + 10 * (counters_of(i)["python_calls"] - 100)  # noqa: E731
    result, probes = _run_fake(tmp_path, monkeypatch, time_of, counters_of=counters_of, half=lambda *a: 3.0)
    assert [e["short_sha"] for e in result["counter_changes"]] == ["0000007", "0000002", "0000005"]
    assert [(e["short_sha"], e["share"]) for e in result["culprits"]] == [
        ("0000007", round(100 / 130, 4)),
        ("0000002", round(50 / 130, 4)),
    ]
    assert [(e["short_sha"], e["share"]) for e in result["opposite_movers"]] == [
        ("0000005", round(-20 / 130, 4))
    ]
    assert result["culprits"][0]["counters"] == {"python_calls": 10, "aten_ops": 1}


def test_only_opposite_movers_is_unexplained():
    from teperf.bisect.conclude import conclude

    mover = {"short_sha": "abc", "share": -1.0, "deltas": {"python_calls": -6}}
    result = conclude(
        {
            "mode": "counters",
            "status": "partial",
            "totals": {"python_calls": 12},
            "culprits": [],
            "opposite_movers": [mover],
            "unresolved": [{"status": "undecided", "direction": 1, "candidates": []}],
        }
    )
    assert result["explained"] is False
    assert result["answer"].startswith("unexplained: every commit found moved the other way (1)")


_COMMIT = {"subject": "a commit", "date": "2026-11-30"}
_MOVER = {**_COMMIT, "short_sha": "0000007", "index": 7, "share": 1.0, "deltas": {"python_calls": 7}}
_STEP = {**_COMMIT, "short_sha": "0000005", "index": 5, "share": 0.9, "delta_us": 90.0}
_MOVED = {"delta_us": 100.0, "delta_pct": 10.0, "verdict": "slower"}


@pytest.mark.parametrize(
    "result, code, words",
    [
        (
            {
                "status": "found",
                "endpoint": _MOVED,
                "culprits": [_STEP],
                "rest": {"share": 0.1, "delta_us": 10},
            },
            0,
            None,
        ),
        ({"status": "inconclusive"}, 1, "unexplained: whether GOOD..BAD changed"),
        ({"status": "inconclusive", "counter_changes": [_MOVER]}, 3, "counters moved, time undecided"),
        ({"status": "no change"}, 4, "no change: GOOD..BAD is no change in time and no counter differs"),
        ({"status": "no change", "counter_changes": [_MOVER]}, 4, "counters moved at 1 commit(s)"),
    ],
)
def test_each_answer_has_its_exit_status(tmp_path, monkeypatch, capsys, result, code, words):
    from conftest import run_in_process

    from teperf.bisect import conclude, runner
    from teperf.bundle import Bundle

    def fake_bisect(config, spec, cell, **kwargs):
        bundle = Bundle.create(tmp_path / "r", "bisect", {"kind": "bisect", "commits": [], "plan": {}})
        bundle.close()
        bundle.update_meta(status="complete", result=conclude.conclude(dict(result, mode="time", probes=0)))
        return bundle.path

    monkeypatch.setattr(runner, "bisect", fake_bisect)
    config = tmp_path / "c.toml"
    config.write_text(HISTORY_CONFIG)
    args = ["bisect", "good..bad", "--cell", "MLP/fp32", "--config", str(config)]
    got, out, err = run_in_process(args, capsys)
    assert got == code, err
    if words:  # not explained: the answer is the last line on stderr too
        assert err.strip().splitlines()[-1].startswith("teperf bisect: ") and words in err, err
    code, out, err = run_in_process([*args, "--format", "json"], capsys)
    assert json.loads(out)["exit_code"] == got


def test_help_lists_the_exit_statuses(capsys):
    from conftest import run_in_process

    code, out, _ = run_in_process(["bisect", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0
    for words in (
        "0 explained",
        "1 unexplained",
        "2 bad input",
        "3 counters moved but time undecided",
        "4 nothing moved",
    ):
        assert words in text, text


def test_never_explained_while_most_is_unexplained_or_parts_undecided():
    """The x-transformers answer: one culprit with 21 %, 79 % unexplained, parts undecided: not exit 0."""
    from teperf.bisect.conclude import conclude

    base = {"mode": "time", "status": "partial", "endpoint": _MOVED, "rest": {"share": 0.79, "delta_us": 79}}
    part = {"status": "undecided", "good_index": 3, "bad_index": 4, "candidates": [{"short_sha": "0000004"}]}
    small = conclude(dict(base, culprits=[dict(_STEP, share=0.21)], unresolved=[part] * 5))
    assert small["exit_code"] == 1 and not small["answer"].startswith("explained")
    assert "carry only 21%" in small["answer"] and "5 part(s) undecided" in small["answer"]
    moved = conclude(
        dict(base, culprits=[dict(_STEP, share=0.21)], unresolved=[part], counter_changes=[_MOVER])
    )
    assert moved["outcome"] == "counters" and moved["exit_code"] == 3
    # most carried, but a part left undecided: still not "explained"
    most = conclude(dict(base, culprits=[_STEP], unresolved=[part], rest={"share": 0.1, "delta_us": 10}))
    assert most["exit_code"] == 1


def test_a_one_commit_part_has_no_halves_and_good_to_bad_keeps_its_load_qualifier():
    from teperf.bisect.conclude import conclude
    from teperf.bisect.report import headline

    loaded = dict(
        _MOVED, verdict="inconclusive", verdict_cause="load", n_pairs=6, ci_low_us=-10, ci_high_us=210
    )
    part = {
        "status": "undecided",
        "good_index": 3,
        "bad_index": 4,
        "candidates": [{"short_sha": "0000004"}],
        "row": {
            "delta_us": 5.0,
            "delta_pct": 0.5,
            "ci_low_us": -9,
            "ci_high_us": 19,
            "verdict": "inconclusive",
        },
    }
    result = conclude({"mode": "time", "status": "inconclusive", "endpoint": loaded, "unresolved": [part]})
    assert "inconclusive (load) at 6 pairs" in result["answer"]
    lines = headline({"result": result, "status": "complete", "good": {}, "bad": {}, "plan": {}})
    assert any(
        "+100.0 us [-10.0, +210.0] (+10.0%) inconclusive (load) at 6 pairs" in line for line in lines
    ), lines
    (line,) = [line for line in lines if line.startswith("0000004")]
    assert "one commit, not told against its parent" in line and "halves" not in line


def test_plan_counts_one_build_per_distinct_set_of_compiled_inputs():
    """Only a commit that changes compiled inputs against its parent starts a new build; the others reuse
    it."""
    from teperf.bisect.plan import Range, distinct_builds, make_plan
    from teperf.config import build_config
    from teperf.sides.gitrepo import Commit

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
    assert plan["seconds_basis"] == "TE" and plan["side_s"] == 90.0  # a factory without figures: TE's
    csrc.update(range(1, 9))  # every commit changes the C++: each side GOOD, BAD and 3 probes is built
    assert make_plan(rng, Factory(), config)["builds"] == 5


def test_a_bisect_pinned_to_core_says_core_for_the_build_tier():
    from teperf.bisect.plan import Range, make_plan, plan_lines
    from teperf.config import build_config
    from teperf.plan import expand
    from teperf.sides.gitrepo import Commit

    commits = [
        Commit(sha=f"{i:040x}", short_sha=f"{i:07x}", subject=f"commit {i}", date="", ref="")
        for i in range(5)
    ]

    class Factory:
        pinned = "core"

        def tier(self, base_sha, head_sha):
            return "build" if int(head_sha, 16) >= 2 else "overlay"

        def seconds(self, tier):
            return {"build": (600.0, "TE"), "overlay": (2.0, "TE")}[tier]

    rng = Range(repo=".", good=commits[0], bad=commits[4], commits=commits[1:])
    config = build_config({"modules": ["Linear"]}, {"processes": 2})
    plan = make_plan(rng, Factory(), config)
    assert plan["tiers"] == {"overlay": 1, "core": 3}
    line = plan_lines(rng, expand(config)[0], plan)[1]
    assert "tier per commit: core 3, overlay 1; 4 builds at most" in line, line


def test_plan_seconds_are_the_packages_own(tmp_path):
    """TE's build figures for TE only; another package gets a default until one of its builds is cached."""
    import json

    from teperf.bisect.sides import GitSideFactory, tier_seconds
    from teperf.options import SideOptions

    cache = tmp_path / "cache"
    assert tier_seconds("transformer_engine", "build", str(cache)) == (600.0, "TE")
    assert tier_seconds("nanogpt", "build", str(cache)) == (60.0, "default")
    assert tier_seconds("nanogpt", "overlay", str(cache)) == (2.0, "default")
    for key, package, seconds in (("a1", "nanogpt", 12.5), ("b2", "nanogpt", 20.0), ("c3", "other", 900.0)):
        (cache / "builds" / key).mkdir(parents=True)
        meta = {"ok": True, "package": package, "seconds": seconds}
        (cache / "builds" / key / "build.json").write_text(json.dumps(meta))
    assert tier_seconds("nanogpt", "build", str(cache)) == (20.0, "measured")
    factory = GitSideFactory(SideOptions(repo=str(tmp_path), package="nanogpt", cache_dir=str(cache)))
    assert factory.seconds("build") == (20.0, "measured")


def test_shares_are_of_good_to_bad_not_of_the_changes_found():
    from teperf.bisect.attribute import attribute

    at = {0: 0.0, 2: 0.0, 3: 70.0, 5: 73.0}  # a +3 after the last step found: left unexplained
    out = attribute(
        [search.Segment(2, 3, "found")],
        lambda i: {"time_pct": at[i]},
        ["time_pct"],
        lambda i: {"short_sha": f"c{i}", "subject": "", "date": "", "sha": f"c{i}"},
        5,
    )
    assert out["totals"] == {"time_pct": 73.0} and out["culprits"][0]["share"] == round(70 / 73, 4)


def test_an_answer_without_totals_still_reads():
    from teperf.bisect.conclude import conclude

    result = conclude({"mode": "counters", "status": "found", "totals": {}, "culprits": [], "unresolved": []})
    assert result["explained"] is False and "GOOD..BAD's counter change" in result["answer"]


def test_a_compiled_range_makes_every_side_the_same_way(monkeypatch):
    """GOOD..BAD needs the extension tier: GOOD (and any unchanged commit) is built too, never the
    installed wheel's compiled code beside local builds (issue 20, item 6)."""
    import teperf.bisect.sides as bisect_sides
    from teperf.bisect.sides import GitSideFactory
    from teperf.options import SideOptions

    asked = []

    class Planned:
        def make(self):
            return "base-side", "head-side"

    def plan_sides(spec, opts=None, **kwargs):
        asked.append((spec, kwargs["strategy"]))
        return Planned()

    monkeypatch.setattr(bisect_sides, "plan_sides", plan_sides)
    factory = GitSideFactory(SideOptions(repo=".", package="pkg", package_dir="pkg"), log=lambda line: None)
    monkeypatch.setattr(factory, "tier", lambda a, b: "extension" if (a, b) == ("g", "b") else "path")
    assert factory.pin_range("g", "b") == "extension"
    factory.sides("g", "g")  # GOOD against itself: what a counters probe of GOOD makes
    factory.sides("g", "p")
    assert asked == [("g..g", "extension"), ("g..p", "extension")]
    python_only = GitSideFactory(
        SideOptions(repo=".", package="pkg", package_dir="pkg"), log=lambda line: None
    )
    monkeypatch.setattr(python_only, "tier", lambda a, b: "overlay")
    assert python_only.pin_range("g", "b") is None and python_only.pinned is None
    forced = GitSideFactory(SideOptions(repo=".", package="pkg", package_dir="pkg", strategy="overlay"))
    assert forced.pin_range("g", "b") is None  # the user's --strategy stands


def test_a_missing_option_points_at_its_own_commands_help(capsys):
    from conftest import run_in_process

    code, out, err = run_in_process(["bisect", "good..bad"], capsys)
    assert code == 2 and out == ""
    assert err == "teperf: error: Missing option '--cell'. (see teperf bisect --help)\n"
    code, _, err = run_in_process(["nosuch"], capsys)  # not a subcommand: the group's own help
    assert code == 2 and err == "teperf: error: No such command 'nosuch'. (see teperf --help)\n"


def test_the_parts_trials_last_at_least_min_trial_s_and_good_bad_is_measured_again_with_them(
    tmp_path, monkeypatch
):
    from teperf.bisect.timing import MIN_TRIAL_S

    result, probes = _run_fake(tmp_path, monkeypatch, _steps(100.0, {5: 200.0}), iters=20)
    timed = [(p["base_index"], p["index"], p["iters"]) for p in probes if p["what"] == "timing"]
    long = round(MIN_TRIAL_S * 1e6 / 100.0)  # the faster end takes 100 us a step
    assert timed[:3] == [(0, 8, 20), (0, 8, long), (0, 4, long)]  # GOOD..BAD again: the shares' denominator
    assert {it for _, _, it in timed[1:]} == {long}
    assert [e["short_sha"] for e in result["culprits"]] == ["0000005"]


# ------------------------------------ the answer carries every counter change point, with its time share


def _report(result, tmp_path):
    """The text lines and the JSON of a result, as `teperf bisect` prints them."""
    import json

    from teperf.bisect.report import RENDERERS, headline, load
    from teperf.bundle import Bundle

    meta = {"kind": "bisect", "commits": [], "plan": {}, "good": {}, "bad": {}}
    bundle = Bundle.create(tmp_path / "shown", "bisect", meta)
    bundle.close()
    bundle.update_meta(status="complete", result=result)
    lines = headline({**meta, "status": "complete", "result": result})
    return lines, json.loads(RENDERERS["json"](*load(bundle.path), bundle.path))


def test_counters_that_moved_are_the_answer_when_good_to_bad_is_undecided_in_time(tmp_path, monkeypatch):
    """The issue's first fixture: only commit 7 of 12 adds 7 Python calls; GOOD..BAD reads +0.4 %
    [-0.25, +1.05] however many pairs (min effect 1 %): undecided, with the budget far from spent."""
    calls = _steps(100, {7: 107})
    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {7: 100.4}),
        n=12,
        counters_of=lambda i: {"python_calls": calls(i)},
        half=lambda *a: 0.65,
    )
    assert [p["processes"] for p in probes if p["what"] == "timing"] == [2, 4, 8]
    assert result["status"] == "inconclusive" and result["budget_spent"] is False
    assert result["outcome"] == "counters" and result["exit_code"] == 3 and result["explained"] is False
    assert result["answer"].startswith(
        "counters moved, time undecided: 1 commit(s) moved the counters: 0000007"
    )
    assert (
        "within --budget" not in result["answer"]
        and "could not be told: +0.4 us [-0.2, +1.1] (+0.4%) inconclusive at 8 pairs" in result["answer"]
    )
    (mover,) = result["counter_movers"]
    assert mover["short_sha"] == "0000007" and mover["deltas"] == {"python_calls": 7}
    assert (
        mover["time"]["share_ci"] is None
        and mover["time"]["of"] == "cell"
        and mover["time"]["under"] == 0.0105
    )
    # 8 pairs gave +-0.65 %; inside +-1 % around +0.4 % needs +-0.6 %: with t(N-1) / sqrt(N), 9 pairs
    assert result["settle"] == {"pairs": 8, "pairs_needed": 9, "budget_s": 45}
    lines, out = _report(result, tmp_path)
    text = "\n".join(lines)
    assert "moved the counters, no step in time of their own (1):" in text
    assert "time: too small to tell at this schedule: under 1.1% of the cell's time" in text
    assert "about 9 pairs would settle GOOD..BAD (1 more" in text
    assert out["exit_code"] == 3 and [e["short_sha"] for e in out["counter_movers"]] == ["0000007"]
    assert out["settle"]["pairs_needed"] == 9 and out["counter_changes"] == out["counter_movers"]


def test_every_counter_mover_is_named_beside_the_time_culprit(tmp_path, monkeypatch):
    """The issue's second fixture: c1 -6 calls, c3 +50, c5 +150 (with its 37.5 us): time names c5; c3 and
    c1 follow as counter movers (c1 the other way), each with what time told of it; the part 0..4 whose
    interval excludes zero (+2.2 us [+0.2, +4.2], under the step size) is reported as moved, not quiet."""
    calls = _steps(100, {1: 94, 3: 144, 5: 294})
    time_of = _steps(100.0, {1: 99.7, 3: 102.2, 5: 139.7})
    result, probes = _run_fake(
        tmp_path, monkeypatch, time_of, counters_of=lambda i: {"python_calls": calls(i)}, half=lambda *a: 2.0
    )
    assert (0, 4, "small") in _timed(probes)
    assert [e["short_sha"] for e in result["counter_changes"]] == ["0000005", "0000003", "0000001"]
    assert [e["short_sha"] for e in result["culprits"]] == ["0000005"]
    assert [e["short_sha"] for e in result["counter_movers"]] == ["0000003"]
    assert [e["short_sha"] for e in result["counter_opposite"]] == ["0000001"]
    c3 = result["counter_movers"][0]["time"]
    assert (
        c3["part"] == [0, 4]
        and c3["of"] == "GOOD..BAD"
        and c3["share_ci"] == [round(0.2 / 39.7, 4), round(4.2 / 39.7, 4)]
    )
    (small,) = result["small_movers"]
    assert (small["good_index"], small["bad_index"], small["delta_us"]) == (0, 4, 2.2)
    assert result["outcome"] == "explained" and result["exit_code"] == 0
    assert "counters also moved at 0000003 (python_calls +50)" in result["answer"]
    lines, out = _report(result, tmp_path)
    text = "\n".join(lines)
    order = [text.index(f'000000{i} "commit {i}"') for i in (5, 3, 1)]
    assert order == sorted(order), text  # time culprit, counter mover, the other way on the counters
    assert "moved in time by less than the step size (no share) (1):" in text and "quiet" not in text
    for key in ("counter_movers", "counter_opposite", "small_movers", "counter_changes", "unconfirmed"):
        assert key in out, key
    assert [e["time"]["part"] for e in out["counter_changes"]] == [[4, 5], [0, 4], [0, 4]]


def test_a_small_segment_is_left_but_good_to_bad_is_always_searched():
    probed = []

    def probe(i, lo, hi):
        probed.append(i)
        return True, True

    changes = search.find_changes(4, probe, small=lambda lo, hi: True)
    assert probed == [2]  # 0..4 itself is searched however little its ends differ
    assert [(s.good, s.bad, s.status) for s in changes.segments] == [(0, 2, "small"), (2, 4, "small")]


def test_counter_segments_under_one_pct_are_not_narrowed_before_a_search_in_time(tmp_path, monkeypatch):
    """Of 1000 calls, commit 3 adds 50, 9 adds 2 and 10 removes 1: with time to come, 8..16 (+1 call, 0.1 %)
    is left as one segment, said with its deltas; --no-confirm (the counters are the answer) narrows all."""
    calls = _steps(1000, {3: 1050, 9: 1052, 10: 1051})
    kw = dict(n=16, counters_of=lambda i: {"python_calls": calls(i)}, half=lambda *a: 2.0)
    result, probes = _run_fake(tmp_path / "t", monkeypatch, _steps(100.0, {3: 150.0}), **kw)
    assert [e["short_sha"] for e in result["counter_changes"]] == ["0000003"]
    (left,) = result["counter_unresolved"]
    assert (left["good_index"], left["bad_index"], left["status"], left["deltas"]) == (
        8,
        16,
        "small",
        {"python_calls": 1},
    )
    lines, out = _report(result, tmp_path)
    assert "counter segments not narrowed to one commit (1):" in lines, lines
    assert any(
        "python_calls +1" in x and "not narrowed (under 1% of GOOD's count on every counter)" in x
        for x in lines
    ), lines
    assert out["counter_unresolved"][0]["status"] == "small"
    assert [e["short_sha"] for e in result["culprits"]] == ["0000003"] and result["exit_code"] == 0
    counted = len([p for p in probes if p["what"] == "counters"])
    result, probes = _run_fake(tmp_path / "c", monkeypatch, _steps(100.0, {}), confirm=False, **kw)
    assert sorted(e["short_sha"] for e in result["culprits"] + result["opposite_movers"]) == [
        "0000003",
        "0000009",
        "000000a",
    ]
    assert not result["unresolved"] and len([p for p in probes if p["what"] == "counters"]) > counted


def test_the_part_that_moved_most_is_split_first_so_a_short_budget_names_the_biggest_step(
    tmp_path, monkeypatch
):
    # +30 us at 2, +70 at 6; 7 compares of 10 s fit the budget: GOOD..BAD and the way down to one step
    result, probes = _run_fake(
        tmp_path, monkeypatch, _steps(100.0, {2: 130.0, 6: 200.0}), half=lambda *a: 2.0, budget_s=75.0
    )
    assert len(_timed(probes)) == 7 and result["budget_spent"]
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006"]  # lower half first found 0000002
    assert [(u["good_index"], u["bad_index"]) for u in result["unresolved"]] == [(0, 4)]


def _pairs_of(probes, lo, hi):
    return [
        p["processes"] for p in probes if p["what"] == "timing" and (p["base_index"], p["index"]) == (lo, hi)
    ]


def test_a_part_its_spread_could_not_settle_within_4x_is_not_measured_again(tmp_path, monkeypatch):
    # 0..4 holds nothing but reads 0 +- 120 us at 2 pairs: to fit under the 10 us step size its t interval
    # needs 10 pairs, past the 4x (8) the search takes; the step at 6 is named
    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {6: 200.0}),
        half=lambda base, head, processes: 120.0 if (base, head) == (0, 4) else 2.0,
    )
    assert _pairs_of(probes, 0, 4) == [2]  # the old rule: 2, 4, 8 pairs (400 s more on a quiet VM)
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006"]
    (left,) = result["unresolved"]
    assert (left["good_index"], left["bad_index"], left["row"]["left"]) == (0, 4, "answer")
    assert left["pairs_needed"] == 10
    assert result["settle_parts"] == {"pairs": 10, "seconds": 50}  # 5 s a pair on the fake clock
    assert result["exit_code"] == 1 and not result["budget_spent"]
    answer = result["answer"]
    assert (
        "1 part(s) undecided (left: measuring again could not change the commits named); about 10 pairs"
        in answer
    )
    assert "within --budget" not in answer
    # issue 59: "carry only 116 %" and "could not change this answer" beside an undecided exit
    assert "1 commit(s) carry 100% of" in answer and "carry only" not in answer
    lines, out = _report(result, tmp_path)
    assert any(
        "not measured again: that could not change the commits named; about 10 pairs" in x for x in lines
    )
    assert out["settle_parts"] == result["settle_parts"] and out["unresolved"][0]["pairs_needed"] == 10


def test_parts_that_could_all_be_settled_are_measured_until_the_answer_is_explained(tmp_path, monkeypatch):
    # +7 us at 2 (under the 10 us step), +12 at 6, +81 at 7; 0..4 reads +7 +- 14 at 2 pairs, +-7 at 4: its
    # 4-pair interval [0, +14] is under 2 steps (the old rule stopped there, exit 1), but its spread says 5
    # pairs settle it: at 8 it reads [+3.5, +10.5], small, and nothing is left undecided
    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {2: 107.0, 6: 119.0, 7: 200.0}),
        half=lambda base, head, processes: 28.0 / processes if (base, head) == (0, 4) else 2.0,
    )
    assert _pairs_of(probes, 0, 4) == [2, 4, 8]
    assert [e["short_sha"] for e in result["culprits"]] == ["0000007", "0000006"]
    assert [(e["good_index"], e["bad_index"]) for e in result["small_movers"]] == [(0, 4)]
    assert not result["unresolved"] and result["exit_code"] == 0


def test_a_part_that_could_outrank_a_named_culprit_is_measured_again_one_that_could_not_is_left(
    tmp_path, monkeypatch
):
    # 16 commits, GOOD..BAD +100: +60 at 13 (named), +40 at 3; 0..4 first reads +40 +- 48 (it could hold
    # more than the named +60, and 3 pairs would settle it), 8..12 holds nothing and reads 0 +- 120 (it
    # could not outrank +60, nor be settled within 4x): only 0..4 is measured again
    def half(base, head, processes):
        return {(0, 4): 96.0 / processes, (8, 12): 120.0}.get((base, head), 2.0)

    result, probes = _run_fake(tmp_path, monkeypatch, _steps(100.0, {3: 140.0, 13: 200.0}), n=16, half=half)
    assert _pairs_of(probes, 0, 4) == [2, 4] and _pairs_of(probes, 8, 12) == [2]  # old rule: [2, 4, 8]
    assert [e["short_sha"] for e in result["culprits"]] == ["000000d", "0000003"]
    assert [(u["good_index"], u["bad_index"], u["row"]["left"]) for u in result["unresolved"]] == [
        (8, 12, "answer")
    ]


def test_a_part_whose_ends_import_identical_code_is_no_change_not_undecided(tmp_path, monkeypatch):
    # issue 59: commits 1..4 touch no package file (docs), so 0..4's sides hash the same; it reads 0 +- 120
    # us, which 4x the pairs could not settle. It was left undecided: exit 3 "time undecided" (the counters
    # moved at 6) beside "measuring again could not change the commits named". It is no change in the
    # package, measured once, and the step at 6 explains GOOD..BAD
    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {6: 200.0}),
        counters_of=_calls({6: 110}),
        half=lambda base, head, processes: 120.0 if (base, head) == (0, 4) else 2.0,
        same_code=lambda base, head: head <= 4,
    )
    assert (0, 4, "identical") in _timed(probes) and _pairs_of(probes, 0, 4) == [2]
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006"] and not result["unresolved"]
    assert result["outcome"] == "explained" and result["exit_code"] == 0, result["answer"]
    assert "undecided" not in result["answer"]
    lines, out = _report(result, tmp_path)
    assert any(x.startswith("no change in the package: 0000001, 0000002, 0000003, 0000004") for x in lines)
    assert [(p["good_index"], p["bad_index"]) for p in out["same_code"]] == [(0, 4)]


def test_same_code_is_two_sides_whose_package_hashes_the_same():
    from teperf.bisect.timing import same_code

    def imported(hash_, name="pkg"):
        packages = {name: {"imported": True, "hash": hash_, "version": "1", "path": "/p"}}
        return {"python": "3.12.1", "torch": {"version": "2.9"}, "packages": packages}

    assert same_code({"base": imported("ab12"), "head": imported("ab12")})
    assert not same_code({"base": imported("ab12"), "head": imported("cd34")})
    assert not same_code({"base": imported(None), "head": imported(None)})  # not hashed: unknown
    assert not same_code({"base": imported("ab12")})  # one side reported
    torch = {"imported": True, "hash": None, "version": "2.9", "path": "/t"}
    only_torch = {"python": "3.12.1", "torch": {"version": "2.9"}, "packages": {"torch": torch}}
    assert not same_code({"base": only_torch, "head": only_torch})  # torch is named, not hashed


def test_could_change_keeps_only_parts_that_could_change_the_answer():
    from teperf.bisect.search import Part
    from teperf.bisect.timing import PartRow, could_change, pairs_to_settle

    def part(lo, delta, half, pairs=3, status="again", verdict="inconclusive"):
        row = {"delta_us": delta, "ci_low_us": delta - half, "ci_high_us": delta + half, "n_pairs": pairs}
        return Part(lo, lo + 1, PartRow(**row, verdict=verdict), status)

    step = part(9, 40.0, 5.0, status="step", verdict="slower")  # a culprit of +40 of +100
    wide = part(0, 0.0, 60.0)  # 0 +- 60 at 3 pairs: could outrank +40, but 25 pairs would settle it
    near = part(1, 5.0, 15.0)  # [-10, +20]: under +40, under the step size; 9 pairs
    big = part(2, 12.0, 15.0)  # reads a step (+12 >= 10): 4 pairs
    high = part(3, 8.0, 36.0)  # reaches +44 > +40: 16 pairs
    assert [pairs_to_settle(p.row, 10.0) for p in (wide, near, big, high)] == [25, 9, 4, 16]
    assert could_change([wide, near, big, high], [step], 100.0, 10.0, 12, 1e9) == [big]
    high = part(3, 8.0, 9.0)  # reaches +17, under +40: 4 pairs
    # both could settle within 12 pairs, in 3 -> 6 -> 12 and 3 -> 6 pairs: all, while 24 pairs are left
    assert could_change([near, high], [step], 100.0, 10.0, 12, 24) == [near, high]
    assert could_change([near, high], [step], 100.0, 10.0, 12, 23) == []  # neither changes the ranking
    assert could_change([near, high], [step], 100.0, 10.0, 8, 1e9) == []  # near: 9 pairs, past 8
    assert could_change([near, high], [], 100.0, 10.0, 8, 0) == [near, high]  # no culprit named: all
    assert could_change([near, high], [step], -100.0, 10.0, 8, 0) == [near, high]  # none named that way


def test_an_undecided_half_waits_until_the_parts_that_moved_are_split(tmp_path, monkeypatch):
    # 0..4 holds nothing but reads +-18 us at 2 pairs (+-9 at 4): the step at 6 is found before it is
    # measured again
    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {6: 200.0}),
        half=lambda base, head, processes: (36.0 / processes) if (base, head) == (0, 4) else 5.0,
    )
    timed = _timed(probes)
    assert timed.index((5, 6, "moved")) < timed.index((0, 4, "quiet"))
    assert [t for t in timed if t[:2] == (0, 4)] == [(0, 4, "undecided"), (0, 4, "quiet")]
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006"] and not result["unresolved"]


def test_an_undecided_step_is_measured_again_before_a_wider_part(tmp_path, monkeypatch):
    # commit 6's own compare first reads under load; 0..4 holds nothing but reads +-12 us at 2 pairs
    loaded = {"left": 1}

    def verdict_of(base, head, v):
        if (base, head) == (5, 6) and loaded["left"]:
            loaded["left"] -= 1
            return "inconclusive (load)"
        return v

    result, probes = _run_fake(
        tmp_path,
        monkeypatch,
        _steps(100.0, {6: 200.0}),
        half=lambda base, head, processes: (24.0 / processes) if (base, head) == (0, 4) else 5.0,
        verdict_of=verdict_of,
    )
    timed = [t[:2] for t in _timed(probes)]
    again = [i for i, t in enumerate(timed) if t in ((5, 6), (0, 4)) and timed[:i].count(t)]
    assert [timed[i] for i in again][:2] == [(5, 6), (0, 4)]  # the step first, then the wider part
    assert [e["short_sha"] for e in result["culprits"]] == ["0000006"]


def test_bisect_refuses_an_odd_schedule_before_any_probe(tmp_path, capsys):
    argv = ["bisect", "v1..v2", "--cell", "Linear/fp32", "--config", "demo", "--rounds", "1", "--trials", "3"]
    code, out, err = run_in_process([*argv, "--repo", str(tmp_path / "nope")], capsys)
    one_error(code, out, err, "an odd number of couples per pair")
