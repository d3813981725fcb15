"""teperf bisect without workers: the search, the range checks, bad input through the CLI."""

from __future__ import annotations

import pytest

from conftest import run_cli
from gitfixture import HISTORY_CONFIG, make_history
from teperf.bisect import search
from teperf.bisect.runner import resolve_range
from teperf.errors import TeperfError



@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 20, 76])
def test_search_finds_every_culprit_within_ceil_log2_probes(n):
    for culprit in range(1, n + 1):
        judged = []

        def judge(i):
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


@pytest.mark.parametrize("spec, words", [
    ("bad..good", "is not an ancestor of"),
    ("good..good", "the range is empty"),
    ("good...bad", "needs GOOD..BAD"),
    ("good..nope", "does not name a commit"),
])
def test_bad_ranges_are_one_line_errors(history, spec, words):
    with pytest.raises(TeperfError, match=words):
        resolve_range(spec, str(history.repo))


def test_a_side_branch_commit_as_good_is_refused(history):
    with pytest.raises(TeperfError, match="first-parent history"):
        resolve_range("side4..bad", str(history.repo))


@pytest.mark.parametrize("args, words", [
    (["bad..good", "--cell", "MLP/fp32"], "is not an ancestor of"),
    (["good..good", "--cell", "MLP/fp32"], "the range is empty"),
    (["good..bad", "--cell", "Attention/fp32"], "no cell 'Attention/fp32'"),
    (["good..bad", "--cell", "MLP/fp32", "--budget", "0"], "must be a positive duration"),
])
def test_bad_input_exits_2_with_one_line(history, tmp_path, args, words):
    res = run_cli("bisect", *args, "--repo", history.repo, "--package", "mypkg",
                  "--config", history.repo.parent / "bisect.toml", "--results-dir", tmp_path / "r")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], res.stderr
    assert not (tmp_path / "r").exists()  # nothing measured, no bundle
