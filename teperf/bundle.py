"""Result bundles on disk: created at the start of a run, appended as it goes."""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
from pathlib import Path
from typing import Any, Iterator

from teperf.errors import TeperfError
from teperf.schema import META_FILE, RECORDS_FILE, SCHEMA_VERSION

DEFAULT_RESULTS = Path("results")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


class Bundle:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._records = None

    @classmethod
    def create(cls, results_dir: str | os.PathLike | None, kind: str, meta: dict) -> "Bundle":
        root = Path(results_dir) if results_dir else DEFAULT_RESULTS
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TeperfError(f"cannot create results directory {root}: {exc.strerror}", "pass a writable --results-dir")
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = root / f"{stamp}-{kind}-{secrets.token_hex(2)}"
        path.mkdir()
        (path / "workers").mkdir()
        bundle = cls(path)
        meta = {"schema": SCHEMA_VERSION, "status": "running", **meta}
        bundle.write_meta(meta)
        bundle._records = open(path / RECORDS_FILE, "a", buffering=1)
        return bundle

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Bundle":
        p = Path(path)
        if not (p / META_FILE).is_file():
            raise TeperfError(f"{p} is not a teperf bundle (no {META_FILE})", "pass a directory under results/ written by teperf run/compare")
        return cls(p)

    def write_meta(self, meta: dict) -> None:
        write_json_atomic(self.path / META_FILE, meta)

    def read_meta(self) -> dict:
        try:
            return json.loads((self.path / META_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise TeperfError(f"cannot read {self.path / META_FILE}: {exc}", "the bundle is damaged; re-run the measurement")

    def update_meta(self, **changes) -> dict:
        meta = self.read_meta()
        meta.update(changes)
        self.write_meta(meta)
        return meta

    def append(self, record: dict) -> None:
        # Line-buffered text file: each record reaches the OS as soon as it is written.
        self._records.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")

    def close(self) -> None:
        if self._records is not None:
            self._records.close()
            self._records = None

    def records(self) -> Iterator[dict]:
        path = self.path / RECORDS_FILE
        if not path.exists():
            return
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except ValueError:
                    # A line cut short by a crash: everything before it still counts.
                    continue

    def worker_log(self, pair: int, side: str) -> Path:
        return self.path / "workers" / f"pair{pair:02d}-{side}.log"
