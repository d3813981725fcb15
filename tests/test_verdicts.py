"""Verdicts (teperf/verdicts.py): the interval rule, the bound an inconclusive interval leaves, the load
rule, what the table adds to an inconclusive verdict, the one-time costs' view of a row and --sweep's
slope verdict. (--fail-on's parsing and cells: test_gate.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from teperf import verdicts as v
from teperf.records import Row

CFG = SimpleNamespace(min_effect_pct=1.0)


@pytest.mark.parametrize(
    "delta, low, high, want",
    [
        (3.0, 2.0, 4.0, v.SLOWER),  # resolved and past the minimum effect
        (-3.0, -4.0, -2.0, v.FASTER),
        (3.0, 0.5, 40.0, v.SLOWER),  # resolved, however wide
        (0.2, -0.5, 0.9, v.NO_CHANGE),  # every change that matters ruled out
        (0.5, 0.1, 0.9, v.NO_CHANGE),  # resolved but smaller than the minimum effect
        (0.2, -0.5, 1.5, v.INCONCLUSIVE),  # +1.5 % is not ruled out
        (0.0, None, 1.0, v.INCONCLUSIVE),  # no interval at all
        (0.0, -1.0, None, v.INCONCLUSIVE),
    ],
)
def test_the_interval_rule(delta, low, high, want):
    assert v.verdict(delta, low, high, CFG) == want


def test_no_change_needs_the_whole_interval_inside_the_minimum_effect_edges_included():
    assert v.verdict(0.0, -1.0, 1.0, CFG) == v.NO_CHANGE
    assert v.verdict(0.0, -1.0, 1.01, CFG) == v.INCONCLUSIVE


def test_an_inconclusive_interval_bounds_by_its_end_farthest_outside_the_minimum_effect():
    assert v.inconclusive_bound(-0.5, 3.0, CFG) == 3.0
    assert v.inconclusive_bound(-4.0, 3.0, CFG) == -4.0
    assert v.inconclusive_bound(-0.5, 0.8, CFG) == 0.8  # nothing outside: the larger end
    assert v.inconclusive_bound(None, 3.0, CFG) is None


@pytest.mark.parametrize(
    "contended, couples, limit, want",
    [(3, 10, 25.0, True), (2, 10, 25.0, False), (0, 0, 25.0, False), (5, 20, 25.0, False), (1, 1, 0.0, True)],
)
def test_the_load_rule_counts_more_than_the_limit_share_of_couples(contended, couples, limit, want):
    assert v.loaded(contended, couples, limit) is want


def _row(**fields):
    return Row(module="Linear", recipe="fp32", shape="8x2x64", mode="eager", **fields)


def test_the_table_adds_what_an_inconclusive_verdict_could_not_rule_out_or_the_load():
    assert v.verdict_text(_row(verdict=v.SLOWER, bound_pct=9.0)) == "slower"
    assert v.verdict_text(_row(verdict=v.INCONCLUSIVE, bound_pct=8.5)) == "inconclusive (up to +8.5%)"
    assert v.verdict_text(_row(verdict=v.INCONCLUSIVE)) == "inconclusive"
    loaded = _row(verdict=v.INCONCLUSIVE, verdict_cause=v.LOAD, contended_pct=83.4, load_bound_pct=2.14)
    assert v.verdict_text(loaded) == "inconclusive (load: 83% contended, bias up to 2.1%)"
    assert v.verdict_text(_row(verdict=None)) == "-"


def test_a_one_time_cost_reads_as_its_own_verdict_without_the_load_cause():
    row = _row(
        verdict=v.INCONCLUSIVE,
        verdict_cause=v.LOAD,
        delta_pct=0.1,
        first_call_verdict=v.SLOWER,
        first_call_delta_pct=40.0,
        first_call_bound_pct=None,
    )
    first = v.onetime(row, "first_call")
    assert (first.verdict, first.delta_pct, first.verdict_cause) == (v.SLOWER, 40.0, None)
    assert row.verdict == v.INCONCLUSIVE  # the row itself is left as it was


@pytest.mark.parametrize(
    "delta, want",
    [
        ({"lo": 0.1, "hi": 0.3}, "steeper"),
        ({"lo": -0.3, "hi": -0.1}, "flatter"),
        ({"lo": -0.25, "hi": 0.5}, "inconclusive (up to 0.50 us/unit)"),
        ({"lo": None, "hi": 0.5}, v.INCONCLUSIVE),
        ({}, v.INCONCLUSIVE),
    ],
)
def test_the_sweep_slope_verdict(delta, want):
    assert v.slope_verdict(delta) == want


def test_every_verdict_has_a_style_in_each_place_it_is_shown():
    for table in (v.STYLE, v.HISTORY_STYLE, v.CSS_CLASS, v.HTML_COLOR):
        assert set(table) == set(v.NAMES)
