"""Profiling a bundle's cell again (``teperf explain BUNDLE --cell ...``): which cell, which sides, one pinned
worker per side that counts and profiles it, and the report (rendered by teperf.explain.render)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from teperf.explain.diff import apply_intervals, combine_profiles, diff_profiles, own_time_intervals
from teperf.explain.render import counters_diff, to_json


def _cell_fields(case: dict) -> list[str]:
    shape = "x".join(str(n) for n in case.get("shape") or [])
    return [str(case.get("module")), str(case.get("recipe")), shape, str(case.get("mode"))]


def find_case(meta: dict, cell: Optional[str], where: str = "the bundle") -> dict:
    """The bundle case named by ``MODULE/RECIPE[/SHAPE[/MODE]]`` (shape as 8x2x256); ``where`` names
    what the cases came from in the errors (a config's, before any bundle exists)."""
    from teperf.errors import TeperfError

    cases = list(meta.get("cases") or [])
    if not cases:
        raise TeperfError(
            "the bundle's metadata lists no cases", "explain a bundle written by teperf compare"
        )
    names = ["/".join(_cell_fields(c)) for c in cases]
    if not cell:
        if len(cases) == 1:
            return cases[0]
        raise TeperfError(f"{where} has several cells", "pick one with --cell, one of: " + ", ".join(names))
    wanted = [part for part in cell.strip().strip("/").split("/")]
    hits = [c for c in cases if _cell_fields(c)[: len(wanted)] == wanted]
    if not hits:
        raise TeperfError(f"no cell {cell!r} in {where}", "use one of: " + ", ".join(names))
    if len(hits) > 1:
        raise TeperfError(
            f"--cell {cell!r} matches {len(hits)} cells",
            "add /SHAPE and /MODE, one of: " + ", ".join("/".join(_cell_fields(c)) for c in hits),
        )
    return hits[0]


def sides_from_meta(meta: dict) -> list:
    """The bundle's sides, in the order they were measured (base before head)."""
    from teperf.errors import TeperfError
    from teperf.sides import Side

    described = meta.get("sides") or {}
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
            raise TeperfError(
                f"the {label} side's directory {missing[0]} is gone",
                "run teperf compare again to rebuild the sides",
            )
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


def profile_case(
    sides: list,
    case: dict,
    *,
    core: int,
    device: str,
    warmup: int,
    iters: int,
    repeats: int,
    hash_seed: int,
    log_dir: Path,
    timeout_s: float,
    progress=None,
) -> dict:
    """Start one pinned worker per side, set the case up, count, then profile it
    ``repeats`` times per side, alternating which side goes first (combined by
    the per-function median, see combine_profiles).

    Returns {"counters": {label: dict|None}, "profiles": {label: rows}, "hello": {label: dict},
    "errors": {label: str}}.
    """
    from teperf.engine.spawn import Worker, WorkerError
    from teperf.errors import TeperfError
    from teperf.plan import Case

    wire = Case.from_meta(case).to_wire(device, warmup)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    workers: dict = {}
    result: dict = {"counters": {}, "profiles": {}, "hello": {}, "errors": {}, "imported": {}}
    runs: dict = {s.label: [] for s in sides}
    try:
        for side in sides:
            if progress:
                progress(f"starting the {side.label} worker")
            try:
                workers[side.label] = Worker(
                    side,
                    core=core,
                    device=device,
                    backends=[wire["backend"]],
                    hash_seed=hash_seed,
                    log_path=log_dir / f"{side.label}.log",
                    cwd=log_dir,
                    timeout_s=timeout_s,
                )
            except WorkerError as exc:
                raise TeperfError(
                    f"the {side.label} worker did not start: {exc}", f"see {log_dir / (side.label + '.log')}"
                )
        for side in sides:  # both import at once; then each collects its hello and pins
            worker = workers[side.label]
            try:
                hello = worker.wait_ready()
            except WorkerError as exc:
                raise TeperfError(
                    f"the {side.label} worker did not start: {exc}", f"see {log_dir / (side.label + '.log')}"
                )
            result["hello"][side.label] = hello
        for side in sides:
            reply = workers[side.label].request({"cmd": "setup", "case": wire})
            if reply.get("type") != "ready":
                raise TeperfError(
                    f"the {side.label} side could not set up {'/'.join(_cell_fields(case))}: "
                    f"{reply.get('error')}",
                    f"see {log_dir / (side.label + '.log')}",
                )
        packages = list(
            dict.fromkeys(
                [s.description["package"] for s in sides if isinstance(s.description.get("package"), str)]
                + case_packages(wire)
            )
        )
        for side in sides:  # which code this explanation is about (the bundle says what was measured)
            reply = workers[side.label].request({"cmd": "imported", "packages": packages})
            if reply.get("type") == "imported":
                result["imported"][side.label] = reply["imported"]
        for side in sides:
            reply = workers[side.label].request({"cmd": "counters", "case_id": wire["id"]})
            result["counters"][side.label] = (
                reply.get("counters") if reply.get("type") == "counters" else None
            )
            if reply.get("type") != "counters":
                result["errors"][side.label] = f"counters: {reply.get('error')}"
        for r in range(max(int(repeats), 1)):
            order = sides if r % 2 == 0 else list(reversed(sides))
            for side in order:
                if progress:
                    progress(f"profiling {side.label} ({r + 1}/{repeats})")
                reply = workers[side.label].request(
                    {"cmd": "profile", "case_id": wire["id"], "iters": int(iters)}
                )
                if reply.get("type") != "profile":
                    raise TeperfError(
                        f"profiling the {side.label} side failed: {reply.get('error')}",
                        f"see {log_dir / (side.label + '.log')}",
                    )
                runs[side.label].append(reply["functions"])
    except WorkerError as exc:
        raise TeperfError(f"a worker failed while explaining: {exc}", f"see the logs in {log_dir}")
    finally:
        for worker in workers.values():
            worker.close()
    result["profiles"] = {label: combine_profiles(rows) for label, rows in runs.items()}
    if len(sides) == 2:
        result["own_time_ci"] = own_time_intervals(runs[sides[0].label], runs[sides[1].label])
    return result


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
    """Profile one cell of a bundle on its sides again; the library side of ``teperf explain``.

    Writes worker logs and ``explain-<cell>.json`` under ``BUNDLE/explain/`` (or a
    temporary directory when the bundle is read-only) and returns that object:
    {cell, case, sides, counters, counters_diff, profiles, diff, saved_to}.
    """
    from teperf.bundle import Bundle
    from teperf.config import Schedule, from_meta
    from teperf.plan import hash_seed

    bundle = Bundle.open(bundle_path)
    meta = bundle.meta().to_dict()
    case = find_case(meta, cell)
    sides = sides_from_meta(meta)
    config = meta.get("config") or {}
    schedule = from_meta(Schedule, meta)
    core, core_note = _usable_core(core, config.get("core"))
    cell_name = "/".join(_cell_fields(case))
    log_dir = _writable_dir(Path(bundle.path) / "explain", cell_name)
    outcome = profile_case(
        sides,
        case,
        core=core,
        device=config.get("device", "cpu"),
        warmup=schedule.warmup,
        iters=iters,
        repeats=repeats,
        hash_seed=hash_seed(int(config.get("seed", 0)), 0),
        log_dir=log_dir,
        timeout_s=float(timeout_s or schedule.timeout_s),
        progress=progress,
    )
    labels = [s.label for s in sides]
    drift = code_drift(bundle.records(), outcome.get("imported") or {})
    report = {
        "cell": cell_name,
        "case": case,
        "core": core,
        "iters": iters,
        "repeats": repeats,
        "sides": labels,
        "counters": outcome["counters"],
        "errors": {**outcome["errors"], **drift, **({"core": core_note} if core_note else {})},
        "profiles": outcome["profiles"],
        "imported": outcome.get("imported") or {},
        "own_time_ci": outcome.get("own_time_ci") or {},
    }
    if len(labels) == 2:
        base, head = labels
        deltas = apply_intervals(
            diff_profiles(outcome["profiles"][base], outcome["profiles"][head]), report["own_time_ci"]
        )
        report["counters_diff"] = counters_diff(
            outcome["counters"].get(base), outcome["counters"].get(head), full=True
        )
        report["diff"] = to_json(deltas)
    target = log_dir / "explain.json"
    try:
        target.write_text(json.dumps(report, indent=1))
        report["saved_to"] = str(target)
    except OSError:
        report["saved_to"] = None
    return report


def case_packages(wire: dict) -> list[str]:
    """The packages under test of one case (teperf.provenance.packages_under_test, for one cell)."""
    if wire.get("factory"):
        return [wire["factory"].split(":", 1)[0].split(".", 1)[0]]
    return ["transformer_engine"] if wire.get("backend") == "te" else ["torch"]


def code_drift(records, now: dict) -> dict:
    """label -> a note when a side now imports other code than its workers did when the bundle was made."""
    from teperf.provenance import code_identity, side_facts

    then = side_facts(records)
    notes = {}
    for label, facts in now.items():
        before = then.get(label)
        if before is None:
            continue
        same_packages = {
            k: v for k, v in (before.get("packages") or {}).items() if k in (facts.get("packages") or {})
        }
        if code_identity({**before, "packages": same_packages}) != code_identity(facts):
            notes[f"{label} code"] = (
                f"{label} now imports other code than when the bundle was measured: this explains today's "
                "code"
            )
    return notes


def _usable_core(asked, recorded) -> tuple[int, str]:
    """(core, note): --core if given (must exist), else the bundle's core, else the last usable one."""
    from teperf.cpus import check_core, core_usable

    if asked is not None or recorded is None:
        return check_core(asked), ""
    if not core_usable(recorded):
        fallback = check_core(None)
        return fallback, f"the bundle's core {recorded} is not usable here; profiled on core {fallback}"
    return recorded, ""


def _writable_dir(parent: Path, cell_name: str) -> Path:
    import re
    import tempfile

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", cell_name)
    target = parent / safe
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / ".write-test"
        probe.write_text("")
        probe.unlink()
        return target
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"teperf-explain-{safe}-"))
