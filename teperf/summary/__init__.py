"""Bundle -> one table model (meta + rows + notes), whatever state the bundle is in."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from teperf.config import METRIC_FIELD, RecordedConfig, Stats
from teperf.errors import TeperfError
from teperf.provenance import identical_code, mixed_code, side_facts
from teperf.records import BundleMeta, Row
from teperf.stats import TableLevels
from teperf.summary.aggregate import aggregate
from teperf.summary.notes import notes, onetime_notes
from teperf.summary.parse import ParsedBundle, parse


@dataclasses.dataclass
class Summary:
    meta: BundleMeta
    rows: list[Row]
    notes: list[str]
    path: Path | None = None
    onetime_notes: list[str] = dataclasses.field(default_factory=list)  # under the one-time table
    # Why the figures compare not what the user named (identical or changing code); exits 1.
    code_problems: list[str] = dataclasses.field(default_factory=list)
    imported: dict = dataclasses.field(default_factory=dict)  # label -> what its first worker imported
    stats: Stats | None = None  # the settings the rows were computed with (None: the bundle's own)
    levels: TableLevels | None = None  # a compare table's rule across its cells (stats.table_levels)

    @property
    def config(self) -> RecordedConfig:
        """The settings the bundle recorded (``known`` tells what it did not)."""
        return self.meta.config

    @property
    def settings(self) -> Stats:
        return self.stats or stats_from_meta(self.meta)

    @property
    def interval_alpha(self) -> float:
        """1 - the confidence of every interval in the table: the table rule's level, else the run's."""
        return self.levels.alpha if self.levels else self.settings.alpha

    @property
    def compare(self) -> bool:
        return len(self.meta.sides) == 2

    @property
    def show_pairs(self) -> bool:
        """Whether the table needs a pairs column: a cell has fewer pairs than planned or than another."""
        measured = [r for r in self.rows if r.status != "skipped"]
        short = any(r.pairs_planned and (r.n_pairs or 0) != r.pairs_planned for r in measured)
        return short or len({r.n_pairs for r in measured if r.n_pairs}) > 1

    @property
    def incomplete_rows(self) -> list[Row]:
        """Cells that failed, ended partial or were never measured (skipped ones are fine)."""
        return [r for r in self.rows if r.status in ("failed", "partial", "missing")]


def stats_from_meta(meta: BundleMeta, **overrides) -> Stats:
    """The run's statistics settings (keys this teperf does not know are ignored)."""
    stats = dataclasses.replace(meta.config.stats, **overrides)
    if stats.metric not in METRIC_FIELD:
        raise TeperfError(
            f"unknown metric {stats.metric!r} in the bundle",
            f"pass --metric with one of: {', '.join(METRIC_FIELD)}",
        )
    return stats


def summarize(path, stats: Stats | None = None, lane: int | None = None) -> Summary:
    """The table model of a bundle; ``lane``: only the trials that lane measured (``report --by-lane``)."""
    parsed = parse(path, lane)
    stats = stats or stats_from_meta(parsed.meta)
    rows, levels = aggregate(parsed, stats, table_rule=lane is None)  # a lane's rows: at the caller's level
    return Summary(
        meta=parsed.meta,
        rows=rows,
        notes=notes(parsed, rows, stats),
        path=parsed.path,
        onetime_notes=onetime_notes(parsed, levels),
        code_problems=code_problems(parsed),
        imported=side_facts(parsed.workers),
        stats=stats,
        levels=levels,
    )


def code_problems(parsed: ParsedBundle) -> list[str]:
    identical = identical_code(parsed.meta, parsed.workers)
    return ([identical] if identical else []) + [
        f"{label}'s workers did not all import the same code: its tree changed during the run"
        # a worker whose set-up failed or that died imported only part of the code: it hashes differently
        for label in mixed_code(w for w in parsed.workers if (w.pair, w.side) not in parsed.failed_workers)
    ]
