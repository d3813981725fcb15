"""The text of a counters check (``teperf counters check``, ``compare --expected``)."""

from __future__ import annotations

from teperf.counters.file import UPDATE_HINT, VERSION_KEYS
from teperf.counters.gate import CheckResult


def render(result: CheckResult) -> str:
    counted = [c for c in result.cells if c.status not in ("skipped", "failed")]
    versions = ", ".join(f"{k} {v}" for k, v in result.made_with.items() if k in VERSION_KEYS)
    whose = f"the {result.side} side's counters" if result.side in ("base", "head") else "counters"
    lines = [
        f"{whose} of {len(counted)} cell{'s' if len(counted) != 1 else ''} ({versions}) "
        f"against {result.path}: {result.seconds:.1f} s"
    ]
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
