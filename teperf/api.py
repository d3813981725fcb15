"""The library API: what the CLI calls, and what a Python user can call.

from teperf import api, config
cfg = config.load_config("default", {"processes": 4})
path = api.compare(cfg, api.path_side("base", "old/"), api.path_side("head", "new/"))
print(api.summarize(path).rows)

A nightly: ``api.nightly(api.plan_nightly(cfg, sides, history=...), options.MeasureOptions(cfg), sides)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import re
import socket
import sys
from pathlib import Path
from typing import Callable, ContextManager, Optional

from teperf.bundle import Bundle, coordinator_facts
from teperf.config import Config
from teperf.cpus import cpu_model
from teperf.doctor import quick_checks
from teperf.engine.adaptive import Adaptive, Snapshot
from teperf.engine.coordinator import lane_cores, run_schedule
from teperf.engine.probe import preflight
from teperf.engine.signals import terminate_as_interrupt
from teperf.engine.spawn import check_python
from teperf.errors import Interrupted, TeperfError
from teperf.history.store import HistoryStore, default_night, machine_from_meta
from teperf.memory import check_memory
from teperf.nightly import (
    NightlyInterrupted,
    NightlyPlan,
    NightlyResult,
    check_night,
    choose_base,
    local_machine,
    parse_shard,
    shard_cases,
)
from teperf.options import MeasureOptions, SideOptions
from teperf.plan import check_balance, check_duration, expand, hash_seed, measured_packages, total_steps
from teperf.provenance import check_path_sides, check_sides_used
from teperf.records import WorkerRecord
from teperf.sides import Side, with_inherited_pythonpath
from teperf.sides.git import plan_sides
from teperf.sides.gitrepo import GitFailed, repo_root, resolve, run_git
from teperf.stats import preload as preload_stats
from teperf.summary import Summary, summarize  # noqa: F401  (re-exported)


def path_side(label: str, path: Optional[str] = None, python: Optional[str] = None) -> Side:
    """A side from a directory put first on sys.path and/or an interpreter."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", label or ""):
        raise TeperfError(
            f"side label {label!r} is not a plain name", "use letters, digits, '.', '_' or '-' (--label)"
        )
    option = "--path" if label not in ("base", "head") else f"--{label}-path"
    sys_path: tuple[str, ...] = ()
    if path is not None:
        p = Path(path)
        if not str(path).strip():  # an unset shell variable: not the current directory in disguise
            raise TeperfError(f"{option} is empty", f"point {option} at the directory that holds the package")
        if not p.is_dir():
            where = "" if p.is_absolute() else f" (from {Path.cwd()})"
            fix = f"point {option} at the directory that holds the package to import"
            raise TeperfError(f"{option} {path!r}{where} is not a directory", fix)
        sys_path = (str(p.resolve()),)
    if python is not None:
        check_python(python)
    return Side(label, python or sys.executable, sys_path, description={"kind": "env" if python else "path"})


def measure(
    config: Config,
    sides: list[Side],
    *,
    results_dir: Optional[str] = None,
    command: Optional[list[str]] = None,
    progress: Optional[Callable[[Optional[int]], Callable[[int, str], None]]] = None,
    extra_meta: Optional[dict] = None,
    cases: Optional[list] = None,
    live: Optional[Callable[[Snapshot], None]] = None,
) -> Path:
    """Run the whole schedule for 1 (run) or 2 (compare) sides; return the bundle path. ``progress(total
    steps or None)`` returns the per-trial callback; ``live(snapshot)`` is called at the start and after
    every pair; ``cases`` narrows ``expand(config)`` (e.g. to a shard)."""
    if len(sides) not in (1, 2) or len({s.label for s in sides}) != len(sides):
        raise TeperfError(
            "need one side (run) or two differently labelled sides (compare)", "check the side options"
        )
    if len(sides) == 1 and config.schedule.precision_pct is not None:
        raise TeperfError(
            "--precision needs two sides: it aims at the width of the base-vs-head interval",
            "use it with compare or nightly; `run` takes --processes (and --budget)",
        )
    check_balance(config, len(sides))
    sides = [with_inherited_pythonpath(s) for s in sides]  # recorded, so explain can use it later
    cases = cases if cases is not None else expand(config)
    check_memory(cases, config.device)
    check_duration(config, len(cases), len(sides))
    # Before any pair: each side must be able to import what it is meant to measure, from where it was named.
    check_path_sides(config, sides)
    found = preflight(config, sides, hash_seed(config.seed, 0))
    preload_stats()  # before any Ctrl-C can be meant for the run (see its docstring)
    meta = {
        "config": config.to_dict(),
        "sides": {s.label: s.to_meta() for s in sides},
        "preflight": found,  # where each side's interpreter finds torch and the packages under test
        "host": {
            "hostname": socket.gethostname(),
            "cpu_model": cpu_model(),
            "cpu_count": os.cpu_count(),
            "core": config.core,
            "lane_cores": lane_cores(config),
            "platform": platform.platform(),
            "coordinator_python": sys.version.split()[0],
        },
        "cases": [c.to_meta() for c in cases],
        "warnings": [
            f"{check.name}: {check.detail}" + (f" ({check.fix})" if check.fix else "")
            for check in quick_checks(config.core, device=config.device)
            if check.status in ("warn", "fail")
        ],
        "coordinator": coordinator_facts(),  # lets a reader tell a live run from one whose coordinator died
        **(extra_meta or {}),
    }
    total = total_steps(config, len(cases), len(sides)) if config.schedule.kind == "fixed" else None
    callback = progress(total) if progress else None
    adaptive = Adaptive(config, cases, len(sides))
    if live is not None:
        adaptive.listeners.append(live)
    with Bundle.session(results_dir, "compare" if len(sides) == 2 else "run", meta, command) as bundle:

        def at_end() -> dict:
            workers: dict = {}  # the first hello of each side, plus every pair's start-up time
            for rec in bundle.records():
                if isinstance(rec, WorkerRecord):
                    side = workers.setdefault(rec.side, dict(rec.hello))
                    side.setdefault("start_s_by_pair", []).append(rec.hello.get("start_s"))
            first = next(iter(workers.values()), {})  # what the workers saw of the GPU
            gpu = {key: first[key] for key in ("gpu", "driver", "cuda") if first.get(key)}
            return {"workers": workers, "host": {**meta["host"], **gpu}}

        bundle.at_end = at_end
        with terminate_as_interrupt():
            failed = run_schedule(config, sides, cases, bundle, callback, adaptive)
        if failed and len(failed) == len(cases):
            bundle.status = "failed"
    return bundle.path


def run(config: Config, side: Side, **kwargs) -> Path:
    return measure(config, [side], **kwargs)


def compare(config: Config, base: Side, head: Side, **kwargs) -> Path:
    return measure(config, [base, head], **kwargs)


def plan_nightly(
    config: Config,
    sides: SideOptions,
    *,
    ref: str = "main",
    history: Optional[str] = None,
    shard: Optional[str] = None,
    night: Optional[str] = None,
    force: bool = False,
    at: Optional[str] = None,
    base_among: Optional[set] = None,
) -> NightlyPlan:
    """Tonight's plan for one shard ("I/N", default all): the head of ``ref``, the commit it is paired
    with (teperf.nightly.choose_base), the cases and this machine; measures nothing. A backfill plans
    the night ``ref`` would have had at ``at``, paired with a commit of ``base_among``."""

    check_sides_used(config, f"--ref {at or ref}", git=True)  # before git is asked anything
    shard_i, shard_n = parse_shard(shard)
    cases = shard_cases(expand(config), shard_i, shard_n)
    if not cases:
        raise TeperfError(
            f"shard {shard_i}/{shard_n} has no cases: the matrix has only {len(expand(config))}",
            "use fewer shards (N at most the number of cases)",
        )
    root = repo_root(sides.repo)
    head_sha = resolve(root, at or ref, what="--ref")
    store = HistoryStore(history)
    machine, label = local_machine(config.device)
    night_id = check_night(night)

    def git_says_yes(*args: str) -> bool:
        try:
            run_git(root, *args)
            return True
        except GitFailed:
            return False

    choice = choose_base(
        store.read(),
        machine=machine,
        ref=ref,
        head_sha=head_sha,
        shard=f"{shard_i}/{shard_n}",
        night=night_id,
        force=force,
        is_ancestor=lambda a, b: git_says_yes("merge-base", "--is-ancestor", a, b),
        has_parent=lambda sha: git_says_yes("rev-parse", "--verify", "--quiet", f"{sha}^1"),
        base_among=base_among,
    )
    return NightlyPlan(
        ref=ref,
        head_sha=head_sha,
        repo=str(root),
        shard=(shard_i, shard_n),
        night=night_id or default_night(head_sha),
        machine=machine,
        label=label,
        cases=tuple(cases),
        choice=choice,
        store=store,
    )


def nightly(
    plan: NightlyPlan,
    measure: MeasureOptions,
    sides: SideOptions,
    *,
    command: Optional[list[str]] = None,
    view: Optional[Callable[[], ContextManager]] = None,
    show: Optional[Callable[[Summary], None]] = None,
) -> NightlyResult:
    """Make the plan's two git sides, compare them on its cases and add the shard to the history. ``view()``
    yields ``(progress, live)`` for :func:`measure` around the measuring; ``show(summary)`` runs before the
    shard is added. Ctrl-C/SIGTERM: the shard is recorded as interrupted where it can be."""

    planned = plan_sides(plan.choice.spec, dataclasses.replace(sides, repo=plan.repo))
    if unchanged := planned.unchanged(measured_packages(measure.config)):
        # a night of docs-only commits: measuring would store noise as a verdict; the next night pairs
        # with the last commit measured, whose code this is
        return NightlyResult(path=None, summary=None, history_file=None, unchanged=unchanged)
    base, head = planned.make()
    try:
        with (view or (lambda: contextlib.nullcontext((None, None))))() as (progress, live):
            path = compare(
                measure.config,
                base,
                head,
                results_dir=measure.results_dir,
                command=command,
                progress=progress,
                extra_meta=plan.meta(),
                cases=list(plan.cases),
                live=live,
            )
    except Interrupted as stop:
        try:
            file, _ = plan.store.add_summary(summarize(stop.path), bundle=str(stop.path), **plan.record())
            where = f"added to the history as an interrupted shard ({file})"
        except TeperfError as exc:  # e.g. stopped before the first cell: nothing to record
            where = f"not added to the history ({exc.one_line()})"
        raise NightlyInterrupted(stop, where) from None
    summary = summarize(path)
    if show is not None:
        show(summary)
    file, _ = plan.store.add_summary(summary, bundle=str(path), **plan.record())
    actual = machine_from_meta(summary.meta)["machine"]
    warning = None
    if actual != plan.machine:
        recorded = summary.meta.get("host", {})
        warning = (
            f"the workers reported machine {actual}, the probe said {plan.machine} "
            f"(GPU/driver names differ: {recorded.get('gpu')!r}, {recorded.get('driver')!r}); "
            "the base was chosen from the probe's history"
        )
    return NightlyResult(path=path, summary=summary, history_file=file, machine_warning=warning)
