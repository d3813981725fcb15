"""What a bisect says while it runs: one line per probe on stderr; on a terminal also a rich status line
below them (probes done, counter probes and compares, steps found, time spent of --budget)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, log, plan: dict, budget_s: float | None = None):
        self.log, self.plan, self.budget_s = log, plan, budget_s
        self.done = {"counters": 0, "timing": 0}
        self.steps = 0
        self.started = time.perf_counter()
        self.timing_s = 0.0
        self.status = None
        if sys.stderr.isatty():
            from rich.console import Console

            self.status = Console(stderr=True).status(self._text())
            self.status.start()

    def _text(self) -> str:
        spent = time.perf_counter() - self.started
        per_step = 1 + 2 * (self.plan.get("expected_probes") or 0)
        left = f", {self.budget_s - self.timing_s:.0f} s of --budget left" if self.budget_s else ""
        return (
            f"bisect: {self.done['counters']} counter probes; {self.done['timing']} compares (about "
            f"{per_step} for one step), {self.steps} steps in time found{left}; {spent:.0f} s so far"
        )

    def probe(self, role: str, sha: str, what: str, result: str, detail: str, seconds: float) -> None:
        kind = "timing" if what == "timing" else "counters"
        self.done[kind] += 1
        if kind == "timing":
            self.timing_s += seconds
        n = sum(self.done.values())
        self.log(f"[{n}] {role} {sha} {what}: {result}{' - ' + detail if detail else ''} ({seconds:.1f} s)")
        if self.status is not None:
            self.status.update(self._text())

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
