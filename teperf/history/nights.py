"""Nights: every run of one machine and night id, its shards put back together. A night is complete when
every shard 1..N has a complete run and all measured one commit; a shard's newest run stands for it, and
the newest run's N is the night's (runs of an older split give cells but no shards)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Iterable

from teperf.history.store import split_shard

COMPLETE = "complete"
NEVER = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)  # sorts a missing date first


@dataclasses.dataclass
class Night:
    machine: str
    machine_label: str
    night: str
    ref: str | None
    subject: str | None
    started: _dt.datetime | None  # the first shard's run date
    count: int  # N: how many shards the night was split into
    shas: list[str] = dataclasses.field(default_factory=list)  # its shards' commits (more: the ref moved)
    shards: dict[int, str] = dataclasses.field(default_factory=dict)  # shard -> its newest run's status
    runs: int = 0

    @property
    def missing(self) -> list[int]:
        return [i for i in range(1, self.count + 1) if i not in self.shards]

    @property
    def not_complete(self) -> list[tuple[int, str]]:
        return [(i, st) for i, st in sorted(self.shards.items()) if st != COMPLETE]

    @property
    def done(self) -> int:
        return sum(1 for st in self.shards.values() if st == COMPLETE)

    @property
    def complete(self) -> bool:
        return self.done == self.count and len(self.shas) <= 1

    @property
    def short_sha(self) -> str:
        return ",".join(s[:10] for s in self.shas)

    def problems(self) -> list[str]:
        """What keeps the night from being whole, one phrase each (empty when complete)."""
        out = []
        if self.missing:
            out.append("missing " + ", ".join(f"{i}/{self.count}" for i in self.missing))
        by_status: dict[str, list[int]] = {}
        for i, st in self.not_complete:
            by_status.setdefault(st, []).append(i)
        out += [", ".join(f"{i}/{self.count}" for i in idx) + f" {st}" for st, idx in by_status.items()]
        if len(self.shas) > 1:
            out.append(f"shards measured different commits ({self.short_sha})")
        return out

    def describe(self) -> str:
        """'complete (3 of 3 shards)' or 'incomplete: 2 of 3 shards (missing 3/3; 2/3 failed)'."""
        shards = f"{self.done} of {self.count} shard{'s' if self.count != 1 else ''}"
        if self.complete:
            return f"complete ({shards})"
        return f"incomplete: {shards} ({'; '.join(self.problems())})"


def _str(v) -> str | None:
    return v if isinstance(v, str) and v else None


def nights(df) -> list[Night]:
    """Every (machine, night) of a history DataFrame, oldest first per machine."""
    if df is None or df.empty:
        return []
    runs = df.drop_duplicates("run_id").sort_values(
        ["run_date", "run_id"], kind="stable", na_position="first"
    )
    out: dict[tuple[str, str], Night] = {}
    for r in runs.itertuples(index=False):
        key = (r.machine, r.night)
        i, n = split_shard(r.shard)
        if key not in out:
            label = _str(r.machine_label) or r.machine
            out[key] = Night(r.machine, label, r.night, _str(r.ref), _str(r.subject), when(r.run_date), n)
        night = out[key]
        night.runs += 1
        # the split changed: the newest run's N decides, older shards of another N drop out
        if n != night.count:
            night.count, night.shards, night.shas = n, {}, []
        night.shards[i] = _str(r.run_status) or "unknown"  # runs are in date order: the newest stays
        sha = _str(r.sha)
        if sha and sha not in night.shas:
            night.shas.append(sha)
    return sorted(out.values(), key=lambda nt: (nt.machine, nt.started or NEVER, nt.night))


def value(x):
    """A row's value, None where it is missing (None, NaN, NaT)."""
    import pandas as pd

    try:
        return None if x is None or (not isinstance(x, str) and pd.isna(x)) else x
    except (TypeError, ValueError):  # pd.isna of a list is an array, not one bool
        return x


def when(v) -> _dt.datetime | None:
    """A row's timestamp as a datetime (None for None, NaN, NaT)."""
    v = value(v)
    return v.to_pydatetime() if hasattr(v, "to_pydatetime") else v


def by_key(items: Iterable[Night]) -> dict[tuple[str, str], Night]:
    return {(n.machine, n.night): n for n in items}


def status_column(df, found: Iterable[Night] | None = None):
    """Each row's night, described (``Night.describe``): a column for CSV/JSON output."""
    index = by_key(found if found is not None else nights(df))
    return [index[key].describe() if key in index else None for key in zip(df["machine"], df["night"])]
