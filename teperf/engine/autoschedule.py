"""--schedule auto: how many trial couples each pair measures, chosen for the narrowest interval per minute.

A pair's log ratio varies by ``between² + MEDIAN_EFFICIENCY * couple² / K`` (K couples per cell, the pair
taking their median), and a lane spends ``max(setup + K * couple time, start period)`` on it: short pairs
are many but each is noisy, long ones waste the lane's time once the couple noise is averaged away. The
first pairs (the pilot, on Schedule's defaults) measure both terms; every pair after that is planned from
all the pairs so far. It reads variances and costs, never an estimate, so it cannot steer the answer.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Iterable, Mapping, Optional, Sequence

from teperf.stats import robust_sd

# Var(median of K normal draws) ~ (pi / 2) * sd^2 / K
MEDIAN_EFFICIENCY = math.pi / 2
# No process-to-process noise below this is assumed (log scale): three pilot pairs can read it as 0,
# which would send every pair to the longest schedule
BETWEEN_FLOOR = 0.003
ROUNDS = 2  # every pair runs the cases twice in shuffled order; couples = ROUNDS * trials, always even
COUPLE_CHOICES = tuple(range(4, 65, 2))  # couples per cell and pair the planner picks from
PILOT_PAIRS = 3  # finished pairs before the first plan: two cannot tell between-pair noise at all
WAITED_S = 0.2  # a lane that waited longer than this for its next pair was held up by the starts


@dataclasses.dataclass(frozen=True)
class PairCost:
    """Seconds a lane spends on a pair: per case outside its trials, per couple of one case, the least
    time per pair the starts allow a lane (0: no lane has waited for a start), and with no pairs started
    ahead the start itself, which then adds up instead of overlapping."""

    setup_s: float
    couple_s: float
    period_s: float = 0.0
    start_s: float = 0.0

    def pair_s(self, n_cases: int, couples: int) -> float:
        return max(self.start_s + n_cases * (self.setup_s + couples * self.couple_s), self.period_s)


@dataclasses.dataclass(frozen=True)
class Noise:
    """One cell's noise on the log scale: one couple's sd, and the sd between pairs beyond the couples'."""

    cell: str
    couple_sd: float
    between_sd: float

    def pair_var(self, couples: int) -> float:
        return self.between_sd**2 + MEDIAN_EFFICIENCY * self.couple_sd**2 / couples


@dataclasses.dataclass(frozen=True)
class Choice:
    couples: int
    noise: Noise  # the cell that decides (the widest at the chosen K)
    cost: PairCost
    n_cases: int

    @property
    def trials(self) -> int:
        return self.couples // ROUNDS

    @property
    def pair_s(self) -> float:
        return self.cost.pair_s(self.n_cases, self.couples)

    def to_dict(self) -> dict:
        return {
            "rounds": ROUNDS,
            "trials": self.trials,
            "couples": self.couples,
            "cell": self.noise.cell,
            "couple_sd_pct": round(100 * self.noise.couple_sd, 3),
            "between_sd_pct": round(100 * self.noise.between_sd, 3),
            "setup_s": round(self.cost.setup_s, 3),
            "couple_s": round(self.cost.couple_s, 4),
            "start_period_s": round(self.cost.period_s, 3),
            "pair_s": round(self.pair_s, 3),
        }


def choose(cost: PairCost, noises: Sequence[Noise], n_cases: int) -> Choice:
    """The couples per pair that minimise the widest cell's variance x a lane's seconds per pair."""

    def widest(k: int) -> Noise:
        return max(noises, key=lambda n: n.pair_var(k))

    best = min(COUPLE_CHOICES, key=lambda k: (widest(k).pair_var(k) * cost.pair_s(n_cases, k), k))
    return Choice(best, widest(best), cost, n_cases)


def cell_noise(cell: str, couples: Mapping[int, Sequence[float]]) -> Optional[Noise]:
    """``couples``: pair -> the log ratios of its couples. None until PILOT_PAIRS pairs have couples."""
    pairs = {p: list(v) for p, v in couples.items() if len(v) >= 3}
    if len(pairs) < PILOT_PAIRS:
        return None
    sds = [robust_sd(v) for v in pairs.values()]
    couple_sd = math.sqrt(statistics.mean(s * s for s in sds))
    medians = [statistics.median(v) for v in pairs.values()]
    explained = statistics.mean(MEDIAN_EFFICIENCY * couple_sd**2 / len(v) for v in pairs.values())
    between = math.sqrt(max(statistics.variance(medians) - explained, BETWEEN_FLOOR**2))
    return Noise(cell, couple_sd, between)


def pair_cost(pairs: Iterable[Mapping[str, float]]) -> Optional[PairCost]:
    """From finished pairs: ``measure_s``, ``trials_s`` (the timed trials' wall time), ``couples``
    (couples of all its cases), ``n_cases``, ``wait_s`` (the lane's wait for it; 0 for a lane's first,
    cold, pair) and ``ahead`` (it was started ahead: its start overlapped the pair before)."""
    pairs = [p for p in pairs if p["couples"] and p["n_cases"]]
    if not pairs:
        return None
    later = [p for p in pairs if p["wait_s"] > 0 or p["ahead"]]
    ahead = not later or 2 * sum(bool(p["ahead"]) for p in later) >= len(later)
    couple_s = sum(p["trials_s"] for p in pairs) / sum(p["couples"] for p in pairs)
    setup_s = statistics.median(max(0.0, p["measure_s"] - p["trials_s"]) / p["n_cases"] for p in pairs)
    waits = [p["wait_s"] for p in pairs if p["wait_s"] > 0]
    if not ahead:
        return PairCost(setup_s, couple_s, start_s=statistics.median(waits) if waits else 0.0)
    waited = [p["wait_s"] + p["measure_s"] for p in pairs if p["wait_s"] > WAITED_S]
    return PairCost(setup_s, couple_s, period_s=statistics.median(waited) if waited else 0.0)


def describe(choice: Mapping, lanes: int, prestart: Optional[Mapping] = None) -> str:
    """The footer's line: what the plan chose and why (``choice``: Choice.to_dict as the bundle keeps it)."""
    per_pair = f"{choice['rounds']} rounds x {choice['trials']} trials"
    why = (
        f"couples {choice['couple_sd_pct']:.1f}% sd, pairs {choice['between_sd_pct']:.1f}% beyond them "
        f"({choice['cell']}); a pair {choice['pair_s']:.1f} s a lane"
    )
    if choice.get("start_period_s"):
        why += f", the starts allow one per {choice['start_period_s']:.1f} s"
    ahead = ""
    if prestart and prestart.get("depth") is not None:
        ahead = f", {prestart['depth']} pairs started ahead on {prestart.get('spare_cores', 0)} spare cores"
    lane_text = f"{lanes} lane{'s' if lanes != 1 else ''}"
    return (
        f"schedule auto: {lane_text}{ahead}, {per_pair} per pair: the narrowest interval per minute ({why})"
    )
