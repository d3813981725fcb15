"""Bundle -> one table model (meta + rows), whatever state the bundle is in."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import numpy as np

from teperf.bundle import Bundle, coordinator_gone
from teperf.errors import TeperfError
from teperf.numbers import duration
from teperf.config import METRICS, Stats
from teperf.schema import ONETIME_CLOCKS, ONETIME_COSTS, ONETIME_STATS, ROW_FIELDS, lost_pairs_text
from teperf.stats import break_even_steps, compare_cell, onetime_cell, single_cell

METRIC_FIELD = {metric: f"{metric}_ns" for metric in METRICS}  # the trial record's clock of each --metric
NOT_HOST_BOUND_SYNC_FRACTION = 0.02  # the final synchronize waited > 2 % of the loop: GPU was behind
PREEMPTED_WALL_OVER_CPU = 1.2


@dataclasses.dataclass
class Summary:
    meta: dict
    rows: list[dict]
    notes: list[str]
    path: Path | None = None
    onetime_notes: list[str] = dataclasses.field(default_factory=list)  # under the one-time table

    @property
    def compare(self) -> bool:
        return len(self.meta.get("sides", {})) == 2

    @property
    def show_pairs(self) -> bool:
        """Whether the table needs a pairs column: some cell rests on fewer pairs than the schedule
        planned (a lost pair, a stop), or cells got different numbers (--precision lets settled
        cells drop out). The one place that decides it for every format."""
        measured = [r for r in self.rows if r.get("status") != "skipped"]
        short = any(r.get("pairs_planned") and (r.get("n_pairs") or 0) != r["pairs_planned"] for r in measured)
        return short or len({r.get("n_pairs") for r in measured if r.get("n_pairs")}) > 1

    @property
    def incomplete_rows(self) -> list[dict]:
        """Cells that failed, ended partial or were never measured (skipped ones are fine)."""
        return [r for r in self.rows if r.get("status") in ("failed", "partial", "missing")]


def _per_step_us(rec: dict, field: str) -> float:
    return rec[field] / rec["iters"] / 1000.0


TRIAL_KEYS = ("case_id", "side", "pair", "round", "trial", "iters")


def _same_kind(value, default) -> bool:
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return type(value) is type(default)


def stats_from_meta(meta: dict, **overrides) -> Stats:
    """The run's statistics settings (keys this teperf does not know are ignored)."""
    raw = (meta.get("config") or {}).get("stats") or {}
    known = {f.name for f in dataclasses.fields(Stats)}
    defaults = Stats()
    # A damaged value falls back to the default rather than ending the report in a traceback.
    kept = {k: v for k, v in raw.items() if k in known and _same_kind(v, getattr(defaults, k))} if isinstance(raw, dict) else {}
    stats = dataclasses.replace(Stats(**kept), **overrides)
    if stats.metric not in METRIC_FIELD:
        raise TeperfError(f"unknown metric {stats.metric!r} in the bundle", f"pass --metric with one of: {', '.join(METRIC_FIELD)}")
    return stats


def _damaged(bundle: Bundle, what: str) -> TeperfError:
    return TeperfError(f"{bundle.path} is damaged: {what}", "re-run the measurement, or fix meta.json by hand")


def stop_note(stop: dict, meta: dict) -> str:
    """How a run with --precision or --budget ended; '' for a fixed schedule that ran out."""
    reason, pairs = stop.get("reason"), stop.get("pairs")
    target, budget = stop.get("precision_pct"), stop.get("budget_s")
    took = duration(stop.get("elapsed_s") or 0)
    open_ = stop.get("open") or []
    missed = ""
    if target is not None and open_:
        cells = ", ".join(open_[:6]) + (" ..." if len(open_) > 6 else "")
        missed = f"; {len(open_)} cell{'s' if len(open_) != 1 else ''} did not reach +-{target:g}%: {cells}"
    if reason == "precision reached":
        return f"precision: every cell reached +-{target:g}% (95% half-width) after {pairs} pairs, {took}"
    if reason == "budget":
        planned = "" if target is not None else f" of {(meta.get('config') or {}).get('schedule', {}).get('processes')}"
        return f"budget of {duration(budget)} spent after {pairs}{planned} pairs ({took}){missed}"
    if reason == "max pairs":
        return f"stopped at the most pairs teperf runs ({pairs}), {took}{missed}"
    return ""


def _usable(rec: dict, field: str) -> bool:
    """A record of a kind the summary reads, with the fields it needs of the right types."""
    kind = rec.get("kind")
    if kind == "trial":
        return (all(k in rec for k in TRIAL_KEYS) and isinstance(rec.get("side"), str)
                and all(isinstance(rec.get(k), (int, float)) and not isinstance(rec.get(k), bool) for k in (field, "wall_ns", "process_cpu_ns", "iters"))
                and rec["iters"] > 0 and all(isinstance(rec.get(k), (int, str)) for k in ("case_id", "pair", "round", "trial")))
    if kind in ("setup", "counters", "failure"):
        return isinstance(rec.get("side"), str) and (rec.get("case_id") is None or isinstance(rec.get("case_id"), (int, str)))
    if kind == "stop":
        return isinstance(rec.get("reason"), str)
    return True


def summarize(path, stats: Stats | None = None, lane: int | None = None) -> Summary:
    """The table model of a bundle; ``lane``: only the trials that lane measured (``report --by-lane``)."""
    bundle = Bundle.open(path)
    meta = bundle.read_meta()
    if not isinstance(meta.get("cases", []), list) or not isinstance(meta.get("sides", {}), dict) or not isinstance(meta.get("config", {}), dict):
        raise _damaged(bundle, "meta.json is not a teperf metadata object")
    if coordinator_gone(meta):
        # Its coordinator died without a word (SIGKILL, a crash): it will never finish.
        meta = {**meta, "status": "interrupted", "status_detail": "coordinator gone"}
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
    onetime = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))  # case -> cost -> side -> pair -> ms
    onetime_seen = OnetimeFacts()
    preempted = total_trials = unusable = compiled_in_trial = 0
    for rec in bundle.raw_records():
        if not _usable(rec, field):
            unusable += 1
            continue
        kind = rec.get("kind")
        if kind == "trial":
            if any(k not in rec for k in TRIAL_KEYS) or not isinstance(rec.get(field), (int, float)) or not rec["iters"]:
                continue  # not a trial this teperf can read
            if lane is not None and rec.get("lane", 0) != lane:
                continue  # bundles from before lanes measured on one lane: lane 0
            cid, side = rec["case_id"], rec["side"]
            v = _per_step_us(rec, field)
            times[cid][side][rec["pair"]].append(v)
            couples[cid].setdefault((rec["pair"], rec["round"], rec["trial"]), {})[side] = v
            total_trials += 1
            compiled_in_trial += bool(isinstance(rec.get("compiles"), int) and rec["compiles"] > 0)
            # Wall time well above process CPU time: the worker sat runnable but
            # descheduled, i.e. something else ran on the measuring core.
            if rec["wall_ns"] > PREEMPTED_WALL_OVER_CPU * rec["process_cpu_ns"] and meta.get("config", {}).get("device") == "cpu":
                preempted += 1
            for clock in ("thread_cpu_ns", "wall_ns", "sync_ns"):
                if isinstance(rec.get(clock), (int, float)) and not isinstance(rec.get(clock), bool):
                    extra[cid][side][clock].append(_per_step_us(rec, clock))
        elif kind == "setup":
            setup_status[rec["case_id"]][rec["side"]] = rec
            if rec.get("status") == "ready" and isinstance(rec.get("info"), dict):
                for cost in ONETIME_COSTS:
                    ms = onetime_ms(rec["info"].get(cost), stats.metric)
                    if ms is not None:  # the first set-up of a case in a pair counts (a restarted worker sets up again)
                        onetime[rec["case_id"]][cost][rec["side"]].setdefault(rec.get("pair"), ms)
                onetime_seen.add(rec, meta)
        elif kind in ("prewarm", "compile_cache"):
            onetime_seen.add(rec, meta)
        elif kind == "counters" and isinstance(rec.get("counters"), dict):
            counters[rec["case_id"]].setdefault(rec["side"], rec["counters"])
        elif kind == "failure" and rec.get("case_id") is not None:
            failures[rec["case_id"]].append(rec)
        elif kind == "pair" and isinstance(rec.get("start_s"), (int, float)):
            pair_starts.append(rec.get("start_s"))
        elif kind == "stop":
            stop = rec

    rows = []
    notes: list[str] = []
    schedule = (meta.get("config") or {}).get("schedule") or {}
    schedule = schedule if isinstance(schedule, dict) else {}
    planned = schedule.get("processes")
    # --precision leaves the number of pairs open: nothing was planned to fall short of
    planned = planned if isinstance(planned, int) and not isinstance(planned, bool) and schedule.get("precision_pct") is None else None
    bad_cases = 0
    for case in meta.get("cases", []):
        if (not isinstance(case, dict) or any(k not in case for k in ("id", "module", "recipe", "shape", "dtype", "mode"))
                or not isinstance(case["shape"], list) or not isinstance(case["id"], (int, str))):
            bad_cases += 1
            continue
        cid = case["id"]
        row = {k: None for k in ROW_FIELDS}
        row.update(module=case["module"], recipe=case["recipe"], shape="x".join(map(str, case["shape"])), dtype=case["dtype"], mode=case["mode"])
        setups = setup_status.get(cid, {})
        skipped = [r for r in setups.values() if r.get("status") == "skipped"]
        # A failure record with final False cost the cell one pair; the next pair measured it again.
        errors = [r for r in setups.values() if r.get("status") == "error"] + [f for f in failures.get(cid, []) if f.get("final", True)]
        lost = [f for f in failures.get(cid, []) if not f.get("final", True)]
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
        # A pair the cell lost (its worker died or hung, CellRetries) counts for neither figure.
        lost_pairs = {f.get("pair") for f in failures.get(cid, [])}
        for cost in ONETIME_COSTS:
            by_side = {side: {p: ms for p, ms in by_pair.items() if p not in lost_pairs}
                       for side, by_pair in onetime[cid][cost].items()}
            if by_side.get(base_label):
                figures = onetime_cell(by_side[base_label], by_side.get(head_label, {}) if head_label else None, stats)
                row.update({f"{cost}_{k}": v for k, v in figures.items() if k in ONETIME_STATS})
        if counters.get(cid):
            row["counters"] = {"base": counters[cid].get(base_label), "head": counters[cid].get(head_label) if head_label else None}
        if case.get("skip"):
            row["status"] = "skipped"
            row["error"] = case["skip"]
        elif skipped and not row["n_trials"]:
            row["status"] = "skipped"
            row["error"] = skipped[0].get("error")
            row["verdict"] = None
        elif errors or lost:
            row["status"] = "failed" if not row["n_trials"] else "partial"
            if errors:
                row["error"] = str(errors[0].get("error"))
                if isinstance(errors[0].get("lost_pairs"), list) and errors[0]["lost_pairs"]:
                    row["error"] += f" ({lost_pairs_text(errors[0]['lost_pairs'])})"
            else:
                pairs = sorted({f.get("pair") for f in lost}, key=str)
                row["error"] = f"lost pair{'s' if len(pairs) > 1 else ''} {', '.join(map(str, pairs))}: {lost[0].get('error')}"
            if not row["n_trials"]:
                row["verdict"] = None
        elif not row["n_trials"]:
            row["status"] = "missing"
        else:
            row["status"] = "ok"
        row["pairs_planned"] = planned
        if row["status"] == "partial":
            where = "/".join(str(row[k]) for k in ("module", "recipe", "shape", "mode"))
            of_planned = f" of {planned}" if planned else ""
            notes.append(f"partial {where}: its figures rest on {row['n_pairs'] or 0}{of_planned} pairs; {row['error']}")
        rows.append(row)

    if meta.get("status") in ("interrupted", "running"):
        detail = f" ({meta['status_detail']})" if meta.get("status_detail") else ""
        notes.append(f"run status: {meta.get('status')}{detail} - the table shows what was measured before it stopped")
    if bad_cases:
        notes.append(f"skipped {bad_cases} case{'s' if bad_cases != 1 else ''} of meta.json that lack their keys (damaged)")
    if not meta.get("cases"):
        notes.append("meta.json lists no cases: nothing to show (a damaged or foreign bundle?)")
    skipped_lines = bundle.skipped_lines + unusable
    if skipped_lines:
        notes.append(f"skipped {skipped_lines} unreadable line{'s' if skipped_lines != 1 else ''} of records.jsonl "
                     "(cut short by a crash, or damaged); the rest is shown")
    elif meta.get("status") == "failed":
        notes.append(f"run status: failed{': ' + meta['error'] if meta.get('error') else ''}")
    if any(r.get("ci_basis") == "trials" for r in rows):
        notes.append("one process pair: intervals cover trial noise only, not the between-process noise (a few % on a VM); use --processes 3 or more for verdicts that hold")
    if any(r.get("host_bound") is False for r in rows):
        notes.append("cells marked 'GPU-bound': the GPU was behind at the end of a trial, so host time is not what limits the step")
    if compiled_in_trial:
        notes.append(f"{compiled_in_trial} trial{'s' if compiled_in_trial != 1 else ''} of compiled cells compiled inside "
                     "the timed loop: their times include compilation")
    if total_trials and preempted / total_trials > 0.05:
        notes.append(f"{preempted} of {total_trials} trials ran at least 20% longer in wall time than in CPU time: other work shared the measuring core (pick a quieter --core or machine)")
    starts = [s for s in pair_starts if s is not None]
    if len(starts) > 1:
        notes.append(f"fresh process pair: the first took {starts[0]:.1f} s to start and set up, later ones {float(np.median(starts[1:])):.1f} s (median; each started while the previous one measured)")
    elif starts:
        notes.append(f"fresh process pair: {starts[0]:.1f} s to start and set up")
    if stop is not None and stop_note(stop, meta):
        notes.append(stop_note(stop, meta))
    lanes = (meta.get("config") or {}).get("lanes")
    if isinstance(lanes, int) and lanes > 1:
        cores = (meta.get("host") or {}).get("lane_cores") or []
        on = f" on cores {', '.join(map(str, cores))}" if cores else ""
        notes.append(f"{lanes} lanes measured pairs at once{on}; `teperf report --by-lane` shows each lane's estimate "
                     "and whether they agree")
    for w in meta.get("warnings", []) or []:
        notes.append(f"doctor: {w}")
    if head_label is None:
        add_break_even(rows)
    return Summary(meta=meta, rows=rows, notes=notes, path=bundle.path, onetime_notes=onetime_seen.notes(meta))


def onetime_ms(clocks, metric: str) -> float | None:
    """A one-time record (teperf.worker.clocks.time_once) -> ms of the headline clock."""
    if not isinstance(clocks, dict):
        return None
    parts = [clocks.get(k) for k in ONETIME_CLOCKS[metric]]
    if not all(isinstance(v, (int, float)) for v in parts):
        return None
    return sum(parts) / 1e6


def add_break_even(rows: list[dict]) -> None:
    """`run`: per cell and mode, the one-time extra over the eager cell and the steps that pay it back."""
    eager = {(r["module"], r["recipe"], r["shape"], r["dtype"]): r for r in rows if r["mode"] == "eager"}
    for r in rows:
        e = eager.get((r["module"], r["recipe"], r["shape"], r["dtype"]))
        if r["mode"] == "eager" or e is None or None in (r.get("first_call_base_ms"), e.get("first_call_base_ms")):
            continue
        r["onetime_extra_ms"] = r["first_call_base_ms"] - e["first_call_base_ms"]
        if r.get("base_us") is not None and e.get("base_us") is not None:
            r["saving_per_step_us"] = e["base_us"] - r["base_us"]
        r["break_even_steps"] = break_even_steps(r["onetime_extra_ms"], r.get("saving_per_step_us"))


class OnetimeFacts:
    """What the one-time table's footer says: where first calls ran, the cache state, the warm-ups."""

    def __init__(self):
        self.first_calls = 0
        self.on_measuring_core = 0
        self.shared_core = 0  # wall time well above CPU time: another process had the core
        self.warmups: list[float] = []  # process-level compile warm-up, s of CPU
        self.cache_mode = None
        self.cache_hits: list[int] = []  # files already in a compile case's cache at its first call
        self.prewarm_errors = 0
        self.recompile_what: set = set()
        self.recompile_graphs: list[int] = []

    def add(self, rec: dict, meta: dict) -> None:
        if rec.get("kind") == "compile_cache":
            self.cache_mode = rec.get("mode")
            return
        if rec.get("kind") == "prewarm":
            self.prewarm_errors += rec.get("status") not in ("ready",)
            return
        info = rec["info"]
        first = info.get("first_call")
        if not isinstance(first, dict):
            return
        self.first_calls += 1
        core = (meta.get("config") or {}).get("core")
        if first.get("cores") == [core]:
            self.on_measuring_core += 1
        cpu = (first.get("process_cpu_ns") or 0) + (first.get("children_cpu_ns") or 0)
        if (meta.get("config") or {}).get("device") == "cpu" and first.get("wall_ns", 0) > 1.2 * cpu:
            self.shared_core += 1
        warm = (first.get("after_process_warmup") or {}).get("compile")
        if isinstance(warm, dict) and "error" not in warm:
            self.warmups.append(((warm.get("process_cpu_ns") or 0) + (warm.get("children_cpu_ns") or 0)) / 1e9)
        if isinstance(first.get("cache"), dict):
            self.cache_hits.append(int(first["cache"].get("files_before") or 0))
        if isinstance(info.get("recompile"), dict):
            self.recompile_what.add(str(info["recompile"].get("what")))
            self.recompile_graphs.append(int(info["recompile"].get("graphs") or 0))

    def notes(self, meta: dict) -> list[str]:
        if not self.first_calls:
            return []
        metric = ((meta.get("config") or {}).get("stats") or {}).get("metric", "process_cpu")
        clock = {"process_cpu": "process CPU time (the worker's threads plus the compiler processes it ran)",
                 "thread_cpu": "main-thread CPU time", "wall": "wall time"}.get(metric, metric)
        paired = "; intervals: Student t over pairs of ln(head/base)" if len(meta.get("sides") or {}) == 2 else ""
        out = [f"one-time costs: {clock} of one call per side and process pair, apart from building the module and "
               f"the warm-up{paired}"]
        spare = self.first_calls - self.on_measuring_core
        if spare:
            out.append(f"{spare} of {self.first_calls} first calls ran on a spare core (pairs set up ahead), "
                       f"{self.on_measuring_core} on the measuring core; CPU time does not depend on the core, "
                       f"wall time does: {self.shared_core} first calls on the CPU waited >20% for their core")
        if self.warmups:
            out.append(f"not in the figures: each worker's first compile of anything (dynamo/inductor start-up, compiler "
                       f"probes), done once on a tiny function: median {float(np.median(self.warmups)):.1f} s of CPU")
        if self.cache_mode == "cold":
            hits = sum(1 for n in self.cache_hits if n)
            out.append(f"compile cache cold: every compile case started from an empty inductor/Triton cache of its own"
                       + (f" ({hits} did not: see the bundle)" if hits else ""))
        elif self.cache_mode == "warm":
            hits = sum(1 for n in self.cache_hits if n)
            out.append(f"compile cache warm: filled before the first pair by a throwaway worker per side; "
                       f"{hits} of {len(self.cache_hits)} compile first calls found it filled"
                       + (f"; {self.prewarm_errors} pre-warm set-ups failed" if self.prewarm_errors else ""))
        for what in sorted(self.recompile_what):
            graphs = sorted(set(self.recompile_graphs))
            none = " (no graph: nothing recompiled, the step ran eagerly)" if graphs == [0] else ""
            out.append(f"recompile: {what}, right after the first compiled call; graphs compiled by it: "
                       f"{', '.join(map(str, graphs))}{none}")
        return out
