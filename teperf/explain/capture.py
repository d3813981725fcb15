"""Profiling a bundle's cell again (``teperf explain BUNDLE --cell ...``): which cell, which sides, one pinned
worker per side that counts and profiles it, and the report (rendered by teperf.explain.render)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Optional

from teperf import records
from teperf.bundle import Bundle
from teperf.config import Config, RecordedConfig
from teperf.cpus import check_core, core_usable
from teperf.engine.oneshot import StepFailed, one_worker
from teperf.engine.spawn import WorkerError
from teperf.errors import TeperfError
from teperf.explain.diff import combine_profiles, own_time_intervals
from teperf.explain.render import counters_diff, report_deltas, to_json
from teperf.plan import Case
from teperf.provenance import code_identity, side_facts
from teperf.sides import Side


def case_key(case: dict) -> str:
    """A bundle case's key (records.cell_key), from a case that may lack fields."""
    module, recipe, mode = (str(case.get(k)) for k in ("module", "recipe", "mode"))
    return records.cell_key(module, recipe, case.get("shape") or [], mode)


def find_case(cases: list, cell: Optional[str], where: str = "the bundle") -> dict:
    """Of a bundle's ``cases`` (meta.json's), the one named by ``MODULE/RECIPE[/SHAPE[/MODE]]`` (shape as
    8x2x256); ``where``: what the cases came from, for the errors."""
    if not cases:
        raise TeperfError(
            "the bundle's metadata lists no cases", "explain a bundle written by teperf compare"
        )
    names = [case_key(c) for c in cases]
    if not cell:
        if len(cases) == 1:
            return cases[0]
        raise TeperfError(f"{where} has several cells", "pick one with --cell, one of: " + ", ".join(names))
    wanted = cell.strip().strip("/").split("/")
    hits = [c for c in cases if case_key(c).split("/")[: len(wanted)] == wanted]
    if not hits:
        raise TeperfError(f"no cell {cell!r} in {where}", "use one of: " + ", ".join(names))
    if len(hits) > 1:
        fix = "add /SHAPE and /MODE, one of: " + ", ".join(case_key(c) for c in hits)
        raise TeperfError(f"--cell {cell!r} matches {len(hits)} cells", fix)
    return hits[0]


def sides_from_meta(described: dict) -> list:
    """The bundle's sides (meta.json's ``sides``), in the order they were measured (base before head)."""
    if not described:
        raise TeperfError(
            "the bundle's metadata has no sides", "explain a bundle written by teperf compare or run"
        )
    sides = []
    for label, desc in described.items():
        desc = dict(desc)
        sys_path = tuple(desc.pop("sys_path", ()) or ())
        missing = [p for p in sys_path if not os.path.isdir(p)]
        if missing:
            fix = "run teperf compare again to rebuild the sides"
            raise TeperfError(f"the {label} side's directory {missing[0]} is gone", fix)
        pythonpath = (desc.get("env") or {}).get("PYTHONPATH") or ""
        gone = [p for p in pythonpath.split(os.pathsep) if p and not os.path.isdir(p)]
        if gone:  # the shell's PYTHONPATH at measuring time (teperf.sides.with_inherited_pythonpath)
            raise TeperfError(
                f"the {label} side's PYTHONPATH directory {gone[0]}, recorded in the bundle, is gone",
                "restore it, or run teperf compare again",
            )
        sides.append(
            Side(
                label=desc.pop("label", label),
                python=desc.pop("python"),
                sys_path=sys_path,
                env=dict(desc.pop("env", {}) or {}),
                description=desc,
            )
        )
    order = {"base": 0, "head": 1}
    return sorted(sides, key=lambda s: order.get(s.label, 2))


def profile_case(config, sides: list, case: dict, log_dir: Path, *, iters: int, repeats: int, progress=None):
    """Start one pinned worker per side, set the case up, count, then profile it ``repeats`` times per
    side, alternating which side goes first. Returns {"counters", "profiles", "hello", "errors",
    "imported": {label: ...}, "own_time_ci"}."""
    progress = progress or (lambda message: None)
    plan_case = Case.from_meta(case)
    result: dict = {"counters": {}, "profiles": {}, "hello": {}, "errors": {}, "imported": {}}
    runs: dict = {s.label: [] for s in sides}
    label = starting = None
    try:
        with contextlib.ExitStack() as stack:
            workers = {}
            for side in sides:  # all start at once, then each collects its hello and pins
                starting = side.label
                progress(f"starting the {starting} worker")
                workers[starting] = stack.enter_context(
                    one_worker(config, side, log_dir, backends=[plan_case.backend])
                )
            for starting, worker in workers.items():
                result["hello"][starting] = worker.ready()
            starting = None
            _set_up(workers, plan_case, case, result)
            for r in range(max(int(repeats), 1)):
                for label in list(workers) if r % 2 == 0 else list(reversed(workers)):
                    progress(f"profiling {label} ({r + 1}/{repeats})")
                    runs[label].append(workers[label].profile(plan_case, iters))
    except StepFailed as exc:
        raise TeperfError(
            f"{exc.what} the {label} side failed: {exc.error}", f"see {Path(log_dir) / (label + '.log')}"
        ) from None
    except WorkerError as exc:
        if starting is not None:
            raise TeperfError(
                f"the {starting} worker did not start: {exc}", f"see {Path(log_dir) / (starting + '.log')}"
            ) from None
        raise TeperfError(f"a worker failed while explaining: {exc}", f"see the logs in {log_dir}") from None
    result["profiles"] = {label: combine_profiles(rows) for label, rows in runs.items()}
    if len(sides) == 2:
        result["own_time_ci"] = own_time_intervals(runs[sides[0].label], runs[sides[1].label])
    return result


def _set_up(workers: dict, plan_case, case: dict, result: dict) -> None:
    """Set the case up on every side, record which code each imports, then count it once per side."""
    for label, worker in workers.items():
        try:
            worker.setup(plan_case)
        except StepFailed as exc:
            raise TeperfError(
                f"the {label} side could not set up {case_key(case)}: {exc.error}",
                f"see {worker.log_path}",
            ) from None
    packages = [w.side.description.get("package") for w in workers.values()]
    packages = list(dict.fromkeys([p for p in packages if isinstance(p, str)] + case_packages(plan_case)))
    for label, worker in workers.items():
        imported = worker.imported(packages)
        if imported is not None:
            result["imported"][label] = imported
    for label, worker in workers.items():
        try:
            result["counters"][label] = worker.counters(plan_case)
        except StepFailed as exc:
            result["counters"][label] = None
            result["errors"][label] = f"counters: {exc.error}"


def rerun_config(recorded: RecordedConfig, core: Optional[int] = None, timeout_s: Optional[float] = None):
    """(config, note): the Config to run a bundle's cell again with here, on ``core`` (must exist), else the
    bundle's (``recorded``) when usable, else the last usable one (the note says which core was taken)."""
    asked, core, note = core, recorded.core, ""
    if asked is not None or core is None or not core_usable(core):
        core = check_core(asked)
        if asked is None and recorded.core is not None:
            note = f"the bundle's core {recorded.core} is not usable here; profiled on core {core}"
    schedule = recorded.schedule
    schedule = dataclasses.replace(schedule, timeout_s=float(timeout_s)) if timeout_s else schedule
    return Config(device=recorded.device, core=core, seed=recorded.seed, schedule=schedule), note


def machine_load(core: int) -> str:
    """A busy machine or core in one line ('' when quiet): the profile's times then include that work."""
    from teperf.doctor import check_load, check_runnable

    busy = [c.detail for c in (check_load(), check_runnable(core)) if c.status == "warn"]
    return "; ".join(busy) + ("; own times include that work (a quieter machine or --core)" if busy else "")


def explain_bundle(
    bundle_path,
    cell: Optional[str] = None,
    *,
    iters: int = 100,
    repeats: int = 5,
    core: Optional[int] = None,
    timeout_s: Optional[float] = None,
    progress=None,
) -> dict:
    """Profile one cell of a bundle on its sides again (``teperf explain``); the report is also saved under
    ``BUNDLE/explain/`` (or a temporary directory when the bundle is read-only)."""
    bundle = Bundle.open(bundle_path)
    meta = bundle.meta()
    case = find_case(meta.cases, cell)
    config, core_note = rerun_config(meta.config, core, timeout_s)  # --core refused before the sides are read
    sides = sides_from_meta(meta.sides)
    cell_name = case_key(case)
    log_dir = _writable_dir(Path(bundle.path) / "explain", cell_name)
    load = machine_load(config.core)  # before the profile: its own workers are not load
    outcome = profile_case(config, sides, case, log_dir, iters=iters, repeats=repeats, progress=progress)
    labels = [s.label for s in sides]
    drift = code_drift(bundle.records(), outcome["imported"])
    report = dict(cell=cell_name, case=case, core=config.core, iters=iters, repeats=repeats, sides=labels)
    report |= {
        k: outcome.get(k, {}) for k in ("counters", "errors", "notes", "profiles", "imported", "own_time_ci")
    }
    report["errors"] |= drift | ({"core": core_note} if core_note else {})
    report["notes"] = {"load": load} if load else {}  # not an error: the figures stand, with this said
    if len(labels) == 2:
        base, head = (outcome["counters"].get(label) for label in labels)
        report["counters_diff"] = counters_diff(base, head, full=True)
        report["diff"] = to_json(report_deltas(report))
    target = log_dir / "explain.json"
    try:
        target.write_text(json.dumps(report, indent=1))
        report["saved_to"] = str(target)
    except OSError:
        report["saved_to"] = None
    return report


def case_packages(case) -> list[str]:
    """The packages under test of one case (teperf.plan.packages_under_test, for one cell)."""
    if case.factory:
        return [case.factory.split(":", 1)[0].split(".", 1)[0]]
    return ["transformer_engine"] if case.backend == "te" else ["torch"]


def code_drift(records, now: dict) -> dict:
    """label -> a note when a side now imports other code than its workers did when the bundle was made."""
    then = side_facts(records)
    notes = {}
    for label, facts in now.items():
        before = then.get(label)
        if before is None:
            continue
        kept = facts.get("packages") or {}
        same_packages = {k: v for k, v in (before.get("packages") or {}).items() if k in kept}
        if code_identity({**before, "packages": same_packages}) != code_identity(facts):
            notes[f"{label} code"] = (
                f"{label} now imports other code than when the bundle was measured: this explains today's "
                "code"
            )
    return notes


def _writable_dir(parent: Path, cell_name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", cell_name)
    target = parent / safe
    try:
        target.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=target).close()  # that it can be written
        return target
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"teperf-explain-{safe}-"))
