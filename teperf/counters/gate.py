"""The counters gate: a side's exact step counters against the expected file kept in the repo (timing gates
misfire on shared CI runners). A change either way fails; a decrease is a win: update the file."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from teperf.bundle import Bundle
from teperf.counters.file import (
    COUNTER_KEYS,
    UPDATE_HINT,
    Expected,
    as_profile,
    calls_by_function,
    made_with,
    new_file_text,
    read_calls,
    rewrite,
    row_line,
    version_mismatch,
    write_calls,
)
from teperf.engine.oneshot import StepFailed, one_worker
from teperf.engine.spawn import WorkerError
from teperf.errors import TeperfError
from teperf.explain.capture import case_key, rerun_config, sides_from_meta
from teperf.explain.diff import by_calls, diff_profiles
from teperf.explain.render import calls_text
from teperf.plan import Case, expand
from teperf.records import BundleMeta, CountersRecord, WorkerRecord

PROFILE_ITERS = 3  # steps profiled for the by-function calls (counts per step are exact)


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
        how = self.kind
        if self.expected is not None and self.got is not None:
            tol = f", allowed +-{self.allowed}" if self.allowed else ""
            how = f"{self.got - self.expected:+d}{tol}, {how}"
        return f"{self.counter} {self.expected} -> {self.got} ({how})"


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


def compare_counts(
    expected: Optional[Expected], key: str, counters: dict, calls: Optional[dict] = None
) -> CellResult:
    """The cell's counters against its row of ``expected`` (None: no file yet)."""
    breaks = list(counters.get("break_reasons") or [])
    row = expected.rows.get(key) if expected else None
    if row is None:
        reason = "no row in the file" if expected else "no file yet"
        return CellResult(key, "new", counters, reason=reason, calls=calls, break_reasons=breaks)
    changes = []
    for name in COUNTER_KEYS:
        want, got = row.counts.get(name), counters.get(name)
        if want is None and got is None:
            continue
        allowed = expected.allowed(row, name)
        if want is None or got is None or abs(int(got) - int(want)) > allowed:
            changes.append(Change(name, want, None if got is None else int(got), allowed))
    status = "changed" if changes else "ok"
    return CellResult(key, status, counters, changes, calls=calls, break_reasons=breaks)


def functions_text(expected_calls: Optional[dict], got_calls: Optional[dict]) -> list[str]:
    """The 4 functions whose calls per step changed most (explain's call diff), as short texts."""
    if not expected_calls or got_calls is None:
        return []
    deltas = by_calls(diff_profiles(as_profile(expected_calls), as_profile(got_calls)), 4)
    return [calls_text(d) for d in deltas]  # as_profile has no lines: each names its file


@dataclasses.dataclass
class CheckResult:
    path: Path
    side: str
    made_with: dict
    cells: list  # CellResult, in the config's order
    not_in_config: list  # rows of the file the config does not have
    seconds: float = 0.0
    updated: dict = dataclasses.field(default_factory=dict)  # key -> "added"/"rewritten" by --update
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
        names = ("side", "made_with", "passed", "seconds", "cells", "not_in_config", "updated", "new_rows")
        out = {"file": str(self.path), **{name: getattr(self, name) for name in names}}
        return out | {"cells": [c.to_dict() for c in self.cells]}


def checked(path, side: str, seen: dict, cells: list, expected: Optional[Expected]) -> CheckResult:
    """The result of ``cells`` against ``expected`` (None: no file yet), with the rows a change needs."""
    keys = {c.key for c in cells}
    rows = expected.rows if expected else {}
    result = CheckResult(Path(path), side, seen, cells, sorted(k for k in rows if k not in keys))
    for cell in result.changed:
        old = rows.get(cell.key)
        result.new_rows[cell.key] = row_line(cell.key, cell.counters, old.tolerance if old else None)
    return result


def refuse_other_versions(expected: Expected, seen: dict, fix: str = "") -> None:
    differ = version_mismatch(expected.made_with, seen)
    if differ:
        raise TeperfError(
            f"{expected.path} was made with other versions ({'; '.join(differ)}): counts are not comparable",
            f"make a file for these versions ({UPDATE_HINT.format(file='NEW.toml')}){fix}",
        )


def count_cells(
    config,
    side,
    cases: list,
    log_dir: Path,
    *,
    on_hello: Callable[[dict], None] = lambda hello: None,
    want_calls: Callable[[str, dict], bool],
    progress: Callable[[str], None] = lambda text: None,
) -> tuple[dict, dict]:
    """(hello, {case key: CellResult with counters or a reason}) from one worker of ``side``; every case is
    set up, then counted, as ``compare`` counts. ``on_hello`` may refuse (raise) before anything is counted;
    ``want_calls(key, counters)`` picks the cells profiled afterwards for their calls by function."""
    results = {c.key: CellResult(c.key, "skipped", reason=c.skip) for c in cases if c.skip}
    runnable = [c for c in cases if not c.skip]
    if not runnable:
        return {}, results
    log_path = Path(log_dir) / f"{side.label}.log"
    worker = current = None
    try:
        with one_worker(config, side, log_dir, backends=sorted({c.backend for c in runnable})) as worker:
            progress(f"starting the {side.label} worker")
            hello = worker.ready()
            on_hello(hello)
            ready = []
            for case in runnable:
                current = case
                progress(f"setting up {case.key}")
                try:
                    worker.setup(case)
                    ready.append(case)
                except StepFailed as exc:
                    status = "skipped" if exc.skipped else "failed"
                    reason = str(exc.error)[:300] + ("" if exc.skipped else f" (log: {log_path})")
                    results[case.key] = CellResult(case.key, status, reason=reason)
            for case in ready:
                current = case
                progress(f"counting {case.key}")
                try:
                    counters = worker.counters(case)
                except StepFailed as exc:
                    results[case.key] = CellResult(case.key, "failed", reason=f"counting: {exc.error}"[:300])
                    continue
                cell = results[case.key] = CellResult(case.key, "counted", counters)
                if want_calls(case.key, counters):
                    progress(f"profiling {case.key}")
                    with contextlib.suppress(StepFailed):  # the counts stand; only the functions go unnamed
                        cell.calls = calls_by_function(worker.profile(case, PROFILE_ITERS))
    except WorkerError as exc:
        if worker is None or (not results and current is None):
            raise TeperfError(f"the {side.label} worker did not start: {exc}", f"see {log_path}") from None
        where = current.key if current else "start-up"
        reason = f"the worker failed at {where}: {exc}"[:300] + f" (log: {log_path})"
        for case in runnable:
            results.setdefault(case.key, CellResult(case.key, "failed", reason=reason))
        hello = worker.hello or {}
    return hello, results


def check(
    config,
    side,
    expected_path,
    *,
    update: bool = False,
    progress: Callable[[str], None] = lambda text: None,
) -> CheckResult:
    """Count every cell of ``config`` on ``side`` once and compare with the file at ``expected_path``;
    ``update`` rewrites the rows that changed and adds the new ones (a missing file is made). A side whose
    versions differ from the file's is refused (TeperfError) either way."""
    t0 = time.perf_counter()
    path = Path(expected_path)
    expected = None if update and not path.exists() else Expected.read(path)
    known_calls = read_calls(path) if expected else {}
    cases = expand(config)
    seen: dict = {}

    def on_hello(hello: dict) -> None:
        seen.update(made_with(hello, config.device))
        if expected is not None:
            refuse_other_versions(expected, seen, ", or check on the versions the file names")

    def want_calls(key: str, counters: dict) -> bool:  # no file yet (expected None) only with update
        cell = compare_counts(expected, key, counters)
        return cell.status != "ok" or (update and key not in known_calls)

    work = Path(tempfile.mkdtemp(prefix="teperf-counters-"))
    try:
        hello, counted = count_cells(
            config, side, cases, work, on_hello=on_hello, want_calls=want_calls, progress=progress
        )
    except TeperfError as exc:
        if str(work) not in str(exc):  # kept when the error points at its log
            shutil.rmtree(work, ignore_errors=True)
        raise
    if not any(c.status == "failed" for c in counted.values()):
        shutil.rmtree(work, ignore_errors=True)  # the worker's log is kept only when a cell failed
    if not seen and hello:
        seen.update(made_with(hello, config.device))
    cells = []
    for case in cases:
        cell = counted[case.key]
        if cell.status == "counted":
            cell = compare_counts(expected, case.key, cell.counters, cell.calls)
            cell.functions = functions_text(known_calls.get(case.key), cell.calls)
        cells.append(cell)
    result = checked(path, side.label, seen, cells, expected)
    if update:
        _update(result, expected)
    result.seconds = round(time.perf_counter() - t0, 1)
    return result


def _update(result: CheckResult, expected: Optional[Expected]) -> None:
    counted = {c.key: c.counters for c in result.changed}
    text = (
        rewrite(expected, counted) if expected else new_file_text(result.path.name, result.made_with, counted)
    )
    if counted or expected is None:
        tmp = result.path.with_name(f".{result.path.name}.tmp")
        try:
            result.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            tmp.replace(result.path)
        except OSError as exc:  # name the file asked for, not the hidden one written first
            raise TeperfError(
                f"cannot write {result.path}: {exc.strerror}", "give --expected a file you can write"
            )
    for key in counted:
        result.updated[key] = "rewritten" if expected is not None and key in expected.rows else "added"
    calls = {c.key: c.calls for c in result.cells if c.calls is not None}
    if calls:
        write_calls(result.path, result.made_with, calls)


def check_bundle(bundle_path, expected_path, side_label: Optional[str] = None) -> CheckResult:
    """The counters ``compare`` recorded for one side (default: head) against the file, nothing counted
    again; one worker of that side profiles the changed cells the calls sidecar has, to name the functions
    behind the change as ``teperf counters check`` does."""
    t0 = time.perf_counter()
    expected = Expected.read(expected_path)
    bundle = Bundle.open(bundle_path)
    meta = bundle.meta()
    labels = list(meta.sides)
    label = side_label or ("head" if "head" in labels else (labels[-1] if labels else "head"))
    hello: dict = {}
    counters: dict = {}
    for record in bundle.records():
        if isinstance(record, WorkerRecord) and record.side == label and not hello:
            hello = record.hello or {}
        elif isinstance(record, CountersRecord) and record.side == label:
            counters.setdefault(record.case_id, record.counters)
    seen = made_with(hello, meta.config.device) if hello else {}
    if hello:
        refuse_other_versions(expected, seen)
    cells = []
    cases = [(case_key(c), c) for c in meta.cases]
    for key, case in cases:
        got = counters.get(case.get("id"))
        if case.get("skip"):
            cells.append(CellResult(key, "skipped", reason=case["skip"]))
        elif got is None:
            cells.append(CellResult(key, "failed", reason=f"the bundle has no counters of the {label} side"))
        else:
            cells.append(compare_counts(expected, key, got))
    result = checked(expected_path, label, seen, cells, expected)
    known = read_calls(expected_path)
    wanted = [case for key, case in cases if key in known and by_key(result, key)]
    if wanted:
        _name_functions(meta, label, wanted, known, result)
    result.seconds = round(time.perf_counter() - t0, 1)
    return result


def by_key(result: CheckResult, key: str) -> Optional[CellResult]:
    """The changed cell named ``key``, or None."""
    return next((c for c in result.changed if c.key == key), None)


def _name_functions(meta: BundleMeta, label: str, cases: list, known: dict, result: CheckResult) -> None:
    """Profile the changed cells on the bundle's ``label`` side in one worker; a side that is gone
    (a temporary tree) or a worker that fails leaves the functions unnamed, with a note."""
    plan_cases = [Case.from_meta(case) for case in cases]
    work = Path(tempfile.mkdtemp(prefix="teperf-counters-"))
    try:
        side = next(s for s in sides_from_meta(meta.sides) if s.label == label)
        config, _note = rerun_config(meta.config)
        _hello, counted = count_cells(config, side, plan_cases, work, want_calls=lambda key, counters: True)
    except (TeperfError, StopIteration) as exc:
        counted = {}
        for case in plan_cases:
            by_key(result, case.key).functions = [f"(not profiled: {exc})"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for key, got in counted.items():
        cell = by_key(result, key)
        if cell is not None and got.calls is not None:
            cell.functions = functions_text(known.get(key), got.calls)
