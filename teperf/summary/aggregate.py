"""Aggregation: a parsed bundle -> one row per cell (teperf.schema.ROW_FIELDS): figures, status, error."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from operator import attrgetter

import numpy as np

from teperf.config import METRIC_FIELD, Stats
from teperf.records import CaseMeta, Row, lost_pairs_text, shape_text
from teperf.schema import ONETIME_CLOCKS, ONETIME_COSTS, ONETIME_STATS, ROW_FIELDS
from teperf.stats import (
    TableLevels,
    break_even_steps,
    clean_couples,
    compare_cell,
    load_bound,
    onetime_cell,
    single_cell,
    table_levels,
)
from teperf.summary.parse import CellRecords, ParsedBundle
from teperf.verdicts import loaded

NOT_HOST_BOUND_SYNC_FRACTION = 0.02  # the final synchronize waited > 2 % of the loop: GPU was behind
EXTRA_CLOCKS = ("thread_cpu_ns", "wall_ns", "sync_ns")


def trials_without_clock(parsed: ParsedBundle, stats: Stats) -> int:
    """Trials that lack the headline clock (another teperf's): not counted in any figure."""
    field = METRIC_FIELD[stats.metric]
    return sum(t.per_step_us(field) is None for cell in parsed.cells.values() for t in cell.trials)


def aggregate(
    parsed: ParsedBundle, stats: Stats, table_rule: bool = True
) -> tuple[list[Row], TableLevels | None]:
    """One row per well-formed case of meta.json, in its order, and a compare table's levels: its cells
    again with every interval at the table's level (stats.table_levels) where that is not the run's own."""
    rows = [cell_row(parsed, case, stats) for case in parsed.cases]
    if parsed.head_label is None:
        rows = with_break_even(rows)
    levels = None
    if parsed.head_label is not None and table_rule:
        levels = table_levels(verdict_cells(rows), stats.alpha)
    if levels and (levels.alpha, levels.floor) != (stats.alpha, stats.alpha):
        table = dataclasses.replace(stats, alpha=levels.alpha)
        rows = [cell_row(parsed, case, table, levels.floor) for case in parsed.cases]
    return rows, levels


def verdict_cells(rows: list[Row]) -> list[tuple[float, float]]:
    """(p, smallest reachable p) of every per-step and one-time cell that could be called slower or faster."""
    cells = [(r.p_value, 0.0) for r in rows if r.p_value is not None]
    for cost in ONETIME_COSTS:  # the one-time costs' fields are named after the cost
        p_values = [(getattr(r, f"{cost}_p_value"), getattr(r, f"{cost}_min_p")) for r in rows]
        cells += [(1.0 if p is None else p, low) for p, low in p_values if low]
    return cells


def cell_row(parsed: ParsedBundle, case: CaseMeta, stats: Stats, floor: float | None = None) -> Row:
    cell = parsed.cell(case.id)
    row = dict.fromkeys(ROW_FIELDS)
    row.update(
        module=case.module, recipe=case.recipe, shape=shape_text(case.shape), dtype=case.dtype, mode=case.mode
    )
    row["info"] = next((r.info for r in cell.setups.values() if r.status == "ready"), None)
    row.update(step_figures(parsed, cell, stats))
    row.update(onetime_figures(parsed, cell, stats, floor))
    if cell.counters:
        sides = {"base": parsed.base_label, "head": parsed.head_label}  # a run's head: None, so no counts
        row["counters"] = {side: cell.counters.get(label) for side, label in sides.items()}
    out = Row(**row)
    out = dataclasses.replace(
        out, **status_of(case, cell, out.n_trials), pairs_planned=parsed.config.planned_pairs
    )
    # a run stopped early, or a records.jsonl cut short after it: a cell short of its pairs is partial
    if out.status == "ok" and out.pairs_planned and (out.n_pairs or 0) < out.pairs_planned:
        stopped = parsed.meta.status == "interrupted"
        error = "the run was interrupted" if stopped else "records.jsonl holds fewer pairs (cut short?)"
        out = dataclasses.replace(out, status="partial", error=error)  # the note and table give the count
    return out


def lost_pairs(cell: CellRecords) -> set:
    """The pairs a cell lost (its worker died or hung, CellRetries): they count for none of its figures."""
    return {f.pair for f in cell.failures}


def lost_time(t) -> float:
    """ln(wall / CPU time) of a trial: the share of its wall time other processes took (0 on an idle core)."""
    return math.log(t.wall_ns / t.process_cpu_ns) if t.wall_ns and t.process_cpu_ns else 0.0


def step_figures(parsed: ParsedBundle, cell: CellRecords, stats: Stats) -> dict:
    """Per-step figures: the headline clock's estimate and interval, the other clocks' medians, GPU-bound,
    and how many couples shared their core."""
    field = METRIC_FIELD[stats.metric]
    base, head = parsed.base_label, parsed.head_label
    times = defaultdict(lambda: defaultdict(list))  # side -> pair -> [us]
    clocks = defaultdict(lambda: defaultdict(list))  # side -> clock -> [us]
    couples = defaultdict(dict)  # (pair, round, trial) -> side -> (us, lost_time, contended)
    lost = lost_pairs(cell)  # a lost pair's trials count for nothing
    kept = [t for t in cell.trials if t.pair not in lost]
    sides, shared = [base] + ([head] if head else []), lambda t: t.contended(parsed.device)
    used, counts = clean_couples(kept, sides, field, stats.max_contended_pct, shared)
    for t, v, key in used:
        times[t.side][t.pair].append(v)
        couples[key][t.side] = (v, lost_time(t), t.contended(parsed.device))
        for clock in EXTRA_CLOCKS:
            value = t.per_step_us(clock)
            if value is not None:
                clocks[t.side][clock].append(value)
    if head is None:
        out = dataclasses.asdict(single_cell(times[base]))
    else:
        by_pair, evidence = defaultdict(list), defaultdict(list)
        for key, c in couples.items():
            if base in c and head in c:
                (b, lost_b, shared_b), (h, lost_h, shared_h) = c[base], c[head]
                by_pair[key[0]].append((b, h))
                evidence[key[0]].append((math.log(h / b), lost_h - lost_b, shared_b or shared_h))
        bias, source = None, ""
        # loaded() is never true at --max-contended 100, which accepts any load: no rule
        if parsed.device == "cpu" and loaded(counts["contended"], counts["couples"], stats.max_contended_pct):
            bias, source = load_bound(evidence, stats.alpha)
        out = dict(
            dataclasses.asdict(
                compare_cell(times[base], times[head], stats, by_pair, parsed.pair_generations, bias)
            ),
            load_bound_source=source or None,
        )
    if counts["couples"] and parsed.device == "cpu":  # elsewhere no trial tells (TrialRecord.contended)
        out["contended_pct"] = 100.0 * counts["contended"] / counts["couples"]
        out["remeasured"] = counts["remeasured"]
    for label, prefix in ((base, "base"), (head, "head")):
        for clock, name in (("thread_cpu_ns", "thread_us"), ("wall_ns", "wall_us")):
            if label is not None and clocks[label].get(clock):
                out[f"{prefix}_{name}"] = float(np.median(clocks[label][clock]))
    syncs = [v for label in (base, head) if label for v in clocks[label].get("sync_ns", [])]
    walls = [v for label in (base, head) if label for v in clocks[label].get("wall_ns", [])]
    if parsed.device == "cuda" and syncs:
        out["sync_us"] = float(np.median(syncs))
        out["host_bound"] = bool(np.median(syncs) <= NOT_HOST_BOUND_SYNC_FRACTION * np.median(walls))
    return out


def onetime_ms(clocks, metric: str) -> float | None:
    """A one-time record (teperf.worker.clocks.time_once) -> ms of the headline clock."""
    if not isinstance(clocks, dict):
        return None
    parts = [clocks.get(k) for k in ONETIME_CLOCKS[metric]]
    return sum(parts) / 1e6 if all(isinstance(v, (int, float)) for v in parts) else None


def onetime_figures(
    parsed: ParsedBundle, cell: CellRecords, stats: Stats, floor: float | None = None
) -> dict:
    """One-time costs (first call, recompile), one figure per side and pair, paired like per-step times."""
    lost = lost_pairs(cell)
    by_cost = defaultdict(lambda: defaultdict(dict))  # cost -> side -> pair -> ms
    for setup in cell.ready:
        for cost in ONETIME_COSTS:
            ms = onetime_ms(setup.info.get(cost), stats.metric)
            # the first set-up of a case in a pair counts (a restarted worker sets up again)
            if ms is not None and setup.pair not in lost:
                by_cost[cost][setup.side].setdefault(setup.pair, ms)
    base, head = parsed.base_label, parsed.head_label
    out = {}
    for cost, by_side in by_cost.items():
        if by_side.get(base):
            figures = onetime_cell(
                by_side[base], by_side.get(head, {}) if head else None, stats, parsed.pair_generations, floor
            )
            out.update({f"{cost}_{k}": v for k, v in figures.items() if k in ONETIME_STATS or k == "min_p"})
    return out


def status_of(case: CaseMeta, cell: CellRecords, n_trials) -> dict:
    """status (ok | partial | failed | skipped | missing), and the error that explains it."""
    skipped = [r for r in cell.setups.values() if r.status == "skipped"]
    # A failure record with final False cost the cell one pair; the next pair measured it again.
    errors = [r for r in cell.setups.values() if r.status == "error"] + [f for f in cell.failures if f.final]
    lost = [f for f in cell.failures if not f.final]
    if case.skip:
        return {"status": "skipped", "error": case.skip}
    if skipped and not n_trials:
        return {"status": "skipped", "error": skipped[0].error, "verdict": None}
    if errors or lost:
        out = {"status": "partial"} if n_trials else {"status": "failed", "verdict": None}
        if errors:
            out["error"] = str(errors[0].error)
            failed = {r.side for r in cell.setups.values() if r.status == "error"}
            if errors[0] in cell.setups.values() and len(failed) < len(cell.setups):
                # one side of a compare could not set the cell up (its factory is missing, say): which
                out["error"] = f"{errors[0].side} only: {out['error']}"
            if getattr(errors[0], "lost_pairs", None):
                out["error"] += f" ({lost_pairs_text(errors[0].lost_pairs)})"
        else:
            pairs = sorted({f.pair for f in lost}, key=str)
            out["error"] = (
                f"lost pair{'s' if len(pairs) > 1 else ''} {', '.join(map(str, pairs))}: {lost[0].error}"
            )
        return out
    return {"status": "ok" if n_trials else "missing"}


def with_break_even(rows: list[Row]) -> list[Row]:
    """`run`: per cell and mode, the one-time extra over the eager cell and the steps that pay it back."""
    cell = attrgetter("module", "recipe", "shape", "dtype")
    eager = {cell(r): r for r in rows if r.mode == "eager"}
    out = []
    for r in rows:
        e = eager.get(cell(r)) if r.mode != "eager" else None
        if e is not None and None not in (r.first_call_base_ms, e.first_call_base_ms):
            extra = r.first_call_base_ms - e.first_call_base_ms
            saving = None if None in (r.base_us, e.base_us) else e.base_us - r.base_us
            steps = break_even_steps(extra, saving)
            r = dataclasses.replace(
                r, onetime_extra_ms=extra, saving_per_step_us=saving, break_even_steps=steps
            )
        out.append(r)
    return out
