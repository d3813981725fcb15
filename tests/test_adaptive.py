"""The stopping rule (teperf/engine/adaptive.py) on simulated per-pair data, with an injected clock."""

import dataclasses

import numpy as np
import pytest

from teperf.config import load_config
from teperf.engine.adaptive import Adaptive, settles
from teperf.plan import Slot, expand
from teperf.records import TrialRecord

ITERS = 50


def landed(pair, case_id, round_, trial, side, us, iters=ITERS, **fields):
    """A trial of ``us`` per step and its slot, as the coordinator hands them to Adaptive.add_trial."""
    fields.setdefault("wall_ns", 0.0)
    record = TrialRecord(
        pair=pair,
        round=round_,
        trial=trial,
        side=("base", "head")[side],
        case_id=case_id,
        iters=iters,
        process_cpu_ns=us * iters * 1000,
        **fields,
    )
    return record, Slot(round_, case_id, trial, side, side)


class Clock:
    """Time moves only when the test says so."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make(
    precision=None, budget=None, min_pairs=4, processes=8, modules="Linear,LayerNormLinear", lanes=1, **stats
):
    cfg = load_config(
        "default",
        {
            "modules": modules.split(","),
            "processes": processes,
            "precision_pct": precision,
            "budget_s": budget,
        },
    )
    cfg = dataclasses.replace(
        cfg,
        lanes=lanes,
        schedule=dataclasses.replace(cfg.schedule, min_pairs=min_pairs),
        stats=dataclasses.replace(cfg.stats, **stats) if stats else cfg.stats,
    )
    clock = Clock()
    cases = expand(cfg)
    return Adaptive(cfg, cases, 2, clock=clock), clock, cases


def feed(ad, pair, case_id, ratios, base=100.0):
    """One pair of one cell: couples whose head/base ratios are ``ratios``."""
    for k, r in enumerate(ratios):
        for side, us in ((0, base), (1, base * r)):
            ad.add_trial(*landed(pair, case_id, 0, k, side, us))


def run_pairs(ad, clock, pair_sd, rng, shift=(0.0, 0.0), seconds_per_case=1.0, max_pairs=200, failed=()):
    """Drive ``ad`` like the coordinator: ask, feed the asked cells, report the pair. Returns the
    cases each pair measured."""
    asked = []
    for pair in range(max_pairs):
        todo = ad.next_pair(pair, failed)
        if not todo:
            break
        asked.append(todo)
        level = rng.normal(0, 1)  # the same draw for every cell of a pair
        for cid in todo:
            r = np.exp(shift[cid] + pair_sd[cid] * level + rng.normal(0, 0.001, 4))
            feed(ad, pair, cid, r)
        clock.now += seconds_per_case * len(todo)
        ad.pair_done(pair, seconds_per_case * len(todo), len(todo))
    return asked


def test_fixed_schedule_is_every_case_for_processes_pairs():
    ad, clock, cases = make(processes=5)
    asked = run_pairs(ad, clock, [0.05, 0.05], np.random.default_rng(0))
    assert asked == [[c.id for c in cases]] * 5
    assert ad.stop_record().reason == "schedule done"


def test_never_stops_before_min_pairs_even_when_narrow():
    ad, clock, _ = make(precision=5.0, min_pairs=4)
    asked = run_pairs(ad, clock, [1e-6, 1e-6], np.random.default_rng(1))  # next to no noise: narrow at once
    assert len(asked) == 4
    assert all(c.settled and c.pairs == 4 for c in ad.cells.values())
    assert ad.stop_reason == "precision reached"


def test_stops_when_widths_reach_the_target():
    ad, clock, _ = make(precision=1.0, min_pairs=4)
    asked = run_pairs(ad, clock, [0.02, 0.02], np.random.default_rng(2))
    for cell in ad.cells.values():
        assert cell.settled and cell.half_pct <= 1.0
    # it went on past min_pairs because 2 % between pairs needs ~20 pairs for +-1 %
    assert 8 < len(asked) < 100
    assert ad.stop_record().open == []


def test_settled_cells_drop_out_of_later_pairs():
    ad, clock, cases = make(precision=1.0, min_pairs=4)
    quiet, loud = (c.id for c in cases)
    asked = run_pairs(ad, clock, {quiet: 0.001, loud: 0.02}, np.random.default_rng(3))
    assert asked[:4] == [[quiet, loud]] * 4
    assert all(todo == [loud] for todo in asked[4:]) and len(asked) > 8
    assert ad.cells[quiet].pairs == 4 and ad.cells[loud].pairs == len(asked)


def test_stopping_looks_at_widths_not_at_estimates():
    # The same noise draws, one cell A/A and one 20 % slower: they stop at the same pair.
    stops = []
    for shift in (0.0, np.log(1.2)):
        ad, clock, cases = make(precision=1.0, modules="Linear")
        run_pairs(ad, clock, [0.02], np.random.default_rng(4), shift=[shift])
        stops.append((ad.cells[0].pairs, round(ad.cells[0].half_pct, 9)))
    assert stops[0] == stops[1]


def test_budget_stops_launching_pairs_that_would_not_fit():
    # 2 cells x 10 s per cell = 20 s a pair; 70 s budget: three pairs fit (60 s), a fourth would end at 80 s.
    ad, clock, _ = make(precision=0.01, budget=70, min_pairs=4)
    asked = run_pairs(ad, clock, [0.02, 0.02], np.random.default_rng(5), seconds_per_case=10.0)
    assert len(asked) == 3 and ad.stop_reason == "budget"
    record = ad.stop_record()
    assert record.elapsed_s == 60.0 and len(record.open) == 2
    # each open cell's width at the end, for the note's "about N min in all would reach it"
    assert record.open_half_pct == {ad.cells[c].key: round(ad.cells[c].half_pct, 4) for c in ad.cells}
    assert min(record.open_half_pct.values()) > 0.01


def test_budget_cuts_the_current_pair_once_spent():
    ad, clock, _ = make(precision=1.0, budget=30)
    assert ad.next_pair(0) and not ad.out_of_time()
    clock.now += 29.0
    assert not ad.out_of_time()
    clock.now += 2.0
    assert ad.out_of_time()
    assert ad.next_pair(1) == [] and ad.stop_reason == "budget"


def test_a_known_start_wait_counts_against_the_budget():
    ad, clock, _ = make(precision=1.0, budget=100)
    ad.start()
    ad.pair_done(0, 20.0, 2, start_s=30.0)
    clock.now += 60.0
    assert ad.next_pair(1, start_s=10.0)  # 60 + 10 + 20 fits
    assert ad.next_pair(2, start_s=25.0) == [] and ad.stop_reason == "budget"  # 60 + 25 + 20 does not


def test_budget_alone_caps_a_fixed_schedule():
    ad, clock, _ = make(budget=45, processes=8)
    asked = run_pairs(ad, clock, [0.02, 0.02], np.random.default_rng(6), seconds_per_case=10.0)
    assert len(asked) == 2 and ad.stop_reason == "budget"  # 20 s a pair: a third would end at 60 s


def test_estimate_leaves_out_the_cold_start_of_the_first_pair():
    ad, clock, _ = make(precision=1.0)
    ad.start()
    assert ad.pair_estimate(2) == 0.0
    ad.pair_done(0, 4.0, 2, start_s=40.0)  # the first pair pays the cold start; later ones were started ahead
    assert ad.pair_estimate(2) == 4.0
    ad.pair_done(1, 6.0, 2, start_s=1.0)
    ad.pair_done(2, 6.0, 2, start_s=3.0)
    assert ad.pair_estimate(1) == pytest.approx(3.0 + 2.0)


def test_with_lanes_the_estimate_leaves_out_every_lanes_cold_first_pair():
    ad, clock, _ = make(precision=1.0, lanes=2)
    ad.start()
    ad.pair_done(1, 4.0, 2, start_s=35.0)  # lane 1's first pair ended first: also cold
    ad.pair_done(0, 4.0, 2, start_s=40.0)
    ad.pair_done(2, 4.0, 2, start_s=1.0)
    assert ad.pair_estimate(1) == pytest.approx(2.0 + 1.0)


def test_a_cell_settles_on_finished_pairs_only():
    """With lanes, another lane's pair is still measuring while one ends: its trials so far do not count."""
    ad, clock, cases = make(precision=50.0, min_pairs=2, modules="Linear")
    ad.start()
    (cid,) = [c.id for c in cases]
    feed(ad, 0, cid, [1.01, 1.02])
    feed(ad, 1, cid, [1.0, 1.01])  # pair 1 in flight on the other lane
    ad.pair_done(0, 1.0, 1)
    assert ad.cells[cid].pairs == 1 and not ad.cells[cid].settled
    ad.pair_done(1, 1.0, 1)
    assert ad.cells[cid].pairs == 2 and ad.cells[cid].settled


def test_failed_and_skipped_cells_get_no_more_pairs():
    ad, clock, cases = make(precision=1.0, modules="Linear,LayerNormLinear,LayerNormMLP")
    a, b, c = (x.id for x in cases)
    assert ad.next_pair(0) == [a, b, c]
    ad.pair_done(0, 3.0, 3, skipped={b: "needs a GPU"}, failed={c: "crash"})
    assert ad.next_pair(1, failed={c: "crash"}) == [a]
    assert {x.key.split("/")[0]: x.dropped for x in ad.cells.values()} == {
        "Linear": "",
        "LayerNormLinear": "skipped",
        "LayerNormMLP": "failed",
    }


def test_a_cell_needs_pairs_and_width():
    assert settles(4, 0.9, 1.0, 4)
    assert not settles(3, 0.1, 1.0, 4)
    assert not settles(10, 1.1, 1.0, 4)
    assert not settles(10, None, 1.0, 4)


def test_listeners_see_each_pair_and_the_budget():
    ad, clock, _ = make(precision=50.0, budget=100)
    seen = []
    ad.listeners.append(seen.append)
    run_pairs(ad, clock, [0.01, 0.01], np.random.default_rng(7), seconds_per_case=5.0)
    assert seen[0].pairs_done == 0 and seen[0].time_left_s == 100
    assert [s.pairs_done for s in seen[1:5]] == [1, 2, 3, 4]
    last = seen[-1]
    assert last.stop_reason == "precision reached" and last.time_left_s == pytest.approx(60.0)
    assert all(c.settled and c.delta_pct is not None for c in last.cells)


@pytest.mark.slow  # a simulation
def test_aa_false_changes_stay_near_alpha_under_the_stopping_rule():
    # Stopping on width only must not turn the 5 % of a fixed schedule into much more. A rule
    # that looked at the estimate (stop once the interval excludes 0) would call most A/A cells.
    rng = np.random.default_rng(8)
    n, changes, pairs = 600, 0, []
    for _ in range(n):
        ad, clock, _ = make(precision=1.0, budget=None, modules="Linear", min_effect_pct=0.0, min_pairs=8)
        run_pairs(ad, clock, [0.02], rng)
        changes += ad.rows[0].verdict in ("slower", "faster")
        pairs.append(ad.rows[0].n_pairs)
    assert changes / n <= 0.085, changes / n
    assert np.median(pairs) > 10  # the rule did run long enough to matter


def test_live_view_draws_cells_and_budget_left():
    import io

    from rich.console import Console

    from teperf.commands._live import LiveView

    ad, clock, _ = make(precision=50.0, budget=300)
    view = LiveView()
    ad.listeners.append(view.update)
    progress = view.factory(None)
    run_pairs(ad, clock, [0.01, 0.01], np.random.default_rng(9), seconds_per_case=5.0)
    progress(50, "pair 8 Linear")
    buf = io.StringIO()
    Console(file=buf, width=120).print(view)
    text = buf.getvalue()
    assert (
        "4 pairs done; target +-50%; budget left 4:" in text
    )  # 300 s less 40 s measured: 4:20 or a tick less
    assert "Linear/fp32/8x2x64/eager" in text and "settled" in text and "+-" in text


def test_a_cell_that_lost_its_pairs_drops_out_of_the_schedule():
    # The coordinator hands CellRetries.failed to the schedule: a cell whose worker died in
    # LOST_PAIRS_PER_CELL pairs is failed and no later pair measures it; one lost pair is not enough.
    from teperf.engine.pair import LOST_PAIRS_PER_CELL, CellRetries

    ad, clock, cases = make(precision=0.01, budget=3600, min_pairs=2)
    retries = CellRetries()
    ad.start()
    dead = cases[0].id
    for pair in range(LOST_PAIRS_PER_CELL):
        todo = ad.next_pair(pair, retries.failed)
        assert dead in todo
        retries.lose(dead, pair, "head: worker died")
        for cid in todo:
            if cid != dead:
                feed(ad, pair, cid, [1.0, 1.01, 0.99, 1.0])
        ad.pair_done(pair, 1.0, len(todo), failed=retries.failed)
    assert dead in retries.failed and dead not in ad.next_pair(LOST_PAIRS_PER_CELL, retries.failed)


def test_the_live_rule_takes_fork_server_generations_as_the_unit_as_the_summary_does():
    """--spawn forkserver: pairs are grouped by the hash seed their trials carry (stats.generations), the
    rule the summary uses, so --precision waits for generations, not pairs."""
    ad, clock, cases = make(processes=4, modules="Linear")
    ad.schedule = dataclasses.replace(ad.schedule, spawn="forkserver")
    for pair in range(4):
        seed = 11 if pair < 2 else 22  # two generations of two pairs
        for k, r in enumerate((1.01, 1.02, 1.03)):
            for side, us in ((0, 100.0), (1, 100.0 * r)):
                ad.add_trial(*landed(pair, 0, 0, k, side, us, hash_seed=seed))
        ad.pair_done(pair, 1.0, 1)
    assert ad.rows[0].n_generations == 2 and ad.rows[0].ci_basis == "generations"
