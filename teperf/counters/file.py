"""The expected-counters file of ``teperf counters check``: TOML, one line per cell, so that ``--update``
rewrites only the rows that changed and keeps comments and hand-set tolerances::

    [made_with]                      # a side with other versions is refused, not diffed
    python = "3.11"
    torch = "2.13.0+cpu"
    device = "cpu"
    teperf = "0.2.0"                 # informational

    [tolerance]                      # optional: default allowance per counter, +- absolute
    allocations = 0

    [cells]
    "MLP/fp32/8x2x64/eager" = { python_calls = 90, aten_ops = 30, tolerance = { python_calls = 2 } }

Its sidecar ``<file stem>.calls.json`` (written by ``--update``, never gated) keeps each cell's calls per
step by function (cProfile) to name the functions behind a change.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path
from typing import Optional

from teperf import __version__
from teperf.errors import TeperfError
from teperf.explain.diff import COUNTER_LABELS

COUNTER_KEYS = tuple(key for key, *_ in COUNTER_LABELS)
# Versions that decide the counts: a file made under others is refused, not diffed.
VERSION_KEYS = ("python", "torch", "device", "gpu", "transformer_engine")
UPDATE_HINT = "teperf counters check --expected {file} --update"
HEADER = """\
# teperf expected step counters: `teperf counters check --expected {name}` fails on any change.
# One row per cell (module/recipe/shape/mode): exact counts per fwd+bwd step. A row may allow
# a change of N either way for a counter: tolerance = {{ allocations = 2 }} (or all rows: [tolerance]).
# Rows that changed are rewritten by: teperf counters check --expected {name} --update
"""


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
        tolerance = _counters(raw.get("tolerance") or {}, f"{path} [tolerance]")
        cells = raw.get("cells") or {}
        if not isinstance(cells, dict):
            raise TeperfError(f"{path}: cells must be a table", "write them under [cells]")
        rows = {}
        for key, value in cells.items():
            where = f"{path} row {key!r}"
            if not isinstance(value, dict):
                raise TeperfError(f"{where} is not a table", 'write it as "KEY" = { python_calls = 34, ... }')
            counts = _counters({k: v for k, v in value.items() if k != "tolerance"}, where)
            rows[key] = Row(key, counts, _counters(value.get("tolerance") or {}, f"{where} tolerance"))
        return cls(path, dict(made_with), tolerance, rows, text)

    def allowed(self, row: Row, counter: str) -> int:
        return int(row.tolerance.get(counter, self.tolerance.get(counter, 0)))


def _counters(table, where: str) -> dict:
    """counter -> count of a row or a tolerance table, checked."""
    if not isinstance(table, dict):
        raise TeperfError(f"{where} must be a table", "write e.g. tolerance = { allocations = 2 }")
    unknown = sorted(set(table) - set(COUNTER_KEYS))
    if unknown:
        raise TeperfError(f"{where}: unknown counter {unknown[0]!r}", f"counters: {', '.join(COUNTER_KEYS)}")
    for k, v in table.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise TeperfError(
                f"{where} {k} must be a whole number >= 0, got {v!r}", "fix the row or --update it"
            )
    return dict(table)


def row_line(key: str, counts: dict, tolerance: Optional[dict] = None) -> str:
    """One row as the file has it: counters in a fixed order, the row's tolerance last."""
    parts = [f"{name} = {int(counts[name])}" for name in COUNTER_KEYS if counts.get(name) is not None]
    if tolerance:
        inner = ", ".join(f"{k} = {int(tolerance[k])}" for k in COUNTER_KEYS if k in tolerance)
        parts.append(f"tolerance = {{ {inner} }}")
    return f"{json.dumps(key)} = {{ {', '.join(parts)} }}"


def new_file_text(name: str, made_with: dict, rows: dict[str, dict]) -> str:
    lines = [HEADER.format(name=name), "[made_with]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in made_with.items()]  # a JSON string is TOML
    lines += ["", "[cells]"]
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
        lines += ["", "[cells]"]
        cells_header = len(lines) - 1
    for key in sorted(changed):
        old = expected.rows.get(key)
        if old is not None and key not in row_at:
            raise TeperfError(
                f"{expected.path}: row {key!r} is not written on one line under [cells]",
                'write each row as "KEY" = { python_calls = 34, ... }, then --update again',
            )
        line = row_line(key, changed[key], old.tolerance if old else None)
        if key in row_at:
            lines[row_at[key]] = line
            continue
        # right after the row before it in sort order, so a comment above the next row stays there
        before = [k for k in row_at if k < key]
        at = row_at[max(before)] + 1 if before else cells_header + 1
        lines.insert(at, line)
        row_at = {k: (i + 1 if i >= at else i) for k, i in row_at.items()}
        row_at[key] = at
    return "\n".join(lines) + "\n"


def calls_path(path) -> Path:
    return Path(path).with_suffix(".calls.json")


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


def as_profile(calls: dict) -> list[dict]:
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
    if te.get("version"):  # without the local part: a package under test carries its commit there
        facts["transformer_engine"] = str(te["version"]).split("+", 1)[0]
    facts["teperf"] = __version__
    return facts


def version_mismatch(expected: dict, got: dict) -> list[str]:
    """'torch 2.12.0 -> 2.13.0' for every deciding version that differs."""
    return [
        f"{key} {expected.get(key, '(none)')} -> {got.get(key, '(none)')}"
        for key in VERSION_KEYS
        if expected.get(key) != got.get(key)
    ]
