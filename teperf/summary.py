"""Bundle -> one table model (meta + rows), whatever state the bundle is in."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import numpy as np

from teperf.bundle import Bundle
from teperf.errors import TeperfError
from teperf.config import Stats
from teperf.schema import ROW_FIELDS
from teperf.stats import compare_cell, single_cell

METRIC_FIELD = {"process_cpu": "process_cpu_ns", "thread_cpu": "thread_cpu_ns", "wall": "wall_ns"}
NOT_HOST_BOUND_SYNC_FRACTION = 0.02  # the final synchronize waited > 2 % of the loop: GPU was behind
PREEMPTED_WALL_OVER_CPU = 1.2


@dataclasses.dataclass
class Summary:
    meta: dict
    rows: list[dict]
    notes: list[str]
    path: Path | None = None

    @property
    def compare(self) -> bool:
        return len(self.meta.get("sides", {})) == 2


def _per_step_us(rec: dict, field: str) -> float:
    return rec[field] / rec["iters"] / 1000.0


TRIAL_KEYS = ("case_id", "side", "pair", "round", "trial", "iters")


def stats_from_meta(meta: dict, **overrides) -> Stats:
    """The run's statistics settings (keys this teperf does not know are ignored)."""
    raw = (meta.get("config") or {}).get("stats") or {}
    known = {f.name for f in dataclasses.fields(Stats)}
    stats = dataclasses.replace(Stats(**{k: v for k, v in raw.items() if k in known}), **overrides)
    if stats.metric not in METRIC_FIELD:
        raise TeperfError(f"unknown metric {stats.metric!r} in the bundle", f"pass --metric with one of: {', '.join(METRIC_FIELD)}")
    return stats


def _damaged(bundle: Bundle, what: str) -> TeperfError:
    return TeperfError(f"{bundle.path} is damaged: {what}", "re-run the measurement, or fix meta.json by hand")


def duration_text(seconds) -> str:
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def stop_note(stop: dict, meta: dict) -> str:
    """How a run with --precision or --budget ended; '' for a fixed schedule that ran out."""
    reason, pairs = stop.get("reason"), stop.get("pairs")
    target, budget = stop.get("precision_pct"), stop.get("budget_s")
    took = duration_text(stop.get("elapsed_s") or 0)
    open_ = stop.get("open") or []
    missed = ""
    if target is not None and open_:
        cells = ", ".join(open_[:6]) + (" ..." if len(open_) > 6 else "")
        missed = f"; {len(open_)} cell{'s' if len(open_) != 1 else ''} did not reach +-{target:g}%: {cells}"
    if reason == "precision reached":
        return f"precision: every cell reached +-{target:g}% (95% half-width) after {pairs} pairs, {took}"
    if reason == "budget":
        planned = "" if target is not None else f" of {(meta.get('config') or {}).get('schedule', {}).get('processes')}"
        return f"budget of {duration_text(budget)} spent after {pairs}{planned} pairs ({took}){missed}"
    if reason == "max pairs":
        return f"stopped at the most pairs teperf runs ({pairs}), {took}{missed}"
    return ""


def summarize(path, stats: Stats | None = None) -> Summary:
    bundle = Bundle.open(path)
    meta = bundle.read_meta()
    if not isinstance(meta, dict) or not isinstance(meta.get("cases", []), list) or not isinstance(meta.get("sides", {}), dict):
        raise _damaged(bundle, "meta.json is not a teperf metadata object")
    stats = stats or stats_from_meta(meta)
    labels = list(meta.get("sides", {}))
    base_label = labels[0] if labels else "base"
    head_label = labels[1] if len(labels) > 1 else None
    field = METRIC_FIELD[stats.metric]

    times = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # case -> side -> pair -> [us]
    extra = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # case -> side -> clock -> [us]
    couples = defaultdict(dict)  # case -> (pair, round, trial) -> {side: us}
    setup_status = defaultdict(dict)  # case -> side -> record
    counters = defaultdict(dict)
    failures = defaultdict(list)
    pair_starts = []
    stop = None
    preempted = total_trials = 0
    for rec in bundle.records():
        if not isinstance(rec, dict):
            continue
        kind = rec.get("kind")
        if kind == "trial":
            if any(k not in rec for k in TRIAL_KEYS) or not isinstance(rec.get(field), (int, float)) or not rec["iters"]:
                continue  # not a trial this teperf can read
            cid, side = rec["case_id"], rec["side"]
            v = _per_step_us(rec, field)
            times[cid][side][rec["pair"]].append(v)
            couples[cid].setdefault((rec["pair"], rec["round"], rec["trial"]), {})[side] = v
            total_trials += 1
            # Wall time well above process CPU time: the worker sat runnable but
            # descheduled, i.e. something else ran on the measuring core.
            if rec["wall_ns"] > PREEMPTED_WALL_OVER_CPU * rec["process_cpu_ns"] and meta.get("config", {}).get("device") == "cpu":
                preempted += 1
            for clock in ("thread_cpu_ns", "wall_ns", "sync_ns"):
                if rec.get(clock) is not None:
                    extra[cid][side][clock].append(_per_step_us(rec, clock))
        elif kind == "setup":
            setup_status[rec["case_id"]][rec["side"]] = rec
        elif kind == "counters":
            counters[rec["case_id"]].setdefault(rec["side"], rec["counters"])
        elif kind == "failure" and rec.get("case_id") is not None:
            failures[rec["case_id"]].append(rec)
        elif kind == "pair":
            pair_starts.append(rec.get("start_s"))
        elif kind == "stop":
            stop = rec

    rows = []
    notes: list[str] = []
    for case in meta.get("cases", []):
        if not isinstance(case, dict) or any(k not in case for k in ("id", "module", "recipe", "shape", "dtype", "mode")):
            raise _damaged(bundle, f"a case in meta.json lacks its keys: {str(case)[:80]}")
        cid = case["id"]
        row = {k: None for k in ROW_FIELDS}
        row.update(module=case["module"], recipe=case["recipe"], shape="x".join(map(str, case["shape"])), dtype=case["dtype"], mode=case["mode"])
        setups = setup_status.get(cid, {})
        skipped = [r for r in setups.values() if r.get("status") == "skipped"]
        errors = [r for r in setups.values() if r.get("status") == "error"] + failures.get(cid, [])
        info = next((r.get("info") for r in setups.values() if r.get("status") == "ready"), None)
        row["info"] = info
        if head_label is None:
            row.update(single_cell(times[cid][base_label]))
        else:
            by_pair = defaultdict(list)
            for (pair, _round, _trial), c in couples[cid].items():
                if base_label in c and head_label in c:
                    by_pair[pair].append((c[base_label], c[head_label]))
            row.update(compare_cell(times[cid][base_label], times[cid][head_label], stats, by_pair))
        for label, prefix in ((base_label, "base"), (head_label, "head")):
            if label is None:
                continue
            ex = extra[cid][label]
            if ex.get("thread_cpu_ns"):
                row[f"{prefix}_thread_us"] = float(np.median(ex["thread_cpu_ns"]))
            if ex.get("wall_ns"):
                row[f"{prefix}_wall_us"] = float(np.median(ex["wall_ns"]))
        syncs = [v for label in (base_label, head_label) if label for v in extra[cid][label].get("sync_ns", [])]
        walls = [v for label in (base_label, head_label) if label for v in extra[cid][label].get("wall_ns", [])]
        if meta.get("config", {}).get("device") == "cuda" and syncs:
            row["sync_us"] = float(np.median(syncs))
            row["host_bound"] = bool(np.median(syncs) <= NOT_HOST_BOUND_SYNC_FRACTION * np.median(walls))
        if counters.get(cid):
            row["counters"] = {"base": counters[cid].get(base_label), "head": counters[cid].get(head_label) if head_label else None}
        if case.get("skip"):
            row["status"] = "skipped"
            row["error"] = case["skip"]
        elif skipped and not row["n_trials"]:
            row["status"] = "skipped"
            row["error"] = skipped[0].get("error")
            row["verdict"] = None
        elif errors:
            row["status"] = "failed" if not row["n_trials"] else "partial"
            row["error"] = str(errors[0].get("error"))
            if not row["n_trials"]:
                row["verdict"] = None
        elif not row["n_trials"]:
            row["status"] = "missing"
        else:
            row["status"] = "ok"
        rows.append(row)

    if meta.get("status") in ("interrupted", "running"):
        notes.append(f"run status: {meta.get('status')} - the table shows what was measured before it stopped")
    elif meta.get("status") == "failed":
        notes.append(f"run status: failed{': ' + meta['error'] if meta.get('error') else ''}")
    if any(r.get("ci_basis") == "trials" for r in rows):
        notes.append("one process pair: intervals cover trial noise only, not the between-process noise (a few % on a VM); use --processes 3 or more for verdicts that hold")
    if any(r.get("host_bound") is False for r in rows):
        notes.append("cells marked 'GPU-bound': the GPU was behind at the end of a trial, so host time is not what limits the step")
    if total_trials and preempted / total_trials > 0.05:
        notes.append(f"{preempted} of {total_trials} trials ran at least 20% longer in wall time than in CPU time: other work shared the measuring core (pick a quieter --core or machine)")
    starts = [s for s in pair_starts if s is not None]
    if len(starts) > 1:
        notes.append(f"fresh process pair: the first took {starts[0]:.1f} s to start and set up, later ones {float(np.median(starts[1:])):.1f} s (median; each started while the previous one measured)")
    elif starts:
        notes.append(f"fresh process pair: {starts[0]:.1f} s to start and set up")
    if stop is not None and stop_note(stop, meta):
        notes.append(stop_note(stop, meta))
    for w in meta.get("warnings", []) or []:
        notes.append(f"doctor: {w}")
    return Summary(meta=meta, rows=rows, notes=notes, path=bundle.path)
