"""The fork-server generation check: pairs forked by one server share its layout and hash seed, so the
summary tests whether generations read alike before the interval over pairs is trusted."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from teperf.config import Stats
from teperf.records import BundleMeta, Row
from teperf.summary.notes import generation_note
from teperf.summary.parse import ParsedBundle


def parsed(spawn: str, seeds: dict[int, int]) -> ParsedBundle:
    meta = {"config": {"schedule": {"spawn": spawn}}}
    return ParsedBundle(path=Path("."), meta=BundleMeta.from_dict(meta), cases=[], cells={}, pair_seeds=seeds)


SEEDS = {p: 100 + p // 4 for p in range(12)}  # 3 generations of 4 pairs


def rows(offsets: dict[int, float]) -> list[Row]:
    """20 cells; a pair's log ratio is its generation's offset plus a little of its own."""
    out = []
    for cell in range(20):
        logs = {p: offsets[SEEDS[p]] + 0.001 * (((p * 7 + cell * 3) % 5) - 2) for p in SEEDS}
        out.append(Row(pair_logs=logs))
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
        generation_note(parsed("forkserver", own), [Row(pair_logs={p: 0.01 * p for p in own})], Stats()) == ""
    )


# ---- the interval's unit: with --spawn forkserver, the generation


def cell_of(offsets: list[float], per_generation: int, jitter: float = 0.002, groups: bool = True) -> dict:
    """A cell whose pairs' log ratios are their generation's offset plus a little of their own."""
    from teperf.stats import compare_cell

    base, head, gen = {}, {}, {}
    for g, off in enumerate(offsets):
        for k in range(per_generation):
            p = g * per_generation + k
            base[p] = [100.0, 100.0]
            head[p] = [100.0 * math.exp(off + jitter * (k - (per_generation - 1) / 2))] * 2
            gen[p] = g
    return compare_cell(base, head, Stats(), None, gen if groups else None)


def test_generations_that_move_together_widen_the_interval():
    offsets = [0.0, 0.03, -0.02, 0.01]
    by_pair = cell_of(offsets, 4, groups=False)
    by_generation = cell_of(offsets, 4)
    assert by_pair.ci_basis == "pairs" and by_generation.ci_basis == "generations"
    assert by_generation.n_generations == 4 and by_generation.n_pairs == 16
    width = lambda row: row.ci_high_pct - row.ci_low_pct  # noqa: E731
    # 16 pairs as if independent: narrow; 4 generations (3 degrees of freedom): what the data support
    assert width(by_generation) > 2.5 * width(by_pair)
    # the estimate is the mean of the generations' means (balanced here: the pairs' mean too)
    assert by_generation.delta_pct == pytest.approx(by_pair.delta_pct, abs=1e-9)


def test_generation_means_equal_a_t_over_them():
    from scipy import stats as sps

    offsets = [0.0, 0.03, -0.02, 0.01]
    row = cell_of(offsets, 3)
    sd = float(np.std(offsets, ddof=1))
    half = sps.t.ppf(0.975, 3) * sd / 2
    assert math.log1p(row.ci_high_pct / 100) == pytest.approx(np.mean(offsets) + half, rel=1e-6)


def test_one_generation_says_so_and_gives_no_precision_width():
    from teperf.stats import INDEPENDENT_BASES

    row = cell_of([0.02], 4)
    assert row.ci_basis == "one generation" and row.ci_basis not in INDEPENDENT_BASES
    assert row.ci_low_pct is not None  # the pairs' interval, flagged


def test_a_generation_per_pair_is_the_pair_interval():
    offsets = [0.0, 0.03, -0.02, 0.01, 0.005]
    assert cell_of(offsets, 1) == cell_of(offsets, 1, groups=False)


def test_one_time_costs_count_generations_for_too_few():
    from teperf.stats import onetime_cell

    base = {p: 100.0 for p in range(8)}
    head = {p: 130.0 + p for p in range(8)}
    assert onetime_cell(base, head, Stats())["verdict"] == "slower"  # 8 pairs
    two = onetime_cell(base, head, Stats(), {p: p // 4 for p in range(8)})  # 2 generations
    assert two["verdict"] == "too few generations"  # 8 pairs, but 2 independent draws


def test_one_generation_is_said_in_the_notes():
    from teperf.summary.notes import notes

    row = Row(status="ok", ci_basis="one generation", pair_logs={0: 0.01, 1: 0.02})
    said = notes(parsed("forkserver", {0: 7, 1: 7}), [row], Stats())
    assert any("one fork-server generation" in n and "--spawn fresh" in n for n in said)
    assert not any(
        "one fork-server generation" in n for n in notes(parsed("fresh", {}), [Row(status="ok")], Stats())
    )


def test_pair_generations_only_for_forkserver_runs():
    assert parsed("forkserver", {0: 7, 1: 7, 2: 9}).pair_generations == {0: 7, 1: 7, 2: 9}
    assert parsed("fresh", {0: 7, 1: 8}).pair_generations is None
