"""Overhead slopes: ``--sweep KEY=V1,V2,...`` over a module kwarg (``GroupedLinear[num_gemms=4]``) or a
shape dimension (``dim0=64,128``), each value a cell of one run. Per pair and side, host time is fitted
against the value by least squares; the slope's interval is Student's t over the pairs' slopes."""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections import defaultdict
from typing import Optional

from teperf.config import METRIC_FIELD, ModuleSpec, backend_module
from teperf.errors import TeperfError
from teperf.records import shape_text
from teperf.stats import t_interval
from teperf.summary import parse, stats_from_meta
from teperf.verdicts import slope_verdict

VARIANT = re.compile(r"^(?P<module>[^\[]+)\[(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^\]]+)\]$")
DIM = re.compile(r"^dim(\d+)$")


@dataclasses.dataclass(frozen=True)
class Sweep:
    key: str
    values: tuple

    @property
    def dim(self) -> Optional[int]:
        m = DIM.match(self.key)
        return int(m.group(1)) if m else None


def _fmt(value) -> str:
    return str(int(value)) if float(value) == int(value) else f"{value:g}"


def parse_sweep(text: str) -> Sweep:
    """'num_gemms=1,2,4,8' or 'dim0=64,128' -> Sweep; at least 2 distinct numbers."""
    key, sep, rest = (text or "").partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise TeperfError(
            f"malformed --sweep {text!r}", "write --sweep KEY=V1,V2,... e.g. --sweep num_gemms=1,2,4,8"
        )
    values = []
    for part in rest.split(","):
        part = part.strip()
        try:
            number = float(part)
        except ValueError:
            raise TeperfError(
                f"--sweep {key}: {part!r} is not a number", "give numbers, e.g. 1,2,4,8"
            ) from None
        values.append(int(number) if number == int(number) else number)
    if len(set(values)) < 2:
        raise TeperfError(
            f"--sweep {key} needs at least two different values", "e.g. --sweep num_gemms=1,2,4,8"
        )
    return Sweep(key, tuple(values))


def apply(config, sweep: Sweep):
    """The config with one module (kwarg sweep) or one shape (dimension sweep) per value."""
    if sweep.dim is not None:
        shapes = []
        for shape in config.shapes:
            if sweep.dim >= len(shape):
                raise TeperfError(
                    f"--sweep {sweep.key}: shape {list(shape)} has no dimension {sweep.dim}",
                    f"use dim0..dim{len(shape) - 1}",
                )
            for value in sweep.values:
                if not isinstance(value, int) or value <= 0:
                    raise TeperfError(
                        f"--sweep {sweep.key}: {value!r} is not a positive size", "give whole numbers"
                    )
                shapes.append(tuple(value if i == sweep.dim else d for i, d in enumerate(shape)))
        return dataclasses.replace(config, shapes=tuple(dict.fromkeys(shapes)))

    modules = []
    for spec in config.modules:
        if spec.factory is None and not getattr(backend_module(config.backend), "TAKES_KWARGS", True):
            raise TeperfError(
                f"--sweep {sweep.key}: the {config.backend} backend's built-in {spec.name} takes no kwargs",
                "sweep a shape dimension (--sweep dim0=...), or use modules with a factory",
            )
        modules += [
            ModuleSpec(f"{spec.name}[{sweep.key}={_fmt(v)}]", spec.factory, {**spec.kwargs, sweep.key: v})
            for v in sweep.values
        ]
    return dataclasses.replace(config, modules=tuple(modules))


def _series_key(case, sweep: Sweep):
    """(series name, value) of a case of a swept run; None for a case outside the sweep."""
    if sweep.dim is not None:
        shape = list(case.shape)
        if sweep.dim >= len(shape):
            return None
        value = shape[sweep.dim]
        rest = "x".join("*" if i == sweep.dim else str(d) for i, d in enumerate(shape))
        return f"{case.module}/{case.recipe}/{rest}/{case.mode}", value
    m = VARIANT.match(case.module)
    if not m or m.group("key") != sweep.key:
        return None
    value = float(m.group("value"))
    return f"{m.group('module')}/{case.recipe}/{shape_text(case.shape)}/{case.mode}", value


def _ols_slope(xs, ys) -> Optional[float]:
    if len(xs) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return None if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def _interval(samples, alpha: float) -> dict:
    if not samples:
        return {"slope": None, "lo": None, "hi": None, "n_pairs": 0}
    mean, half, _sd, _mde = t_interval(samples, alpha)
    lo, hi = (mean - half, mean + half) if math.isfinite(half) else (None, None)
    return {"slope": mean, "lo": lo, "hi": hi, "n_pairs": len(samples)}


def analyze(bundle_path, sweep: Sweep) -> list[dict]:
    """One dict per series (module/recipe/shape-with-*/mode): per side the us and counters per value and
    the slope with its interval, and head - base with its verdict."""
    parsed = parse(bundle_path)
    stats = stats_from_meta(parsed.meta)
    field = METRIC_FIELD[stats.metric]
    labels = parsed.labels or ["run"]
    series: dict = defaultdict(dict)  # name -> value -> case
    for case in parsed.cases:
        key = _series_key(case, sweep)
        if key is not None and not case.skip:
            series[key[0]][key[1]] = case
    out = []
    for name, cases in series.items():
        values = sorted(cases)
        # side -> pair -> value -> [per-step us]
        per: dict = {label: defaultdict(lambda: defaultdict(list)) for label in labels}
        for value in values:
            for trial in parsed.cell(cases[value].id).trials:
                us = trial.per_step_us(field)
                if us is not None and trial.side in per:
                    per[trial.side][trial.pair][value].append(us)
        row: dict = {"series": name, "key": sweep.key, "values": values, "sides": {}}
        slopes: dict = {}
        for label in labels:
            pairs = per[label]
            medians = [[statistics.median(p[v]) for p in pairs.values() if p.get(v)] for v in values]
            # values no pair measured (skipped at run time: a recipe the GPU lacks) drop out
            measured = [v for v, m in zip(values, medians) if m]
            by_pair = {  # the pairs that measured every measured value
                pair: _ols_slope(measured, [statistics.median(got[v]) for v in measured])
                for pair, got in pairs.items()
                if all(got.get(v) for v in measured)
            }
            slopes[label] = {p: s for p, s in by_pair.items() if s is not None}
            counters = [parsed.cell(cases[v].id).counters.get(label) for v in values]
            calls = [c.get("python_calls") if c else None for c in counters]
            row["sides"][label] = {
                "us": [statistics.fmean(m) if m else None for m in medians],
                "python_calls": calls,
                "calls_slope": _ols_slope(values, calls) if None not in calls else None,
                **_interval(list(slopes[label].values()), stats.alpha),
            }
        if len(labels) == 2:
            base, head = labels
            common = sorted(set(slopes[base]) & set(slopes[head]))
            delta = _interval([slopes[head][p] - slopes[base][p] for p in common], stats.alpha)
            delta["verdict"] = slope_verdict(delta)
            row["delta"] = delta
        out.append(row)
    return out


def _us(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _slope(d: dict) -> str:
    if d.get("slope") is None:
        return "-"
    ci = f" [{d['lo']:+.2f}, {d['hi']:+.2f}]" if d.get("lo") is not None else ""
    return f"{d['slope']:+.2f} us/unit{ci}"


def render(rows: list[dict]) -> str:
    """Plain text: per series, a line per value and the slopes."""
    lines = []
    for row in rows:
        labels = list(row["sides"])
        n = max(s["n_pairs"] for s in row["sides"].values())
        lines.append(f"sweep {row['key']} over {row['series']} ({n} pairs):")
        columns = "".join(f" {lb + ' us':>12} {lb + ' py calls':>16}" for lb in labels)
        lines.append(f"  {row['key']:>10}{columns}")
        for i, value in enumerate(row["values"]):
            cells = "".join(
                f" {_us(row['sides'][lb]['us'][i]):>12} {str(row['sides'][lb]['python_calls'][i] or '-'):>16}"
                for lb in labels
            )
            lines.append(f"  {_fmt(value):>10}{cells}")
        for lb in labels:
            side = row["sides"][lb]
            calls = side.get("calls_slope")
            extra = f"; python calls {calls:+.2f} per unit" if calls is not None else ""
            lines.append(f"  slope {lb}: {_slope(side)}{extra}")
        if "delta" in row:
            lines.append(
                f"  slope {labels[1]} - {labels[0]}: {_slope(row['delta'])}: {row['delta']['verdict']}"
            )
    return "\n".join(lines) + ("\n" if lines else "")


def series_from_cells(cells) -> list[dict]:
    """Per (module, key, recipe, variant) of history cells named ``MODULE[KEY=V]`` with two values or
    more: the newest host time per value and the least-squares slope through them."""
    groups: dict = defaultdict(dict)
    for cell in cells:
        m = VARIANT.match(cell.module)
        last = cell.latest
        if not m or last is None or last.host_us is None:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        name = (m.group("module"), m.group("key"), cell.recipe, cell.variant)
        groups[name][value] = last
    out = []
    for name, points in sorted(groups.items()):
        if len(points) < 2:
            continue
        values = sorted(points)
        us, shas = [points[v].host_us for v in values], [points[v].short_sha for v in values]
        named = dict(zip(("module", "key", "recipe", "variant"), name))
        out.append(named | {"values": values, "us": us, "shas": shas, "slope": _ols_slope(values, us)})
    return out
