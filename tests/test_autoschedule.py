"""--schedule auto: the planner's choice (engine/autoschedule.py) and the config rules that switch it on."""

import math
import random

import pytest
from test_adaptive import landed

from teperf.config import load_config
from teperf.engine import autoschedule
from teperf.engine.autoschedule import Noise, PairCost, cell_noise, choose, pair_cost


def test_noisy_couples_and_cheap_couples_buy_long_pairs():
    # couples cost little next to a pair's start: the plan measures many of them per pair
    many = choose(PairCost(setup_s=0.5, couple_s=0.01, start_s=10.0), [Noise("a", 0.07, 0.01)], 4)
    few = choose(PairCost(setup_s=0.5, couple_s=0.5, start_s=0.2), [Noise("a", 0.07, 0.01)], 4)
    assert many.couples > few.couples
    assert many.couples == max(autoschedule.COUPLE_CHOICES)


def test_between_pair_noise_buys_more_pairs_not_longer_ones():
    cost = PairCost(setup_s=0.2, couple_s=0.05, start_s=2.0)
    quiet_pairs = choose(cost, [Noise("a", 0.05, 0.003)], 4)
    loud_pairs = choose(cost, [Noise("a", 0.05, 0.05)], 4)
    assert loud_pairs.couples < quiet_pairs.couples


def test_the_choice_is_the_minimum_of_variance_times_time():
    cost, noise = PairCost(0.3, 0.04, start_s=3.0), Noise("a", 0.06, 0.02)
    pick = choose(cost, [noise], 4)
    score = {k: noise.pair_var(k) * cost.pair_s(4, k) for k in autoschedule.COUPLE_CHOICES}
    assert score[pick.couples] == min(score.values())
    assert pick.trials * autoschedule.ROUNDS == pick.couples


def test_a_start_limited_lane_measures_longer_pairs_for_free():
    # the starts allow one pair per 10 s a lane: couples up to that are free
    free = choose(PairCost(0.1, 0.05, period_s=10.0), [Noise("a", 0.07, 0.02)], 4)
    assert free.pair_s == pytest.approx(10.0, abs=4 * 0.05 * 2)
    assert free.couples >= 40


def test_the_widest_cell_decides():
    cost = PairCost(0.2, 0.05, start_s=2.0)
    pick = choose(cost, [Noise("quiet", 0.01, 0.003), Noise("loud", 0.08, 0.01)], 2)
    assert pick.noise.cell == "loud"


def _couples(rng, pairs, k, couple_sd, between_sd):
    out = {}
    for p in range(pairs):
        level = rng.gauss(0, between_sd)
        out[p] = [level + rng.gauss(0, couple_sd) for _ in range(k)]
    return out


def test_cell_noise_recovers_both_terms():
    rng = random.Random(5)
    noise = cell_noise("a", _couples(rng, 60, 24, 0.06, 0.02))
    assert noise.couple_sd == pytest.approx(0.06, rel=0.1)
    assert noise.between_sd == pytest.approx(0.02, rel=0.35)


def test_cell_noise_waits_for_the_pilot_and_floors_the_between_term():
    rng = random.Random(1)
    assert cell_noise("a", _couples(rng, autoschedule.PILOT_PAIRS - 1, 12, 0.05, 0.0)) is None
    noise = cell_noise("a", _couples(rng, 40, 12, 0.05, 0.0))
    assert noise.between_sd >= autoschedule.BETWEEN_FLOOR


def _pair(measure_s, trials_s, couples, wait_s=0.0, ahead=True, n_cases=4):
    return dict(
        measure_s=measure_s, trials_s=trials_s, couples=couples, n_cases=n_cases, wait_s=wait_s, ahead=ahead
    )


def test_pair_cost_splits_setup_from_couples_and_reads_the_start_period():
    pairs = [_pair(6.0, 4.8, 48, wait_s=0.0, ahead=False)] + [_pair(6.0, 4.8, 48, wait_s=4.0)] * 5
    cost = pair_cost(pairs)
    assert cost.couple_s == pytest.approx(0.1)
    assert cost.setup_s == pytest.approx(0.3)
    assert cost.period_s == pytest.approx(10.0) and cost.start_s == 0


def test_pair_cost_without_pairs_started_ahead_adds_the_start():
    pairs = [_pair(6.0, 4.8, 48, wait_s=0.0, ahead=False)] + [_pair(6.0, 4.8, 48, 8.0, ahead=False)] * 3
    cost = pair_cost(pairs)
    assert cost.start_s == pytest.approx(8.0) and cost.period_s == 0
    assert cost.pair_s(4, 12) == pytest.approx(8.0 + 4 * (0.3 + 12 * 0.1))


def test_describe_says_what_it_chose_and_why():
    pick = choose(PairCost(0.3, 0.04, period_s=9.0), [Noise("LayerNormLinear/bf16", 0.07, 0.02)], 4)
    text = autoschedule.describe(pick.to_dict(), 4, {"depth": 6, "spare_cores": 12})
    assert text.startswith("schedule auto: 4 lanes, 6 pairs started ahead on 12 spare cores, 2 rounds x ")
    assert "couples 7.0% sd" in text and "LayerNormLinear/bf16" in text and "one per 9.0 s" in text


# --------------------------------------------------------------------------- when the schedule is auto


def test_precision_or_budget_plans_the_schedule_and_drops_the_configs_fixed_numbers():
    config = load_config("pr-thread")  # its own precision and budget
    assert config.schedule.kind == "auto"
    assert (config.schedule.precision_pct, config.schedule.budget_s) == (0.5, 300.0)
    assert (config.schedule.rounds, config.schedule.trials, config.schedule.iters) == (2, 6, 50)
    assert load_config("default", {"budget_s": "2m"}).schedule.kind == "auto"
    assert load_config("default").schedule.kind == "fixed"  # make demo's 8 pairs, as before


def test_the_configs_own_schedule_runs_when_asked_for_by_name():
    sched = load_config("pr-thread", {"kind": "fixed"}).schedule
    assert (sched.processes, sched.rounds, sched.trials, sched.iters) == (1, 6, 9, 300)
    assert sched.precision_pct is None and sched.budget_s is None


def test_typed_numbers_are_kept_under_auto():
    config = load_config("pr-thread", {"rounds": 4, "iters": 80})
    assert (config.schedule.rounds, config.schedule.iters, config.schedule.trials) == (4, 80, 6)


def test_auto_alone_runs_until_a_default_budget():
    sched = load_config("default", {"kind": "auto"}).schedule
    assert sched.budget_s == 300.0 and sched.precision_pct is None


def test_a_planned_choice_reaches_the_pairs_after_the_pilot():
    from teperf.engine.adaptive import Adaptive
    from teperf.plan import expand

    config = load_config("default", {"budget_s": 60, "modules": ["Linear"]})
    cases = expand(config)
    plan = Adaptive(config, cases, 2, clock=lambda: 0.0)
    plan.start()
    rng = random.Random(2)
    for pair in range(autoschedule.PILOT_PAIRS):
        sched = plan.schedule_for(pair)
        assert (sched.rounds, sched.trials) == (2, 6)  # the pilot: Schedule's defaults
        for rnd in range(sched.rounds):
            for trial in range(sched.trials):
                ratio = math.exp(rng.gauss(0, 0.08))
                for side, value in ((0, 1e6), (1, 1e6 * ratio)):
                    plan.add_trial(*landed(pair, cases[0].id, rnd, trial, side, value / 1000, wall_ns=0.1e9))
        plan.pair_done(pair, 2.5, 1, start_s=5.0, ahead=True)
    assert plan.choice is not None
    assert plan.schedule_for(autoschedule.PILOT_PAIRS).trials == plan.choice.trials
    assert plan.stop_record().schedule["couples"] == plan.choice.couples


# --------------------------------------------------------------------------- real workers on the CPU

ONE_LONG_PAIR = """
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[8, 2, 64]]

[modules.MLP]
factory = "demo_blocks:make_mlp"
kwargs = { hidden = 64 }

[schedule]
processes = 1
rounds = 2
trials = 4
iters = 20
warmup = 10
min_pairs = 4
"""


def _one_long_pair(tmp_path, results_dir, *extra):
    from tests.conftest import ROOT, run_cli

    config = tmp_path / "one-pair.toml"
    config.write_text(ONE_LONG_PAIR)
    planted = ROOT / "examples" / "planted"
    return run_cli(
        "compare", "--config", config, "--base-path", planted / "base", "--head-path", planted / "head",
        "--max-contended", "100", "--format", "json", "--results-dir", results_dir, *extra,
    )  # fmt: skip


@pytest.mark.real_worker
def test_a_cpu_config_of_one_long_pair_calls_nothing_and_its_gate_fails(tmp_path, results_dir):
    import json

    # head's MLP spins 100 us a step: one pair's trial interval would have called it slower
    res = _one_long_pair(tmp_path, results_dir, "--fail-on", "slower")
    (row,) = json.loads(res.stdout)["rows"]
    assert row["n_pairs"] == 1 and row["verdict"] == "inconclusive" and row["verdict_cause"] == "few units"
    assert res.returncode == 1  # --fail-on: undecided is not passing
    assert "MLP/fp32 inconclusive" in res.stderr and "a verdict needs 3" in res.stderr


@pytest.mark.real_worker
@pytest.mark.statistical
def test_the_same_config_under_precision_plans_its_pairs_and_decides(tmp_path, results_dir):
    import json

    # a target every cell meets at once: the run ends at min_pairs (4), whatever the machine's speed
    res = _one_long_pair(tmp_path, results_dir, "--precision", "50")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    (row,) = out["rows"]
    assert row["n_pairs"] == 4 and row["verdict"] == "slower", row  # +100 us on about 500 us
    assert any(n.startswith("schedule auto: 1 lane") for n in out["notes"]), out["notes"]


def test_processes_typed_under_a_planned_budget_is_said_to_be_unused():
    from teperf.commands._common import unused_processes

    line = unused_processes(load_config("default", {"budget_s": "1m", "processes": 4}))
    assert (
        line.startswith("--processes 4 is not used: the schedule plans itself") and "--schedule fixed" in line
    )
    fixed = load_config("default", {"budget_s": "1m", "processes": 4, "kind": "fixed"})
    assert unused_processes(fixed) is None  # fixed: the budget caps those 4 pairs


def test_schedule_plan_benchmark_hands_the_args_after_dashes_to_compare(monkeypatch, tmp_path):
    # `schedule_plan.py --run -- ARGS` (make bench-plan, the GPU scripts): argparse took ARGS for bundles
    import subprocess
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import schedule_plan

    ran = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    argv = [
        "schedule_plan.py",
        "--run",
        "--results-dir",
        str(tmp_path),
        "--",
        "--config",
        "demo",
        "--iters",
        "25",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit):  # nothing ran, so no bundle to show
        schedule_plan.main()
    (cmd,) = ran
    assert cmd[3:8] == ["compare", "--config", "demo", "--iters", "25"]
