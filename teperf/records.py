"""Every record of a bundle (meta.json, records.jsonl) and every history row, as typed values that check
themselves: wrong types are refused, unknown keys kept in ``extra``, unknown kinds as :class:`UnknownRecord`;
schema 1 records are upgraded on the way in, a newer schema is refused."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any, ClassVar, Mapping, Optional, Union

from teperf import __version__
from teperf.config import RecordedConfig, accepts, read_config, type_hints
from teperf.errors import TeperfError
from teperf.schema import ONETIME_COSTS, ROW_FIELDS

SCHEMA_VERSION = 2
HISTORY_SCHEMA_VERSION = 1
META_FILE = "meta.json"
RECORDS_FILE = "records.jsonl"

SETUP_STATUSES = ("ready", "error", "skipped")
CONTENDED_WALL_OVER_CPU = 1.2  # a CPU trial whose wall time exceeds its CPU time this much shared its core


class RecordError(ValueError):
    """A record or meta.json whose fields do not have the types its kind defines."""


@dataclasses.dataclass(kw_only=True)
class Typed:
    """Base of every record: ``from_dict`` checks the types, ``to_dict`` writes the JSON object back."""

    kind: ClassVar[str] = ""
    extra: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]):
        """A decoded line -> the record (unknown keys in ``extra``); RecordError when a field is missing."""
        values: dict[str, Any] = {}
        extra = {k: v for k, v in raw.items() if k != "kind"}
        for f in dataclasses.fields(cls):
            if f.name == "extra":
                continue
            if f.name in extra:
                values[f.name] = extra.pop(f.name)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{cls.kind or cls.__name__} record without {f.name!r}")
        return cls(**values, extra=extra)

    def __post_init__(self) -> None:
        # Checked when made, so that the engine cannot write a record a reader would refuse.
        hints = type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and not accepts(value, hints[f.name]):
                raise RecordError(
                    f"{self.kind or type(self).__name__} record: {f.name}={value!r:.60} is not "
                    f"{hints[f.name]}"
                )
        self.check()

    def check(self) -> None:
        """Rules beyond the field types (subclasses)."""

    def to_dict(self) -> dict:
        out = {"kind": self.kind} if self.kind else {}
        out.update((f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "extra")
        out.update(self.extra)
        return out


CaseId = Union[int, str]


@dataclasses.dataclass(kw_only=True)
class WorkerRecord(Typed):
    """A worker started and said hello (its interpreter, torch, TE, GPU, start-up time)."""

    kind: ClassVar[str] = "worker"
    pair: int
    side: str
    hash_seed: Optional[int] = None
    hello: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(kw_only=True)
class SetupRecord(Typed):
    """A case set up in one side's worker: ready (with ``info``), error, or skipped."""

    kind: ClassVar[str] = "setup"
    pair: int
    side: str
    case_id: CaseId
    status: str
    info: Optional[dict] = None
    error: Optional[str] = None

    def check(self) -> None:
        if self.status not in SETUP_STATUSES:
            raise RecordError(f"setup record with status {self.status!r}")


@dataclasses.dataclass(kw_only=True)
class PairRecord(Typed):
    """A process pair started: its hash seed and how long it took to start and set up."""

    kind: ClassVar[str] = "pair"
    pair: int
    hash_seed: Optional[int] = None
    start_s: Optional[float] = None
    lane: int = 0  # --lanes: which lane measured it (bundles from before lanes: lane 0)
    core: Optional[int] = None  # the core it measured on


@dataclasses.dataclass(kw_only=True)
class TrialRecord(Typed):
    """One timed trial of ``iters`` steps; clocks in ns for all steps together (teperf.worker.clocks)."""

    kind: ClassVar[str] = "trial"
    pair: int
    round: int
    trial: int
    side: str
    case_id: CaseId
    iters: int
    process_cpu_ns: float
    wall_ns: float
    position: Optional[int] = None
    hash_seed: Optional[int] = None
    t: Optional[float] = None
    thread_cpu_ns: Optional[float] = None
    sync_ns: Optional[float] = None
    gpu_ns: Optional[float] = None
    compiles: Optional[int] = None
    lane: int = 0  # --lanes: which lane measured it (bundles from before lanes: lane 0)
    core: Optional[int] = None
    attempt: int = 0  # n: the couple's n-th re-measure, after an attempt that shared its core

    def check(self) -> None:
        if self.iters <= 0:
            raise RecordError(f"trial record with iters={self.iters}")
        if self.attempt < 0:
            raise RecordError(f"trial record with attempt={self.attempt}")

    def contended(self, device: Optional[str]) -> bool:
        """Whether another process had the core: wall well above CPU time (on a GPU, device waits are
        in the wall time too, so it cannot tell: False)."""
        return device == "cpu" and self.wall_ns > CONTENDED_WALL_OVER_CPU * self.process_cpu_ns

    def per_step_us(self, clock: str) -> Optional[float]:
        """``clock`` (a field name, e.g. 'process_cpu_ns') per step in us; None where not measured, or where
        the value is no time (negative, NaN, infinite: a damaged line, whose log would raise)."""
        value = getattr(self, clock, None) if clock in type_hints(type(self)) else self.extra.get(clock)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            return None
        return value / self.iters / 1000.0


@dataclasses.dataclass(kw_only=True)
class CountersRecord(Typed):
    """What one case does per step on one side (Python calls, aten ops, ...), counted outside the trials."""

    kind: ClassVar[str] = "counters"
    pair: int
    side: str
    case_id: CaseId
    counters: dict


@dataclasses.dataclass(kw_only=True)
class FailureRecord(Typed):
    """A worker died or hung, or a case raised. ``final`` False: the next pair measures the cell again;
    ``case_id`` None: a worker that did not start."""

    kind: ClassVar[str] = "failure"
    pair: Optional[int] = None
    side: str
    case_id: Optional[CaseId] = None
    error: Optional[str] = None
    final: bool = True
    lost_pairs: list = dataclasses.field(default_factory=list)
    log_tail: str = ""


@dataclasses.dataclass(kw_only=True)
class StopRecord(Typed):
    """The last record: how the run ended, and the cells a --precision target left open."""

    kind: ClassVar[str] = "stop"
    reason: str
    pairs: Optional[int] = None
    elapsed_s: Optional[float] = None
    precision_pct: Optional[float] = None
    budget_s: Optional[float] = None
    open: list = dataclasses.field(default_factory=list)
    open_half_pct: dict = dataclasses.field(default_factory=dict)  # an open cell's 95 % half-width at the end
    prestart: Optional[dict] = None  # pairs started ahead: depth, started, measured, lanes' waits
    schedule: Optional[dict] = None  # --schedule auto's last choice (engine.autoschedule.Choice.to_dict)


@dataclasses.dataclass(kw_only=True)
class CompileCacheRecord(Typed):
    """A run with compile cases: inductor's cache state (``--compile-cache``) and its directory."""

    kind: ClassVar[str] = "compile_cache"
    mode: str
    dir: Optional[str] = None


@dataclasses.dataclass(kw_only=True)
class PrewarmRecord(Typed):
    """``--compile-cache warm``: a compile case set up by a throwaway worker (``side`` None: not started)."""

    kind: ClassVar[str] = "prewarm"
    side: Optional[str] = None
    case_id: Optional[CaseId] = None
    status: Optional[str] = None  # the worker's reply: ready, or error
    info: Optional[dict] = None
    error: Optional[str] = None


@dataclasses.dataclass(kw_only=True)
class ServerRecord(Typed):
    """``--spawn forkserver``: a side's fork server started, died or failed to start."""

    kind: ClassVar[str] = "server"
    event: str
    side: str
    generation: int
    hash_seed: Optional[int] = None
    pid: Optional[int] = None
    start_s: Optional[float] = None
    import_s: Optional[float] = None
    error: Optional[str] = None


@dataclasses.dataclass(kw_only=True)
class ProbeRecord(Typed):
    """A bisect bundle's probe of one commit (counted or timed), with the commit's sha/subject/date."""

    kind: ClassVar[str] = "probe"
    index: int
    role: str = "probe"
    what: str = ""
    result: str
    seconds: Optional[float] = None
    sha: Optional[str] = None
    short_sha: Optional[str] = None
    subject: Optional[str] = None
    date: Optional[str] = None
    detail: Optional[str] = None
    tier: Optional[str] = None
    counters: Optional[dict] = None


@dataclasses.dataclass(kw_only=True)
class UnknownRecord(Typed):
    """A kind this teperf does not know (a newer teperf of the same schema added it): kept, not read."""

    raw: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.raw)


KINDS: dict[str, type] = {
    cls.kind: cls
    for cls in (WorkerRecord, SetupRecord, PairRecord, TrialRecord, CountersRecord, FailureRecord, StopRecord)
    + (CompileCacheRecord, PrewarmRecord, ServerRecord, ProbeRecord)
}
Record = Union[tuple(KINDS.values()) + (UnknownRecord,)]


def parse_record(raw: Mapping[str, Any], schema: int = SCHEMA_VERSION) -> Record:
    """One decoded line of records.jsonl, written under ``schema`` -> its typed record (or RecordError)."""
    if not isinstance(raw, Mapping):
        raise RecordError("a record is a JSON object")
    if schema < 2 and raw.get("kind") == "failure":  # schema 1 (teperf 0.1.0) failures lack these
        raw = {"final": True, "lost_pairs": [], "log_tail": "", **raw}
    cls = KINDS.get(raw.get("kind"))
    return UnknownRecord(raw=dict(raw)) if cls is None else cls.from_dict(raw)


@dataclasses.dataclass(kw_only=True)
class BundleMeta:
    """meta.json of a run, compare, nightly or bisect bundle (bisect's own keys stay in ``extra``)."""

    schema: int = SCHEMA_VERSION
    status: str = "running"
    teperf_version: Optional[str] = None
    kind: Optional[str] = None  # run | compare | bisect (an instance field here, not the record kind)
    command: Optional[list] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    config: RecordedConfig = dataclasses.field(default_factory=RecordedConfig)  # written back as recorded
    sides: dict = dataclasses.field(default_factory=dict)
    host: dict = dataclasses.field(default_factory=dict)
    cases: list = dataclasses.field(default_factory=list)
    warnings: Optional[list] = None
    coordinator: Optional[dict] = None
    error: Optional[str] = None
    workers: Optional[dict] = None
    status_detail: Optional[str] = None
    config_raw: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    extra: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "BundleMeta":
        """A meta.json object, upgraded; RecordError for wrong types, TeperfError for a newer schema."""
        if not isinstance(raw, Mapping):
            raise RecordError("meta.json holds no metadata object")
        check_version(raw)
        raw = {**raw, "schema": SCHEMA_VERSION}  # so far an upgrade changes only the version number
        hints = type_hints(cls)
        values, extra = {}, {}
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "config_raw"}
        for key, value in raw.items():
            if key in names:
                if value is None and key in ("config", "sides", "host", "cases"):
                    continue  # an empty part reads as the default
                hint = dict if key == "config" else hints[key]  # read as a RecordedConfig below
                if not accepts(value, hint):
                    want = str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")
                    raise RecordError(f"meta.json: {key} is {type(value).__name__}, not {want}")
                values[key] = value
            else:
                extra[key] = value
        if "config" in values:  # typed; the object itself is kept to be written back as it was
            values["config_raw"] = values["config"]
            values["config"] = read_config(values["config"])
        return cls(**values, extra=extra)

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out["config"] = out.pop("config_raw")
        if self.status_detail is None:
            out.pop("status_detail")
        out.update(self.extra)
        return out


@dataclasses.dataclass(kw_only=True)
class CaseMeta(Typed):
    """One case of meta.json's ``cases`` (teperf.plan.Case.to_meta)."""

    id: CaseId
    module: str
    recipe: str
    shape: list
    dtype: str
    mode: str
    skip: Optional[str] = None


def shape_text(shape) -> str:
    """[8, 2, 256] -> '8x2x256', as a shape reads in a cell's key (a summary row's is that text)."""
    return shape if isinstance(shape, str) else "x".join(map(str, shape))


def cell_key(module: str, recipe: str, shape, mode: str) -> str:
    """The one key of a cell: 'Linear/bf16/8x2x256/eager' (teperf.plan.Case.key)."""
    return f"{module}/{recipe}/{shape_text(shape)}/{mode}"


class _RowReads:
    """What a summary row answers besides its fields: its cell's key and, at the JSON/CSV edge, a dict."""

    @property
    def key(self) -> str:
        return cell_key(self.module, self.recipe, self.shape, self.mode)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# A summary row's figures that json/csv leave out: the smallest p its interval could reach (of each one-time
# cost too), where its load bound came from, each pair's log ratio (report --by-lane groups them) and the
# fork-server generations its interval rests on.
ROW_INTERNAL = (
    *("min_p", *(f"{cost}_min_p" for cost in ONETIME_COSTS)),
    *("load_bound_source", "pair_logs", "n_generations"),
)
# One row of the summary table (teperf.summary.aggregate), frozen: a misspelled field cannot read None.
Row = dataclasses.make_dataclass(
    "Row",
    [(name, Any, None) for name in ROW_FIELDS + ROW_INTERNAL],
    bases=(_RowReads,),
    frozen=True,
    kw_only=True,
)


def check_version(meta: Mapping[str, Any], where: str = "this bundle") -> int:
    """The schema ``meta`` was written under (default 1); a TeperfError when it is newer than this reads."""
    version = meta.get("schema", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RecordError(f"meta.json: schema {version!r} is not a version number")
    if version > SCHEMA_VERSION:
        writer = meta.get("teperf_version")
        if writer == __version__:  # this very release writes SCHEMA_VERSION: the file was changed since
            raise RecordError(f"meta.json: schema {version}, but teperf {writer} writes {SCHEMA_VERSION}")
        raise newer_schema(f"{where} has bundle schema {version}", writer, SCHEMA_VERSION, "it")
    return version


def newer_schema(what: str, writer, reads: int, read_what: str) -> TeperfError:
    """The error for a file a newer teperf (``writer``, its version where known) wrote."""
    known = isinstance(writer, str) and writer
    by, read = (f"teperf {writer}", f"teperf {writer} or newer") if known else ("a newer teperf",) * 2
    return TeperfError(
        f"{what}, written by {by}; this teperf {__version__} reads schema {reads} and older",
        f"read {read_what} with {read} (upgrade: git pull in teperf's clone, then pip install -U .)",
    )


def lost_pairs_text(pairs: list) -> str:
    """How a failure record's ``lost_pairs`` reads in the table: 'in 2 pairs: 0, 1'."""
    return f"in {len(pairs)} pair{'s' if len(pairs) != 1 else ''}: {', '.join(map(str, pairs))}"


# The nightly history's columns: the run's (the same on every row of a file), then the cell's. ref and
# subject are untrusted text; run_date: when the measurement started; base_*: what the nightly commit was
# paired against (the previous one); machine: the fingerprint id (hash of cpu_model, gpu, driver); shard:
# "I/N"; night: which night the shard belongs to (store.default_night; older files: null); host_us and
# host_spread_pct: the measured side's (head, or the only side); counters: JSON text; first_call_* and
# recompile_ms: one-time costs (teperf.schema ONETIME_COSTS), ms, the measured side's and a compare's paired
# change; verdict_cause: "load" where its couples shared their core (older files: null).
RUN_COLUMNS = tuple(
    """run_id run_kind run_date run_status ref sha subject committed_at base_sha base_subject
    base_committed_at machine machine_label cpu_model gpu driver hostname shard night teperf_version
    torch_version bundle""".split()
)
HISTORY_COLUMNS = RUN_COLUMNS + tuple(
    """module recipe shape dtype mode status error host_us host_spread_pct base_us head_us delta_us delta_pct
    ci_low_us ci_high_us ci_low_pct ci_high_pct verdict ci_basis n_pairs n_trials base_spread_pct
    head_spread_pct pair_sd_pct mde_pct host_bound counters first_call_ms first_call_delta_pct
    first_call_verdict recompile_ms verdict_cause""".split()
)


def _column_type(name: str) -> type:
    """A history column's type, as its name says: figures (_us, _pct, _ms) float, counts (n_) int."""
    if name.endswith(("_us", "_pct", "_ms")):
        return float
    if name.startswith("n_"):
        return int
    if name == "run_date" or name.endswith("_at"):
        return _dt.datetime
    return bool if name == "host_bound" else str


# Column -> the Python type of its values (None is allowed in every column but run_id).
HISTORY_COLUMN_TYPES = {name: _column_type(name) for name in HISTORY_COLUMNS}


class _HistoryChecks(_RowReads):
    def __post_init__(self) -> None:
        if not isinstance(self.run_id, str) or not self.run_id:
            raise RecordError(f"history row with run_id {self.run_id!r}")
        for name, want in HISTORY_COLUMN_TYPES.items():
            value = getattr(self, name)
            if value is not None and not accepts(value, Optional[want]):
                raise RecordError(f"history row: {name}={value!r:.60} is not {want.__name__}")


# One cell of one run in the nightly history, its types checked when made.
HistoryRow = dataclasses.make_dataclass(
    "HistoryRow",
    [("run_id", str)] + [(name, Optional[HISTORY_COLUMN_TYPES[name]], None) for name in HISTORY_COLUMNS[1:]],
    bases=(_HistoryChecks,),
    kw_only=True,
)
CELL_KEY = ("module", "recipe", "shape", "dtype", "mode")


# of the store's ``_explanations/*.json``: bump it when a field changes meaning, and read the older one
EXPLANATION_SCHEMA_VERSION = 1
# explained: commits named carry the change; noise: GOOD..BAD is no change when measured again;
# unexplained: it moved but no commit was confirmed; failed: the bisect could not run (tried again next time)
EXPLANATION_STATUSES = ("explained", "noise", "unexplained", "failed")
CULPRIT_FIELDS = tuple("sha short_sha subject delta_us share share_ci verdict counters url".split())


@dataclasses.dataclass(kw_only=True)
class ExplanationRecord(Typed):
    """A change point of the history bisected: its culprits (dicts of CULPRIT_FIELDS) and the answer."""

    kind: ClassVar[str] = "explanation"
    schema: int = EXPLANATION_SCHEMA_VERSION
    key: str  # teperf.history.explain.ChangePoint.key: machine, cell, GOOD and BAD
    machine: str
    module: str
    recipe: str
    shape: str = ""
    dtype: str = ""
    mode: str = ""
    good_sha: str
    bad_sha: str
    status: str
    answer: str
    culprits: list = dataclasses.field(default_factory=list)
    rest_us: Optional[float] = None  # GOOD..BAD's measured delta that the culprits leave
    delta_us: Optional[float] = None  # GOOD..BAD's measured delta
    bundle: Optional[str] = None  # the bisect's bundle
    explained_at: Optional[str] = None
    teperf_version: Optional[str] = None

    def check(self) -> None:
        if self.status not in EXPLANATION_STATUSES:
            raise RecordError(
                f"explanation record: status {self.status!r} is not one of {EXPLANATION_STATUSES}"
            )
        for c in self.culprits:
            if not isinstance(c, dict) or not isinstance(c.get("sha"), str):
                raise RecordError(f"explanation record: culprit {c!r:.60} has no sha")
            unknown = set(c) - set(CULPRIT_FIELDS)
            if unknown:
                raise RecordError(f"explanation record: culprit with unknown fields {sorted(unknown)}")

    @classmethod
    def from_stored(cls, raw: Mapping[str, Any], where: str) -> "ExplanationRecord":
        """A stored record -> its type; a newer schema is refused with what to do."""
        version = raw.get("schema", 1) if isinstance(raw, Mapping) else None
        if not isinstance(version, int):
            raise RecordError(f"{where}: not an explanation record")
        if version > EXPLANATION_SCHEMA_VERSION:
            what = f"{where} has explanation schema {version}"
            raise newer_schema(what, raw.get("teperf_version"), EXPLANATION_SCHEMA_VERSION, "the history")
        return cls.from_dict(raw)
