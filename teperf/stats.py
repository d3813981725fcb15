"""Statistics of one cell. The process pair is the unit: r_p = the median ln(head / base) over its
adjacent A/B trial couples (cancels drift between pairs); the estimate is the mean of r_p with a Student t
interval over pairs (one pair: over its couples), or over fork-server generations, which move together."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from statistics import NormalDist, median
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from teperf.config import Stats
from teperf.verdicts import (
    FEW_UNITS,
    INCONCLUSIVE,
    LOAD,
    MIN_VERDICT_UNITS,
    NO_CHANGE,
    TOO_FEW_GENERATIONS,
    TOO_FEW_PAIRS,
    any_load,
    inconclusive_bound,
    loaded,
    verdict,
)

# ci_basis values whose interval is taken over independent draws (the width --precision aims at)
INDEPENDENT_BASES = ("pairs", "generations")


def robust_sd(values: Sequence[float]) -> float:
    """The median absolute deviation scaled to a normal sd: a stalled couple does not move it."""
    values = np.asarray(values, dtype=float)
    return float(np.median(np.abs(values - np.median(values)))) * 1.4826


def spread_pct(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return float((q3 - q1) / med * 100) if med > 0 else None


def preload() -> None:
    """Import scipy.special before measuring: a Ctrl-C inside its lazy import leaves it half-imported,
    and the summary of what was measured then fails."""
    from scipy import special  # noqa: F401


def t_quantile(q: float, dof: float) -> float:
    """Student t's q-quantile: the ufunc scipy.stats.t.ppf wraps, without its 0.3 ms of argument checks a
    call (the schedule computes intervals after every pair)."""
    from scipy import special  # imported here: CLI start-up

    return float(special.stdtrit(dof, q))


def t_interval(samples: Sequence[float], alpha: float) -> tuple[float, float, float, float]:
    """(mean, half_width, sd, mde) of a t interval; half_width = inf when n < 2."""
    n = len(samples)
    mean = float(np.mean(samples))
    if n < 2:
        return mean, math.inf, math.nan, math.inf
    sd = float(np.std(samples, ddof=1))
    se = sd / math.sqrt(n)
    tcrit = t_quantile(1 - alpha / 2, n - 1)
    mde = (tcrit + t_quantile(0.8, n - 1)) * se
    return mean, tcrit * se, sd, mde


def t_p_value(centre: float, samples: Sequence[float]) -> float | None:
    """Two-sided p of Student's t for ``centre`` with the standard error of ``samples``: below alpha exactly
    when t_interval's interval around ``centre`` excludes 0."""
    from scipy import special

    n = len(samples)
    se = float(np.std(samples, ddof=1)) / math.sqrt(n) if n >= 2 else math.nan
    if not math.isfinite(se):
        return None
    return float(2 * special.stdtr(n - 1, -abs(centre) / se)) if se > 0 else float(centre == 0)


# One cell's paired estimate (compare_cell; single_cell: one side's), handed whole: the per-step figures of
# its summary row (teperf.schema.ROW_FIELDS says what each is); None where the cell has no pair or interval.
CELL_FIELDS = tuple(
    """n_pairs n_trials base_spread_pct head_spread_pct base_us head_us delta_us delta_pct ci_low_pct
    ci_high_pct ci_low_us ci_high_us ci_basis pair_sd_pct mde_pct p_value min_p verdict verdict_cause
    bound_pct load_bound_pct pair_logs n_generations""".split()
)
CellEstimate = dataclasses.make_dataclass(
    "CellEstimate", [(name, Any, None) for name in CELL_FIELDS], frozen=True, kw_only=True
)


def pairs_to_settle(half: float, pairs: int, target: float, alpha: float) -> int:
    """The pairs at which a t interval now ``half`` wide over ``pairs`` pairs would be ``target`` wide (the
    same unit), its spread as measured: t(N-1) sd / sqrt(N) (bisect's parts and GOOD..BAD alike)."""
    sd = half * math.sqrt(pairs) / t_quantile(1 - alpha / 2, pairs - 1)
    n = max(pairs + 1, math.ceil((NormalDist().inv_cdf(1 - alpha / 2) * sd / target) ** 2))
    while t_quantile(1 - alpha / 2, n - 1) * sd / math.sqrt(n) > target:
        n += max(1, n // 20)
    return n


def pct_of_log(r: float) -> float:
    """A log ratio as a percent change: ln(head/base) 0.01 -> +1.005 %."""
    return (math.exp(r) - 1) * 100


def half_width_pct(cell) -> float | None:
    """The half-width in % that ``--precision`` aims at of a CellEstimate or Row (None: no interval), on the
    log scale so that a +20 % cell and an A/A cell with the same noise stop at the same pair."""
    if cell.ci_low_pct is None or cell.ci_high_pct is None:
        return None
    return pct_of_log((math.log1p(cell.ci_high_pct / 100) - math.log1p(cell.ci_low_pct / 100)) / 2)


def compare_cell(
    base: Mapping[int, Sequence[float]],
    head: Mapping[int, Sequence[float]],
    cfg: Stats,
    couples: Mapping[int, Sequence[tuple[float, float]]] | None = None,
    groups: Mapping[int, int] | None = None,
    load_bias: float | None = None,
) -> CellEstimate:
    """base/head: pair -> per-step times (us) of its trials; couples: pair -> adjacent (base, head) trial
    times; groups: pair -> its fork-server generation (None: every pair is its own unit); load_bias: the
    bias load could add (load_bound, log scale; None: no load rule), which widens the interval both ways."""
    couples = couples or {}
    pairs = sorted(set(base) & set(head))
    counts = CellEstimate(
        n_pairs=len(pairs),
        n_trials=sum(len(v) for v in base.values()),  # every base trial on disk, matched or not
        base_spread_pct=spread_pct([v for p in pairs for v in base[p]]),
        head_spread_pct=spread_pct([v for p in pairs for v in head[p]]),
    )
    if not pairs:
        return counts

    # statistics.median: the same value as np.median on these short lists of positive times, 10x faster
    def pair_log_ratio(p: int) -> float:
        if couples.get(p):
            return median([math.log(h / b) for b, h in couples[p]])
        return math.log(median(head[p]) / median(base[p]))

    logs = np.array([pair_log_ratio(p) for p in pairs])
    units = unit_logs(pairs, logs, groups)
    n_units = len(units)
    basis = "pairs" if n_units == len(pairs) else "generations" if n_units > 1 else "one generation"
    if basis == "one generation":
        units = logs
    mean, half, sd, mde = t_interval(units, cfg.alpha)
    bias = load_bias or 0.0
    width_from = units
    b = float(math.exp(np.mean([math.log(median(base[p])) for p in pairs])))
    if len(pairs) == 1:
        basis = "trials"  # nothing to replicate over: the couples of the one pair give the width
        one = couples.get(pairs[0], ())
        if len(one) >= 2:
            width_from = [math.log(h / b) for b, h in one]
            _, half, _, mde = t_interval(width_from, cfg.alpha)
    delta_pct = pct_of_log(mean)
    half += bias
    low_pct, high_pct = (None, None)
    if math.isfinite(half):
        low_pct, high_pct = pct_of_log(mean - half), pct_of_log(mean + half)
    called, cause = verdict(delta_pct, low_pct, high_pct, cfg), None
    if basis not in INDEPENDENT_BASES or len(units) < MIN_VERDICT_UNITS:
        # the interval is shown, but the design cannot back a verdict on it (verdicts.FEW_UNITS)
        called, cause = INCONCLUSIVE, FEW_UNITS
    elif load_bias is not None:
        narrow = (pct_of_log(mean - half + bias), pct_of_log(mean + half - bias))
        if math.isfinite(half) and verdict(delta_pct, *narrow, cfg) != called:
            cause = LOAD  # the change is within what load could make
    return dataclasses.replace(
        counts,
        base_us=b,
        head_us=b * math.exp(mean),
        delta_pct=delta_pct,
        delta_us=b * math.exp(mean) - b,
        ci_low_pct=low_pct,
        ci_high_pct=high_pct,
        ci_low_us=None if low_pct is None else b * low_pct / 100,
        ci_high_us=None if high_pct is None else b * high_pct / 100,
        ci_basis=basis,
        pair_sd_pct=sd * 100 if basis in INDEPENDENT_BASES else None,
        mde_pct=None if not math.isfinite(mde) else pct_of_log(mde),
        # the p of the widened interval: below alpha exactly when it excludes 0
        p_value=t_p_value(math.copysign(max(abs(mean) - bias, 0.0), mean), width_from)
        if math.isfinite(half)
        else None,
        min_p=0.0,
        verdict=called,
        verdict_cause=cause,
        bound_pct=inconclusive_bound(low_pct, high_pct, cfg) if called == INCONCLUSIVE else None,
        load_bound_pct=None if load_bias is None else pct_of_log(bias),
        pair_logs=dict(zip(pairs, logs.tolist())),
        n_generations=n_units if n_units < len(pairs) else None,
    )


def load_bound(couples: Mapping[int, Sequence[tuple[float, float, bool]]], alpha: float) -> tuple[float, str]:
    """The bias load could add to a cell's estimate (log scale), and what measured it. ``couples``: pair ->
    (ln(head/base), ln(wall/CPU) of the head trial minus the base's, contended) of each couple its figures
    rest on. Interleaving makes load hit both sides alike in expectation; the bias left is bounded twice,
    the larger counting: (a) the head's lost time over the base's (mean over pairs of the median over
    couples) times the share the estimate carries, |slope| + margin (within_pair_slope) at most 1 (taken
    whole, the head's trials losing 17-23 % less under a hog bounded its CPU time by 18-26 %); (b) how far
    the contended couples move the estimate from their pair's clean ones (no clean one: the mean gap
    elsewhere), in full at twice the gap's margin, none within it (one clean couple in 32 had made its noise
    a 23 % bound)."""
    asym = [float(np.median([x for _, x, _ in c])) for c in couples.values() if c]
    slope, margin = within_pair_slope(couples, 1, alpha)
    lost = abs(float(np.mean(asym))) * min(1.0, abs(slope) + margin) if asym else 0.0
    bound, source = lost, "the head's lost time over the base's" if asym else ""
    shifts, gaps, unmeasured = [], [], 0
    for c in couples.values():
        clean, shared = [r for r, _, s in c if not s], [r for r, _, s in c if s]
        if clean and shared:
            shifts.append(float(np.median([r for r, _, _ in c]) - np.median(clean)))
            gaps.append(float(np.median(shared) - np.median(clean)))
        elif shared:
            unmeasured += 1  # nothing clean to hold it against in this pair
        else:
            shifts.append(0.0)
    if gaps:
        gap, margin = within_pair_slope(couples, 2, alpha)
        shown = 1.0 if abs(gap) >= 2 * margin else max(0.0, abs(gap) / margin - 1)  # none within its margin
        shift = abs(float(np.mean(shifts + [float(np.mean(gaps))] * unmeasured))) * shown
        if shift > bound:
            bound, source = shift, "contended against clean couples"
    return bound, source


def within_pair_slope(
    couples: Mapping[int, Sequence[tuple[float, float, bool]]], column: int, alpha: float
) -> tuple[float, float]:
    """(slope, its 1 - alpha t margin) of the least-squares line of the couples' log ratio on their
    ``column`` (1: lost-time asymmetry, 2: contended), each pair centred on its own means so that the change
    and the pair's level drop out; the margin is inf where that column does not vary enough to tell."""
    pairs = [np.array(c, dtype=float)[:, [0, column]] for c in couples.values() if len(c) >= 2]
    d = np.concatenate([m - m.mean(axis=0) for m in pairs]) if pairs else np.zeros((0, 2))
    dof, sxx = len(d) - len(pairs) - 1, float(d[:, 1] @ d[:, 1])
    if dof < 1 or sxx < 1e-12:
        return 0.0, math.inf
    slope = float(d[:, 1] @ d[:, 0]) / sxx
    se = math.sqrt(float(np.sum((d[:, 0] - slope * d[:, 1]) ** 2)) / dof / sxx)
    return slope, t_quantile(1 - alpha / 2, dof) * se


def unit_logs(pairs: Sequence[int], logs: np.ndarray, groups: Mapping[int, int] | None) -> np.ndarray:
    """The independent draws of the interval: the pairs' log ratios, or each generation's mean of them."""
    if not groups:
        return logs
    by_group: dict[int, list[float]] = {}
    for p, r in zip(pairs, logs):
        by_group.setdefault(groups.get(p, -1 - p), []).append(float(r))
    return logs if len(by_group) == len(pairs) else np.array([float(np.mean(v)) for v in by_group.values()])


def generations(spawn: str | None, seeds: Mapping[int, int]) -> dict[int, int] | None:
    """pair -> its fork-server generation (the hash seed its server gave every fork); None unless forked."""
    return dict(seeds) if spawn == "forkserver" and seeds else None


def single_cell(values: Mapping[int, Sequence[float]]) -> CellEstimate:
    """One side alone (`teperf run`): median, spread, between-pair spread (no head: no change, no verdict)."""
    all_v = [v for p in sorted(values) for v in values[p]]
    pair_medians = [float(np.median(values[p])) for p in sorted(values) if values[p]]
    return CellEstimate(
        # the same definition as compare_cell's: geometric mean of per-pair medians
        base_us=float(np.exp(np.mean(np.log(pair_medians)))) if pair_medians else None,
        n_pairs=len(pair_medians),
        n_trials=len(all_v),
        base_spread_pct=spread_pct(all_v),
        head_spread_pct=None,
        pair_sd_pct=float(np.std(pair_medians, ddof=1) / np.mean(pair_medians) * 100)
        if len(pair_medians) >= 2
        else None,
    )


def onetime_pairs_needed(alpha: float) -> int:
    """The fewest units with a signed-rank interval: the smallest two-sided p-value is 2 / 2**n."""
    return max(2, math.ceil(1 - math.log2(alpha)))


def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(W+ <= j), j = 0..n(n+1)/2: the exact null distribution of W+ (each rank in or out with p 1/2)."""
    dist = np.ones(1)
    for rank in range(1, n + 1):
        dist = (np.concatenate([dist, np.zeros(rank)]) + np.concatenate([np.zeros(rank), dist])) / 2
    return np.cumsum(dist)


def signed_rank_interval(logs: Sequence[float], alpha: float) -> tuple[float, float, float, float] | None:
    """(Hodges-Lehmann estimate, low, high, p): the median Walsh average, the exact Wilcoxon signed-rank
    interval and the p-value that is <= alpha exactly when it excludes 0; None below onetime_pairs_needed.
    It holds whatever the tails (the sides are exchangeable in an A/A): one-time costs are few and
    heavy-tailed, where Student's t read 2 of 8 A/A cells slower."""
    x = np.sort(np.asarray(logs, dtype=float))
    n = len(x)
    if n < onetime_pairs_needed(alpha):
        return None
    cdf = _signed_rank_cdf(n)
    below = int(np.searchsorted(cdf, alpha / 2 * (1 + 1e-9), side="right"))  # P(W+ < below) <= alpha/2
    walsh = np.sort((x[:, None] + x[None, :])[np.triu_indices(n)] / 2)
    # the interval excludes 0 when fewer than `below` Walsh averages lie on one side of it
    p = min(1.0, 2 * float(cdf[min(int(np.sum(walsh <= 0)), int(np.sum(walsh >= 0)))]))
    return float(np.median(walsh)), float(walsh[below - 1]), float(walsh[len(walsh) - below]), p


def onetime_rule(
    alpha: float, floor_pct: float, unit: str = "pairs", needed_alpha: float | None = None
) -> str:
    """The one-time rule in words, for the report's footer (onetime_cell applies it); ``needed_alpha``: the
    level the fewest units must reach (the table's), when it is not ``alpha``."""
    needed = onetime_pairs_needed(needed_alpha or alpha)
    return (
        f"verdicts: Hodges-Lehmann estimate and exact signed-rank {level_text(alpha)} interval over "
        f"{unit} of ln(head/base), from {needed} {unit} on ('too few {unit}' "
        f"below); slower/faster when the interval excludes 0 and the estimate passes the min effect: the "
        f"larger of --min-effect-once ({floor_pct:g}%) and the cost's A/A spread in the cell (robust sd over "
        f"{unit}); "
        f"no change when the interval lies inside +-{floor_pct:g}%"
    )


def level_text(alpha: float) -> str:
    """An interval's confidence level as the tables print it: 95%, 98.3%."""
    return f"{(1 - alpha) * 100:.3g}%"


@dataclasses.dataclass(frozen=True)
class TableLevels:
    """A compare table's rule across its cells (table_levels): one interval level for every cell."""

    alpha: float  # every interval is a 1 - alpha one
    floor: float  # a cell whose smallest reachable p-value is above this gets no verdict
    family: int  # the cells that could reach a verdict
    changed: int  # of them, those whose interval excludes 0
    cells: int  # every cell with an interval: at onetime_pairs_needed(alpha / cells) pairs all are family


def table_levels(cells: Sequence[tuple[float, float]], alpha: float) -> TableLevels:
    """(p, smallest reachable p) of each cell with an interval -> the table's levels. One 95 % interval per
    cell calls about 1 in 20 unchanged cells slower or faster, so a table of many calls some. Tarone (1990)
    leaves out the cells that could not pass (one-time costs at few pairs); Benjamini-Hochberg over the rest
    (Gilbert 2005) then holds the chance of any false verdict in an unchanged table to alpha, and the
    share of false ones among those called in a changed table. A cell's interval at alpha x max(changed, 1)
    / family excludes 0 exactly when Benjamini-Hochberg rejects its p (Benjamini-Yekutieli's FCR interval)."""
    if len(cells) <= 1:
        return TableLevels(alpha, alpha, len(cells), sum(p <= alpha for p, _ in cells), len(cells))
    k = next(k for k in range(1, len(cells) + 1) if sum(low <= alpha / k for _, low in cells) <= k)
    family = sorted(p for p, low in cells if low <= alpha / k)
    changed = max((i for i, p in enumerate(family, 1) if p <= alpha * i / len(family)), default=0)
    level = alpha * max(changed, 1) / max(len(family), 1)
    return TableLevels(level, alpha / k, len(family), changed, len(cells))


def onetime_cell(
    base: Mapping[int, float],
    head: Mapping[int, float] | None,
    cfg: Stats,
    groups: Mapping[int, int] | None = None,
    floor: float | None = None,
) -> dict:
    """A one-time cost (ms) of one cell, one figure per side per pair (onetime_rule says the rule); ``floor``:
    the table's TableLevels.floor, which a cell's fewest units must be able to reach.
    The minimum effect is raised to the cost's own A/A spread (robust sd of the units): one-time costs
    vary by tens of % between processes. One side alone: geometric mean over pairs and their spread."""
    base = {p: v for p, v in base.items() if v and v > 0}
    if head is None:
        one = single_cell({p: [v] for p, v in base.items()})
        return {"base_ms": one.base_us, "n_pairs": one.n_pairs, "pair_sd_pct": one.pair_sd_pct}
    head = {p: v for p, v in head.items() if v and v > 0}
    pairs = sorted(set(base) & set(head))
    out: dict = {"n_pairs": len(pairs), "verdict": None, "bound_pct": None}
    out.update(dict.fromkeys(("ci_low_pct", "ci_high_pct", "ci_low_ms", "ci_high_ms")))
    if not pairs:
        return out
    logs = np.array([math.log(head[p] / base[p]) for p in pairs])
    units = unit_logs(pairs, logs, groups)
    b = float(math.exp(np.mean([math.log(base[p]) for p in pairs])))
    enough = len(units) >= onetime_pairs_needed(floor or cfg.alpha)
    interval = signed_rank_interval(units, cfg.alpha) if enough else None
    centre = interval[0] if interval else float(np.median(units))
    spread = robust_sd(units) if len(units) > 1 else 0.0
    min_effect = max(cfg.min_effect_once_pct, pct_of_log(spread))
    delta_pct = pct_of_log(centre)
    out.update(
        base_ms=b,
        head_ms=b * math.exp(centre),
        delta_ms=b * math.expm1(centre),
        delta_pct=delta_pct,
        pair_sd_pct=float(np.std(units, ddof=1)) * 100 if len(units) > 1 else None,
        min_effect_pct=min_effect,
        min_p=2.0 ** (1 - len(units)),
    )
    if interval is None:
        out["verdict"] = TOO_FEW_GENERATIONS if len(units) < len(pairs) else TOO_FEW_PAIRS
        return out
    low, high = pct_of_log(interval[1]), pct_of_log(interval[2])
    out.update(ci_low_pct=low, ci_high_pct=high, ci_low_ms=b * low / 100, ci_high_ms=b * high / 100)
    rule = dataclasses.replace(cfg, min_effect_pct=min_effect)
    called, floor = verdict(delta_pct, low, high, rule), cfg.min_effect_once_pct
    if called == NO_CHANGE and not (-floor <= low and high <= floor):
        # the spread raises only the bar for calling a change; "no change" must still rule out
        # every change past --min-effect-once, or a -46..+143 % interval would read "no change"
        called, rule = INCONCLUSIVE, dataclasses.replace(cfg, min_effect_pct=floor)
    bound = inconclusive_bound(low, high, rule) if called == INCONCLUSIVE else None
    return dict(out, p_value=interval[3], verdict=called, bound_pct=bound)


def pick_attempt(attempts: Mapping[int, Mapping], sides: Sequence) -> tuple[int | None, bool]:
    """One couple's ``attempts`` (attempt -> side -> (value, contended)) -> (the first complete attempt
    that none contended, False); (None, True) when every complete one was; (None, False): none complete."""
    complete = False
    for attempt in sorted(attempts):
        got = attempts[attempt]
        if not all(side in got for side in sides):
            continue
        complete = True
        if not any(got[side][1] for side in sides):
            return attempt, False
    return None, complete


def choose_attempts(slots: Mapping, sides: Sequence, limit_pct: float) -> tuple[dict, list, int, int]:
    """The couples a cell's figures rest on. ``slots``: couple key -> pick_attempt's ``attempts``. A couple
    contended every time is left out, unless more than ``limit_pct`` % (or all) are: then they count with
    their last attempt (the verdict says load). Returns (key -> attempt, keys without a complete attempt,
    couples, couples contended every time)."""
    picked, incomplete, contended = {}, [], {}
    for key, attempts in slots.items():
        attempt, every_time = pick_attempt(attempts, sides)
        if attempt is not None:
            picked[key] = attempt
        elif every_time:
            contended[key] = max(a for a, got in attempts.items() if all(side in got for side in sides))
        else:
            incomplete.append(key)
    couples = len(picked) + len(contended)
    if contended and (any_load(limit_pct) or loaded(len(contended), couples, limit_pct) or not picked):
        picked.update(contended)
    return picked, incomplete, couples, len(contended)


def clean_couples(
    trials: Iterable, sides: Sequence[str], field: str, limit_pct: float, contended: Callable[[Any], bool]
) -> tuple[list, dict]:
    """The trials (records.TrialRecord) a cell's per-step figures rest on, the summary's rule and the live
    stopping rule's alike: per couple the attempt choose_attempts picks; a couple never complete (a run cut
    short) keeps its trials that did not share the core (all of them at ``limit_pct`` 100, where any load is
    accepted, as for whole couples). ``contended(trial)``: it shared its core.
    -> ([(trial, us per step of ``field``, couple key)], {"couples", "contended", "remeasured"})."""
    slots: dict = defaultdict(lambda: defaultdict(dict))  # (pair, round, trial) -> attempt -> side -> (us, c)
    records = {}
    for t in trials:
        if (v := t.per_step_us(field)) is not None:
            slots[(t.pair, t.round, t.trial)][t.attempt][t.side] = (v, contended(t))
            records[(t.pair, t.round, t.trial, t.attempt, t.side)] = (t, v)
    picked, incomplete, couples, n_contended = choose_attempts(slots, sides, limit_pct)
    remeasured = sum(max(attempts) > 0 for attempts in slots.values())
    counts = {"couples": couples, "contended": n_contended, "remeasured": remeasured}
    used = [(*records[(*key, attempt, side)], key) for key, attempt in picked.items() for side in sides]
    for key in incomplete:
        last = max(slots[key])
        keep = [side for side, (_, c) in slots[key][last].items() if not c or any_load(limit_pct)]
        used += [(*records[(*key, last, side)], key) for side in keep]
    return used, counts


def break_even_steps(extra_ms: float | None, saving_us: float | None) -> int | str | None:
    """Steps until a mode pays back its one-time extra over eager; "never" when it saves nothing per step;
    None when a figure is missing."""
    if extra_ms is None or saving_us is None:
        return None
    return "never" if saving_us <= 0 else max(0, math.ceil(extra_ms * 1000.0 / saving_us))


def lanes_agree(groups: list[list[float]], alpha: float) -> tuple[float | None, str]:
    """p-value of a one-way ANOVA over the lanes' per-pair log ratios and 'yes'/'NO' at ``alpha``."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g) >= 2]
    # fewer than two lanes of two pairs, or no spread inside any lane: ANOVA is undefined
    if len(groups) < 2 or all(len(set(g)) == 1 for g in groups):
        return None, "-"
    # scipy.stats.f_oneway's F test, written out: importing scipy.stats costs every CLI run 1.2 s of CPU
    from scipy import special

    k, n = len(groups), sum(len(g) for g in groups)
    grand = float(np.mean(np.concatenate(groups)))
    between = sum(len(g) * (float(np.mean(g)) - grand) ** 2 for g in groups) / (k - 1)
    within = sum(float(np.sum((g - np.mean(g)) ** 2)) for g in groups) / (n - k)
    p = float(special.fdtrc(k - 1, n - k, between / within))
    if math.isnan(p):
        return None, "-"
    return p, "yes" if p >= alpha else "NO"
