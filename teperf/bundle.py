"""Result bundles on disk: created at the start of a run, appended as it goes."""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import secrets
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator

from teperf import __version__
from teperf.errors import DiskFull, Interrupted, TeperfError
from teperf.records import (
    META_FILE,
    RECORDS_FILE,
    SCHEMA_VERSION,
    BundleMeta,
    Record,
    RecordError,
    Typed,
    check_version,
    parse_record,
)

DEFAULT_RESULTS = Path("results")
DAMAGED = "the bundle is damaged; re-run the measurement"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def _process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), which tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def coordinator_facts() -> dict:
    """Who writes this bundle, so that a reader can tell a live run from a killed one."""
    return {"pid": os.getpid(), "hostname": socket.gethostname(), "start_ticks": _process_start(os.getpid())}


def coordinator_gone(meta: BundleMeta) -> bool:
    """True when meta says ``running`` but its coordinator no longer exists on this host (unknown: no)."""
    facts = meta.coordinator if meta.status == "running" else None
    if not isinstance(facts, dict) or facts.get("hostname") != socket.gethostname():
        return False
    pid = facts.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # someone else's process under that pid
        pass
    started = _process_start(pid)
    return facts.get("start_ticks") is not None and started is not None and started != facts["start_ticks"]


def _damaged(path: Path, what: str) -> TeperfError:
    return TeperfError(f"{path} is damaged: {what}", "re-run the measurement, or fix meta.json by hand")


def _unreadable(path: Path, exc: OSError) -> TeperfError:
    """A bundle file that cannot be opened, with the fix for why: a permission is not damage."""
    if isinstance(exc, PermissionError):
        return TeperfError(
            f"cannot read {path}: permission denied", "make it readable (chmod u+r) or run as its owner"
        )
    if isinstance(exc, FileNotFoundError):
        return TeperfError(f"{path} is missing", "the bundle lost its measurements; re-run the measurement")
    if isinstance(exc, IsADirectoryError):
        return TeperfError(f"{path} is a directory, not a file", DAMAGED)
    return TeperfError(f"cannot read {path}: {exc.strerror or exc}", DAMAGED)


class Bundle:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._records = None
        self._append_lock = threading.Lock()  # parallel lanes append from their own threads
        self.skipped_lines = 0  # lines of records.jsonl the last records() pass could not read
        self.schema = SCHEMA_VERSION  # the version it was written under (records() upgrades older ones)
        # what Bundle.session writes at the end: the status, its error, and keys known only then
        self.status, self.error = "complete", None
        self.at_end: Callable[[], dict] | None = None

    @classmethod
    def create(cls, results_dir: str | os.PathLike | None, kind: str, meta: dict) -> "Bundle":
        root = Path(results_dir) if results_dir else DEFAULT_RESULTS
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # mkdir says "File exists" for a file where the directory (or a parent of it) should be
            in_way = isinstance(exc, FileExistsError)
            why = "a file is in the way" if in_way else exc.strerror
            fix = "pass a writable --results-dir that is a directory" + (
                ", or move the file away" if in_way else ""
            )
            raise TeperfError(f"cannot create results directory {root}: {why}", fix)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = root / f"{stamp}-{kind}-{secrets.token_hex(2)}"
        path.mkdir()
        (path / "workers").mkdir()
        bundle = cls(path)
        bundle.write_meta({"schema": SCHEMA_VERSION, "status": "running", **meta})
        bundle._records = open(path / RECORDS_FILE, "a", buffering=1)
        return bundle

    @classmethod
    @contextlib.contextmanager
    def session(cls, results_dir, kind: str, meta: dict, command: list | None = None) -> Iterator["Bundle"]:
        """A run's bundle, from its first key to its end status: the keys every bundle has, then
        complete / interrupted / failed written whatever ends the body. The body may set ``status`` (a run
        whose every cell failed) and ``at_end`` (called after the records are closed: more keys to write)."""
        command = sys.argv if command is None else command
        head = {"teperf_version": __version__, "kind": kind, "command": command, "started_at": now_iso()}
        bundle = cls.create(results_dir, kind, {**head, "finished_at": None, **meta})
        try:
            yield bundle
        except (KeyboardInterrupt, Interrupted) as stop:
            bundle.status = "interrupted"
            raise Interrupted(bundle.path, getattr(stop, "signum", signal.SIGINT)) from None
        except TeperfError as exc:
            bundle.status, bundle.error = "failed", exc.one_line()
            raise
        except OSError as exc:
            bundle.status, bundle.error = "failed", f"{type(exc).__name__}: {exc}"
            # what was measured is in the bundle: said as such, not "cannot use"
            if exc.errno == errno.ENOSPC:
                raise DiskFull(bundle.path, exc) from None
            raise
        except Exception as exc:  # keep the bundle consistent, then let the CLI report it
            bundle.status, bundle.error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            try:
                bundle.close()
                end = bundle.at_end() if bundle.at_end else {}
                bundle.update_meta(status=bundle.status, error=bundle.error, finished_at=now_iso(), **end)
            except OSError as exc:  # a full disk leaves meta.json as it was ("running"); the records stay
                if exc.errno != errno.ENOSPC:
                    raise
                raise DiskFull(bundle.path, exc) from None

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Bundle":
        p = Path(path)
        if p.is_file() and p.name.endswith((".tar.xz", ".tar.gz", ".tgz", ".tar")):  # evidence's form
            raise TeperfError(
                f"{p} is an archive, not a bundle", f"unpack it first (tar -xf {p}), then pass its directory"
            )
        meta_file = p / META_FILE
        if not meta_file.is_file() and (meta_file.is_symlink() or meta_file.is_dir()):  # no file to read
            raise TeperfError(f"{meta_file} is a broken link or a directory, not a file", DAMAGED)
        if not meta_file.is_file():
            fix = "pass a directory under results/ written by teperf run/compare"
            try:
                inside = sorted(c for c in (p.iterdir() if p.is_dir() else ()) if (c / META_FILE).is_file())
            except OSError:  # not ours to list
                inside = []
            if p.name in (META_FILE, RECORDS_FILE) and p.is_file():  # a file of a bundle
                fix = f"pass the bundle's directory: {p.parent}"
            elif inside:  # results/ itself
                fix = f"pass one of the {len(inside)} bundles in it, e.g. the last: {inside[-1]}"
            raise TeperfError(f"{p} is not a teperf bundle (no {META_FILE})", fix)
        bundle = cls(p)
        try:
            meta = bundle.read_meta()
        except TeperfError:
            return bundle  # damaged: the reader says so when it needs the metadata
        try:
            bundle.schema = check_version(meta, where=str(p))  # a newer teperf's bundle stops here
        except RecordError as exc:
            raise _damaged(p, str(exc)) from None
        return bundle

    def write_meta(self, meta: dict) -> None:
        path = self.path / META_FILE
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # replaced whole: a reader never sees half
        tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
        os.replace(tmp, path)

    def read_meta(self) -> dict:
        path = self.path / META_FILE
        try:
            meta = json.loads(path.read_bytes().decode("utf-8-sig"))  # a BOM: an editor's, not damage
        except OSError as exc:
            raise _unreadable(path, exc) from None
        except ValueError as exc:  # UnicodeDecodeError is a ValueError
            raise TeperfError(f"cannot read {path}: {str(exc)[:200]}", DAMAGED)
        if not isinstance(meta, dict):
            raise TeperfError(f"{path} holds no metadata object", DAMAGED)
        return meta

    def meta(self) -> BundleMeta:
        """meta.json as a typed value, upgraded from an older schema."""
        try:
            return BundleMeta.from_dict(self.read_meta())
        except RecordError as exc:
            raise _damaged(self.path, str(exc)) from None

    def update_meta(self, **changes) -> None:
        self.write_meta({**self.read_meta(), **changes})

    def append(self, record: Typed | dict) -> None:
        """Write one record (a dict is read as its type first, so what is written always reads back)."""
        data = (record if isinstance(record, Typed) else parse_record(record)).to_dict()
        # Line-buffered text file: each record reaches the OS as soon as it is written.
        line = json.dumps(data, separators=(",", ":"), default=str) + "\n"
        with self._append_lock:
            self._records.write(line)

    def close(self) -> None:
        if self._records is not None:
            self._records.close()
            self._records = None

    def records(self) -> Iterator[Record]:
        """Every record, typed and upgraded to this schema; a line that is not one is skipped and counted
        in ``skipped_lines``."""
        for raw in self.raw_records():
            try:
                yield parse_record(raw, self.schema)
            except RecordError:
                self.skipped_lines += 1

    def raw_records(self) -> Iterator[dict]:
        """Each line that is a JSON object, once, as written; others are counted in ``skipped_lines``."""
        self.skipped_lines = 0
        path = self.path / RECORDS_FILE
        try:
            f = open(path, "rb")
        except OSError as exc:  # every cell would read "not measured": the data is gone, not unmeasured
            raise _unreadable(path, exc) from None
        seen: set[bytes] = set()  # a line written twice (records appended again) is one record, not two
        with f:
            for raw in filter(None, (line.strip() for line in f)):
                record = None
                if raw not in seen:  # the line itself, not its hash: a collision would drop a measured sample
                    seen.add(raw)
                    with contextlib.suppress(ValueError):  # bad JSON or bad UTF-8
                        record = json.loads(raw.decode("utf-8"))
                if isinstance(record, dict):
                    yield record
                else:
                    self.skipped_lines += 1

    def worker_log(self, pair: int, side: str) -> Path:
        return self.path / "workers" / f"pair{pair:02d}-{side}.log"
