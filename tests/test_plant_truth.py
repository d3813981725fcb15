"""The pure parts of benchmarks/plant_truth.py (issue 56): ABBA ordering, block deltas, the line fit, the
switch fit, the raw per-step difference of a bundle's trials and the probe package it writes. No timing."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pt():
    spec = importlib.util.spec_from_file_location("plant_truth", ROOT / "benchmarks" / "plant_truth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_abba_order_balances_every_block(pt):
    order = pt.abba_order(3)
    assert order == [False, True, True, False] * 3
    for i in range(0, len(order), 4):
        block = order[i : i + 4]
        assert sum(block) == 2
        # positions of on and of off average the same: a linear drift cancels
        assert sum(j for j, s in enumerate(block) if s) == sum(j for j, s in enumerate(block) if not s)


def test_block_deltas_cancel_a_linear_drift(pt):
    order = pt.abba_order(4)
    plant, drift = 7.0, 0.5
    per_step = [100 + drift * i + (plant if on else 0) for i, on in enumerate(order)]
    assert pt.block_deltas(order, per_step) == pytest.approx([plant] * 4)


def test_block_deltas_drop_an_incomplete_block_and_refuse_a_bad_one(pt):
    order = pt.abba_order(2)[:6]
    assert len(pt.block_deltas(order, [1, 2, 2, 1, 1, 2])) == 1
    with pytest.raises(ValueError):
        pt.block_deltas([True, True, False, False], [1, 1, 1, 1])


def test_t_mean(pt):
    mean, hw = pt.t_mean([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert hw == pytest.approx(4.302653 * 1.0 / math.sqrt(3), rel=1e-5)  # t(0.975, 2) * sd / sqrt(n)
    assert pt.t_mean([5.0])[1] == math.inf


def test_fit_line_exact_and_with_noise(pt):
    exact = pt.fit_line([0, 50, 100, 200], [3, 58, 113, 223])
    assert exact["slope"] == pytest.approx(1.1)
    assert exact["intercept"] == pytest.approx(3.0)
    assert exact["slope_hw"] == pytest.approx(0.0, abs=1e-9)
    noisy = pt.fit_line([0, 1, 2, 3, 4], [0.1, 0.9, 2.2, 2.8, 4.1])
    # by hand: slope 9.9 / 10, intercept 2.02 - 0.99 * 2; the t half-widths from the residuals (3 dof)
    assert noisy["slope"] == pytest.approx(0.99)
    assert noisy["intercept"] == pytest.approx(0.04)
    s2 = sum(r * r for r in [0.06, -0.13, 0.18, -0.21, 0.10]) / 3
    assert noisy["slope_hw"] == pytest.approx(3.182446 * math.sqrt(s2 / 10), rel=1e-4)
    assert noisy["intercept_hw"] == pytest.approx(3.182446 * math.sqrt(s2 * (1 / 5 + 4 / 10)), rel=1e-4)
    two = pt.fit_line([0, 1], [1, 3])
    assert two["slope"] == 2 and math.isnan(two["slope_hw"])
    with pytest.raises(ValueError):
        pt.fit_line([1, 1, 1], [1, 2, 3])


def test_switch_fit_separates_the_plant_from_the_switches(pt):
    order = pt.abba_order(5)
    switches = [0.1 + 0.05 * (i % 3) + (0.02 if on else 0) for i, on in enumerate(order)]
    per_step = [60 + (100 if on else 0) + 400 * c for on, c in zip(order, switches)]
    got = pt.switch_fit(order, per_step, switches)
    assert got["plant_us"] == pytest.approx(100)
    assert got["us_per_switch"] == pytest.approx(400)


def test_raw_delta_of_trial_records(pt):
    def trial(pair, side, us):
        return {"kind": "trial", "pair": pair, "side": side, "iters": 10, "process_cpu_ns": us * 10 * 1000}

    records = [trial(0, "base", 50), trial(0, "head", 60), trial(0, "base", 54), trial(0, "head", 62)]
    records += [trial(1, "base", 40), trial(1, "head", 52), {"kind": "setup", "pair": 1}]
    got = pt.raw_delta(records)
    assert got["pairs"] == 2
    assert got["mean_us"] == pytest.approx((9 + 12) / 2)
    assert got["median_us"] == pytest.approx((9 + 12) / 2)
    assert pt.raw_delta([trial(0, "base", 1)]) is None


def test_probe_package_plants_what_it_says(pt, tmp_path):
    side = pt.write_side(tmp_path / "head", True, "arith", 12.0, 345)
    text = (side / pt.PACKAGE / "__init__.py").read_text()
    assert "ON = True" in text and "KIND = 'arith'" in text and "LAPS = 345" in text
    compile(text, "plant_probe", "exec")
    sys.path.insert(0, str(side))
    try:
        probe = importlib.import_module(pt.PACKAGE)
        assert probe.plant() == sum(i * i for i in range(345))
    finally:
        sys.path.remove(str(side))
        sys.modules.pop(pt.PACKAGE, None)


def test_render_fits_the_measured_kinds(pt):
    sizes = [0.0, 50.0, 100.0, 200.0]
    truth = {("thread", us): {"truth_us": us * 1.1 + 1, "truth_hw_us": 1.0, "thread_us": us, "wall_us": us}
             for us in sizes}  # fmt: skip
    measured = {("thread", us): {"delta_us": us * 1.1 + 2, "ci_low_us": 0.0, "ci_high_us": 300.0}
                for us in sizes}  # fmt: skip
    table = pt.render(sizes, ["thread"], ["thread"], truth, measured)
    assert "thread: teperf = +1.00 (+-0.00) + 1.0000 (+-0.0000) x truth" in table
    assert "+ 1.1000 (+-0.0000) x nominal" in table


def test_estimators_agree_on_an_additive_change_without_noise(pt):
    def trial(pair, rnd, side, us, attempt=0):
        return {"kind": "trial", "pair": pair, "round": rnd, "trial": 0, "side": side, "iters": 1,
                "process_cpu_ns": us * 1000, "attempt": attempt}  # fmt: skip

    records = []
    for pair, base in enumerate((100.0, 120.0, 80.0)):
        for rnd in range(3):
            records += [trial(pair, rnd, "base", base), trial(pair, rnd, "head", base + 50)]
    records.append(trial(0, 0, "head", 999.0, attempt=1))  # an attempt without its base: not a couple
    couples = pt.couples_of(records)
    assert couples[0] == [(100.0, 150.0)] * 3
    got = pt.estimators(couples)
    assert got["mean_diff_us"] == pytest.approx(50) and got["median_diff_us"] == pytest.approx(50)
    # the ratio estimators convert through a base level, so unequal pairs move them (Jensen): by hand,
    # teperf's is 98.65 x (exp(mean(ln 1.625, ln 1.5, ln 1.4167)) - 1) = 50.46, the ratio of means 51.15
    assert got["teperf_us"] == pytest.approx(50.46, abs=0.01)
    assert got["mean_log_us"] == got["teperf_us"]  # one couple value per round: median = mean
    assert got["ratio_of_means_us"] == pytest.approx(51.15, abs=0.01)


def test_a_fixed_work_plant_is_compared_at_the_speed_of_teperfs_compare(pt):
    truth = {"truth_us": 100.0, "truth_hw_us": 8.0, "base_us": 400.0, "thread_us": 100.0, "wall_us": 100.0}
    slower = {"base_us": 600.0, "delta_us": 150.0, "ci_low_us": 140.0, "ci_high_us": 160.0}
    assert pt.truth_at_speed("arith", truth, slower) == (150.0, 12.0, 1.5)  # the minute ran 1.5x slower
    assert pt.truth_at_speed("thread", truth, slower) == (100.0, 8.0, 1.0)  # a clock's us are the clock's
    assert pt.truth_at_speed("arith", truth, None) == (100.0, 8.0, 1.0)  # nothing measured: as measured
    rows = pt.render([100.0], ["arith", "thread"], [], {("arith", 100.0): truth, ("thread", 100.0): truth},
                     {("arith", 100.0): slower, ("thread", 100.0): slower}).splitlines()  # fmt: skip
    assert "| +150.00 +- 12.00 (x 1.50) |" in rows[2] and rows[2].count("| yes |") == 1, rows[2]
    assert "as measured" in rows[3] and "| no |" in rows[3], rows[3]
