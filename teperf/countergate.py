"""The counters gate: a side's exact step counters against an expected file kept in the repo.

Timing gates misfire on shared CI runners; the step counters (teperf/worker/counters.py:
Python calls, ATen ops, autograd nodes, kernel launches, syncs, allocations, and for
compile cells graphs, graph breaks, recompiles and guard failures) are exact and cost one
worker run. Like PyTorch's instruction-count gate, the file holds the expected counts, one
row per cell; a change either way fails the check (a decrease is a win: update the file),
and the check prints the rows to paste. ``teperf counters check`` and ``teperf compare
--expected`` are the CLI over this module.

The file (TOML, one line per cell so that ``--update`` rewrites only the rows that changed
and keeps comments and hand-set tolerances)::

    [made_with]                      # a side with other versions is refused, not diffed
    python = "3.11"
    torch = "2.13.0+cpu"
    device = "cpu"
    teperf = "0.2.0"                 # informational

    [tolerance]                      # optional: default allowance per counter, +- absolute
    allocations = 0

    [cells]
    "Linear/fp32/8x2x64/eager" = { python_calls = 34, aten_ops = 12, autograd_nodes = 3, allocations = 9 }
    "MLP/fp32/8x2x64/eager" = { python_calls = 90, aten_ops = 30, tolerance = { python_calls = 2 } }

Beside it, ``<file stem>.calls.json`` (written by ``--update``) keeps each cell's calls per
step by function (cProfile), so that a changed cell names the functions whose call counts
account for the change (explain's call diff). It is for diagnosis only, never gated.

Coordinator side: no torch.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Callable, Optional

import tomllib

from teperf import __version__
from teperf.errors import TeperfError
from teperf.explain.diff import COUNTER_LABELS, by_calls, diff_profiles

COUNTER_KEYS = tuple(key for key, *_ in COUNTER_LABELS)
# Versions that decide the counts: a file made under others is refused, not diffed.
VERSION_KEYS = ("python", "torch", "device", "gpu", "transformer_engine")
# Tolerance written into a new file's [tolerance] (+- absolute). Measured repeatable on the CPU
# across fresh processes (README, "Counters gate"): every counter, so none is needed yet.
DEFAULT_TOLERANCE: dict[str, int] = {}
PROFILE_ITERS = 3  # steps profiled for the by-function calls (counts per step are exact)
UPDATE_HINT = "teperf counters check --expected {file} --update"
HEADER = """\
# teperf expected step counters: `teperf counters check --expected {name}` fails on any change.
# One row per cell (module/recipe/shape/mode): exact counts per fwd+bwd step. A row may allow
# a change of N either way for a counter: tolerance = {{ allocations = 2 }} (or all rows: [tolerance]).
# Rows that changed are rewritten by: teperf counters check --expected {name} --update
"""


# ---- the expected file ----


@dataclasses.dataclass
class Row:
    key: str
    counts: dict  # counter -> int (counters not measurable where the file was made are absent)
    tolerance: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Expected:
    path: Path
    made_with: dict
    tolerance: dict
    rows: dict  # key -> Row
    text: str = ""  # the file as read: --update rewrites lines of it

    @classmethod
    def read(cls, path) -> "Expected":
        path = Path(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise TeperfError(
                f"expected-counters file {path} does not exist",
                f"make it with: {UPDATE_HINT.format(file=path)}",
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise TeperfError(f"cannot read {path}: {exc}", "give a readable UTF-8 TOML file") from None
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TeperfError(
                f"{path}: invalid TOML ({exc})", "fix the file, or delete it and --update"
            ) from None
        unknown = sorted(set(raw) - {"made_with", "tolerance", "cells"})
        if unknown:
            raise TeperfError(
                f"{path}: unknown section {unknown[0]!r}",
                "the sections are [made_with], [tolerance], [cells]",
            )
        made_with = raw.get("made_with")
        if not isinstance(made_with, dict) or not all(isinstance(v, str) for v in made_with.values()):
            raise TeperfError(
                f"{path} has no [made_with] table of version strings",
                f"make the file with {UPDATE_HINT.format(file=path)}",
            )
        tolerance = _tolerance(raw.get("tolerance") or {}, f"{path} [tolerance]")
        cells = raw.get("cells") or {}
        if not isinstance(cells, dict):
            raise TeperfError(f"{path}: cells must be a table", "write them under [cells]")
        rows = {}
        for key, value in cells.items():
            where = f"{path} row {key!r}"
            if not isinstance(value, dict):
                raise TeperfError(f"{where} is not a table", 'write it as "KEY" = { python_calls = 34, ... }')
            extra = sorted(set(value) - set(COUNTER_KEYS) - {"tolerance"})
            if extra:
                raise TeperfError(
                    f"{where}: unknown counter {extra[0]!r}", f"counters: {', '.join(COUNTER_KEYS)}"
                )
            counts = {}
            for name in COUNTER_KEYS:
                if name in value:
                    counts[name] = _count(value[name], f"{where} {name}")
            rows[key] = Row(key, counts, _tolerance(value.get("tolerance") or {}, f"{where} tolerance"))
        return cls(path, dict(made_with), tolerance, rows, text)

    def allowed(self, row: Row, counter: str) -> int:
        return int(row.tolerance.get(counter, self.tolerance.get(counter, 0)))


def _count(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TeperfError(f"{where} must be a whole number >= 0, got {value!r}", "fix the row or --update it")
    return value


def _tolerance(table, where: str) -> dict:
    if not isinstance(table, dict):
        raise TeperfError(f"{where} must be a table", "write e.g. tolerance = { allocations = 2 }")
    unknown = sorted(set(table) - set(COUNTER_KEYS))
    if unknown:
        raise TeperfError(f"{where}: unknown counter {unknown[0]!r}", f"counters: {', '.join(COUNTER_KEYS)}")
    return {k: _count(v, f"{where} {k}") for k, v in table.items()}


def row_line(key: str, counts: dict, tolerance: Optional[dict] = None) -> str:
    """One row as the file has it: counters in a fixed order, the row's tolerance last."""
    parts = [f"{name} = {int(counts[name])}" for name in COUNTER_KEYS if counts.get(name) is not None]
    if tolerance:
        inner = ", ".join(f"{k} = {int(tolerance[k])}" for k in COUNTER_KEYS if k in tolerance)
        parts.append(f"tolerance = {{ {inner} }}")
    return f"{json.dumps(key)} = {{ {', '.join(parts)} }}"


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def new_file_text(name: str, made_with: dict, rows: dict[str, dict]) -> str:
    lines = [HEADER.format(name=name), "[made_with]"]
    lines += [f"{k} = {_toml_str(v)}" for k, v in made_with.items()]
    lines.append("")
    if DEFAULT_TOLERANCE:
        lines.append("[tolerance]")
        lines += [f"{k} = {v}" for k, v in DEFAULT_TOLERANCE.items()]
        lines.append("")
    lines.append("[cells]")
    lines += [row_line(key, rows[key]) for key in sorted(rows)]
    return "\n".join(lines) + "\n"


_ROW_START = re.compile(r'^\s*"((?:[^"\\]|\\.)*)"\s*=')


def rewrite(expected: Expected, changed: dict[str, dict]) -> str:
    """The file's text with the rows in ``changed`` (key -> new counts) replaced or added; every other
    line as it was. New rows go to their sorted place among the rows, so the order stays stable."""
    lines = expected.text.splitlines()
    in_cells = False
    row_at: dict[str, int] = {}
    cells_header = None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("["):
            in_cells = stripped.split("#")[0].strip() == "[cells]"
            if in_cells:
                cells_header = index
            continue
        match = _ROW_START.match(line) if in_cells else None
        if match:
            row_at[json.loads(f'"{match.group(1)}"')] = index
    if cells_header is None:
        lines.append("")
        lines.append("[cells]")
        cells_header = len(lines) - 1
    for key in sorted(changed):
        if key in expected.rows and key not in row_at:
            raise TeperfError(
                f"{expected.path}: row {key!r} is not written on one line under [cells]",
                'write each row as "KEY" = { python_calls = 34, ... }, then --update again',
            )
    inserts = []
    for key, counts in changed.items():
        old = expected.rows.get(key)
        line = row_line(key, counts, old.tolerance if old else None)
        if key in row_at:
            lines[row_at[key]] = line
        else:
            inserts.append((key, line))
    for key, line in sorted(inserts):
        # right after the row before it in sort order, so a comment above the next row stays there
        before = [k for k in row_at if k < key]
        at = row_at[max(before)] + 1 if before else cells_header + 1
        lines.insert(at, line)
        row_at = {k: (i + 1 if i >= at else i) for k, i in row_at.items()}
        row_at[key] = at
    return "\n".join(lines) + "\n"


def calls_path(path) -> Path:
    path = Path(path)
    return path.with_name(path.stem + ".calls.json")


def read_calls(path) -> dict:
    """key -> {"rel::name": calls per step} from the sidecar; {} when there is none or it is unreadable."""
    try:
        data = json.loads(calls_path(path).read_text())
        return dict(data.get("cells") or {})
    except (OSError, ValueError, AttributeError):
        return {}


def calls_by_function(functions: list[dict]) -> dict:
    out: dict = {}
    for row in functions:
        name = f"{row.get('rel') or row.get('file') or '?'}::{row.get('name') or '?'}"
        out[name] = round(out.get(name, 0) + float(row.get("calls") or 0), 4)
    return dict(sorted(out.items()))


def _as_profile(calls: dict) -> list[dict]:
    rows = []
    for name, value in calls.items():
        rel, _, fn = name.partition("::")
        rows.append({"rel": rel, "name": fn, "file": rel, "line": 0, "calls": value})
    return rows


def write_calls(path, made_with: dict, cells: dict) -> None:
    old = read_calls(path)
    old.update(cells)
    data = {"made_with": made_with, "cells": {k: old[k] for k in sorted(old)}}
    calls_path(path).write_text(json.dumps(data, indent=1) + "\n")


# ---- versions ----


def _public(version: str) -> str:
    # A package under test carries its commit in the local part (2.16.0.dev0+abc123): not a version change.
    return version.split("+", 1)[0]


def made_with(hello: dict, device: str) -> dict:
    """The versions a side's counts depend on, from its worker's hello."""
    facts = {
        "python": ".".join(str(hello.get("python", "?")).split(".")[:2]),
        "torch": str(hello.get("torch", "?")),
        "device": device,
    }
    if hello.get("gpu"):
        facts["gpu"] = str(hello["gpu"])
    te = hello.get("backend_te") or {}
    if te.get("version"):
        facts["transformer_engine"] = _public(str(te["version"]))
    facts["teperf"] = __version__
    return facts


def version_mismatch(expected: dict, got: dict) -> list[str]:
    """'torch 2.12.0 -> 2.13.0' for every deciding version that differs."""
    out = []
    for key in VERSION_KEYS:
        if expected.get(key) != got.get(key):
            out.append(f"{key} {expected.get(key, '(none)')} -> {got.get(key, '(none)')}")
    return out


# ---- comparing ----


@dataclasses.dataclass
class Change:
    counter: str
    expected: Optional[int]
    got: Optional[int]
    allowed: int = 0

    @property
    def kind(self) -> str:
        if self.expected is None:
            return "new counter"
        if self.got is None:
            return "not measured"
        return "win" if self.got < self.expected else "regression"

    def text(self) -> str:
        if self.expected is None or self.got is None:
            return f"{self.counter} {self.expected} -> {self.got} ({self.kind})"
        tol = f", allowed +-{self.allowed}" if self.allowed else ""
        return (
            f"{self.counter} {self.expected} -> {self.got} ({self.got - self.expected:+d}{tol}, {self.kind})"
        )


@dataclasses.dataclass
class CellResult:
    key: str
    status: str  # ok | changed | new | skipped | failed
    counters: Optional[dict] = None
    changes: list = dataclasses.field(default_factory=list)
    reason: str = ""
    functions: list = dataclasses.field(default_factory=list)  # "+5 calls of f (pkg/mod.py)"
    calls: Optional[dict] = None  # by function, when profiled
    break_reasons: list = dataclasses.field(default_factory=list)

    @property
    def win(self) -> bool:
        return bool(self.changes) and all(c.kind == "win" for c in self.changes)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["changes"] = [dict(dataclasses.asdict(c), kind=c.kind) for c in self.changes]
        out["win"] = self.win
        out.pop("calls")
        return out


def compare_counts(expected: Expected, key: str, counters: dict) -> CellResult:
    row = expected.rows.get(key)
    if row is None:
        return CellResult(key, "new", counters, reason="no row in the file")
    changes = []
    for name in COUNTER_KEYS:
        want, got = row.counts.get(name), counters.get(name)
        if want is None and got is None:
            continue
        allowed = expected.allowed(row, name)
        if want is None or got is None or abs(int(got) - int(want)) > allowed:
            changes.append(Change(name, want, None if got is None else int(got), allowed))
    return CellResult(key, "changed" if changes else "ok", counters, changes)


def functions_text(expected_calls: Optional[dict], got_calls: Optional[dict], n: int = 4) -> list[str]:
    """The functions whose calls per step changed most (explain's call diff), as short texts."""
    if not expected_calls or got_calls is None:
        return []
    deltas = by_calls(diff_profiles(_as_profile(expected_calls), _as_profile(got_calls)), n)
    out = []
    for d in deltas:
        value = d.d_calls
        count = f"{int(value):+d}" if value == int(value) else f"{value:+.2f}"
        where = f" ({d.rel})" if d.rel not in ("~", "") else ""
        out.append(f"{count} {'call' if abs(value) == 1 else 'calls'} of {d.name}{where}")
    return out


@dataclasses.dataclass
class CheckResult:
    path: Path
    side: str
    made_with: dict
    cells: list  # CellResult, in the config's order
    not_in_config: list  # rows of the file the config does not have
    seconds: float = 0.0
    updated: dict = dataclasses.field(
        default_factory=dict
    )  # key -> what --update wrote ("added"/"rewritten")
    new_rows: dict = dataclasses.field(default_factory=dict)  # key -> the row line a changed/new cell needs

    @property
    def changed(self) -> list:
        return [c for c in self.cells if c.status in ("changed", "new")]

    @property
    def failed(self) -> list:
        return [c for c in self.cells if c.status == "failed"]

    @property
    def passed(self) -> bool:
        return not self.changed and not self.failed

    def to_dict(self) -> dict:
        return {
            "file": str(self.path),
            "side": self.side,
            "made_with": self.made_with,
            "passed": self.passed,
            "seconds": self.seconds,
            "cells": [c.to_dict() for c in self.cells],
            "not_in_config": self.not_in_config,
            "updated": self.updated,
            "new_rows": self.new_rows,
        }


# ---- measuring one side (one worker) ----


def count_cells(
    config,
    side,
    cases: list,
    log_dir: Path,
    *,
    on_hello: Callable[[dict], None] = lambda hello: None,
    want_calls: Callable[[str, dict], bool] = lambda key, counters: False,
    progress: Callable[[str], None] = lambda text: None,
) -> tuple[dict, dict]:
    """(hello, {case key: CellResult with counters or a reason}) from one worker of ``side``.

    Every case is set up first and then counted, as ``compare`` counts (so both give the same
    numbers). ``on_hello`` may refuse (raise) before anything is counted; ``want_calls(key,
    counters)`` says which cells are profiled afterwards for their calls by function.
    """
    from teperf.engine.spawn import Worker, WorkerError
    from teperf.plan import hash_seed

    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{side.label}.log"
    results: dict = {}
    runnable = []
    for case in cases:
        if case.skip:
            results[case.key] = CellResult(case.key, "skipped", reason=case.skip)
        else:
            runnable.append(case)
    if not runnable:
        return {}, results
    try:
        worker = Worker(
            side,
            core=config.core,
            device=config.device,
            backends=sorted({c.backend for c in runnable}),
            hash_seed=hash_seed(config.seed, 0),
            log_path=log_path,
            cwd=log_dir,
            timeout_s=config.schedule.timeout_s,
        )
    except WorkerError as exc:
        raise TeperfError(f"the {side.label} worker did not start: {exc}", f"see {log_path}") from None
    current = None
    try:
        progress(f"starting the {side.label} worker")
        hello = worker.wait_ready()
        on_hello(hello)
        ready = []
        for case in runnable:
            current = case
            progress(f"setting up {case.key}")
            reply = worker.request(
                {"cmd": "setup", "case": case.to_wire(config.device, config.schedule.warmup)}
            )
            if reply.get("type") == "ready":
                ready.append(case)
            else:
                status = "skipped" if reply.get("skipped") else "failed"
                reason = str(reply.get("error"))[:300] + (
                    "" if status == "skipped" else f" (log: {log_path})"
                )
                results[case.key] = CellResult(case.key, status, reason=reason)
        for case in ready:
            current = case
            progress(f"counting {case.key}")
            reply = worker.request({"cmd": "counters", "case_id": case.id})
            if reply.get("type") != "counters":
                results[case.key] = CellResult(
                    case.key, "failed", reason=f"counting: {reply.get('error')}"[:300]
                )
                continue
            counters = reply["counters"]
            cell = results[case.key] = CellResult(case.key, "counted", counters)
            if want_calls(case.key, counters):
                progress(f"profiling {case.key}")
                reply = worker.request({"cmd": "profile", "case_id": case.id, "iters": PROFILE_ITERS})
                if reply.get("type") == "profile":
                    cell.calls = calls_by_function(reply["functions"])
    except WorkerError as exc:
        reason = (
            f"the worker failed at {current.key if current else 'start-up'}: {exc}"[:300]
            + f" (log: {log_path})"
        )
        if not results and current is None:
            raise TeperfError(f"the {side.label} worker did not start: {exc}", f"see {log_path}") from None
        for case in runnable:
            results.setdefault(case.key, CellResult(case.key, "failed", reason=reason))
        hello = worker.hello or {}
    finally:
        worker.close()
    return hello, results


def check(
    config,
    side,
    expected_path,
    *,
    update: bool = False,
    log_dir: Optional[Path] = None,
    progress: Callable[[str], None] = lambda text: None,
) -> CheckResult:
    """Count every cell of ``config`` on ``side`` once and compare with the file at ``expected_path``.

    ``update``: rewrite the rows that changed (and add the new ones) in place; a missing file is
    made. A side whose versions differ from the file's is refused (TeperfError) either way.
    """
    import shutil
    import tempfile

    from teperf.plan import expand

    t0 = time.perf_counter()
    path = Path(expected_path)
    if update and not path.exists():
        expected = None
    else:
        expected = Expected.read(path)
    known_calls = read_calls(path) if expected else {}
    cases = expand(config)
    seen: dict = {}

    def on_hello(hello: dict) -> None:
        seen.update(made_with(hello, config.device))
        if expected is not None:
            differ = version_mismatch(expected.made_with, seen)
            if differ:
                raise TeperfError(
                    f"{path} was made with other versions ({'; '.join(differ)}): counts are not comparable",
                    f"make a file for these versions ({UPDATE_HINT.format(file='NEW.toml')}), "
                    "or check on the versions the file names",
                )

    def want_calls(key: str, counters: dict) -> bool:
        if expected is None:
            return update
        cell = compare_counts(expected, key, counters)
        return cell.status != "ok" or (update and key not in known_calls)

    work = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="teperf-counters-"))
    try:
        hello, counted = count_cells(
            config, side, cases, work, on_hello=on_hello, want_calls=want_calls, progress=progress
        )
    except TeperfError as exc:
        if log_dir is None and str(work) not in str(exc):  # kept when the error points at its log
            shutil.rmtree(work, ignore_errors=True)
        raise
    if log_dir is None and not any(c.status == "failed" for c in counted.values()):
        shutil.rmtree(work, ignore_errors=True)  # the worker's log is kept only when a cell failed
    if not seen and hello:
        seen.update(made_with(hello, config.device))
    cells = []
    for case in cases:
        cell = counted[case.key]
        if cell.status == "counted":
            calls = cell.calls
            if expected is not None:
                cell = compare_counts(expected, case.key, cell.counters)
                cell.calls = calls
            else:
                cell = CellResult(case.key, "new", cell.counters, reason="no file yet", calls=calls)
            cell.functions = functions_text(known_calls.get(case.key), calls)
        cell.break_reasons = list((cell.counters or {}).get("break_reasons") or [])
        cells.append(cell)
    keys = {c.key for c in cases}
    result = CheckResult(
        path=path,
        side=side.label,
        made_with=seen,
        cells=cells,
        not_in_config=sorted(k for k in (expected.rows if expected else {}) if k not in keys),
    )
    for cell in result.changed:
        old = expected.rows.get(cell.key) if expected else None
        result.new_rows[cell.key] = row_line(cell.key, cell.counters, old.tolerance if old else None)
    if update:
        _update(result, expected, cells)
    result.seconds = round(time.perf_counter() - t0, 1)
    return result


def _update(result: CheckResult, expected: Optional[Expected], cells: list) -> None:
    counted = {c.key: c.counters for c in result.changed}
    if expected is None:
        text = new_file_text(result.path.name, result.made_with, counted)
    else:
        text = rewrite(expected, counted)
    if counted or expected is None:
        result.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = result.path.with_name(f".{result.path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(result.path)
    for key in counted:
        result.updated[key] = "rewritten" if expected is not None and key in expected.rows else "added"
    calls = {c.key: c.calls for c in cells if c.calls is not None}
    if calls:
        write_calls(result.path, result.made_with, calls)


# ---- checking a compare bundle's head side ----


def check_bundle(
    bundle_path, expected_path, side_label: Optional[str] = None, name_functions: bool = True
) -> CheckResult:
    """The counters ``compare`` recorded for one side (default: head) against the file.

    Nothing is counted again. When a cell changed and the file's calls sidecar has it,
    ``name_functions`` starts one worker of that side to profile the changed cells, so that the
    functions behind the change are named as ``teperf counters check`` names them.
    """
    from teperf.bundle import Bundle
    from teperf.records import CountersRecord, WorkerRecord

    t0 = time.perf_counter()
    expected = Expected.read(expected_path)
    bundle = Bundle.open(bundle_path)
    meta = bundle.meta().to_dict()
    labels = list((meta.get("sides") or {}).keys())
    label = side_label or ("head" if "head" in labels else (labels[-1] if labels else "head"))
    config = meta.get("config") or {}
    device = config.get("device", "cpu")
    hello: dict = {}
    counters: dict = {}
    for record in bundle.records():
        if isinstance(record, WorkerRecord) and record.side == label and not hello:
            hello = record.hello or {}
        elif isinstance(record, CountersRecord) and record.side == label:
            counters.setdefault(record.case_id, record.counters)
    seen = made_with(hello, device) if hello else {}
    differ = version_mismatch(expected.made_with, seen) if hello else []
    if differ:
        raise TeperfError(
            f"{expected.path} was made with other versions ({'; '.join(differ)}): counts are not comparable",
            f"make a file for these versions ({UPDATE_HINT.format(file='NEW.toml')})",
        )
    cells = []
    for case in meta.get("cases") or []:
        key = _meta_key(case)
        got = counters.get(case.get("id"))
        if case.get("skip"):
            cells.append(CellResult(key, "skipped", reason=case["skip"]))
        elif got is None:
            cells.append(CellResult(key, "failed", reason=f"the bundle has no counters of the {label} side"))
        else:
            cell = compare_counts(expected, key, got)
            cell.break_reasons = list(got.get("break_reasons") or [])
            cells.append(cell)
    keys = {c.key for c in cells}
    result = CheckResult(
        path=Path(expected_path),
        side=label,
        made_with=seen,
        cells=cells,
        not_in_config=sorted(k for k in expected.rows if k not in keys),
    )
    for cell in result.changed:
        old = expected.rows.get(cell.key)
        result.new_rows[cell.key] = row_line(cell.key, cell.counters, old.tolerance if old else None)
    known = read_calls(expected_path)
    wanted = [c for c in meta.get("cases") or [] if _meta_key(c) in known and by_key(result, _meta_key(c))]
    if name_functions and wanted:
        _name_functions(bundle, meta, label, wanted, known, result)
    result.seconds = round(time.perf_counter() - t0, 1)
    return result


def _meta_key(case: dict) -> str:
    shape = "x".join(str(n) for n in case.get("shape") or [])
    return f"{case.get('module')}/{case.get('recipe')}/{shape}/{case.get('mode')}"


def by_key(result: CheckResult, key: str) -> Optional[CellResult]:
    """The changed cell named ``key``, or None."""
    return next((c for c in result.changed if c.key == key), None)


def _name_functions(bundle, meta: dict, label: str, cases: list, known: dict, result: CheckResult) -> None:
    """Profile the changed cells on the bundle's ``label`` side in one worker; a side that is gone
    (a temporary tree) or a worker that fails leaves the functions unnamed, with a note."""
    import shutil
    import tempfile
    from types import SimpleNamespace

    from teperf.config import Schedule, from_meta
    from teperf.explain.capture import _usable_core, sides_from_meta
    from teperf.plan import Case

    config = meta.get("config") or {}
    try:
        side = next(s for s in sides_from_meta(meta) if s.label == label)
        core, _note = _usable_core(None, config.get("core"))
    except (TeperfError, StopIteration) as exc:
        for case in cases:
            by_key(result, _meta_key(case)).functions = [f"(not profiled: {exc})"]
        return
    plan_cases = [Case.from_meta(case) for case in cases]
    run_config = SimpleNamespace(
        core=core,
        device=config.get("device", "cpu"),
        seed=int(config.get("seed", 0)),
        schedule=from_meta(Schedule, meta),
    )
    work = Path(tempfile.mkdtemp(prefix="teperf-counters-"))
    try:
        _hello, counted = count_cells(
            run_config, side, plan_cases, work, want_calls=lambda key, counters: True
        )
    except TeperfError as exc:
        counted = {}
        for case in cases:
            by_key(result, _meta_key(case)).functions = [f"(not profiled: {exc})"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for key, got in counted.items():
        cell = by_key(result, key)
        if cell is not None and got.calls is not None:
            cell.functions = functions_text(known.get(key), got.calls)


# ---- text ----


def render(result: CheckResult) -> str:
    lines = []
    counted = [c for c in result.cells if c.status not in ("skipped", "failed")]
    versions = ", ".join(f"{k} {v}" for k, v in result.made_with.items() if k in VERSION_KEYS)
    whose = f"the {result.side} side's counters" if result.side in ("base", "head") else "counters"
    lines.append(
        f"{whose} of {len(counted)} cell{'s' if len(counted) != 1 else ''} ({versions}) "
        f"against {result.path}: {result.seconds:.1f} s"
    )
    hint = UPDATE_HINT.format(file=result.path)
    for cell in result.cells:
        if cell.status == "ok":
            continue
        if cell.status in ("skipped", "failed"):
            lines.append(f"  {cell.key}: {cell.status}: {cell.reason}")
            continue
        if cell.status == "new":
            lines.append(f"  {cell.key}: new cell, {cell.reason}")
        else:
            changes = "; ".join(c.text() for c in cell.changes)
            verdict = " - win: update the file" if cell.win else ""
            lines.append(f"  {cell.key}: {changes}{verdict}")
        if cell.functions:
            lines.append(f"    functions: {', '.join(cell.functions)}")
        if cell.break_reasons:
            lines.append(f"    graph breaks: {'; '.join(cell.break_reasons)}")
    if result.not_in_config:
        n = len(result.not_in_config)
        lines.append(f"  {n} row{'s' if n != 1 else ''} of the file not in this config, not checked")
    n_ok = sum(1 for c in result.cells if c.status == "ok")
    changed = result.changed
    if result.updated:
        lines.append(f"updated {result.path}: " + ", ".join(f"{k} {v}" for k, v in result.updated.items()))
    elif changed:
        lines.append(
            f"{len(changed)} cell{'s' if len(changed) != 1 else ''} changed, {n_ok} unchanged; "
            f"rows as they are now (paste under [cells], or run {hint}):"
        )
        lines += [f"    {line}" for line in result.new_rows.values()]
    else:
        lines.append(f"{n_ok} cell{'s' if n_ok != 1 else ''} as expected")
    return "\n".join(lines) + "\n"
