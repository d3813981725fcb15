"""History rows -> per-cell series, detected changes and overview numbers.

Shared by ``teperf history`` and ``teperf dashboard``; pure data, no HTML.

One point per commit and machine: when a commit was measured more than once
(a re-run), the newest run stands for it.  Failed cells are kept as points
without a value (shown, never fed to change detection).  Shards of one night
merge by themselves (each cell is in one shard); every point also carries its
night and, when that night is incomplete, what is missing (``nights.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import math
from typing import Any, Sequence

from teperf.history import changepoint
from teperf.history.nights import Night, by_key, nights
from teperf.history.store import ordered
from teperf.records import CELL_KEY

WEEK = _dt.timedelta(days=7)


@dataclasses.dataclass
class Point:
    sha: str | None
    subject: str | None
    date: _dt.datetime | None  # commit date, else run date: the series' time axis
    run_date: _dt.datetime | None
    run_id: str
    host_us: float | None
    status: str | None
    base_sha: str | None
    base_us: float | None
    delta_us: float | None
    delta_pct: float | None
    ci_low_us: float | None
    ci_high_us: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    verdict: str | None
    n_pairs: int | None
    spread_pct: float | None
    error: str | None
    night: str | None = None
    night_note: str | None = (
        None  # None: the night is complete; else e.g. "incomplete: 2 of 3 shards (missing 3/3)"
    )

    @property
    def short_sha(self) -> str:
        return (self.sha or "")[:10] or self.run_id[:15]

    @property
    def ok(self) -> bool:
        return self.host_us is not None and self.status in ("ok", "partial")


@dataclasses.dataclass
class Found:
    """A detected change mapped onto commits."""

    kind: str  # step | drift
    direction: str  # slower | faster
    index: int  # first point after (step) / first point of the drift
    end_index: int
    before_us: float
    after_us: float
    pvalue: float
    first_bad: Point  # step: first point after the change; drift: its first point
    last_good: Point | None  # the point before (None: the change starts the history)
    paired: Point | None  # the night whose paired comparison spans exactly this change, if any
    moved: bool = False  # the index was moved by one to the night whose paired test agrees

    @property
    def delta_us(self) -> float:
        return self.after_us - self.before_us

    @property
    def delta_pct(self) -> float:
        return 100.0 * self.delta_us / self.before_us if self.before_us else math.nan


@dataclasses.dataclass
class Cell:
    machine: str
    machine_label: str
    module: str
    recipe: str
    shape: str
    dtype: str
    mode: str
    points: list[Point]
    changes: list[Found]
    levels: list[tuple[int, int, float, float]]  # (first, last point index, level at first, level at last)

    @property
    def key(self) -> tuple:
        return (self.machine, self.module, self.recipe, self.shape, self.dtype, self.mode)

    @property
    def slug(self) -> str:
        """A file/anchor-safe id (module names are untrusted text)."""
        text = "\0".join(self.key)
        return "c" + hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def variant(self) -> str:
        return f"{self.shape} {self.dtype} {self.mode}"

    @property
    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None

    def week_ago(self) -> Point | None:
        """The newest ok point at least 7 days older than the newest point."""
        last = self.latest
        if last is None or last.date is None:
            return None
        for p in reversed(self.points[:-1]):
            if p.ok and p.date is not None and p.date <= last.date - WEEK:
                return p
        return None

    def change_vs_week(self) -> float | None:
        old, last = self.week_ago(), self.latest
        if old is None or last is None or not last.ok or not old.host_us:
            return None
        return 100.0 * (last.host_us - old.host_us) / old.host_us

    def recent_change(self, within: int = 7) -> Found | None:
        """The newest step whose first bad point is among the last ``within`` points, else a
        drift that is still going on (reaches the newest point)."""
        n = len(self.points)
        steps = [c for c in self.changes if c.kind == "step" and c.index >= n - within]
        if steps:
            return steps[-1]
        drifts = [c for c in self.changes if c.kind == "drift" and c.end_index == n - 1]
        return drifts[-1] if drifts else None


def _val(x):
    if x is None:
        return None
    try:
        if isinstance(x, float) and math.isnan(x):
            return None
    except TypeError:
        pass
    try:
        import pandas as pd

        if x is pd.NaT or (not isinstance(x, str) and pd.isna(x)):
            return None
    except (TypeError, ValueError):
        pass
    return x


def _dt_or_none(x) -> _dt.datetime | None:
    x = _val(x)
    if x is None:
        return None
    return x.to_pydatetime() if hasattr(x, "to_pydatetime") else x


def _points(group, night_of: dict[tuple[str, str], Night] | None = None) -> list[Point]:
    """Rows of one cell (series order) -> one point per commit (newest run wins)."""
    night_of = night_of or {}
    by_key: dict[str, Any] = {}
    order: list[str] = []
    for row in group.itertuples(index=False):
        key = _val(row.sha) or f"run:{row.run_id}"
        if key not in by_key:
            order.append(key)
            by_key[key] = row
        elif (_dt_or_none(row.run_date) or _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)) >= (
            _dt_or_none(by_key[key].run_date) or _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
        ):
            by_key[key] = row
    points = []
    for key in order:
        r = by_key[key]
        points.append(
            Point(
                sha=_val(r.sha),
                subject=_val(r.subject),
                date=_dt_or_none(r.committed_at) or _dt_or_none(r.run_date),
                run_date=_dt_or_none(r.run_date),
                run_id=r.run_id,
                host_us=_val(r.host_us),
                status=_val(r.status),
                base_sha=_val(r.base_sha),
                base_us=_val(r.base_us),
                delta_us=_val(r.delta_us),
                delta_pct=_val(r.delta_pct),
                ci_low_us=_val(r.ci_low_us),
                ci_high_us=_val(r.ci_high_us),
                ci_low_pct=_val(r.ci_low_pct),
                ci_high_pct=_val(r.ci_high_pct),
                verdict=_val(r.verdict),
                n_pairs=_val(r.n_pairs),
                spread_pct=_val(r.host_spread_pct),
                error=_val(r.error),
                night=_val(r.night),
                night_note=_note(night_of.get((r.machine, r.night))),
            )
        )
    return points


def _note(night: Night | None) -> str | None:
    return None if night is None or night.complete else night.describe()


def _paired_night(points: Sequence[Point], i: int) -> Point | None:
    """Point ``i`` if its paired comparison was against exactly point ``i-1``'s commit."""
    if i <= 0 or i >= len(points):
        return None
    p, prev = points[i], points[i - 1]
    if p.verdict is None or p.base_sha is None or prev.sha is None or p.base_sha != prev.sha:
        return None
    return p


def analyze_cell(
    machine: str,
    machine_label: str,
    key: tuple,
    group,
    settings: changepoint.DetectionSettings,
    night_of: dict[tuple[str, str], Night] | None = None,
) -> Cell:
    module, recipe, shape, dtype, mode = key
    points = _points(ordered(group), night_of)
    ok_idx = [i for i, p in enumerate(points) if p.ok]
    values = [points[i].host_us for i in ok_idx]
    seed = int(hashlib.sha256("\0".join((machine, *key)).encode()).hexdigest()[:8], 16)
    cs = dataclasses.replace(settings, seed=settings.seed ^ seed)
    raw = changepoint.detect(values, cs) if len(values) >= 2 * cs.min_size else []
    found: list[Found] = []
    for ch in raw:
        if ch.kind == "step":
            i = ok_idx[ch.index]
            direction = "slower" if ch.delta > 0 else "faster"
            moved = False
            # The paired night-over-night test can place a step more exactly than the series can:
            # if the detected night's own paired test does not see it but exactly one neighbour's does, move
            # there.
            here = _paired_night(points, i)
            if here is None or here.verdict != direction:
                agree = [
                    j
                    for j in (i - 1, i + 1)
                    if 0 < j < len(points)
                    and (pn := _paired_night(points, j)) is not None
                    and pn.verdict == direction
                ]
                if len(agree) == 1:
                    i, moved = agree[0], True
            found.append(
                Found(
                    "step",
                    direction,
                    i,
                    i,
                    ch.before,
                    ch.after,
                    ch.pvalue,
                    first_bad=points[i],
                    last_good=points[i - 1] if i > 0 else None,
                    paired=_paired_night(points, i),
                    moved=moved,
                )
            )
        else:
            a, b = ok_idx[ch.index], ok_idx[ch.end_index]
            found.append(
                Found(
                    "drift",
                    "slower" if ch.delta > 0 else "faster",
                    a,
                    b,
                    ch.before,
                    ch.after,
                    ch.pvalue,
                    first_bad=points[a],
                    last_good=points[a - 1] if a > 0 else None,
                    paired=None,
                )
            )
    levels = []
    first = len(values) - cs.window if cs.window and len(values) > cs.window else 0
    for start, stop, y0, y1 in changepoint.segment_levels(values, raw, first) if values else []:
        levels.append((ok_idx[start], ok_idx[stop - 1], y0, y1))
    return Cell(machine, machine_label, module, recipe, shape, dtype, mode, points, found, levels)


def analyze(df, settings: changepoint.DetectionSettings | None = None) -> list[Cell]:
    """Every (machine, cell) of a history DataFrame, analysed."""
    settings = settings or changepoint.DetectionSettings()
    if df.empty:
        return []
    night_of = by_key(nights(df))
    df = df.copy()
    for c in CELL_KEY:
        df[c] = df[c].fillna("")
    cells = []
    for (machine, *key), group in df.groupby(["machine", *CELL_KEY], sort=True):
        label = group["machine_label"].dropna()
        cells.append(
            analyze_cell(
                machine, label.iloc[-1] if len(label) else machine, tuple(key), group, settings, night_of
            )
        )
    return cells
