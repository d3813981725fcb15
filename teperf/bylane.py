"""`teperf report --by-lane`: each lane's estimate of every cell, and whether the lanes agree (ANOVA)."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

from teperf.bundle import Bundle
from teperf.config import Stats
from teperf.numbers import pct, us
from teperf.records import Row, TrialRecord
from teperf.render import TableModel, csv_text, json_value, key_columns, render_markdown, render_rich
from teperf.stats import lanes_agree, level_text
from teperf.summary import Summary, summarize

FIELDS = ("module", "recipe", "shape", "mode", "lane", "core", "n_pairs", "base_us", "level_pct", "delta_pct")
FIELDS += ("ci_low_pct", "ci_high_pct", "verdict", "agree_p", "agree")
FIGURES = ("n_pairs", "base_us", "delta_pct", "ci_low_pct", "ci_high_pct", "verdict")


def lane_cores(path) -> dict[int, list[int]]:
    """Lane -> the cores its trials ran on (one, unless the bundle says otherwise); lane 0 for old bundles."""
    cores: dict[int, set] = defaultdict(set)
    for rec in Bundle.open(path).records():
        if isinstance(rec, TrialRecord):
            cores[rec.lane].update([rec.core] if rec.core is not None else [])
    return {lane: sorted(c) for lane, c in sorted(cores.items())}


def breakdown(path, stats: Stats | None = None) -> tuple[Summary, list[dict]]:
    """The whole run's summary and one row per (cell, lane) plus a row per cell for all lanes."""
    whole = summarize(path, stats)
    stats = whole.settings
    cores = lane_cores(path)
    # every lane's intervals at the whole table's level, as its "all" row
    at = dataclasses.replace(stats, alpha=whole.interval_alpha)
    per_lane = {lane: summarize(path, at, lane=lane).rows for lane in cores}
    rows = []
    for i, row in enumerate(whole.rows):
        cell = {k: getattr(row, k) for k in ("module", "recipe", "shape", "mode")}
        groups = []
        for lane, lane_rows in per_lane.items():
            r = lane_rows[i]
            if not r.n_pairs:
                continue
            groups.append(list((r.pair_logs or {}).values()))
            rows.append({**cell, **_figures(r, row), "lane": lane, "core": ",".join(map(str, cores[lane]))})
        p, agree = lanes_agree(groups, stats.alpha)
        rows.append({**cell, **_figures(row, row), "lane": "all", "core": "", "agree_p": p, "agree": agree})
    return whole, rows


def _figures(r: Row, whole: Row) -> dict:
    level = (r.base_us / whole.base_us - 1) * 100 if r.base_us and whole.base_us else None
    return {**{k: getattr(r, k) for k in FIGURES}, "level_pct": level, "agree_p": None, "agree": ""}


def table_model(summary: Summary, rows: list[dict]) -> TableModel:
    keys = key_columns(summary.rows)  # the cells' own rows: the same cells
    cols = keys + ["lane", "core", "pairs", "base", "level"]
    if summary.compare:
        cols += ["delta %", f"{level_text(summary.interval_alpha)} CI", "verdict", "lanes agree (p)"]
    lines, styles = [], []
    for r in rows:
        line = [r[k] for k in keys]
        level = "" if r["lane"] == "all" else pct(r["level_pct"], none="")
        line += [str(r["lane"]), r["core"], str(r["n_pairs"] or 0), us(r["base_us"]), level]
        if summary.compare:
            ci = "-" if r["ci_low_pct"] is None else f"[{r['ci_low_pct']:+.1f}, {r['ci_high_pct']:+.1f}]%"
            agree = r["agree"] + (f" ({r['agree_p']:.2f})" if r["agree_p"] is not None else "")
            line += [pct(r["delta_pct"]), ci, r["verdict"] or "-", agree]
        lines.append(line)
        styles.append("bold" if r["lane"] == "all" else ("red" if r.get("agree") == "NO" else None))
    n_lanes = len({r["lane"] for r in rows if r["lane"] != "all"})
    differ = sum(r.get("agree") == "NO" for r in rows)
    tested = sum(r.get("agree") in ("yes", "NO") for r in rows)
    footer = [
        f"{n_lanes} lane{'s' if n_lanes != 1 else ''}; level: a lane's base time against all lanes' "
        "(a slower lane shows there; pairing cancels what hits both sides of a couple alike)"
        if n_lanes
        else "no lane measured a trial: no cell was measured (teperf report BUNDLE says why)"
    ]
    if summary.compare:
        footer.append(
            f"lanes agree: one-way ANOVA of the per-pair log ratios across lanes (lanes with 2+ pairs); "
            f"NO = p < alpha. {differ} of {tested} cells differ (about 5% expected by chance)"
        )
    if summary.path:
        footer.append(f"bundle: {summary.path}")
    numeric = ("lane", "core", "pairs", "base", "level", "delta %")
    return TableModel("teperf report --by-lane", [], cols, lines, styles, footer, numeric)


def render_by_lane(path, fmt: str, stats: Stats | None = None, console=None) -> str | None:
    """fmt (teperf.render.RENDERERS' keys) -> the text to print, or None where it printed on ``console``."""
    summary, rows = breakdown(path, stats)
    flat = [{k: json_value(r.get(k)) for k in FIELDS} for r in rows]
    if fmt == "json":
        return json.dumps({"lanes": flat}, indent=2) + "\n"
    if fmt == "csv":
        return csv_text(FIELDS, flat)
    model = table_model(summary, rows)
    return render_markdown(model) if fmt in ("markdown", "comment") else render_rich(model, console)
