"""When to stop measuring, and which cells the next pair measures: a fixed ``processes`` pairs, or with
``precision_pct`` pairs until every cell's 95 % half-width is that narrow (or ``budget_s`` is spent).
Stopping reads only interval widths, never the estimates, so it does not pick the answer."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections import defaultdict
from typing import Callable, Iterable, Optional

from teperf.config import METRIC_FIELD, Config, Schedule, Stats
from teperf.engine import autoschedule
from teperf.plan import Slot
from teperf.records import StopRecord, TrialRecord
from teperf.stats import (
    INDEPENDENT_BASES,
    CellEstimate,
    clean_couples,
    compare_cell,
    generations,
    half_width_pct,
)
from teperf.verdicts import loaded

MAX_PAIRS = 1000  # with --precision the budget bounds the run; this only guards against a runaway loop


@dataclasses.dataclass
class CellState:
    """What the live view shows of one cell and what the stopping rule reads."""

    case_id: int
    key: str
    pairs: int = 0
    delta_pct: Optional[float] = None
    half_pct: Optional[float] = None
    settled: bool = False  # reached the precision target: no more pairs
    dropped: str = ""  # failed or skipped: no more pairs either


@dataclasses.dataclass
class Snapshot:
    cells: list[CellState]
    pairs_done: int
    target_pct: Optional[float]
    budget_s: Optional[float]
    elapsed_s: float
    stop_reason: str = ""

    @property
    def time_left_s(self) -> Optional[float]:
        return None if self.budget_s is None else max(0.0, self.budget_s - self.elapsed_s)


class Adaptive:
    """Which cases go into the next pair and whether to stop; fed every trial as it lands on disk."""

    def __init__(
        self, config: Config, cases: Iterable, n_sides: int, clock: Callable[[], float] = time.monotonic
    ):
        sched = config.schedule
        self.target = sched.precision_pct if n_sides == 2 else None
        self.budget = sched.budget_s
        self.auto = sched.kind == "auto"
        self.max_pairs = MAX_PAIRS if self.target is not None or self.auto else sched.processes
        # --schedule auto plans the couples per pair, unless the user typed them
        self.plans_couples = self.auto and n_sides == 2 and not {"rounds", "trials"} & set(config.from_cli)
        self.choice: Optional[autoschedule.Choice] = None
        self._pair_sched: dict[int, Schedule] = {}  # pair -> the schedule it measured with
        self._trials_s: dict[int, float] = defaultdict(float)  # pair -> its timed trials' wall seconds
        self._costs: list[dict] = []  # finished pairs, as autoschedule.pair_cost reads them
        self._couple_logs: dict[int, dict[int, list[float]]] = {}  # case -> pair -> couple log ratios
        # the table's widest level over its per-step cells (stats.table_levels: all in the family, none
        # changed); one-time cells that join the family at many pairs can widen the table's intervals more
        cells = max(1, sum(not c.skip for c in cases))
        self.stats: Stats = dataclasses.replace(config.stats, alpha=config.stats.alpha / cells)
        self.schedule = sched
        self.field = METRIC_FIELD.get(config.stats.metric, "process_cpu_ns")
        self.clock = clock
        self.t0: Optional[float] = None
        self.cells = {c.id: CellState(c.id, c.key, dropped=c.skip and "skipped" or "") for c in cases}
        self.n_sides = n_sides
        self._trials: dict[int, list[TrialRecord]] = defaultdict(list)  # case -> its trials as they landed
        self._shared: set[tuple] = set()  # (pair, round, trial, attempt, side): trials that shared the core
        self._labels: dict[int, str] = {}  # side index -> its label
        self._seeds: dict[int, int] = {}  # pair -> its hash seed (with forkserver: its generation's)
        self._pair_cost: list[float] = []  # seconds of measuring per case, one figure per finished pair
        self._pair_start: dict[int, float] = {}  # pair -> seconds it took to start (each lane's first: cold)
        self.cold_pairs = max(1, config.lanes)  # pairs 0..lanes-1 start cold, one per lane
        self.rows: dict[int, CellEstimate] = {}  # case -> its interim estimate
        self.pairs_done = 0  # pairs that measured at least one trial
        self._measured: set[int] = set()
        self._finished: set[int] = set()  # pairs that ended: with lanes, others are still measuring
        self.stop_reason = ""
        self.listeners: list[Callable[[Snapshot], None]] = []

    def start(self) -> None:
        """The budget counts from here (before the first pair starts, start-up included)."""
        if self.t0 is None:
            self.t0 = self.clock()
        self._notify()

    def elapsed(self) -> float:
        return 0.0 if self.t0 is None else self.clock() - self.t0

    def open_cases(self, failed: Iterable[int] = ()) -> list[int]:
        """Cases that still need pairs, in case order (a fixed schedule: all, failed ones are skipped)."""
        if self.target is None:
            return list(self.cells)
        failed = set(failed)
        return [cid for cid, c in self.cells.items() if not c.settled and not c.dropped and cid not in failed]

    def next_pair(self, pair: int, failed: Iterable[int] = (), start_s: Optional[float] = None) -> list[int]:
        """The cases pair ``pair`` measures; [] means stop (the reason is in ``stop_reason``). ``start_s``:
        how long it will likely wait for its workers, where the caller knows (PairSchedule)."""
        if self.stop_reason:
            return []
        if self.t0 is None:
            self.start()
        todo = self.open_cases(failed)
        if pair >= self.max_pairs:
            return self._stop("max pairs" if self.target is not None else "")
        if not todo:
            return self._stop(
                "precision reached" if any(c.settled for c in self.cells.values()) else "no cell left"
            )
        budgeted = self.budget is not None and pair > 0  # the first pair always runs
        if budgeted and self.elapsed() + self.pair_estimate(len(todo), start_s) > self.budget:
            return self._stop("budget")
        return todo

    def may_launch(self, pair: int) -> bool:
        """Whether a pair may be started ahead (it is closed unused if the run stops first)."""
        return not self.stop_reason and pair < self.max_pairs

    def out_of_time(self) -> bool:
        """The budget is spent: the current pair stops at the next couple (every sample so far stays)."""
        if self.budget is None or self.elapsed() <= self.budget:
            return False
        self.stop_reason = "budget"
        return True

    def schedule_for(self, pair: int) -> Schedule:
        """The rounds and trials ``pair`` measures with: the latest auto choice, else the config's."""
        sched = self.schedule
        if self.choice is not None:
            sched = dataclasses.replace(sched, rounds=autoschedule.ROUNDS, trials=self.choice.trials)
        self._pair_sched[pair] = sched
        return sched

    def pair_estimate(self, n_cases: int, start_s: Optional[float] = None) -> float:
        """Seconds the next pair will likely take with ``n_cases`` cases: the median cost per case so far,
        plus ``start_s`` or else the median start of the pairs after each lane's first (those paid the
        cold start)."""
        if not self._pair_cost:
            return 0.0
        later = [s for pair, s in self._pair_start.items() if pair >= self.cold_pairs]
        start = start_s if start_s is not None else statistics.median(later) if later else 0.0
        return statistics.median(self._pair_cost) * n_cases + start

    def add_trial(self, record: TrialRecord, slot: Slot, contended: bool = False) -> None:
        """A trial as it lands (record.attempt > 0: its couple again; ``contended``: it shared its core)."""
        if record.per_step_us(self.field) is not None:
            self._trials[slot.case_id].append(record)
            self._labels[slot.side] = record.side
            if contended:
                self._shared.add((record.pair, record.round, record.trial, record.attempt, record.side))
            self._trials_s[record.pair] += record.wall_ns / 1e9
            if record.hash_seed is not None:
                self._seeds[record.pair] = record.hash_seed
            self._measured.add(record.pair)

    def pair_done(
        self,
        pair: int,
        seconds: float,
        n_cases: int,
        skipped: Iterable[int] = (),
        failed: Iterable[int] = (),
        start_s: float = 0.0,
        ahead: bool = False,
    ) -> None:
        """After each pair (``seconds`` measuring ``n_cases`` cases, its lane waited ``start_s`` for it to
        start; ``ahead``: it was started ahead): settle the cells narrow enough."""
        self._finished.add(pair)
        self.pairs_done = len(self._measured)
        self._pair_start[pair] = start_s
        if n_cases:
            self._pair_cost.append(seconds / n_cases)
            sched = self._pair_sched.get(pair, self.schedule)
            self._costs.append(
                {
                    "measure_s": seconds,
                    "trials_s": self._trials_s.pop(pair, 0.0),
                    "couples": sched.rounds * sched.trials * n_cases,
                    "n_cases": n_cases,
                    "wait_s": start_s if pair >= self.cold_pairs else 0.0,  # a lane's first start is no wait
                    "ahead": ahead,
                }
            )
        for why, cids in (("skipped", skipped), ("failed", failed)):
            for cid in cids:
                if cid in self.cells and not self.cells[cid].dropped:
                    self.cells[cid].dropped = why
        for cid in self._trials:
            self.update_cell(cid)
        if self.plans_couples:
            self.replan()
        self._notify()

    def replan(self) -> None:
        """--schedule auto: the couples per pair for the pairs that start measuring from now on."""
        cost = autoschedule.pair_cost(self._costs)
        open_ids = self.open_cases()
        noises = [
            noise
            for cid in open_ids
            if (noise := autoschedule.cell_noise(self.cells[cid].key, self._couple_logs.get(cid, {})))
        ]
        if cost is not None and noises:
            self.choice = autoschedule.choose(cost, noises, len(open_ids))

    def update_cell(self, case_id: int) -> None:
        cell = self.cells[case_id]
        if self.n_sides != 2:
            cell.pairs = len({t.pair for t in self._trials.get(case_id, ())})
            return
        # a pair another lane is still measuring is left out: its figure is not final yet
        trials = [t for t in self._trials.get(case_id, ()) if t.pair in self._finished]
        base, head = self._labels.get(0), self._labels.get(1)
        shared = lambda t: (t.pair, t.round, t.trial, t.attempt, t.side) in self._shared  # noqa: E731
        used, counts = clean_couples(trials, (base, head), self.field, self.stats.max_contended_pct, shared)
        times, by_key, couples = defaultdict(lambda: defaultdict(list)), defaultdict(dict), defaultdict(list)
        for t, v, key in used:
            times[t.side][t.pair].append(v)
            by_key[key][t.side] = v
        for (pair, _, _), c in by_key.items():
            if len(c) == 2:
                couples[pair].append((c[base], c[head]))
        self._couple_logs[case_id] = {p: [math.log(h / b) for b, h in c] for p, c in couples.items()}
        groups = generations(self.schedule.spawn, self._seeds)  # the summary's unit of the intervals
        estimate = self.rows[case_id] = compare_cell(times[base], times[head], self.stats, couples, groups)
        cell.pairs, cell.delta_pct = estimate.n_pairs, estimate.delta_pct
        # One pair's (or one generation's) interval misses between-process noise: no width yet.
        cell.half_pct = half_width_pct(estimate) if estimate.ci_basis in INDEPENDENT_BASES else None
        # Too many couples shared their core: more pairs, while the budget lasts, may bring the share down.
        limit = self.stats.max_contended_pct
        if self.target is not None and not loaded(counts["contended"], counts["couples"], limit):
            # for good: a settled cell gets no more pairs
            cell.settled |= settles(cell.pairs, cell.half_pct, self.target, self.schedule.min_pairs)

    def snapshot(self) -> Snapshot:
        cells = [dataclasses.replace(c) for c in self.cells.values()]
        return Snapshot(cells, self.pairs_done, self.target, self.budget, self.elapsed(), self.stop_reason)

    def stop_record(self) -> StopRecord:
        """What the bundle keeps about how the run ended (summary.py turns it into a note)."""
        unsettled = [self.cells[cid] for cid in self.open_cases()] if self.target is not None else []
        return StopRecord(
            reason=self.stop_reason or "schedule done",
            pairs=self.pairs_done,
            elapsed_s=round(self.elapsed(), 3),
            precision_pct=self.target,
            budget_s=self.budget,
            open=[cell.key for cell in unsettled],
            open_half_pct={c.key: round(c.half_pct, 4) for c in unsettled if c.half_pct is not None},
            schedule=self.choice.to_dict() if self.choice is not None else None,
        )

    def _stop(self, reason: str) -> list[int]:
        self.stop_reason = reason or "schedule done"
        self._notify()
        return []

    def _notify(self) -> None:
        if self.listeners:
            snap = self.snapshot()
            for listener in self.listeners:
                listener(snap)


def settles(pairs: int, half_pct: Optional[float], target_pct: float, min_pairs: int) -> bool:
    """The stopping rule of one cell: enough pairs and a narrow enough interval. Widths only."""
    return pairs >= min_pairs and half_pct is not None and half_pct <= target_pct
