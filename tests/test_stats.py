"""Statistics: calibration on simulated A/A cells, power on planted shifts, verdict rules.

The simulation mimics what was measured on the H200 VM: each fresh process
gets its own level (a few % apart, the same for both sides of a pair only
partly), and trials inside one process scatter much less.
"""

import dataclasses

import numpy as np
import pytest

from teperf import stats
from teperf.config import Stats
from teperf.stats import TableLevels, compare_cell, half_width_pct, single_cell, table_levels
from teperf.verdicts import inconclusive_bound, verdict

DEFAULT = Stats()


def simulate_cell(
    rng,
    n_pairs=6,
    trials=6,
    shift_pct=0.0,
    pair_sd=0.03,
    process_sd=0.01,
    trial_sd=0.01,
    base=500.0,
    spells=0.0,
):
    """pair_sd: level shared by both processes of a pair; process_sd: each process's own offset.
    spells: chance per trial slot that the machine switches between its normal speed and a
    slow spell (up to 2x, as on the H200 VM); the switch may fall between a couple's two trials.
    Returns (base, head, couples): pair -> per-step times, pair -> [(base, head)] in run order."""
    base_t, head_t, couples = {}, {}, {}
    slow = 1.0
    for p in range(n_pairs):
        level = base * np.exp(rng.normal(0, pair_sd))
        b_level = level * np.exp(rng.normal(0, process_sd))
        h_level = level * np.exp(rng.normal(0, process_sd)) * (1 + shift_pct / 100)
        base_t[p], head_t[p], couples[p] = [], [], []
        for k in range(trials):
            speeds = []
            for _ in range(2):  # the couple's two trials, one after the other
                if rng.random() < spells:
                    slow = 1.0 if slow > 1.0 else rng.uniform(1.3, 2.0)
                speeds.append(slow)
            first, second = speeds if k % 2 == 0 else speeds[::-1]  # A B, then B A
            b = b_level * first * np.exp(rng.normal(0, trial_sd))
            h = h_level * second * np.exp(rng.normal(0, trial_sd))
            base_t[p].append(b)
            head_t[p].append(h)
            couples[p].append((b, h))
    return base_t, head_t, couples


def measure(rng, cfg, **kw):
    base_t, head_t, couples = simulate_cell(rng, **kw)
    return compare_cell(base_t, head_t, cfg, couples)


def test_aa_false_change_rate_matches_alpha():
    rng = np.random.default_rng(1)
    cfg = Stats(alpha=0.05, min_effect_pct=0.0)
    n = 3000
    changes = 0
    for _ in range(n):
        changes += measure(rng, cfg).verdict in ("slower", "faster")
    rate = changes / n
    assert 0.035 <= rate <= 0.065, rate  # 5 % advertised; a binomial 3000 draws sits well inside


def test_aa_false_change_rate_holds_under_slow_spells():
    rng = np.random.default_rng(11)
    cfg = Stats(alpha=0.05, min_effect_pct=0.0)
    n = 2000
    changes = sum(measure(rng, cfg, spells=0.15).verdict in ("slower", "faster") for _ in range(n))
    assert 0.03 <= changes / n <= 0.07, changes / n


def test_couples_resist_slow_spells_better_than_side_medians():
    # The per-pair ratio from adjacent couples must beat the ratio of the side medians
    # when the machine's speed swings (it measured 1.3-1.9x lower sd on the H200).
    rng = np.random.default_rng(12)
    cfg = Stats(alpha=0.05, min_effect_pct=0.0)
    with_couples, medians_only = [], []
    for _ in range(400):
        b, h, c = simulate_cell(rng, spells=0.15)
        with_couples.append(compare_cell(b, h, cfg, c).pair_sd_pct)
        medians_only.append(compare_cell(b, h, cfg).pair_sd_pct)
    assert np.median(with_couples) < 0.8 * np.median(medians_only)


def test_default_min_effect_keeps_aa_at_or_below_alpha():
    rng = np.random.default_rng(2)
    n = 2000
    changes = sum(measure(rng, DEFAULT).verdict in ("slower", "faster") for _ in range(n))
    assert changes / n <= 0.05


def test_trial_level_interval_would_be_overconfident():
    # Why the pair is the unit: treating all trials as independent draws
    # rejects far more often than 5 % on the same A/A data.
    rng = np.random.default_rng(3)
    from scipy import stats as sps

    n, rejections = 500, 0
    for _ in range(n):
        _, _, couples = simulate_cell(rng)
        res = sps.ttest_1samp([np.log(hh / bb) for pair in couples.values() for bb, hh in pair], 0.0)
        rejections += res.pvalue < 0.05
    assert rejections / n > 0.2


def test_planted_shift_is_detected_with_the_right_size():
    rng = np.random.default_rng(4)
    hits, sizes = 0, []
    for _ in range(300):
        res = measure(rng, DEFAULT, shift_pct=8.0)
        hits += res.verdict == "slower"
        sizes.append(res.delta_pct)
        assert res.ci_low_pct < res.ci_high_pct
    assert hits / 300 >= 0.9
    assert abs(np.median(sizes) - 8.0) < 1.0


def test_faster_is_reported_as_faster():
    rng = np.random.default_rng(5)
    res = measure(rng, DEFAULT, shift_pct=-15.0)
    assert res.verdict == "faster" and res.delta_us < 0


def test_us_and_pct_agree_and_interval_contains_estimate():
    rng = np.random.default_rng(6)
    res = measure(rng, DEFAULT, shift_pct=5.0)
    assert res.delta_us == pytest.approx(res.base_us * res.delta_pct / 100)
    assert res.delta_us == pytest.approx(res.head_us - res.base_us)  # the columns add up
    assert res.ci_low_us <= res.delta_us <= res.ci_high_us
    assert res.ci_basis == "pairs" and res.n_pairs == 6
    assert res.mde_pct > 0 and res.pair_sd_pct > 0


def test_single_pair_shows_its_trial_interval_but_calls_nothing():
    # One pair's interval covers trial noise only: even a +20 % change is left undecided (issue 55).
    rng = np.random.default_rng(7)
    b, h, couples = simulate_cell(rng, n_pairs=1, shift_pct=20.0)
    res = compare_cell(b, h, DEFAULT, couples)
    assert res.ci_basis == "trials" and res.n_pairs == 1
    assert res.ci_low_pct > 0  # the interval alone would have said slower
    assert (res.verdict, res.verdict_cause) == ("inconclusive", "few units")


def test_two_pairs_call_nothing_three_do():
    rng = np.random.default_rng(3)
    b, h, couples = simulate_cell(rng, n_pairs=2, shift_pct=20.0)
    assert compare_cell(b, h, DEFAULT, couples).verdict_cause == "few units"
    b, h, couples = simulate_cell(rng, n_pairs=3, shift_pct=20.0)
    res = compare_cell(b, h, DEFAULT, couples)
    assert res.verdict == "slower" and res.verdict_cause is None


def test_no_pairs_means_no_verdict():
    res = compare_cell({0: [1.0]}, {}, DEFAULT)
    assert res.verdict is None and res.n_pairs == 0


@pytest.mark.parametrize(
    "delta, low, high, expected, bound",
    [
        (5.0, 2.0, 8.0, "slower", None),
        (-5.0, -8.0, -2.0, "faster", None),
        (140.0, 127.0, 153.0, "slower", None),  # wide, but far from 0
        (-40.0, -60.0, -15.0, "faster", None),
        (1.2, 0.3, 2.1, "slower", None),  # excludes 0, at least min_effect: as before
        (0.4, -0.5, 0.9, "no change", None),  # the whole interval inside +-1 %
        (0.5, 0.2, 0.8, "no change", None),  # resolved, but every value under min_effect
        (0.0, -1.0, 1.0, "no change", None),  # the edges count as inside
        # the PR #2957 case: +3.0 % [-2.3, +8.5] leaves an 8.5 % regression possible
        (3.0, -2.3, 8.5, "inconclusive", 8.5),
        (0.4, -1.2, 1.9, "inconclusive", 1.9),  # 2.15 -> 2.16: room for a 1.9 % regression
        (-0.5, -3.0, 0.8, "inconclusive", -3.0),  # only the lower end is outside
        (0.7, 0.2, 1.4, "inconclusive", 1.4),  # excludes 0, but under min_effect and not inside +-1 %
        (5.0, -20.0, 30.0, "inconclusive", 30.0),  # what used to be "noisy"
        (5.0, None, None, "inconclusive", None),  # no interval at all
    ],
)
def test_verdict_rules(delta, low, high, expected, bound):
    assert verdict(delta, low, high, DEFAULT) == expected
    if expected == "inconclusive":
        assert inconclusive_bound(low, high, DEFAULT) == bound


def test_inconclusive_row_carries_its_bound():
    # Three pairs a few % apart: the interval reaches past +-1 % on both sides of 0.
    res = compare_cell({0: [100.0], 1: [100.0], 2: [100.0]}, {0: [99.0], 1: [103.0], 2: [101.0]}, DEFAULT)
    assert res.verdict == "inconclusive"
    assert res.bound_pct == pytest.approx(max(res.ci_low_pct, res.ci_high_pct, key=abs))
    # taken on the log scale: close to half the width in % for an interval this narrow
    assert half_width_pct(res) == pytest.approx((res.ci_high_pct - res.ci_low_pct) / 2, rel=0.02)


def test_decided_rows_have_no_bound():
    rng = np.random.default_rng(8)
    res = measure(rng, DEFAULT, shift_pct=20.0)
    assert res.verdict == "slower" and res.bound_pct is None


def test_single_side_summary():
    res = single_cell({0: [100.0, 102.0, 98.0], 1: [110.0, 111.0, 109.0]})
    assert res.base_us == pytest.approx((100.0 * 110.0) ** 0.5)  # geometric mean of pair medians
    assert res.n_pairs == 2 and res.pair_sd_pct > 5 and res.verdict is None
    assert res.base_spread_pct > 0


def _table(rng, cfg, shifts, **kw):
    """One compare table of seeded cells: their rows at the run's level, then again at the table's."""
    data = [simulate_cell(rng, shift_pct=s, **kw) for s in shifts]
    rows = [compare_cell(b, h, cfg, c) for b, h, c in data]
    levels = table_levels([(r.p_value, r.min_p) for r in rows], cfg.alpha)
    at = Stats(alpha=levels.alpha, min_effect_pct=cfg.min_effect_pct)
    return [compare_cell(b, h, at, c) for b, h, c in data], levels


@pytest.mark.slow  # a simulation
def test_table_rule_holds_an_unchanged_tables_false_verdicts_to_alpha():
    """Issue 32: 24 A/A cells at 95 % each read 2+ false verdicts a quarter of the time; the table's rule
    holds the chance of any false verdict in a table of unchanged cells to alpha."""
    rng = np.random.default_rng(32)
    cfg = Stats(alpha=0.05, min_effect_pct=0.0)
    tables = 1000
    per_cell = any_false = 0
    for _ in range(tables):
        rows, _ = _table(rng, cfg, [0.0] * 6)
        per_cell += sum(measure(rng, cfg).verdict in ("slower", "faster") for _ in range(6))
        any_false += any(r.verdict in ("slower", "faster") for r in rows)
    assert 0.04 <= per_cell / (6 * tables) <= 0.06  # each cell alone: its nominal 5 %
    assert 0.025 <= any_false / tables <= 0.06, any_false  # the table as a whole: 5 %, not 1 - 0.95**6 = 26 %


def test_table_rule_keeps_a_real_change_and_its_interval_agrees_with_the_test():
    rng = np.random.default_rng(7)
    cfg = Stats(alpha=0.05, min_effect_pct=1.0)
    found = 0
    for _ in range(100):
        rows, levels = _table(rng, cfg, [0.0, 0.0, 8.0, 0.0, 0.0, 0.0])
        found += rows[2].verdict == "slower"
        for r in rows:  # an interval at the table's level excludes 0 exactly when Benjamini-Hochberg rejects
            excludes = r.ci_low_pct > 0 or r.ci_high_pct < 0
            assert excludes == (r.p_value <= levels.alpha)
        assert levels.family == 6 and levels.alpha == pytest.approx(0.05 * max(1, levels.changed) / 6)
    assert found >= 95  # +8 % on 3 % pair noise: the rule costs width, not this plant


@pytest.mark.parametrize(
    ("pairs", "family", "floor"),
    [(6, 3, 0.05 / 3), (7, 3, 0.05 / 4), (8, 6, 0.05 / 6)],
)
def test_table_rule_leaves_out_one_time_cells_that_could_not_pass(pairs, family, floor):
    """Tarone: 3 per-step and 3 first-call cells; a signed-rank p is at least 2 / 2**pairs."""
    cells = [(0.5, 0.0)] * 3 + [(0.5, 2.0 ** (1 - pairs))] * 3
    levels = table_levels(cells, 0.05)
    assert (levels.family, levels.changed, levels.cells) == (family, 0, 6)
    assert levels.floor == pytest.approx(floor) and levels.alpha == pytest.approx(0.05 / family)
    assert table_levels([(0.01, 0.0)], 0.05) == TableLevels(0.05, 0.05, 1, 1, 1)  # one cell: its own level


def test_fail_on_fails_a_cell_too_few_pairs_left_undecided():
    from teperf.records import Row
    from teperf.verdicts import failing_cells

    few = Row(module="Linear", recipe="bf16", verdict="inconclusive", verdict_cause="few units", n_pairs=1)
    few = dataclasses.replace(few, ci_basis="trials", delta_pct=2.0)
    decided = Row(module="LayerNorm", recipe="bf16", verdict="inconclusive", n_pairs=8, ci_basis="pairs")
    assert failing_cells([few, decided], {"slower"}) == [
        "Linear/bf16 inconclusive +2.0% (1 pair: a verdict needs 3)"
    ]
    assert failing_cells([few, decided], set()) == []  # no gate asked for: nothing fails


class _Trial:
    """What clean_couples reads of a records.TrialRecord."""

    def __init__(self, side, trial, us, contended=False, attempt=0):
        self.side, self.trial, self.us, self.shared = side, trial, us, contended
        self.pair, self.round, self.attempt = 0, 0, attempt

    def per_step_us(self, field):
        return self.us


def test_clean_couples_keeps_a_cut_couples_contended_trial_only_where_any_load_is_accepted():
    # couple 0 whole; couple 1 cut short after its base trial, which shared its core
    trials = [_Trial("base", 0, 10.0), _Trial("head", 0, 11.0), _Trial("base", 1, 12.0, contended=True)]
    contended = lambda t: t.shared  # noqa: E731
    used, counts = stats.clean_couples(trials, ["base", "head"], "process_cpu_ns", 20.0, contended)
    assert sorted(v for _, v, _ in used) == [10.0, 11.0] and counts["couples"] == 1
    used, _ = stats.clean_couples(trials, ["base", "head"], "process_cpu_ns", 100.0, contended)
    assert sorted(v for _, v, _ in used) == [10.0, 11.0, 12.0]


def test_lanes_agree_is_scipys_one_way_anova():
    # written out so that a CLI run need not import scipy.stats (1.2 s of CPU); the same p to rounding
    from scipy.stats import f_oneway

    rng = np.random.default_rng(3)
    for k in (2, 3, 8):
        groups = [list(rng.normal(rng.normal(0, 0.5), 1, rng.integers(2, 12))) for _ in range(k)]
        p, agree = stats.lanes_agree(groups, 0.05)
        assert p == pytest.approx(float(f_oneway(*groups).pvalue), rel=1e-9, abs=1e-12)
        assert agree == ("yes" if p >= 0.05 else "NO")
    # a lane of one pair is left out; no spread inside any lane leaves ANOVA undefined
    assert stats.lanes_agree([[1.0, 1.0, 1.0], [5.0, 5.0, 6.0], [9.0]], 0.05)[1] == "NO"
    assert stats.lanes_agree([[1.0, 1.0], [2.0, 2.0]], 0.05) == (None, "-")
