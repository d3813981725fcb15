"""The live view while a run measures (rich Live on stderr, on a terminal only)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


class LiveView:
    """While a compare measures, on a terminal: per cell the pairs done, the current delta and
    half-width, and the time left of the budget, above the progress bar (rich Live on stderr)."""

    MAX_ROWS = 20  # the unsettled cells first; a nightly's 100+ cells would not fit a screen

    def __init__(self):
        from rich import progress as bar
        from rich.console import Console

        self.bar = bar.Progress(
            bar.TextColumn("[bold]measuring"),
            bar.BarColumn(),
            bar.MofNCompleteColumn(),
            bar.TextColumn("steps"),
            bar.TimeElapsedColumn(),
            bar.TextColumn("ETA"),
            bar.TimeRemainingColumn(),
            bar.TextColumn("{task.description}"),
            console=Console(stderr=True),
        )
        self.snapshot = None

    def factory(self, total):
        task = self.bar.add_task("", total=total)
        return lambda steps, what: self.bar.update(task, advance=steps, description=what)

    def update(self, snapshot) -> None:
        self.snapshot = snapshot
        self.seen_at = time.monotonic()  # the budget keeps ticking between snapshots

    def __rich__(self):
        from rich.console import Group
        from rich.table import Table

        if (snap := self.snapshot) is None:
            return self.bar
        title = f"{snap.pairs_done} pairs done"
        if snap.target_pct is not None:
            title += f"; target +-{snap.target_pct:g}%"
        if snap.budget_s is not None:
            left = max(0.0, snap.time_left_s - (time.monotonic() - self.seen_at))
            title += f"; budget left {int(left // 60)}:{int(left % 60):02d}"
        table = Table(title=title, title_justify="left", box=None, pad_edge=False)
        for col in ("cell", "pairs", "delta", "half-width", ""):
            table.add_column(col, justify="left" if col in ("cell", "") else "right", overflow="fold")
        cells = sorted(snap.cells, key=lambda c: (c.settled or bool(c.dropped), c.case_id))
        for c in cells[: self.MAX_ROWS]:
            state = c.dropped or ("settled" if c.settled else "")
            table.add_row(
                c.key,
                str(c.pairs),
                "-" if c.delta_pct is None else f"{c.delta_pct:+.2f}%",
                "-" if c.half_pct is None else f"+-{c.half_pct:.2f}%",
                state,
                style="dim" if state else None,
            )
        if len(cells) > self.MAX_ROWS:
            table.add_row(f"... {len(cells) - self.MAX_ROWS} more", "", "", "", "")
        return Group(table, self.bar)


@contextmanager
def live_view():
    """(progress factory, snapshot listener) for api.measure: a LiveView's on a terminal, else None."""
    if not sys.stderr.isatty():
        yield None, None
        return
    from rich.live import Live

    view = LiveView()
    with Live(view, console=view.bar.console, refresh_per_second=2, transient=True):
        yield view.factory, view.update
