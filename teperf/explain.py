"""Turning two profiles or two counter sets into "where did the delta come from".

Coordinator side: no torch. Input is what the worker sends back
(``teperf.worker.profile`` rows, ``teperf.worker.counters`` dicts).

Functions are matched between base and head by (rel, name): the path
relative to the sys.path entry it came from plus the qualified name, so the
same function matches although its absolute path and line differ between
the two trees. Several entries with one key (two lambdas in one function)
are added up.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Iterable, Optional

from teperf.numbers import signed_us
from teperf.provenance import side_line

COUNTER_LABELS = (
    # key, singular, plural, shown when 0
    ("python_calls", "py call", "py calls", True),
    ("aten_ops", "aten op", "aten ops", True),
    ("autograd_nodes", "autograd node", "autograd nodes", False),
    ("kernel_launches", "kernel", "kernels", True),
    ("syncs", "sync", "syncs", False),
    ("allocations", "alloc", "allocs", False),
    # compile cells only (teperf/worker/counters.py count_compile)
    ("graphs", "graph", "graphs", False),
    ("graph_breaks", "graph break", "graph breaks", True),
    ("recompiles", "recompile", "recompiles", False),
    ("guard_failures", "guard failure", "guard failures", False),
)


@dataclasses.dataclass
class FunctionDelta:
    rel: str
    name: str
    file: str  # head's absolute file when the function exists there, else base's
    line: int
    base_calls: float = 0.0
    head_calls: float = 0.0
    base_own_us: float = 0.0
    head_own_us: float = 0.0
    base_cum_us: float = 0.0
    head_cum_us: float = 0.0
    in_base: bool = False
    in_head: bool = False
    # Own-time change per repeat (head - base, the two profiled next to each other): its mean and 95%
    # half-width. None: not known (one repeat, or rows given without their repeats).
    own_mean_us: Optional[float] = None
    own_hw_us: Optional[float] = None

    @property
    def own_settled(self) -> Optional[bool]:
        """Whether the own-time change's interval excludes 0; None when there is no interval."""
        if self.own_hw_us is None or self.own_mean_us is None:
            return None
        return abs(self.own_mean_us) > self.own_hw_us

    @property
    def own_pm(self) -> str:
        """'+-12.3 us', or '' without an interval."""
        return "" if self.own_hw_us is None else f"+-{self.own_hw_us:.1f} us"

    @property
    def d_calls(self) -> float:
        return round(self.head_calls - self.base_calls, 4)

    @property
    def d_own_us(self) -> float:
        return round(self.head_own_us - self.base_own_us, 3)

    @property
    def d_cum_us(self) -> float:
        return round(self.head_cum_us - self.base_cum_us, 3)

    @property
    def where(self) -> str:
        """file:line of a Python function; "" for a C function (its name says it all)."""
        if self.rel == "~":
            return ""
        return self.rel if self.line <= 0 else f"{self.rel}:{self.line}"

    @property
    def short_name(self) -> str:
        return self.name

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(
            d_calls=self.d_calls,
            d_own_us=self.d_own_us,
            d_cum_us=self.d_cum_us,
            where=self.where,
            own_settled=self.own_settled,
        )
        return out


def _key(row: dict) -> tuple:
    return (row.get("rel") or row.get("file") or "?", row.get("name") or "?")


def diff_profiles(base: Iterable[dict], head: Iterable[dict]) -> list[FunctionDelta]:
    """One FunctionDelta per function seen on either side, in no particular order."""
    table: dict[tuple, FunctionDelta] = {}
    for side, rows in (("base", base), ("head", head)):
        for row in rows:
            key = _key(row)
            delta = table.get(key)
            if delta is None:
                delta = table[key] = FunctionDelta(
                    rel=key[0], name=key[1], file=row.get("file", key[0]), line=int(row.get("line") or 0)
                )
            elif side == "head" and not delta.in_head:
                delta.file, delta.line = row.get("file", delta.file), int(row.get("line") or 0)
            setattr(delta, f"in_{side}", True)
            setattr(delta, f"{side}_calls", getattr(delta, f"{side}_calls") + float(row.get("calls") or 0))
            setattr(delta, f"{side}_own_us", getattr(delta, f"{side}_own_us") + float(row.get("own_us") or 0))
            setattr(delta, f"{side}_cum_us", getattr(delta, f"{side}_cum_us") + float(row.get("cum_us") or 0))
    return list(table.values())


def own_time_intervals(base_runs: list[list[dict]], head_runs: list[list[dict]]) -> dict[str, list]:
    """{"rel\tname": [mean, half_width]} of each function's own-time change over the repeats: repeat r's
    head minus repeat r's base (profiled one after the other), Student t at 95%. Few repeats give
    wide intervals: at 2 repeats a -620 us line can be +134 us at 5."""
    from teperf.stats import t_half_width

    n = min(len(base_runs), len(head_runs))
    if n < 2:
        return {}

    def per_repeat(rows: list[dict]) -> dict[tuple, float]:
        out: dict[tuple, float] = {}
        for row in rows:
            out[_key(row)] = out.get(_key(row), 0.0) + float(row.get("own_us") or 0)
        return out

    base = [per_repeat(rows) for rows in base_runs[:n]]
    head = [per_repeat(rows) for rows in head_runs[:n]]
    keys = set().union(*base, *head)
    out = {}
    for key in keys:
        diffs = [h.get(key, 0.0) - b.get(key, 0.0) for b, h in zip(base, head)]
        out["\t".join(key)] = [round(sum(diffs) / n, 3), round(t_half_width(diffs), 3)]
    return out


def apply_intervals(deltas: list[FunctionDelta], intervals: dict) -> list[FunctionDelta]:
    for d in deltas:
        got = intervals.get(f"{d.rel}\t{d.name}")
        if got:
            d.own_mean_us, d.own_hw_us = float(got[0]), float(got[1])
    return deltas


def by_own_time(deltas: list[FunctionDelta], n: Optional[int] = None) -> list[FunctionDelta]:
    """Largest |delta own time| first; ties broken by |delta calls|, then name."""
    ranked = sorted(deltas, key=lambda d: (-abs(d.d_own_us), -abs(d.d_calls), d.rel, d.name))
    return ranked if n is None else ranked[:n]


def by_calls(deltas: list[FunctionDelta], n: Optional[int] = None) -> list[FunctionDelta]:
    """Largest |delta calls| first (only functions whose call count changed).

    Ties are broken by |delta cumulative time|, so a helper ranks above the
    functions it calls when both gained the same number of calls.
    """
    changed = [d for d in deltas if d.d_calls != 0]
    ranked = sorted(changed, key=lambda d: (-abs(d.d_calls), -abs(d.d_cum_us), d.rel, d.name))
    return ranked if n is None else ranked[:n]


def _fmt_count(value: float) -> str:
    if value == int(value):
        return f"{int(value):+d}"
    return f"{value:+.2f}"


def summary(deltas: list[FunctionDelta], n_time: int = 2, n_calls: int = 2) -> str:
    """One line: "+13 calls of g (dataclasses.py:1), +6.0 us +-1.2 us in f (pkg/mod.py:12)".

    Call counts first: they repeat exactly. Then own time, leaving out the changes whose interval
    over the repeats includes 0 (noise at this many repeats); without intervals, the largest."""
    parts = []
    for d in by_calls(deltas, n_calls):
        parts.append(
            f"{_fmt_count(d.d_calls)} {'call' if abs(d.d_calls) == 1 else 'calls'} of {d.short_name}"
            + (f" ({d.where})" if d.where else "")
        )
    timed = [d for d in by_own_time(deltas) if d.d_own_us != 0 and d.own_settled is not False]
    for d in timed[:n_time]:
        pm = f" {d.own_pm}" if d.own_pm else ""
        parts.append(f"{signed_us(d.d_own_us)}{pm} in {d.short_name}" + (f" ({d.where})" if d.where else ""))
    unsettled = sum(1 for d in deltas if d.d_own_us != 0 and d.own_settled is False)
    if not parts:
        return "no function-level difference" + (
            f" beyond the noise ({unsettled} own-time changes within their intervals)" if unsettled else ""
        )
    return ", ".join(parts)


def render_text(deltas: list[FunctionDelta], n: int = 15, title: str = "") -> str:
    """Two plain-text tables: top-n by own-time delta and by call-count delta."""
    lines = []
    if title:
        lines.append(title)
    total_base = sum(d.base_own_us for d in deltas)
    total_head = sum(d.head_own_us for d in deltas)
    lines.append(
        f"profiled own time per step: base {total_base:.1f} us, head {total_head:.1f} us ({signed_us(total_head - total_base)}; includes cProfile overhead)"
    )
    lines.append("")
    lines.append(
        f"By own time (top {n}; +- is the 95% interval over the repeats, ~ marks one that includes 0):"
    )
    lines.append(f"  {'delta':>10} {'+-':>11} {'base':>9} {'head':>9} {'calls b/h':>13}  function")
    for d in by_own_time(deltas, n):
        pm = "" if d.own_hw_us is None else ("~" if d.own_settled is False else "") + d.own_pm
        lines.append(
            f"  {signed_us(d.d_own_us):>10} {pm:>11} {d.base_own_us:>9.1f} {d.head_own_us:>9.1f} {_calls_pair(d):>13}  {d.short_name}  {d.where}{_presence(d)}"
        )
    lines.append("")
    changed = by_calls(deltas, n)
    lines.append(f"By calls per step ({len(by_calls(deltas))} functions changed; top {n}):")
    if not changed:
        lines.append("  (no call count changed)")
    for d in changed:
        lines.append(
            f"  {_fmt_count(d.d_calls):>10} {_calls_pair(d):>19} {signed_us(d.d_cum_us):>10} cum  {d.short_name}  {d.where}{_presence(d)}"
        )
    return "\n".join(lines)


def _calls_pair(d: FunctionDelta) -> str:
    def fmt(v: float) -> str:
        return str(int(v)) if v == int(v) else f"{v:.2f}"

    return f"{fmt(d.base_calls)}/{fmt(d.head_calls)}"


def _presence(d: FunctionDelta) -> str:
    # cProfile lists only functions that ran: "not called" may also mean "does not exist"
    if d.in_head and not d.in_base:
        return "  [not called in base]"
    if d.in_base and not d.in_head:
        return "  [not called in head]"
    return ""


def to_json(deltas: list[FunctionDelta], n: int = 50) -> dict:
    return {
        "by_own_time": [d.to_dict() for d in by_own_time(deltas, n)],
        "by_calls": [d.to_dict() for d in by_calls(deltas, n)],
        "summary": summary(deltas),
    }


# ---- counters ----


def counter_deltas(base: Optional[dict], head: Optional[dict]) -> dict:
    """{key: head - base} for every counter measurable on both sides (None otherwise)."""
    out = {}
    for key, *_ in COUNTER_LABELS:
        b = (base or {}).get(key)
        h = (head or {}).get(key)
        out[key] = None if b is None or h is None else h - b
    return out


def counters_diff(base: Optional[dict], head: Optional[dict], full: bool = False) -> str:
    """Short text for tables, e.g. "+14 py calls, +1 aten op, 0 kernels".

    Python calls, ATen ops and kernels are always shown when measurable (so
    "0 kernels" says the count was checked); the others only when they
    changed, unless ``full``. Counters not measurable on both sides are left
    out; with no counters at all the text is "" (nothing measured).
    """
    if not base or not head:
        return ""
    deltas = counter_deltas(base, head)
    parts = []
    for key, one, many, always in COUNTER_LABELS:
        value = deltas[key]
        if value is None or (value == 0 and not (always or full)):
            continue
        value = int(value)
        label = one if abs(value) == 1 else many
        parts.append(f"{value:+d} {label}" if value else f"0 {label}")
    return ", ".join(parts)


# ---- profiling a bundle's cell again (teperf explain BUNDLE --cell ...) ----


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


def combine_profiles(profiles: list[list[dict]]) -> list[dict]:
    """Several per-step profiles of one side -> one, by the per-function median.

    A function absent from one profile counts as 0 there. The median keeps a
    preemption that landed in one repeat from being pinned on whatever
    function happened to be running.
    """
    import statistics

    if len(profiles) == 1:
        return list(profiles[0])
    merged: dict[tuple, dict] = {}
    values: dict[tuple, dict] = {}
    for index, rows in enumerate(profiles):
        for row in rows:
            key = (_key(row), int(row.get("line") or 0))
            merged.setdefault(key, dict(row))
            per = values.setdefault(key, {f: [0.0] * len(profiles) for f in ("calls", "own_us", "cum_us")})
            for field in per:
                per[field][index] += float(row.get(field) or 0)
    out = []
    for key, row in merged.items():
        for field, series in values[key].items():
            row[field] = round(statistics.median(series), 4 if field == "calls" else 3)
        out.append(row)
    out.sort(key=lambda r: -r["own_us"])
    return out


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

    fields = {
        f: case[f]
        for f in (
            "id",
            "backend",
            "module",
            "recipe",
            "shape",
            "dtype",
            "mode",
            "factory",
            "kwargs",
            "inputs",
        )
        if f in case
    }
    fields["shape"] = tuple(fields.get("shape") or ())
    wire = Case(**fields).to_wire(device, warmup)
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
                    f"the {side.label} side could not set up {'/'.join(_cell_fields(case))}: {reply.get('error')}",
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
    from teperf.plan import hash_seed

    bundle = Bundle.open(bundle_path)
    meta = bundle.meta().to_dict()
    case = find_case(meta, cell)
    sides = sides_from_meta(meta)
    config = meta.get("config") or {}
    schedule = config.get("schedule") or {}
    core, core_note = _usable_core(core, config.get("core"))
    cell_name = "/".join(_cell_fields(case))
    log_dir = _writable_dir(Path(bundle.path) / "explain", cell_name)
    outcome = profile_case(
        sides,
        case,
        core=core,
        device=config.get("device", "cpu"),
        warmup=int(schedule.get("warmup", 50)),
        iters=iters,
        repeats=repeats,
        hash_seed=hash_seed(int(config.get("seed", 0)), 0),
        log_dir=log_dir,
        timeout_s=float(timeout_s or schedule.get("timeout_s", 600.0)),
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
                f"{label} now imports other code than when the bundle was measured: this explains today's code"
            )
    return notes


def render_report(report: dict, n: int = 15) -> str:
    """Text for ``teperf explain``."""
    lines = [
        f"explain {report['cell']} (core {report['core']}, {report['repeats']} x {report['iters']} profiled steps per side)"
    ]
    labels = report["sides"]
    counters = report.get("counters") or {}
    for label, facts in (report.get("imported") or {}).items():
        lines.append("  " + side_line(label, facts))
    for label in labels:
        c = counters.get(label)
        if c:
            lines.append(
                f"  {label} counters: "
                + ", ".join(f"{k}={v}" for k, v in c.items() if v is not None and not isinstance(v, list))
            )
            if c.get("break_reasons"):
                lines.append(f"  {label} graph breaks: " + "; ".join(c["break_reasons"]))
    if len(labels) == 2:
        lines.append(f"  counters {labels[1]} - {labels[0]}: {report.get('counters_diff') or 'n/a'}")
        deltas = apply_intervals(
            diff_profiles(report["profiles"][labels[0]], report["profiles"][labels[1]]),
            report.get("own_time_ci") or {},
        )
        lines.append(f"  in short: {summary(deltas)}")
        if int(report.get("repeats") or 0) < 2:
            lines.append("  (one repeat: own-time changes have no interval; --repeats 3 or more gives one)")
        lines.append("")
        lines.append(render_text(deltas, n=n))
    else:
        rows = report["profiles"][labels[0]][:n]
        lines.append("")
        lines.append(f"By own time (top {n}), {labels[0]}:")
        for row in rows:
            where = row.get("rel", "?") if not row.get("line") else f"{row.get('rel')}:{row.get('line')}"
            lines.append(f"  {row['own_us']:>9.1f} us {row['calls']:>8g} calls  {row['name']}  {where}")
    for label, error in (report.get("errors") or {}).items():
        lines.append(f"  note: {label}: {error}")
    if report.get("saved_to"):
        lines.append(f"saved: {report['saved_to']}")
    return "\n".join(lines) + "\n"


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
