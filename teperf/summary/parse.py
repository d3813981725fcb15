"""A bundle on disk -> its typed records by cell; a record or case that does not read is counted."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Optional

from teperf.bundle import Bundle, coordinator_gone
from teperf.config import RecordedConfig
from teperf.errors import TeperfError
from teperf.records import (
    RECORDS_FILE,
    BundleMeta,
    CaseId,
    CaseMeta,
    CompileCacheRecord,
    CountersRecord,
    FailureRecord,
    PairRecord,
    PrewarmRecord,
    RecordError,
    SetupRecord,
    StopRecord,
    TrialRecord,
    WorkerRecord,
)
from teperf.stats import generations


@dataclasses.dataclass
class CellRecords:
    """What the bundle holds about one case, in the order it was written."""

    trials: list[TrialRecord] = dataclasses.field(default_factory=list)
    setups: dict[str, SetupRecord] = dataclasses.field(default_factory=dict)  # side -> its last set-up
    ready: list[SetupRecord] = dataclasses.field(default_factory=list)  # every ready set-up (one-time costs)
    counters: dict[str, dict] = dataclasses.field(default_factory=dict)  # side -> the first counters
    failures: list[FailureRecord] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ParsedBundle:
    path: Path
    meta: BundleMeta  # meta.json, upgraded; status 'interrupted' when its coordinator is gone
    cases: list[CaseMeta]
    cells: dict[CaseId, CellRecords]
    bad_cases: int = 0  # cases of meta.json without their keys
    skipped_lines: int = 0  # lines of records.jsonl that did not read as a record
    pair_starts: list[float] = dataclasses.field(default_factory=list)  # s to start and set up each pair
    pair_seeds: dict[int, int] = dataclasses.field(default_factory=dict)  # pair -> hash seed (its server's)
    stop: Optional[StopRecord] = None
    compile_cache: Optional[CompileCacheRecord] = None
    prewarms: list[PrewarmRecord] = dataclasses.field(default_factory=list)
    total_trials: int = 0
    preempted_trials: int = 0  # CPU trials that waited for their core (wall time well above CPU time)
    compiled_in_trial: int = 0  # trials that compiled inside the timed loop
    workers: list[WorkerRecord] = dataclasses.field(default_factory=list)  # each worker's hello
    failed_workers: set = dataclasses.field(default_factory=set)  # (pair, side) of a set-up error or death

    @property
    def labels(self) -> list[str]:
        return list(self.meta.sides)

    @property
    def base_label(self) -> str:
        return self.labels[0] if self.labels else "base"

    @property
    def head_label(self) -> Optional[str]:
        return self.labels[1] if len(self.labels) > 1 else None

    @property
    def config(self) -> RecordedConfig:
        return self.meta.config

    @property
    def pair_generations(self) -> Optional[dict[int, int]]:
        """pair -> its fork-server generation (the intervals' unit); None unless the run forked workers."""
        return generations(self.config.known("schedule.spawn"), self.pair_seeds)

    @property
    def device(self) -> Optional[str]:
        return self.config.known("device")

    def cell(self, case_id: CaseId) -> CellRecords:
        return self.cells.get(case_id) or CellRecords()


def parse(path, lane: Optional[int] = None) -> ParsedBundle:
    """Read the bundle at ``path`` (a TeperfError when it cannot be); ``lane``: only that lane's trials."""
    bundle = Bundle.open(path)
    meta = bundle.meta()
    if coordinator_gone(meta):
        # Its coordinator died without a word (SIGKILL, a crash): it will never finish.
        meta = dataclasses.replace(meta, status="interrupted", status_detail="coordinator gone")
    cases, bad_cases = [], 0
    for raw in meta.cases:
        try:
            cases.append(CaseMeta.from_dict(raw if isinstance(raw, dict) else {}))  # {}: lacks its keys
        except RecordError:
            bad_cases += 1
    parsed = ParsedBundle(
        path=bundle.path, meta=meta, cases=cases, cells=defaultdict(CellRecords), bad_cases=bad_cases
    )
    read = 0
    for rec in bundle.records():
        read += 1
        if lane is not None and isinstance(rec, TrialRecord) and rec.lane != lane:
            continue  # bundles from before lanes measured on one lane: lane 0
        _add(parsed, rec)
    parsed.skipped_lines = bundle.skipped_lines
    if not read and meta.status == "complete":  # else every cell reads "not measured", silently
        raise TeperfError(
            f"{bundle.path / RECORDS_FILE} holds no records, but meta.json says the run completed",
            "the bundle lost its measurements; re-run the measurement",
        )
    parsed.cells = dict(parsed.cells)
    return parsed


def _add(parsed: ParsedBundle, rec) -> None:
    if isinstance(rec, TrialRecord):
        parsed.cells[rec.case_id].trials.append(rec)
        parsed.total_trials += 1
        parsed.compiled_in_trial += bool(rec.compiles)
        parsed.preempted_trials += rec.contended(parsed.device)
    elif isinstance(rec, SetupRecord):
        cell = parsed.cells[rec.case_id]
        cell.setups[rec.side] = rec
        if rec.status == "error":
            parsed.failed_workers.add((rec.pair, rec.side))
        if rec.status == "ready" and isinstance(rec.info, dict):
            cell.ready.append(rec)
    elif isinstance(rec, CountersRecord):
        parsed.cells[rec.case_id].counters.setdefault(rec.side, rec.counters)
    elif isinstance(rec, FailureRecord):
        parsed.failed_workers.add((rec.pair, rec.side))
        if rec.case_id is not None:
            parsed.cells[rec.case_id].failures.append(rec)
    elif isinstance(rec, PairRecord):
        if rec.start_s is not None:
            parsed.pair_starts.append(rec.start_s)
        if rec.hash_seed is not None:
            parsed.pair_seeds[rec.pair] = rec.hash_seed
    elif isinstance(rec, StopRecord):
        parsed.stop = rec
    elif isinstance(rec, CompileCacheRecord):
        parsed.compile_cache = rec
    elif isinstance(rec, PrewarmRecord):
        parsed.prewarms.append(rec)
    elif isinstance(rec, WorkerRecord):
        parsed.workers.append(rec)
