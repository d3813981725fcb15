"""Two profiles or counter sets -> what changed, function by function. Functions match by (path relative
to their sys.path entry, qualified name), so across trees; entries sharing a key (two lambdas) add up."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Iterable, Optional

from teperf.stats import t_interval

COUNTER_LABELS = (
    # key, singular, plural, shown when 0
    ("python_calls", "py call", "py calls", True),
    ("aten_ops", "aten op", "aten ops", True),
    ("autograd_nodes", "autograd node", "autograd nodes", False),
    ("kernel_launches", "kernel", "kernels", True),
    ("syncs", "sync", "syncs", False),
    ("allocations", "alloc", "allocs", False),
    # compile cells only (teperf/worker/counters.py count_compile)
    ("graphs", "graph", "graphs", False),
    ("graph_breaks", "graph break", "graph breaks", True),
    ("recompiles", "recompile", "recompiles", False),
    ("guard_failures", "guard failure", "guard failures", False),
)


@dataclasses.dataclass
class FunctionDelta:
    rel: str
    name: str
    file: str  # head's absolute file when the function exists there, else base's
    line: int
    base_calls: float = 0.0
    head_calls: float = 0.0
    base_own_us: float = 0.0
    head_own_us: float = 0.0
    base_cum_us: float = 0.0
    head_cum_us: float = 0.0
    in_base: bool = False
    in_head: bool = False
    # Own-time change per repeat (head - base): its mean and 95% half-width; None: one repeat.
    own_mean_us: Optional[float] = None
    own_hw_us: Optional[float] = None

    @property
    def own_settled(self) -> Optional[bool]:
        """Whether the own-time change's interval excludes 0; None when there is no interval."""
        if self.own_hw_us is None or self.own_mean_us is None:
            return None
        return abs(self.own_mean_us) > self.own_hw_us

    @property
    def own_shown_us(self) -> float:
        """The change shown beside its interval: the interval's centre (the mean over repeats) when there is
        one, else the change of the summed profiles."""
        return self.d_own_us if self.own_mean_us is None else self.own_mean_us

    @property
    def own_pm(self) -> str:
        """'+-12.3 us', or '' without an interval."""
        return "" if self.own_hw_us is None else f"+-{self.own_hw_us:.1f} us"

    @property
    def d_calls(self) -> float:
        return round(self.head_calls - self.base_calls, 4)

    @property
    def d_own_us(self) -> float:
        return round(self.head_own_us - self.base_own_us, 3)

    @property
    def d_cum_us(self) -> float:
        return round(self.head_cum_us - self.base_cum_us, 3)

    @property
    def where(self) -> str:
        """file:line of a Python function; "" for a C function (its name says it all)."""
        if self.rel == "~":
            return ""
        return self.rel if self.line <= 0 else f"{self.rel}:{self.line}"

    def to_dict(self) -> dict:
        derived = ("d_calls", "d_own_us", "d_cum_us", "where", "own_settled")
        return {**dataclasses.asdict(self), **{name: getattr(self, name) for name in derived}}


def _key(row: dict) -> tuple:
    return (row.get("rel") or row.get("file") or "?", row.get("name") or "?")


def diff_profiles(base: Iterable[dict], head: Iterable[dict]) -> list[FunctionDelta]:
    """One FunctionDelta per function seen on either side, in no particular order."""
    table: dict[tuple, FunctionDelta] = {}
    for side, rows in (("base", base), ("head", head)):
        for row in rows:
            key = _key(row)
            delta = table.get(key)
            if delta is None:
                delta = table[key] = FunctionDelta(
                    rel=key[0], name=key[1], file=row.get("file", key[0]), line=int(row.get("line") or 0)
                )
            elif side == "head" and not delta.in_head:
                delta.file, delta.line = row.get("file", delta.file), int(row.get("line") or 0)
            setattr(delta, f"in_{side}", True)
            setattr(delta, f"{side}_calls", getattr(delta, f"{side}_calls") + float(row.get("calls") or 0))
            setattr(delta, f"{side}_own_us", getattr(delta, f"{side}_own_us") + float(row.get("own_us") or 0))
            setattr(delta, f"{side}_cum_us", getattr(delta, f"{side}_cum_us") + float(row.get("cum_us") or 0))
    return list(table.values())


def own_time_intervals(base_runs: list[list[dict]], head_runs: list[list[dict]]) -> dict[str, list]:
    """{"rel\tname": [mean, half_width]} of each function's own-time change, repeat r's head minus repeat
    r's base, Student t at 95%."""
    n = min(len(base_runs), len(head_runs))
    if n < 2:
        return {}

    def per_repeat(rows: list[dict]) -> dict[tuple, float]:
        out: dict[tuple, float] = {}
        for row in rows:
            out[_key(row)] = out.get(_key(row), 0.0) + float(row.get("own_us") or 0)
        return out

    base = [per_repeat(rows) for rows in base_runs[:n]]
    head = [per_repeat(rows) for rows in head_runs[:n]]
    keys = set().union(*base, *head)
    out = {}
    for key in keys:
        diffs = [h.get(key, 0.0) - b.get(key, 0.0) for b, h in zip(base, head)]
        out["\t".join(key)] = [round(sum(diffs) / n, 3), round(t_interval(diffs, 0.05)[1], 3)]
    return out


def apply_intervals(deltas: list[FunctionDelta], intervals: dict) -> list[FunctionDelta]:
    for d in deltas:
        got = intervals.get(f"{d.rel}\t{d.name}")
        if got:
            d.own_mean_us, d.own_hw_us = float(got[0]), float(got[1])
    return deltas


def by_own_time(deltas: list[FunctionDelta], n: Optional[int] = None) -> list[FunctionDelta]:
    """Largest |delta own time| first; ties broken by |delta calls|, then name."""
    return sorted(deltas, key=lambda d: (-abs(d.d_own_us), -abs(d.d_calls), d.rel, d.name))[:n]


def by_calls(deltas: list[FunctionDelta], n: Optional[int] = None) -> list[FunctionDelta]:
    """Largest |delta calls| first, of the functions whose count changed; ties by |delta cumulative time|,
    so a helper ranks above the functions it calls."""
    changed = [d for d in deltas if d.d_calls != 0]
    return sorted(changed, key=lambda d: (-abs(d.d_calls), -abs(d.d_cum_us), d.rel, d.name))[:n]


def counter_deltas(base: Optional[dict], head: Optional[dict]) -> dict:
    """{key: head - base} for every counter measurable on both sides (None otherwise)."""
    base, head = base or {}, head or {}
    values = {key: (base.get(key), head.get(key)) for key, *_ in COUNTER_LABELS}
    return {key: None if b is None or h is None else h - b for key, (b, h) in values.items()}


def combine_profiles(profiles: list[list[dict]]) -> list[dict]:
    """Several per-step profiles of one side -> one, by the per-function median (absent: 0), which keeps
    a preemption in one repeat off whatever function was running."""
    if len(profiles) == 1:
        return list(profiles[0])
    merged: dict[tuple, dict] = {}
    values: dict[tuple, dict] = {}
    for index, rows in enumerate(profiles):
        for row in rows:
            key = (_key(row), int(row.get("line") or 0))
            merged.setdefault(key, dict(row))
            per = values.setdefault(key, {f: [0.0] * len(profiles) for f in ("calls", "own_us", "cum_us")})
            for field in per:
                per[field][index] += float(row.get(field) or 0)
    for key, row in merged.items():
        for field, series in values[key].items():
            row[field] = round(statistics.median(series), 4 if field == "calls" else 3)
    return sorted(merged.values(), key=lambda r: -r["own_us"])
