import time
from collections import Counter

import pytest
from conftest import one_error, run_in_process

from teperf.config import load_config
from teperf.errors import TeperfError
from teperf.plan import expand, hash_seed, pair_slots, start_order, total_steps


def _cfg(**kw):
    return load_config("default", {"processes": 4, "rounds": 3, "trials": 4, **kw})


def test_expand_is_the_full_matrix():
    cfg = _cfg(shapes=[(8, 2, 256), (4, 64)])
    cases = expand(cfg)
    assert len(cases) == 3 * 1 * 2
    assert [c.id for c in cases] == list(range(6))
    assert len({c.key for c in cases}) == 6


def test_every_trial_has_both_sides_next_to_each_other():
    cfg = _cfg()
    slots = list(pair_slots(cfg, [0, 1, 2], pair=0, n_sides=2))
    assert len(slots) == 3 * 3 * 4 * 2
    for first, second in zip(slots[::2], slots[1::2]):
        assert (first.round, first.case_id, first.trial) == (second.round, second.case_id, second.trial)
        assert {first.side, second.side} == {0, 1}
        assert (first.position, second.position) == (0, 1)


def test_sides_alternate_and_balance():
    cfg = _cfg()
    for pair in range(4):
        slots = list(pair_slots(cfg, [0, 1, 2], pair=pair, n_sides=2))
        firsts = Counter(s.side for s in slots if s.position == 0)
        assert firsts[0] == firsts[1]  # base goes first exactly half the time
        by_case_round = [s.side for s in slots if s.position == 0 and s.case_id == 0 and s.round == 0]
        assert by_case_round[0] != by_case_round[1]  # A B, then B A


def test_case_order_is_shuffled_per_round_and_reproducible():
    cfg = _cfg(seed=3)
    ids = list(range(8))

    def orders(seed_cfg):
        out = []
        for rnd_slots in range(seed_cfg.schedule.rounds):
            seq = [
                s.case_id
                for s in pair_slots(seed_cfg, ids, 0, 2)
                if s.round == rnd_slots and s.trial == 0 and s.position == 0
            ]
            out.append(seq)
        return out

    a, b = orders(cfg), orders(cfg)
    assert a == b
    assert len({tuple(o) for o in a}) > 1  # rounds differ
    assert orders(_cfg(seed=4)) != a


def test_hash_seeds_and_start_order_change_per_pair():
    seeds = {hash_seed(0, p) for p in range(10)}
    assert len(seeds) == 10
    assert start_order(0, 2) == [0, 1] and start_order(1, 2) == [1, 0]


def test_total_steps():
    cfg = _cfg(iters=10)
    assert total_steps(cfg, 3, 2) == 4 * 3 * 4 * 10 * 3 * 2


def test_prestart_depth_gives_each_worker_a_spare_core():
    from teperf.engine.prestart import MAX_AUTO_PRESTART, prestart_depth

    auto = load_config("default", {"processes": 8})
    assert prestart_depth(auto, 14, 2) == 7  # 16-core GPU machine less the measuring core and its sibling
    assert prestart_depth(auto, 1, 2) == 1  # 2-core CI VM: one pair ahead, both workers share the core
    assert prestart_depth(auto, 0, 2) == 0
    assert (
        prestart_depth(load_config("default", {"processes": 3}), 14, 2) == 2
    )  # never more than the pairs left
    assert prestart_depth(load_config("default", {"processes": 40}), 100, 2) == MAX_AUTO_PRESTART
    assert prestart_depth(load_config("default", {"prestart": 2}), 14, 2) == 2
    assert prestart_depth(load_config("default", {"prestart": 5}), 3, 2) == 3


def test_prestart_depth_follows_start_vs_measuring_time():
    """Issue 34: lanes * (ceil(start / measure) + 1) pairs ahead, at most one spare core per worker."""
    from teperf.engine.prestart import prestart_depth

    many = load_config("default", {"processes": 200})
    # the H200 with 4 lanes: 12 spare cores, a pair starts in 12 s and measures in 8 s
    assert prestart_depth(many, 12, 2, lanes=4) == 6  # before any pair: every spare core starts one
    assert prestart_depth(many, 12, 2, lanes=4, start_s=12, measure_s=8) == 6  # needs 12: the cores bound it
    assert prestart_depth(many, 40, 2, lanes=1, start_s=12, measure_s=30) == 2  # measuring is slow: 1 + 1
    assert prestart_depth(many, 40, 2, lanes=2, start_s=12, measure_s=5) == 8  # 2 * (3 + 1)
    assert prestart_depth(many, 1, 2, lanes=1, start_s=12, measure_s=5) == 1  # the 2-core VM: one pair ahead


class _Plan:
    max_pairs = 4

    def __init__(self):
        self.start_s = {}  # pair -> the start wait the schedule foresaw for it

    def next_pair(self, pair, failed, start_s=None):
        self.start_s[pair] = start_s
        return [0, 1] if pair < self.max_pairs else []

    def may_launch(self, pair):
        return pair < self.max_pairs

    def open_cases(self, failed):
        return [0, 1]


class _Runner:
    def __init__(self, pair, case_ids, fail=False):
        self.pair, self.cases, self.dropped = pair, {c: None for c in case_ids}, set()
        self.launched, self.closed, self.fail, self.launched_at = None, False, fail, None

    def launch(self, cores):
        if self.fail:
            from teperf.engine.spawn import WorkerError

            raise WorkerError("no interpreter")
        self.launched, self.launched_at = cores, time.perf_counter()

    def close(self, hurry=False):
        self.closed = True


def _schedule(import_cores, fail_first=False):
    from teperf.engine.pair import RunContext
    from teperf.engine.prestart import PairSchedule

    made = []

    def new_runner(pair, case_ids):
        made.append(_Runner(pair, case_ids, fail=fail_first and not made))
        return made[-1]

    cfg = load_config("default", {"processes": 4, "prestart": 1})
    ctx = RunContext(cfg, ["base", "head"], None, lane_cores=[1], import_cores=import_cores)
    sched = PairSchedule(ctx, _Plan(), new_runner)
    return sched, made


def test_a_cold_pair_starts_its_sides_at_once_where_spare_cores_allow():
    sched, made = _schedule([2, 3, 4, 5])
    runner, todo = sched.take(0)
    assert runner.pair == 0 and runner.launched == [2, 3]  # both sides import at once, on spare cores
    assert made[1].pair == 1 and made[1].launched == [4, 5]  # the pair ahead shares none of them


def test_a_cold_pair_starts_one_side_after_the_other_where_cores_are_few():
    sched, made = _schedule([0])  # the 2-core CI VM: one spare core, shared by the pair ahead
    runner, _ = sched.take(0)
    assert runner.pair == 0 and runner.launched is None  # PairTrials.start spawns on the lane's core
    assert made[1].launched == [0, 0]


def test_a_cold_pair_whose_launch_fails_starts_cold():
    sched, made = _schedule([2, 3, 4, 5], fail_first=True)
    runner, _ = sched.take(0)
    assert made[0].closed and runner is made[1] and runner.pair == 0 and runner.launched is None


def test_the_schedule_counts_pairs_started_waiting_and_measured():
    """Issue 34: the live line and the stop record's prestart figures."""
    sched, made = _schedule([2, 3, 4, 5])
    sched.stop_rule.pair_done = lambda *args, **kwargs: None
    runner, todo = sched.take(0)
    runner.skipped = {}
    assert sched.line() == "pairs started 2, waiting 1, measured 0"  # pair 0 cold, pair 1 ahead
    sched.pair_done(runner, todo, t0=time.perf_counter(), start_s=0.0)
    figures = sched.figures()
    assert figures["measured"] == 1 and figures["started"] == 2 and figures["spare_cores"] == 4
    assert figures["start_s"] == 0.0 and figures["lane_wait_s"] == 0.0  # pair 0 was no pair started ahead
    ahead, todo = sched.take(0)
    assert ahead is made[1] and ahead.started_ahead
    sched.close_upcoming()
    assert all(r.closed for r in made[2:])


def test_the_budget_check_foresees_the_wait_for_a_pairs_workers():
    """A lane that took the H100 run's last pair 15 s before its workers were ready overran the budget."""
    sched, made = _schedule([2, 3, 4, 5])
    sched.stop_rule.pair_done = lambda *args, **kwargs: None
    runner, todo = sched.take(0)
    assert sched.stop_rule.start_s[0] is None  # nothing started yet: the stop rule's own estimate
    runner.skipped, runner.started_ahead = {}, False
    t0 = time.perf_counter()
    sched.pair_done(runner, todo, t0=t0, start_s=20.0)  # a cold start of 20 s
    ahead, todo = sched.take(0)  # launched just now: about all of a cold start still to wait
    assert ahead is made[1] and 19.0 < sched.stop_rule.start_s[1] <= 20.0
    ahead.skipped, ahead.launched_at = {}, t0 - 30.0
    sched.pair_done(ahead, todo, t0=t0, start_s=2.0)  # launch to ready: 32 s
    made[2].launched_at = time.perf_counter() - 12.0
    sched.take(0)
    assert 19.0 < sched.stop_rule.start_s[2] <= 20.0  # 32 s typical, 12 s of it had


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--processes", "99999999999999999999"], "cannot finish in a day"),
        (["--iters", "1000000000000"], "one trial takes at least"),
        (["--warmup", "1000000000000"], "one warm-up takes at least"),
    ],
)
def test_a_schedule_that_cannot_finish_is_refused_before_any_worker(argv, words, tmp_path, capsys):
    code, out, err = run_in_process(["run", *argv, "--results-dir", str(tmp_path)], capsys)
    one_error(code, out, err, words)
    assert not any(tmp_path.iterdir())  # no bundle: refused before measuring


def test_a_long_schedule_with_a_budget_is_left_to_the_budget():
    from teperf.config import build_config
    from teperf.plan import check_duration

    check_duration(build_config({}, {"processes": 10**12, "budget_s": "5m"}), 3, 1)
    with pytest.raises(TeperfError, match="cannot finish in a day"):
        check_duration(build_config({}, {"processes": 10**12}), 3, 1)


def test_a_schedule_of_many_hours_says_how_long_it_takes(capsys):
    from teperf.config import build_config
    from teperf.plan import check_duration

    check_duration(build_config({}, {"processes": 100000}), 3, 2)
    err = capsys.readouterr().err
    assert "takes about" in err and "days" in err and "--budget" in err, err
    check_duration(build_config({}, {"processes": 8}), 3, 2)
    assert capsys.readouterr().err == ""
