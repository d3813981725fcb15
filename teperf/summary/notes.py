"""Presentation: the notes under the table (what the figures rest on, what went wrong, how the run
ended) and under the one-time table. Words only: every figure comes from aggregation."""

from __future__ import annotations

import socket

import numpy as np

from teperf.config import Stats
from teperf.engine.autoschedule import describe
from teperf.numbers import duration
from teperf.records import CONTENDED_WALL_OVER_CPU, BundleMeta, Row, StopRecord
from teperf.stats import TableLevels, lanes_agree, onetime_rule, pairs_to_settle
from teperf.summary.aggregate import trials_without_clock
from teperf.summary.parse import ParsedBundle
from teperf.verdicts import FEW_UNITS, LOAD, MIN_VERDICT_UNITS, any_load


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _where_running(meta: BundleMeta) -> str:
    """' on HOST (pid N)' for a coordinator on another host, whose liveness this reader cannot check."""
    facts = meta.coordinator
    if not isinstance(facts, dict) or not facts.get("hostname") or facts["hostname"] == socket.gethostname():
        return ""
    pid = f", pid {facts['pid']}" if facts.get("pid") else ""
    return f" on {facts['hostname']}{pid}, which this host cannot check"


def notes(parsed: ParsedBundle, rows: list[Row], stats: Stats) -> list[str]:
    meta = parsed.meta
    of_planned = f" of {parsed.config.planned_pairs}" if parsed.config.planned_pairs else ""
    out = [
        f"partial {row.key}: its figures rest on {row.n_pairs or 0}{of_planned} pairs; {row.error}"
        for row in rows
        if row.status == "partial"
    ]
    if meta.status == "interrupted":
        detail = f" ({meta.status_detail})" if meta.status_detail else ""
        out.append(f"run status: interrupted{detail} - the table shows what was measured before it stopped")
    elif meta.status == "running":
        out.append(f"run status: running{_where_running(meta)} - the table shows what was measured so far")
    if parsed.bad_cases:
        out.append(f"skipped {_plural(parsed.bad_cases, 'case')} of meta.json that lack their keys (damaged)")
    if not meta.cases:
        out.append("meta.json lists no cases: nothing to show (a damaged or foreign bundle?)")
    skipped_lines = parsed.skipped_lines + trials_without_clock(parsed, stats)
    if skipped_lines:
        out.append(
            f"skipped {_plural(skipped_lines, 'unreadable line')} of records.jsonl "
            "(cut short by a crash, written twice, or damaged); the rest is shown"
        )
    elif meta.status == "failed":
        out.append(f"run status: failed{': ' + meta.error if meta.error else ''}")
    if few := [r for r in rows if r.verdict_cause == FEW_UNITS or r.ci_basis in ("trials", "one generation")]:
        out.append(few_units_note(few))
    if any(r.host_bound is False for r in rows):
        out.append(
            "cells marked 'GPU-bound': the GPU was behind at the end of a trial, so host time is not what "
            "limits the step"
        )
    if parsed.compiled_in_trial:
        out.append(
            f"{_plural(parsed.compiled_in_trial, 'trial')} of compiled cells compiled inside "
            "the timed loop: their times include compilation"
        )
    out.append(load_note(parsed, rows, stats))
    starts = parsed.pair_starts
    made = "forked" if parsed.pair_generations is not None else "fresh"
    if len(starts) > 1:
        out.append(
            f"{made} process pair: the first took {starts[0]:.1f} s to start and set up, later ones "
            f"{float(np.median(starts[1:])):.1f} s (median; each started while the previous one measured)"
        )
    elif starts:
        out.append(f"{made} process pair: {starts[0]:.1f} s to start and set up")
    out.append(stop_note(parsed.stop, meta) if parsed.stop is not None else "")
    if parsed.stop is not None and parsed.stop.schedule:
        out.append(describe(parsed.stop.schedule, parsed.config.known("lanes", 1), parsed.stop.prestart))
    lanes = parsed.config.known("lanes", 1)
    if lanes > 1:
        cores = meta.host.get("lane_cores") or []
        on = f" on cores {', '.join(map(str, cores))}" if cores else ""
        out.append(
            f"{lanes} lanes measured pairs at once{on}; `teperf report --by-lane` shows each lane's estimate "
            "and whether they agree"
        )
    out.append(generation_note(parsed, rows, stats))
    out += [f"doctor: {w}" for w in meta.warnings or []]
    return [note for note in out if note]  # the *_note helpers give "" for nothing to say


def generation_note(parsed: ParsedBundle, rows: list[Row], stats: Stats) -> str:
    """--spawn forkserver: whether the pairs of one server generation (sharing its address-space layout
    and hash seed) agree more with each other than with other generations', per cell (one-way ANOVA)."""
    generation_of = parsed.pair_generations
    if generation_of is None:
        return ""

    tested = differ = 0
    for row in rows:
        groups: dict[int, list[float]] = {}
        for pair, value in (row.pair_logs or {}).items():
            generation = generation_of.get(int(pair))
            if generation is not None:
                groups.setdefault(generation, []).append(value)
        p, agree = lanes_agree(list(groups.values()), stats.alpha)
        tested += p is not None
        differ += agree == "NO"
    if not tested:
        return ""
    expected = max(1, round(tested * stats.alpha))
    text = (
        f"fork-server generations: pairs of one generation read differently from other generations' in "
        f"{differ} of {tested} cells (one-way ANOVA of per-pair log ratios, p < {stats.alpha:g}; about "
        f"{expected} by chance)"
    )
    if differ > 2 * expected:
        text += (
            ": pairs of a generation are not independent here, which is why the intervals take the "
            "generation, not the pair, as the unit (--server-pairs 1 or --spawn fresh make every pair one)"
        )
    return text


def load_note(parsed: ParsedBundle, rows: list[Row], stats: Stats) -> str:
    """What sharing the measuring core did: couples measured again, couples left out, cells inconclusive."""
    remeasured = sum(r.remeasured or 0 for r in rows)
    shares = [r.contended_pct for r in rows if r.contended_pct]
    limit = stats.max_contended_pct
    counted = [p for p in shares if p > limit or p == 100 or any_load(limit)]  # teperf.stats.choose_attempts
    left_out = [p for p in shares if p not in counted]
    if not (remeasured or shares) and parsed.preempted_trials <= 0.05 * parsed.total_trials:
        return ""
    text = (
        f"{parsed.preempted_trials} of {parsed.total_trials} trials shared the measuring core (wall time at "
        f"least {CONTENDED_WALL_OVER_CPU * 100 - 100:.0f}% above CPU time); {_plural(remeasured, 'couple')} "
        "measured again"
    )
    if left_out:
        low, high = f"{min(left_out):.0f}", f"{max(left_out):.0f}"
        text += (
            "; couples that shared it in every attempt are left out of the figures: "
            f"{low if low == high else f'{low}-{high}'}% per cell"
        )
    if counted and any_load(limit):
        text += f"; they count (the limit is 100%): up to {max(counted):.0f}% of a cell's couples"
    elif counted:
        loaded = sum(r.verdict_cause == LOAD for r in rows)
        text += (
            f"; {_plural(len(counted), 'cell')} had more than {limit:g}% of their couples share it in every "
            f"attempt (up to {max(counted):.0f}%): their figures count them, their intervals widened by the "
            "bias load could add"
            + (f", and {loaded} {'is' if loaded == 1 else 'are'} inconclusive (load)" if loaded else "")
        )
    return text + " - pick a quieter --core or machine"


def warm_cache_text(caches: list[dict], filled: int) -> str:
    """What a warm run's compile first calls found in the cache (each graph: hit, miss or bypass)."""
    counted = [c for c in caches if "fxgraph_hit" in c]
    if not counted:  # a bundle from before the counters: only whether the directory held files
        return f"{filled} of {len(caches)} compile first calls found it filled"
    graphs = [sum(c.get(f"fxgraph_{k}", 0) for k in ("hit", "miss", "bypass")) for c in counted]
    every = sum(1 for c, n in zip(counted, graphs) if n and c.get("fxgraph_hit") == n)
    text = f"{every} of {len(counted)} compile first calls found every graph they compiled in it"
    missed = sum(1 for c in counted if c.get("fxgraph_miss"))
    bypassed = sum(1 for c in counted if c.get("fxgraph_bypass") or c.get("autograd_bypass"))
    none = sum(1 for n in graphs if not n)
    parts = [
        f"{missed} compiled graphs anew (cache misses)" if missed else "",
        f"{bypassed} bypassed a cache (graphs it cannot key or store)" if bypassed else "",
        f"{none} compiled nothing inductor caches" if none else "",
    ]
    return text + "".join(f"; {p}" for p in parts if p)


def stop_note(stop: StopRecord, meta: BundleMeta) -> str:
    """How a run with --precision or --budget ended; '' for a fixed schedule that ran out."""
    target, budget, pairs = stop.precision_pct, stop.budget_s, stop.pairs
    took = duration(stop.elapsed_s or 0)
    missed = ""
    if target is not None and stop.open:
        cells = ", ".join(stop.open[:6]) + (" ..." if len(stop.open) > 6 else "")
        missed = f"; {_plural(len(stop.open), 'cell')} did not reach +-{target:g}%: {cells}"
        missed += more_time_text(stop, meta.config.stats.alpha)  # the alpha the run's widths were read at
    if stop.reason == "precision reached":
        return f"precision: every cell reached +-{target:g}% (95% half-width) after {pairs} pairs, {took}"
    if stop.reason == "budget":
        planned = ""
        if target is None and meta.config.known("schedule.kind") != "auto":
            planned = f" of {meta.config.known('schedule.processes')}"
        return f"budget of {duration(budget)} spent after {pairs}{planned} pairs ({took}){missed}"
    if stop.reason == "max pairs":
        return f"stopped at the most pairs teperf runs ({pairs}), {took}{missed}"
    return ""


def more_time_text(stop: StopRecord, alpha: float) -> str:
    """How long the run would take in all, at its pace, to bring its widest open cell to the target: the
    pairs that would settle it (stats.pairs_to_settle, the rule bisect's parts use) at its seconds a pair."""
    widest = max(stop.open_half_pct.values(), default=None)
    if widest is None or not stop.elapsed_s or (stop.pairs or 0) < 2 or widest <= stop.precision_pct:
        return ""
    total = stop.elapsed_s * pairs_to_settle(widest, stop.pairs, stop.precision_pct, alpha) / stop.pairs
    return f" (the widest at +-{widest:.2f}%: about {duration(total)} in all at this pace would reach it)"


def onetime_notes(parsed: ParsedBundle, levels: TableLevels | None = None) -> list[str]:
    """The one-time table's footer: the clock, where first calls ran, the compile cache, the warm-ups."""
    meta = parsed.meta
    config = parsed.config
    ready = [s.info for cell in parsed.cells.values() for s in cell.ready]
    infos = [info for info in ready if isinstance(info.get("first_call"), dict)]
    if not infos:
        return []
    firsts = [info["first_call"] for info in infos]
    cpu = lambda c: (c.get("process_cpu_ns") or 0) + (c.get("children_cpu_ns") or 0)  # noqa: E731
    first_calls = len(firsts)
    on_measuring_core = sum(first.get("cores") == [config.known("core")] for first in firsts)
    on_cpu = config.known("device") == "cpu"  # wall time well above CPU time: another process had the core
    shared_core = sum(
        on_cpu and first.get("wall_ns", 0) > CONTENDED_WALL_OVER_CPU * cpu(first) for first in firsts
    )
    warm = [(first.get("after_process_warmup") or {}).get("compile") for first in firsts]
    warmups = [cpu(w) / 1e9 for w in warm if isinstance(w, dict) and "error" not in w]  # s of CPU
    # a compile case's cache at its first call (teperf.schema: first_call.cache)
    caches = [first["cache"] for first in firsts if isinstance(first.get("cache"), dict)]
    recompiles = [info["recompile"] for info in infos if isinstance(info.get("recompile"), dict)]
    stats = config.stats  # the run's own clock and rule
    clock = {
        "process_cpu": "process CPU time (the worker's threads plus the compiler processes it ran)",
        "thread_cpu": "main-thread CPU time",
        "wall": "wall time",
    }.get(stats.metric, stats.metric)
    unit = "fork-server generations" if parsed.pair_generations is not None else "pairs"
    out = [
        f"one-time costs: {clock} of one call per side and process pair, apart from building the module and "
        f"the warm-up"
    ]
    if len(meta.sides) == 2:
        # from stats.alpha / cells pairs on, every one-time cell of the table is in its family
        needed = stats.alpha / max(1, levels.cells) if levels else None
        out.append(
            onetime_rule(levels.alpha if levels else stats.alpha, stats.min_effect_once_pct, unit, needed)
        )
    spare = first_calls - on_measuring_core
    if spare:
        out.append(
            f"{spare} of {first_calls} first calls ran on a spare core (pairs set up ahead), "
            f"{on_measuring_core} on the measuring core; CPU time does not depend on the core, "
            f"wall time does: {shared_core} first calls on the CPU waited "
            f">{CONTENDED_WALL_OVER_CPU * 100 - 100:.0f}% for their core"
        )
    if warmups:
        out.append(
            "not in the figures: each worker's first compile of anything (dynamo/inductor start-up, "
            f"compiler probes), done once on a tiny function: median {float(np.median(warmups)):.1f} s of CPU"
        )
    cache_mode = parsed.compile_cache.mode if parsed.compile_cache else None
    filled = sum(1 for c in caches if c.get("files_before"))
    if cache_mode == "cold":
        hits = sum(1 for c in caches if c.get("fxgraph_hit") or c.get("autograd_hit"))
        out.append(
            "compile cache cold: every compile case started from an empty inductor/Triton cache of its own"
            + (f" ({filled or hits} did not: see the bundle)" if filled or hits else "")
        )
    elif cache_mode == "warm":
        prewarm_errors = sum(p.status != "ready" for p in parsed.prewarms)
        out.append(
            "compile cache warm: filled before the first pair by a throwaway worker per side; "
            + warm_cache_text(caches, filled)
            + (f"; {prewarm_errors} pre-warm set-ups failed" if prewarm_errors else "")
        )
    shared = sum(
        any(isinstance(s.info.get("first_call"), dict) for s in cell.ready) for cell in parsed.cells.values()
    )
    if shared > 1:
        out.append(
            f"{shared} cases shared each worker, so their first calls are not independent: a process's "
            "first case pays what a process does once (its first kernels and fusions, the compiler's first "
            "look at the library's code), later ones reuse what it left; for what a fresh process pays, "
            "measure one case a run"
        )
    lazily = [
        f"{case.module} {case.recipe} {case.mode}"
        for case in parsed.cases
        if case.mode != "compile" and case.id in parsed.cells
        if any((s.info.get("first_call") or {}).get("graphs") for s in parsed.cells[case.id].ready)
    ]
    if lazily:
        text = (
            f"first calls that ran torch.compile inside the library: {', '.join(lazily)} (it compiles part "
            "of its code on first use, e.g. TE's fused helpers)"
        )
        if cache_mode != "warm":  # under --compile-cache warm a side's workers share one cache
            text += (
                "; each worker compiles them in an inductor cache of its own, cold, so a process that finds "
                "them in a warm cache pays less"
            )
        out.append(text)
    for what in sorted({str(r.get("what")) for r in recompiles}):
        graphs = sorted({int(r.get("graphs") or 0) for r in recompiles})
        none = " (no graph: nothing recompiled, the step ran eagerly)" if graphs == [0] else ""
        out.append(
            f"recompile: {what}, right after the first compiled call; graphs compiled by it: "
            f"{', '.join(map(str, graphs))}{none}"
        )
    return out


def few_units_note(rows) -> str:
    """Why cells on too few independent units are undecided, and what would decide them (one line)."""
    if any(r.ci_basis == "one generation" for r in rows):
        return (
            "one fork-server generation: no slower or faster called (a verdict needs "
            f"{MIN_VERDICT_UNITS} generations, the unit with --spawn forkserver); use more pairs than "
            "--server-pairs, or --spawn fresh"
        )
    fewest = min(r.n_pairs or 0 for r in rows)
    if fewest == 1:
        why = "one process pair's interval covers trial noise only, not the noise between processes"
    else:
        why = f"{fewest} process pairs estimate the noise between processes too loosely"
    return (
        f"no slower or faster called: {why}; a verdict needs {MIN_VERDICT_UNITS} pairs or more "
        f"(--processes {MIN_VERDICT_UNITS}, or --budget to let teperf plan them)"
    )
