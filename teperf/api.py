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
from typing import Any, Callable, ContextManager, Optional

from teperf.bundle import Bundle, coordinator_facts
from teperf.config import Config
from teperf.counters.file import Expected
from teperf.counters.gate import check_bundle
from teperf.counters.render import render as render_counters
from teperf.cpus import cpu_model
from teperf.doctor import quick_checks
from teperf.engine.adaptive import Adaptive, Snapshot
from teperf.engine.coordinator import lane_cores, run_schedule
from teperf.engine.probe import preflight
from teperf.engine.signals import terminate_as_interrupt
from teperf.engine.spawn import check_python
from teperf.errors import Interrupted, TeperfError
from teperf.explain.capture import explain_bundle, find_case
from teperf.explain.render import render_report
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
from teperf.sides.git import SidesPlan, plan_sides
from teperf.sides.gitrepo import GitFailed, repo_root, resolve, run_git
from teperf.stats import preload as preload_stats
from teperf.summary import Summary, summarize  # noqa: F401  (re-exported)
from teperf.sweep import Sweep, analyze
from teperf.sweep import render as render_sweep


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


def check_extras(
    config: Config, *, expected: Optional[str] = None, explain_cell: Optional[str] = None
) -> None:
    """What compare's --expected and --explain need, checked before measuring, not after minutes of it."""
    if expected:
        if not config.counters:
            raise TeperfError("--expected needs the counters", "leave --no-counters out")
        if config.compile_cache == "warm":  # code loaded from a warm cache counts differently
            raise TeperfError(
                "--expected needs --compile-cache cold, as counters check counts", "leave it out"
            )
        Expected.read(expected)
    if explain_cell:
        find_case([c.to_meta() for c in expand(config)], explain_cell, where="the config")


@dataclasses.dataclass(frozen=True)
class CompareSides:
    """compare's two sides; ``base``/``head`` None when nothing is to be measured (``plan_only``, or the
    git sides' measured packages are unchanged: ``unchanged`` says why). ``planned``: the git sides' plan."""

    base: Optional[Side] = None
    head: Optional[Side] = None
    planned: Optional[SidesPlan] = None
    unchanged: Optional[str] = None


def compare_sides(
    config: Config,
    sides: SideOptions,
    spec: Optional[str] = None,
    *,
    base_path=None,
    head_path=None,
    base_python=None,
    head_python=None,
    plan_only: bool = False,
) -> CompareSides:
    """The sides of BASE..HEAD (git refs, planned and made), or of paths and interpreters."""
    if spec:
        if base_path or head_path:
            raise TeperfError(
                "BASE..HEAD and --base-path/--head-path both given", "use one way to name the sides"
            )
        repo_root(sides.repo)  # a --repo that is not one is said first
        check_sides_used(config, spec, git=True)  # before any build is planned
        planned = plan_sides(spec, dataclasses.replace(sides, python=base_python or head_python))
        unchanged = planned.unchanged(measured_packages(config))
        if unchanged or plan_only:
            return CompareSides(planned=planned, unchanged=unchanged)
        return CompareSides(*planned.make(), planned=planned)
    if plan_only:
        raise TeperfError("--plan needs git refs (BASE..HEAD)", "give BASE..HEAD, or leave --plan out")
    if not any((base_path, head_path, base_python, head_python)):
        raise TeperfError(
            "nothing to compare",
            "give BASE..HEAD (git refs), or --base-path/--head-path, or --base-python/--head-python",
        )
    # --strategy env names exactly these sides (its help says so): not a git flag here
    ignored = [f for f in sides.git_flags_given() if not (f == "--strategy" and sides.strategy == "env")]
    # one path alone, no interpreter: the other side would be this python, bare
    if (base_path is None) != (head_path is None) and not (base_python or head_python):
        given, label = ("base", "head") if base_path else ("head", "base")
        raise TeperfError(
            f"--{given}-path given without --{label}-path: {label} would be this interpreter with "
            "nothing of its own on sys.path",
            f"give --{label}-path DIR too (or --{label}-python for an installed {label})",
        )
    if ignored:
        raise TeperfError(
            f"{', '.join(ignored)} only {'apply' if len(ignored) > 1 else 'applies'} to git refs "
            "(BASE..HEAD), not to --base-path/--head-path/--base-python/--head-python",
            f"drop {', '.join(ignored)}, or give BASE..HEAD",
        )
    return CompareSides(path_side("base", base_path, base_python), path_side("head", head_path, head_python))


@dataclasses.dataclass(frozen=True)
class Extras:
    """The steps after measuring: --explain's report, --sweep's slopes, --expected's counters check."""

    explained: Optional[dict] = None
    swept: Optional[list] = None
    checked: Any = None  # counters.gate.CheckResult

    def texts(self) -> list[str]:
        """Each as the CLI prints it after the table."""
        return [
            *([render_report(self.explained) + "\n"] if self.explained is not None else []),
            *([render_sweep(self.swept)] if self.swept is not None else []),
            *([render_counters(self.checked)] if self.checked is not None else []),
        ]

    @property
    def passed(self) -> bool:  # False: the head's counters moved from the expected file's
        return self.checked is None or self.checked.passed


def extras(
    summary: Summary,
    *,
    explain_cell: Optional[str] = None,
    sweep: Optional[Sweep] = None,
    expected: Optional[str] = None,
) -> Extras:
    """Run the steps after measuring that were asked for (check them first with :func:`check_extras`)."""
    return Extras(
        explained=explain_bundle(summary.path, explain_cell) if explain_cell else None,
        swept=analyze(summary.path, sweep) if sweep else None,
        checked=check_bundle(summary.path, expected) if expected else None,
    )


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
        recorded = summary.meta.host
        warning = (
            f"the workers reported machine {actual}, the probe said {plan.machine} "
            f"(GPU/driver names differ: {recorded.get('gpu')!r}, {recorded.get('driver')!r}); "
            "the base was chosen from the probe's history"
        )
    return NightlyResult(path=path, summary=summary, history_file=file, machine_warning=warning)
