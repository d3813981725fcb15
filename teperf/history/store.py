"""The nightly history: append-only Parquet files ``<root>/<run_id>.parquet`` (a local directory or an
fsspec URL), one row per cell. Every writer adds its own file, atomically: a temporary dot-file renamed, or
on object stores one PUT. DuckDB reads it too: ``read_parquet('DIR/*.parquet', union_by_name=true)``."""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import json
import math
import os
import posixpath
import re
import secrets
import warnings
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from teperf.errors import TeperfError
from teperf.records import (
    HISTORY_COLUMN_TYPES,
    HISTORY_SCHEMA_VERSION,
    RUN_COLUMNS,
    BundleMeta,
    ExplanationRecord,
    HistoryRow,
    RecordError,
    Row,
    newer_schema,
    shape_text,
)

DEFAULT_HISTORY = os.path.join("results", "history")
HISTORY_ENV = "TEPERF_HISTORY"
SUFFIX = ".parquet"
EXPLANATIONS = "_explanations"  # the sidecar of explained change points (add_explanation)
# fsspec protocols where one upload is atomic (the object is visible complete or not at all)
OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory"}

_TS = pa.timestamp("us", tz="UTC")
_ARROW_TYPES = {str: pa.string(), float: pa.float64(), int: pa.int64(), bool: pa.bool_(), _dt.datetime: _TS}
SCHEMA_KEY = b"teperf.history.schema"
SCHEMA = pa.schema(  # HistoryRow's columns: the run-level ones (the same on every row of a file), the cell's
    [pa.field(name, _ARROW_TYPES[t], nullable=name != "run_id") for name, t in HISTORY_COLUMN_TYPES.items()],
    metadata={SCHEMA_KEY: str(HISTORY_SCHEMA_VERSION).encode()},
)
COLUMNS = SCHEMA.names


def machine_fingerprint(cpu_model: str | None, gpu: str | None, driver: str | None) -> tuple[str, str]:
    """(id, label) of the machine kind: CPU model + GPU + driver.  Runs of different ids never mix."""
    parts = [(cpu_model or "unknown CPU").strip(), (gpu or "no GPU").strip(), (driver or "no driver").strip()]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    label = parts[0] + " / " + parts[1] + ("" if driver is None else f" / driver {parts[2]}")
    return digest, label


def machine_from_meta(meta: BundleMeta) -> dict:
    host, workers = meta.host, meta.workers or {}
    hello = next(iter(workers.values()), {})
    gpu = host.get("gpu") or hello.get("gpu")
    driver = host.get("driver") or hello.get("driver")
    fid, label = machine_fingerprint(host.get("cpu_model"), gpu, driver)
    return {
        "machine": fid,
        "machine_label": label,
        "cpu_model": host.get("cpu_model"),
        "gpu": gpu,
        "driver": driver,
        "hostname": host.get("hostname"),
        "torch_version": hello.get("torch"),
    }


def _ts(value) -> _dt.datetime | None:
    if not isinstance(value, _dt.datetime):
        try:
            value = _dt.datetime.fromisoformat(str(value))  # 3.11 reads a "Z" too
        except ValueError:
            return None
    return (value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)).astimezone(_dt.timezone.utc)


def _num(value):
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def measured_sides(meta: BundleMeta) -> tuple[dict, dict | None]:
    """(measured side, base side or None): for a compare the head is measured; a run has one side."""
    sides = meta.sides
    if "head" in sides:
        return dict(sides["head"]), dict(sides.get("base") or {}) or None
    found = [dict(side) for side in sides.values()]  # in order: base, head
    return (found[1], found[0]) if len(found) >= 2 else ((found or [{}])[0], None)


def default_night(sha: str | None, run_id: str | None = None) -> str:
    """The night a run belongs to when none was named: its measured commit, not a date, so that a shard
    re-run hours or a day later joins its night. A run without a commit is a night of its own."""
    return sha[:12] if isinstance(sha, str) and sha else f"run:{run_id}"


def split_shard(text) -> tuple[int, int]:
    """'I/N' -> (I, N); anything else (an old or hand-made row) reads as 1/1."""
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except (TypeError, ValueError):
        return 1, 1
    return (i, n) if 1 <= i <= n else (1, 1)


NO_SHA = "nosha"  # a run id's commit part when the bundle names none


# a summary row's values that a history row carries as they are, and its figures (floats, NaN: None)
_AS_IS = (
    "module recipe dtype mode status verdict verdict_cause ci_basis host_bound first_call_verdict".split()
)
_NUMBERS = (
    "base_us head_us delta_us delta_pct ci_low_us ci_high_us ci_low_pct ci_high_pct base_spread_pct"
    " head_spread_pct pair_sd_pct mde_pct first_call_delta_pct"
).split()


def _cell_columns(r: Row, is_compare: bool) -> dict:
    """A summary row's cell columns: the measured side's figures (head's in a compare)."""
    side = "head" if is_compare else "base"
    row = {key: getattr(r, key) for key in _AS_IS}
    row.update({key: _num(getattr(r, key)) for key in _NUMBERS})
    row.update(
        n_pairs=None if r.n_pairs is None else int(r.n_pairs),
        n_trials=None if r.n_trials is None else int(r.n_trials),
        shape=None if r.shape is None else shape_text(r.shape),
        error=None if r.error is None else str(r.error),
        host_us=_num(getattr(r, f"{side}_us")),
        host_spread_pct=_num(getattr(r, f"{side}_spread_pct")),
        counters=None if r.counters is None else json.dumps(r.counters, sort_keys=True, default=str),
        first_call_ms=_num(getattr(r, f"first_call_{side}_ms")),
        recompile_ms=_num(getattr(r, f"recompile_{side}_ms")),
    )
    return row


def rows_from_summary(
    summary,
    *,
    run_kind: str = "import",
    ref: str | None = None,
    shard: str = "1/1",
    night: str | None = None,
    bundle: str | None = None,
    run_id: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[HistoryRow]:
    """A bundle summary (``teperf.api.summarize``) -> history rows, one per cell. ``night`` defaults to
    ``default_night`` of its commit; ``overrides`` replaces run-level values (e.g. the sha of a bundle
    whose side has no git description)."""
    meta = summary.meta
    head, base = measured_sides(meta)
    mach = machine_from_meta(meta)
    overrides = dict(overrides or {})
    sha = overrides.get("sha", head.get("sha"))
    if run_id is None:
        # deterministic per bundle, so importing the same bundle twice is a no-op: its directory's name
        # (not how the path was typed) and not the sha (a second import may add --sha)
        name = posixpath.basename(str(bundle or "").rstrip("/"))
        ident = f"{name}|{meta.started_at}|{shard}|{night or ''}"
        token = hashlib.sha256(ident.encode()).hexdigest()[:8]
        started = _ts(meta.started_at) or _dt.datetime.now(_dt.timezone.utc)
        short = (sha or NO_SHA)[:10]
        run_id = f"{started:%Y%m%dT%H%M%SZ}_{mach['machine']}_{short}_s{shard.replace('/', 'of')}_{token}"
    run = {
        "run_id": run_id,
        "run_kind": run_kind,
        "run_date": _ts(meta.started_at),
        "run_status": meta.status,
        "ref": ref if ref is not None else head.get("ref"),
        "sha": sha,
        "subject": head.get("subject"),
        "committed_at": _ts(head.get("commit_date") or head.get("committed_at")),
        "base_sha": base.get("sha") if base else None,
        "base_subject": base.get("subject") if base else None,
        "base_committed_at": _ts((base or {}).get("commit_date") or (base or {}).get("committed_at")),
        "shard": shard,
        "night": night,
        "teperf_version": meta.teperf_version,
        "bundle": bundle,
        **mach,
    }
    for key, value in overrides.items():
        if key not in RUN_COLUMNS:
            raise KeyError(f"unknown run-level column {key!r}")
        run[key] = _ts(value) if key in ("run_date", "committed_at", "base_committed_at") else value
    if run["night"] is None:
        run["night"] = default_night(run["sha"], run_id)
    return [HistoryRow(**run, **_cell_columns(r, is_compare=base is not None)) for r in summary.rows]


def to_table(rows: Sequence[HistoryRow | Mapping[str, Any]]) -> pa.Table:
    """Rows as a table; a mapping is checked (unknown columns, wrong types: a ValueError)."""
    typed = []
    for row in rows:
        unknown = set() if isinstance(row, HistoryRow) else set(row) - set(COLUMNS)
        if unknown:
            raise RecordError(f"history row with unknown columns {sorted(unknown)}")
        typed.append(row if isinstance(row, HistoryRow) else HistoryRow(**row))
    cols = {name: [getattr(row, name) for row in typed] for name in COLUMNS}
    return pa.Table.from_pydict(cols, schema=SCHEMA)


class HistoryStore:
    """A history store at a local path or fsspec URL."""

    def __init__(self, url: str | os.PathLike | None = None):
        import fsspec

        self.url = url = os.fspath(url) if url is not None else os.environ.get(HISTORY_ENV) or DEFAULT_HISTORY
        self.unreadable: list[str] = []  # "path (why)" of each file the last read() skipped
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as exc:
            fix = "give a local directory or an fsspec URL whose filesystem package is installed"
            raise TeperfError(f"cannot open history store {url!r}: {exc}", fix)
        proto = self.fs.protocol
        protocols = set(proto) if isinstance(proto, (tuple, list)) else {proto}
        self.local = "file" in protocols
        self.object_store = bool(OBJECT_STORES & protocols)
        if self.local and os.path.exists(self.root) and not os.path.isdir(self.root):
            fix = "give the history's directory (--history, or $TEPERF_HISTORY)"
            raise TeperfError(f"{url} is a file, not a history store (a directory of run files)", fix)
        if self.local and os.path.islink(self.root) and not os.path.exists(self.root):  # else "File exists"
            target = os.readlink(self.root)
            raise TeperfError(
                f"{url} is a symbolic link to {target}, which does not exist",
                f"create {target} (mkdir -p), or point --history at an existing directory",
            )

    def _path(self, name: str) -> str:
        return posixpath.join(self.root, name) if not self.local else os.path.join(self.root, name)

    def _ls(self, folder: str) -> list[str]:
        """The paths in ``folder`` (none when it does not exist)."""
        try:
            return [str(name) for name in self.fs.ls(folder, detail=False)] if self.fs.exists(folder) else []
        except FileNotFoundError:
            return []

    def files(self) -> list[str]:
        """Complete run files, sorted by name (= run date first)."""
        bases = {name: posixpath.basename(name.rstrip("/")) for name in self._ls(self.root)}
        out = [
            name for name, base in bases.items() if base.endswith(SUFFIX) and not base.startswith((".", "_"))
        ]
        return sorted(out, key=posixpath.basename)

    def append(self, rows: Sequence[Mapping[str, Any]] | pa.Table) -> str:
        """Write one run (all rows must share one run_id) as a new file, atomically; return its path."""
        table = rows if isinstance(rows, pa.Table) else to_table(rows)
        if table.num_rows == 0:
            fix = "check the bundle (teperf report BUNDLE)"
            raise TeperfError("nothing to add to the history: the run has no cells", fix)
        ids = set(table.column("run_id").to_pylist())
        if len(ids) != 1 or None in ids:
            raise ValueError(f"one run per file: got run ids {sorted(map(str, ids))}")
        run_id = ids.pop()
        if "/" in run_id or run_id.startswith((".", "_")):
            raise ValueError(f"bad run id {run_id!r}")
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        return self._put(run_id + SUFFIX, buf.getvalue())

    def _put(self, name: str, data: bytes) -> str:
        """Write ``data`` as ``name`` under the root, atomically (see the module's docstring)."""
        final = self._path(name)
        folder, base = posixpath.split(name)
        tmp = self._path(posixpath.join(folder, f".{base}.{secrets.token_hex(3)}.tmp"))
        try:
            self.fs.makedirs(self._path(folder) if folder else self.root, exist_ok=True)
        except OSError as exc:
            raise TeperfError(f"cannot create history store {self.url}: {exc}", "pass a writable --history")
        if self.local:
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, final)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        elif self.object_store:
            # one PUT: the object appears whole or not at all (a copy + delete would only add a window
            # in which a killed writer leaves its temp object behind)
            self.fs.pipe_file(final, data)
        else:
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, final)
        return final

    # A sidecar of the run files: one JSON record per change point (teperf.records.ExplanationRecord),
    # under a folder that files() never lists; a change point explained again replaces its record.

    def add_explanation(self, record) -> str:
        name = posixpath.join(EXPLANATIONS, record.key + ".json")
        return self._put(name, json.dumps(record.to_dict(), sort_keys=True, indent=1).encode())

    def explanations(self) -> dict:
        """Change point key -> its ExplanationRecord; an unreadable record is skipped with a warning."""
        out = {}
        for name in sorted(self._ls(self._path(EXPLANATIONS))):
            if not name.endswith(".json") or posixpath.basename(name).startswith("."):
                continue
            try:
                rec = ExplanationRecord.from_stored(json.loads(self.fs.cat_file(name)), name)
            except (OSError, ValueError) as exc:  # RecordError is a ValueError
                warnings.warn(f"history: skipping unreadable {name}: {exc}", stacklevel=2)
                continue
            out[rec.key] = rec
        return out

    def read(self):
        """All rows (a pandas DataFrame in the store's schema). A file that cannot be read is skipped and
        named in ``unreadable`` rather than taking the whole history down."""
        tables = []
        self.unreadable = []
        for path in self.files():
            try:
                with warnings.catch_warnings():  # pyarrow/pandas warnings become the line above
                    warnings.simplefilter("ignore")
                    t = pq.read_table(path, filesystem=self.fs)
            except Exception as exc:  # noqa: BLE001 - keep going, say which file
                why = re.sub(r"^Could not open Parquet input source '.*?': ", "", str(exc))  # names it again
                self.unreadable.append(f"{path} ({why[:300]})")
                continue
            check_version(t, path)
            tables.append(_conform(t))
        table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
        df = table.to_pandas()
        if not df.empty:  # files written before nights were recorded: the night is the commit's
            missing = df["night"].isna()
            df.loc[missing, "night"] = [
                default_night(sha, rid) for sha, rid in zip(df.loc[missing, "sha"], df.loc[missing, "run_id"])
            ]
        return df.reset_index(drop=True)

    def add_summary(self, summary, **kwargs) -> tuple[str, bool]:
        """Rows from a bundle summary -> a new run file: (path, added). The same bundle imported twice is
        not added again, except that one present without a commit is replaced by one naming it (--sha)."""
        rows = rows_from_summary(summary, **kwargs)
        token = f"_{rows[0].run_id.rsplit('_', 1)[-1]}{SUFFIX}" if rows else None
        present = [f for f in self.files() if f.endswith(token)] if rows else []
        if present and rows[0].sha and f"_{NO_SHA}_" in posixpath.basename(present[0]):
            path = self.append(rows)  # imported before without a commit: this import names it
            self.fs.rm(present[0])
            return path, True
        if present:  # the same bundle, imported before
            return present[0], False
        return self.append(rows), True


def check_version(table: pa.Table, path: str) -> None:
    """A TeperfError when a newer teperf wrote the file (one that does not say is schema 1), naming it."""
    raw = (table.schema.metadata or {}).get(SCHEMA_KEY, b"1")
    version = int(raw) if raw.isdigit() else 1
    if version > HISTORY_SCHEMA_VERSION:
        writers = table.column("teperf_version").to_pylist() if "teperf_version" in table.column_names else []
        writer = next((v for v in writers if v), None)
        raise newer_schema(
            f"{path} has history schema {version}", writer, HISTORY_SCHEMA_VERSION, "the history"
        )


def _conform(table: pa.Table) -> pa.Table:
    """Any older/newer file -> today's schema: missing columns null, unknown ones dropped."""
    names = table.column_names
    cols = [
        table.column(f.name).cast(f.type, safe=False) if f.name in names else pa.nulls(table.num_rows, f.type)
        for f in SCHEMA
    ]
    return pa.Table.from_arrays(cols, schema=SCHEMA)


def ordered(df):
    """Rows in series order: commit date, then run date (re-measurements of one commit stay together)."""
    if df.empty:
        return df
    key = df["committed_at"].fillna(df["run_date"])
    return (
        df.assign(_order=key)
        .sort_values(["_order", "run_date", "run_id"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def latest_run(df, *, machine: str, ref: str | None = None, exclude_sha: str | None = None) -> dict | None:
    """The newest run (by run date) of ``machine`` (and ``ref``), as a dict of its run-level columns."""
    sel = df[(df["machine"] == machine) & df["sha"].notna()]
    if ref is not None:
        sel = sel[sel["ref"] == ref]
    if exclude_sha is not None:
        sel = sel[sel["sha"] != exclude_sha]
    if sel.empty:
        return None
    top = sel.sort_values(["run_date", "run_id"]).iloc[-1]
    return {name: top[name] for name in RUN_COLUMNS}
