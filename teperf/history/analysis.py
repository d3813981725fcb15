"""History rows -> per-cell series, detected changes and overview numbers (``teperf history``/``dashboard``):
one point per commit and machine (the newest run wins); failed cells are points without a value.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import math
from typing import Any, Sequence

from teperf.history import changepoint
from teperf.history.nights import NEVER, Night, by_key, nights, value, when
from teperf.history.store import ordered
from teperf.records import CELL_KEY
from teperf.verdicts import FASTER, INCONCLUSIVE, SLOWER

WEEK = _dt.timedelta(days=7)


@dataclasses.dataclass
class Point:
    sha: str | None
    subject: str | None
    date: _dt.datetime | None  # commit date, else run date: the series' time axis
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
    error: str | None
    night: str | None = None
    # None: the night is complete; else e.g. "incomplete: 2 of 3 shards (missing 3/3)"
    night_note: str | None = None

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
    pvalue: float | None  # the levels' permutation / trend test (None: found by the night's paired compare)
    first_bad: Point  # step: first point after the change; drift: its first point
    last_good: Point | None  # the point before (None: the change starts the history)
    paired: Point | None  # the night whose paired comparison spans exactly this change, if any

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
        return "c" + hashlib.sha256("\0".join(self.key).encode()).hexdigest()[:12]

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
        cutoff = last.date - WEEK
        return next((p for p in reversed(self.points[:-1]) if p.ok and p.date and p.date <= cutoff), None)

    def change_vs_week(self) -> float | None:
        old, last = self.week_ago(), self.latest
        if old is None or last is None or not last.ok or not old.host_us:
            return None
        return 100.0 * (last.host_us - old.host_us) / old.host_us

    def recent_change(self, within: int = 7) -> Found | None:
        """The newest step among the last ``within`` points, else a drift that reaches the newest point."""
        n = len(self.points)
        steps = [c for c in self.changes if c.kind == "step" and c.index >= n - within]
        drifts = [c for c in self.changes if c.kind == "drift" and c.end_index == n - 1]
        return (steps or drifts or [None])[-1]


# Point fields read straight from the row's column of the same name
_SAME = [f.name for f in dataclasses.fields(Point) if f.name not in ("date", "run_id", "night_note")]


def _points(group, night_of: dict[tuple[str, str], Night]) -> list[Point]:
    """Rows of one cell (series order) -> one point per commit (newest run wins)."""
    newest: dict[str, Any] = {}  # first appearance order: re-runs keep their commit's place
    for row in group.itertuples(index=False):
        key = value(row.sha) or f"run:{row.run_id}"
        if key not in newest or (when(row.run_date) or NEVER) >= (when(newest[key].run_date) or NEVER):
            newest[key] = row
    return [
        Point(
            **{name: value(getattr(r, name)) for name in _SAME},
            date=when(r.committed_at) or when(r.run_date),
            run_id=r.run_id,
            night_note=_note(night_of.get((r.machine, r.night))),
        )
        for r in newest.values()
    ]


def _note(night: Night | None) -> str | None:
    return None if night is None or night.complete else night.describe()


def _paired_night(points: Sequence[Point], i: int) -> Point | None:
    """Point ``i`` if its paired comparison was against point ``i-1``'s commit, a night that was measured."""
    if i <= 0 or i >= len(points):
        return None
    p, prev = points[i], points[i - 1]
    spans = p.verdict is not None and prev.ok and p.base_sha is not None and p.base_sha == prev.sha
    return p if spans else None


def _levels_may_step(points: Sequence[Point], i: int, s: changepoint.DetectionSettings) -> tuple | None:
    """Ways the levels may step at night ``i``: both, an inconclusive estimate's, None (load swings them)."""
    p = _paired_night(points, i)
    if p is None:
        return (SLOWER, FASTER)
    if p.verdict != INCONCLUSIVE or p.delta_pct is None or abs(p.delta_pct) < s.min_effect_pct:
        return None
    return (SLOWER,) if p.delta_pct > 0 else (FASTER,)


def _stepped(points: Sequence[Point], i: int, s: changepoint.DetectionSettings) -> Point | None:
    """Night ``i`` when its compare against night ``i-1`` is a confident step past the minimum effect."""
    p = _paired_night(points, i)
    if p is None or not p.ok or p.verdict not in ("slower", "faster") or p.delta_pct is None:
        return None
    return p if abs(p.delta_pct) >= s.min_effect_pct and abs(p.delta_us or 0.0) >= s.min_effect_us else None


def paired_steps(points: Sequence[Point], s: changepoint.DetectionSettings) -> list[int]:
    """The nights whose own paired compare is a step (two steps one night apart are two), less a blip: a
    step the next night's compare undoes to within the minimum effect is one night's process luck."""
    steps = [i for i in range(1, len(points)) if _stepped(points, i, s)]
    blips: set[int] = set()
    for i in steps:
        nxt = _stepped(points, i + 1, s)
        if nxt is not None and nxt.verdict != points[i].verdict:
            net = (1 + points[i].delta_pct / 100) * (1 + nxt.delta_pct / 100) - 1
            if abs(net) * 100 < s.min_effect_pct:
                blips |= {i, i + 1}
    return [i for i in steps if i not in blips]


def _paired_found(points: Sequence[Point], i: int) -> Found:
    p = points[i]
    before = p.base_us if p.base_us is not None else points[i - 1].host_us
    after = before * (1 + p.delta_pct / 100)  # so that the size reads as the night's own paired delta
    return Found("step", p.verdict, i, i, before, after, None, p, points[i - 1], p)


def analyze_cell(
    machine: str,
    machine_label: str,
    key: tuple,
    group,
    settings: changepoint.DetectionSettings,
    night_of: dict[tuple[str, str], Night],
) -> Cell:
    """One cell's points and change points: a step where a night's paired compare says so; the levels'
    search only at nights without one, and for drifts (changepoint.py)."""
    points = _points(ordered(group), night_of)
    ok_idx = [i for i, p in enumerate(points) if p.ok]
    values = [points[i].host_us for i in ok_idx]
    seed = int(hashlib.sha256("\0".join((machine, *key)).encode()).hexdigest()[:8], 16)
    cs = dataclasses.replace(settings, seed=settings.seed ^ seed)
    paired = paired_steps(points, cs)
    cuts = [ok_idx.index(i) for i in paired]
    may = {j: w for j in range(1, len(ok_idx)) if (w := _levels_may_step(points, ok_idx[j], cs)) is not None}
    raw = changepoint.detect(values, cs, cuts, may) if len(values) >= 2 * cs.min_size else []
    raw = [c for c in raw if c.kind != "step" or c.direction in may[c.index]]
    found = [_paired_found(points, i) for i in paired]
    for ch in raw:
        a, b = ok_idx[ch.index], ok_idx[ch.end_index]
        # the last night measured before it: a failed night in between is not a good side to bisect from
        last_good = points[ok_idx[ch.index - 1]] if ch.index > 0 else None
        found.append(
            Found(ch.kind, ch.direction, a, b, ch.before, ch.after, ch.pvalue, points[a], last_good, None)
        )
    found.sort(key=lambda f: (f.index, f.kind))
    first = len(values) - cs.window if cs.window and len(values) > cs.window else 0
    steps = cuts + [c.index for c in raw if c.kind == "step"]
    segments = changepoint.segment_levels(values, steps, raw, first) if values else []
    levels = [(ok_idx[start], ok_idx[stop - 1], y0, y1) for start, stop, y0, y1 in segments]
    return Cell(machine, machine_label, *key, points, found, levels)


def analyze(df, settings: changepoint.DetectionSettings | None = None) -> list[Cell]:
    """Every (machine, cell) of a history DataFrame, analysed."""
    settings = settings or changepoint.DetectionSettings()
    if df.empty:
        return []
    night_of = by_key(nights(df))
    df = df.fillna({c: "" for c in CELL_KEY})
    cells = []
    for (machine, *key), group in df.groupby(["machine", *CELL_KEY], sort=True):
        labels = group["machine_label"].dropna()
        label = labels.iloc[-1] if len(labels) else machine
        cells.append(analyze_cell(machine, label, tuple(key), group, settings, night_of))
    return cells
