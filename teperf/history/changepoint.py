"""Change detection on one cell's series of levels (host time per night), at nights without a paired
compare (analysis.py). Steps: E-divisive means (Matteson & James 2014) with a seeded permutation test,
steps below the minimum effect merged away weakest first; drifts: Mann-Kendall with the Theil-Sen slope
between steps. A change at ``index=i`` means point ``i`` is the first after it.
"""

from __future__ import annotations

import dataclasses
import functools
from itertools import pairwise
from typing import Collection, Optional, Sequence

import numpy as np
from scipy import stats as sps


@dataclasses.dataclass(frozen=True)
class DetectionSettings:
    sig_level: float = 0.01  # permutation-test p-value to accept a step
    permutations: int = 999  # stops early once p cannot reach sig_level, so only real steps cost all of them
    min_size: int = 3  # points on each side of a step, at least
    min_effect_pct: float = 2.0  # smallest step/drift worth reporting, % of the level before
    min_effect_us: float = 0.0  # ... and in microseconds
    local_window: int = 8  # points each side used to size a step
    # stricter than steps: one test per segment, and a trend needs many nights anyway
    drift_sig_level: float = 0.001
    drift_min_points: int = 8
    # analyse the newest this-many points of a series (0: all); E-divisive is O(n^2) a permutation
    window: int = 200
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Change:
    kind: str  # "step" | "drift"
    index: int  # first point after the change (step) / first point of the drifting segment
    end_index: int  # step: == index; drift: last point of the drifting segment
    before: float  # level before (us)
    after: float  # level after (us)
    pvalue: float

    @property
    def delta(self) -> float:
        return self.after - self.before

    @property
    def delta_pct(self) -> float:
        return 100.0 * self.delta / self.before if self.before else float("nan")

    @property
    def direction(self) -> str:
        return "slower" if self.delta > 0 else "faster"


@functools.lru_cache(maxsize=16)  # one entry per segment length; 1.3 MB at the 200-point window
def _split_grid(n: int, min_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (tau, kappa) of a series of n: the weight nx my / (nx + my), the parts' pair counts, and the
    splits with both parts >= min_size. The permutation test asks for the same n hundreds of times."""
    taus = np.arange(n + 1.0)[:, None]
    nx = np.broadcast_to(taus, (n + 1, n + 1))
    my = np.arange(n + 1.0)[None, :] - taus
    valid = (nx >= min_size) & (my >= min_size)
    with np.errstate(divide="ignore", invalid="ignore"):
        grid = nx * my / (nx + my), np.stack([nx * my, nx * (nx - 1) / 2.0, my * (my - 1) / 2.0]), valid
    for a in grid:
        a.flags.writeable = False  # shared by every later call: a caller's write would corrupt the cache
    return grid


def _best_split(z: np.ndarray, min_size: int) -> tuple[float, int]:
    """Best (Q, tau) over all splits z[:tau] | z[tau:kappa] with both parts >= min_size: all (tau, kappa)
    pairs at once from a 2-D prefix sum of |z_i - z_j| (O(n^2) memory and time)."""
    n = len(z)
    if n < 2 * min_size:
        return -np.inf, -1
    weight, (nxmy, pairs_x, pairs_y), valid = _split_grid(n, min_size)
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = np.abs(z[:, None] - z[None, :]).cumsum(0).cumsum(1)  # p[a, b] = sum_{i<a, j<b} d_ij
    diag = np.diag(p)  # p[a, a]
    within_x = diag[:, None] / 2.0  # pairs inside z[:tau]
    # pairs inside z[tau:kappa]: (p[k,k] - 2 p[t,k] + p[t,t]) / 2, d being symmetric
    within_y = (diag[None, :] - 2.0 * p + diag[:, None]) / 2.0
    between = p - diag[:, None]  # sum over i < tau <= j < kappa
    with np.errstate(divide="ignore", invalid="ignore"):
        q = weight * (2.0 * between / nxmy - within_x / pairs_x - within_y / pairs_y)
    q = np.where(valid, q, -np.inf)
    t, _k = np.unravel_index(np.argmax(q), q.shape)
    return float(q[t, _k]), int(t)


def _best_over_segments(x: np.ndarray, bounds: list[int], min_size: int) -> tuple[float, int]:
    best_q, best_idx = -np.inf, -1
    for a, b in pairwise(bounds):
        q, t = _best_split(x[a:b], min_size)
        if t >= 0 and q > best_q:
            best_q, best_idx = q, a + t
    return best_q, best_idx


def e_divisive(
    series: Sequence[float], settings: DetectionSettings = DetectionSettings()
) -> list[tuple[int, float]]:
    """Significant change points of ``series`` as (index, p-value), sorted by index."""
    x = np.asarray(series, dtype=float)
    rng = np.random.default_rng(settings.seed)
    bounds = [0, len(x)]
    found: list[tuple[int, float]] = []
    while True:
        q_obs, idx = _best_over_segments(x, bounds, settings.min_size)
        if idx < 0:
            break
        exceed = 0
        for _ in range(settings.permutations):
            y = x.copy()
            for a, b in pairwise(bounds):
                rng.shuffle(y[a:b])
            q_perm, _ = _best_over_segments(y, bounds, settings.min_size)
            if q_perm >= q_obs:
                exceed += 1
                if (exceed + 1) / (settings.permutations + 1) > settings.sig_level:
                    break  # cannot become significant any more: stop early (p is then a lower bound)
        pvalue = (exceed + 1) / (settings.permutations + 1)
        if pvalue > settings.sig_level:
            break
        found.append((idx, pvalue))
        bounds = sorted(bounds + [idx])
    return sorted(found)


def _pairwise_slopes(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(len(t), k=1)
    return (y[j] - y[i]) / (t[j] - t[i])


def _local_levels(x: np.ndarray, idx: int, lo: int, hi: int, w: int) -> tuple[float, float]:
    """Levels just before and just after ``idx``, with the local trend taken out: Sen's slope from the
    pairwise slopes that do not cross ``idx`` (Hirsch's seasonal Kendall slope), so the step does not
    bias it and a ramp's detrended jump is ~0."""
    # slope from up to 4w points each side (a slope from w points is too noisy to extrapolate)
    s_before = np.arange(max(lo, idx - 4 * w), idx)
    s_after = np.arange(idx, min(hi, idx + 4 * w))
    slopes = np.concatenate([_pairwise_slopes(s_before, x[s_before]), _pairwise_slopes(s_after, x[s_after])])
    t_before = np.arange(max(lo, idx - w), idx)
    t_after = np.arange(idx, min(hi, idx + w))
    slope = float(np.median(slopes)) if len(slopes) else 0.0
    # levels at the change, i.e. extrapolated to idx - 0.5 from both sides
    before = float(np.median(x[t_before] - slope * (t_before - (idx - 0.5))))
    after = float(np.median(x[t_after] - slope * (t_after - (idx - 0.5))))
    return before, after


def _big_enough(before: float, after: float, s: DetectionSettings) -> bool:
    delta = abs(after - before)
    pct = 100.0 * delta / abs(before) if before else float("inf")
    return pct >= s.min_effect_pct and delta >= s.min_effect_us


def detect(
    series: Sequence[float],
    settings: DetectionSettings = DetectionSettings(),
    cuts: Sequence[int] = (),
    steps_at: Optional[Collection[int]] = None,
) -> list[Change]:
    """Steps and drifts in ``series`` (its newest ``settings.window`` points; no NaN). ``cuts``: steps found
    otherwise (the nights' paired compares), which bound the drifts' segments; ``steps_at``: where a step
    of the levels may be reported (None: anywhere; empty: the search is skipped)."""
    x = np.asarray(series, dtype=float)
    if np.isnan(x).any():
        raise ValueError("series contains NaN; drop failed points first")
    off = len(x) - settings.window if settings.window and len(x) > settings.window else 0
    x = x[off:]
    cuts = [c - off for c in cuts if c > off]
    allowed = None if steps_at is None else {i - off for i in steps_at if i >= off}
    points = _steps(x, settings) if allowed is None or allowed else {}
    points = {i: p for i, p in points.items() if allowed is None or i in allowed}
    bounds = sorted({0, len(x), *points, *cuts})
    changes: list[Change] = []
    for lo, i, hi in zip(bounds, bounds[1:], bounds[2:]):
        if i in points:  # its size: medians of the whole segments on either side (what a reader sees)
            before, after = float(np.median(x[lo:i])), float(np.median(x[i:hi]))
            changes.append(Change("step", i + off, i + off, before, after, points[i]))
    for a, b in pairwise(bounds):
        seg = x[a:b]
        if len(seg) < settings.drift_min_points:
            continue
        t = np.arange(len(seg))
        tau = sps.kendalltau(t, seg)
        if not np.isfinite(tau.pvalue) or tau.pvalue > settings.drift_sig_level:
            continue
        fit = sps.theilslopes(seg, t)
        start, end = fit.intercept, fit.intercept + fit.slope * (len(seg) - 1)
        if _big_enough(start, end, settings):
            changes.append(Change("drift", a + off, b - 1 + off, float(start), float(end), float(tau.pvalue)))
    return sorted(changes, key=lambda c: (c.index, c.kind))


def _steps(x: np.ndarray, settings: DetectionSettings) -> dict[int, float]:
    points = dict(e_divisive(x, settings))
    # Merge step: drop the weakest point below the minimum effect, re-size the neighbours, repeat.
    while points:
        idxs = sorted(points)
        bounds = [0] + idxs + [len(x)]
        sizes = {
            i: _local_levels(x, i, bounds[j], bounds[j + 2], settings.local_window)
            for j, i in enumerate(idxs)
        }
        weak = [
            i
            for j, i in enumerate(idxs)
            if not _big_enough(*sizes[i], settings)
            or not _big_enough(
                float(np.median(x[bounds[j] : i])), float(np.median(x[i : bounds[j + 2]])), settings
            )
        ]
        if not weak:
            break
        weakest = min(weak, key=lambda i: abs(sizes[i][1] - sizes[i][0]) / max(abs(sizes[i][0]), 1e-12))
        del points[weakest]
    return points


def segment_levels(
    series: Sequence[float], cuts: Sequence[int], changes: Sequence[Change], start: int = 0
) -> list[tuple[int, int, float, float]]:
    """(start, stop, level at start, level at stop - 1) of the segments between ``cuts``, for plotting: a
    flat one's median, a drifting one's Theil-Sen line; points before ``start`` (not analysed) get none."""
    x = np.asarray(series, dtype=float)
    cuts = sorted({c for c in cuts if c > start})
    drifts = {(c.index, c.end_index): c for c in changes if c.kind == "drift"}
    bounds = [start] + cuts + [len(x)]
    out = []
    for a, b in pairwise(bounds):
        if b <= a:
            continue
        d = drifts.get((a, b - 1))
        y0, y1 = (d.before, d.after) if d is not None else (float(np.median(x[a:b])),) * 2
        out.append((a, b, y0, y1))
    return out
