"""The fork-server generation check: pairs forked by one server share its layout and hash seed, so the
summary tests whether generations read alike before the interval over pairs is trusted."""

from __future__ import annotations

from pathlib import Path

from teperf.config import Stats
from teperf.summary.notes import generation_note
from teperf.summary.parse import ParsedBundle


def parsed(spawn: str, seeds: dict[int, int]) -> ParsedBundle:
    meta = {"config": {"schedule": {"spawn": spawn}}}
    return ParsedBundle(path=Path("."), meta=meta, cases=[], cells={}, pair_seeds=seeds)


SEEDS = {p: 100 + p // 4 for p in range(12)}  # 3 generations of 4 pairs


def rows(offsets: dict[int, float]) -> list[dict]:
    """20 cells; a pair's log ratio is its generation's offset plus a little of its own."""
    out = []
    for cell in range(20):
        logs = {p: offsets[SEEDS[p]] + 0.001 * (((p * 7 + cell * 3) % 5) - 2) for p in SEEDS}
        out.append({"pair_logs": logs})
    return out


def test_generations_that_disagree_are_named_with_the_way_out():
    note = generation_note(parsed("forkserver", SEEDS), rows({100: 0.0, 101: 0.03, 102: -0.02}), Stats())
    assert "in 20 of 20 cells" in note and "not independent" in note and "--server-pairs 1" in note


def test_generations_that_agree_get_the_count_only():
    note = generation_note(parsed("forkserver", SEEDS), rows({100: 0.0, 101: 0.0, 102: 0.0}), Stats())
    assert "of 20 cells" in note and "not independent" not in note


def test_fresh_pairs_and_single_pair_generations_are_not_tested():
    assert generation_note(parsed("fresh", SEEDS), rows({100: 0.0, 101: 0.03, 102: -0.02}), Stats()) == ""
    own = {p: 1000 + p for p in range(12)}  # every pair its own generation (--server-pairs 1)
    assert (
        generation_note(parsed("forkserver", own), [{"pair_logs": {p: 0.01 * p for p in own}}], Stats()) == ""
    )
