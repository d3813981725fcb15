"""History store: round trip, atomic writes, readers without teperf, fsspec URLs, fingerprints."""

from __future__ import annotations

import datetime as dt
import os
import types
import warnings

import pandas as pd
import pyarrow.parquet as pq
import pytest

from teperf.history import store as store_mod
from teperf.history.store import (
    COLUMNS,
    HistoryStore,
    latest_run,
    machine_fingerprint,
    machine_from_meta,
    ordered,
    rows_from_summary,
)
from teperf.records import BundleMeta, Row


def make_meta(
    sha="a" * 40, base_sha="b" * 40, started="2025-01-02T03:04:05+01:00", gpu=None, driver=None, single=False
):
    head = {
        "label": "head",
        "python": "/usr/bin/python3",
        "sha": sha,
        "subject": "Head <b>subject</b>",
        "commit_date": "2025-01-01T12:00:00+00:00",
        "ref": "main",
    }
    base = {
        "label": "base",
        "python": "/usr/bin/python3",
        "sha": base_sha,
        "subject": "Base subject",
        "commit_date": "2024-12-31T12:00:00+00:00",
        "ref": "prev",
    }
    workers = {"head": {"torch": "2.13.0", **({"gpu": gpu, "driver": driver} if gpu else {})}}
    return {
        "teperf_version": "0.1.0",
        "command": ["teperf", "compare"],
        "started_at": started,
        "finished_at": "2025-01-02T03:10:00+01:00",
        "status": "complete",
        "config": {},
        "sides": {"run": head} if single else {"base": base, "head": head},
        "host": {"hostname": "box", "cpu_model": "Test CPU 9000", "core": 1},
        "workers": workers,
    }


def make_row(module="Linear", recipe="fp32", base=100.0, head=110.0, single=False, **extra):
    row = {
        "module": module,
        "recipe": recipe,
        "shape": "8x2x256",
        "dtype": "float32",
        "mode": "eager",
        "status": "ok",
        "error": None,
        "base_us": base,
        "head_us": None if single else head,
        "delta_us": None if single else head - base,
        "delta_pct": None if single else 100 * (head - base) / base,
        "ci_low_us": None if single else 8.0,
        "ci_high_us": None if single else 12.0,
        "verdict": None if single else "slower",
        "n_pairs": 6,
        "base_spread_pct": 1.5,
        "head_spread_pct": None if single else 2.5,
        "pair_sd_pct": 0.7,
        "mde_pct": 1.2,
        "host_bound": None,
        "counters": {"base": {"ops": 3}, "head": {"ops": 4}},
    }
    row.update(extra)
    return Row(**row)


def summary(meta=None, rows=None):
    return types.SimpleNamespace(
        meta=BundleMeta.from_dict(meta or make_meta()),
        rows=rows if rows is not None else [make_row(), make_row("LayerNormMLP", base=200.0, head=190.0)],
    )


def test_round_trip_keeps_every_value(tmp_path):
    st = HistoryStore(tmp_path / "h")
    path, added = st.add_summary(summary(), run_kind="nightly", ref="main", shard="2/3", bundle="results/x")
    assert added and os.path.exists(path) and path.endswith(".parquet")
    df = st.read()
    assert list(df.columns) == COLUMNS
    assert len(df) == 2
    r = df[df.module == "Linear"].iloc[0]
    assert r.sha == "a" * 40 and r.base_sha == "b" * 40 and r.ref == "main" and r.shard == "2/3"
    assert r.subject == "Head <b>subject</b>"  # stored as is; escaping is the renderer's job
    assert r.host_us == 110.0 and r.base_us == 100.0 and r.delta_us == 10.0 and r.verdict == "slower"
    assert r.host_spread_pct == 2.5 and r.n_pairs == 6
    assert r.run_date == pd.Timestamp("2025-01-02T02:04:05Z")  # stored in UTC
    assert r.committed_at == pd.Timestamp("2025-01-01T12:00:00Z")
    assert r.cpu_model == "Test CPU 9000" and r.torch_version == "2.13.0" and r.run_kind == "nightly"
    assert '"ops": 4' in r.counters
    # the same bundle again is not a second run
    path2, added2 = st.add_summary(summary(), run_kind="nightly", ref="main", shard="2/3", bundle="results/x")
    assert not added2 and path2 == path and len(st.read()) == 2


def test_single_side_run_measures_the_only_side(tmp_path):
    rows = rows_from_summary(summary(make_meta(single=True), [make_row(single=True)]))
    assert rows[0].host_us == 100.0 and rows[0].head_us is None and rows[0].base_sha is None
    assert rows[0].sha == "a" * 40 and rows[0].host_spread_pct == 1.5


def test_readable_by_pandas_and_pyarrow_directly(tmp_path):
    st = HistoryStore(tmp_path / "h")
    st.add_summary(summary(make_meta(started="2025-01-02T00:00:00Z")), bundle="one")
    st.add_summary(summary(make_meta(sha="c" * 40, started="2025-01-03T00:00:00Z")), bundle="two")
    (tmp_path / "h" / ".left-over.parquet.tmp").write_bytes(
        b"PAR1 half a file"
    )  # a killed writer's leftovers
    df = pd.read_parquet(tmp_path / "h")
    assert len(df) == 4 and set(df.sha) == {"a" * 40, "c" * 40}
    import pyarrow.dataset as ds

    assert ds.dataset(str(tmp_path / "h"), format="parquet").to_table().num_rows == 4


def test_readable_by_duckdb(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    st = HistoryStore(tmp_path / "h")
    st.add_summary(summary(), bundle="one")
    (tmp_path / "h" / ".x.parquet.tmp").write_bytes(b"junk")
    n = duckdb.sql(
        f"select count(*) from read_parquet('{tmp_path / 'h'}/*.parquet', union_by_name=true)"
    ).fetchall()[0][0]
    assert n == 2


def test_killed_write_leaves_no_file_that_breaks_reading(tmp_path, monkeypatch):
    st = HistoryStore(tmp_path / "h")
    st.add_summary(summary(), bundle="good")

    def dies_half_way(table, where, **kwargs):
        where.write(b"PAR1" + b"\0" * 100)  # a partial file...
        raise KeyboardInterrupt  # ...and the process is stopped

    monkeypatch.setattr(store_mod.pq, "write_table", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        st.add_summary(summary(make_meta(sha="d" * 40)), bundle="killed")
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "h")) == [
        os.path.basename(f) for f in st.files()
    ]  # no temp file left
    assert len(st.files()) == 1
    assert set(st.read().sha) == {"a" * 40}
    assert len(pd.read_parquet(tmp_path / "h")) == 2


def test_the_final_name_appears_only_complete(tmp_path, monkeypatch):
    """While a write is in progress, readers see no file under the final name."""
    st = HistoryStore(tmp_path / "h")
    seen = {}
    real = store_mod.pq.write_table

    def spy(table, where, **kwargs):
        seen["during"] = st.files()
        return real(table, where, **kwargs)

    monkeypatch.setattr(store_mod.pq, "write_table", spy)
    st.add_summary(summary(), bundle="x")
    assert seen["during"] == [] and len(st.files()) == 1


def test_damaged_file_is_skipped_and_named(tmp_path):
    st = HistoryStore(tmp_path / "h")
    st.add_summary(summary(), bundle="x")
    (tmp_path / "h" / "20990101T000000Z_bad.parquet").write_bytes(b"not parquet at all")
    with warnings.catch_warnings(record=True) as caught:  # the commands say it in one teperf line
        warnings.simplefilter("always")
        df = st.read()
    assert len(df) == 2 and not caught
    assert len(st.unreadable) == 1 and "20990101T000000Z_bad.parquet" in st.unreadable[0]


def test_old_files_without_new_columns_still_read(tmp_path):
    st = HistoryStore(tmp_path / "h")
    st.add_summary(summary(), bundle="x")
    path = st.files()[0]
    table = pq.read_table(path).drop_columns(["host_spread_pct", "torch_version"])
    pq.write_table(table, path)
    df = st.read()
    assert df.host_spread_pct.isna().all() and df.torch_version.isna().all() and len(df) == 2


def test_fsspec_url_store(tmp_path):
    url = f"memory://teperf-test-{os.getpid()}/history"
    st = HistoryStore(url)
    assert not st.local
    st.add_summary(summary(), bundle="x")
    st.add_summary(summary(make_meta(sha="e" * 40, started="2025-02-01T00:00:00Z")), bundle="y")
    assert len(st.files()) == 2
    assert len(st.read()) == 4
    assert not [f for f in st.fs.ls(st.root, detail=False) if f.endswith(".tmp")]
    file_st = HistoryStore(f"file://{tmp_path}/h2")
    file_st.add_summary(summary(), bundle="x")
    assert len(HistoryStore(tmp_path / "h2").read()) == 2


def test_empty_or_missing_store_reads_empty(tmp_path):
    df = HistoryStore(tmp_path / "nothing-here").read()
    assert df.empty and list(df.columns) == COLUMNS


def test_machine_fingerprint_separates_gpu_and_driver():
    a = machine_fingerprint("Xeon 8480", "NVIDIA H200", "570.1")
    b = machine_fingerprint("Xeon 8480", "NVIDIA H200", "575.2")
    c = machine_fingerprint("Xeon 8480", None, None)
    assert len({a[0], b[0], c[0]}) == 3
    assert a == machine_fingerprint("Xeon 8480", "NVIDIA H200", "570.1")
    assert "H200" in a[1] and "570.1" in a[1] and "no GPU" in c[1]
    m = machine_from_meta(BundleMeta.from_dict(make_meta(gpu="NVIDIA H200", driver="570.1")))
    assert m["machine"] == machine_fingerprint("Test CPU 9000", "NVIDIA H200", "570.1")[0]
    assert m["gpu"] == "NVIDIA H200" and m["hostname"] == "box"


def test_ordering_and_latest_run(tmp_path):
    st = HistoryStore(tmp_path / "h")
    st.add_summary(summary(make_meta(sha="1" * 40, started="2025-01-05T00:00:00Z")), ref="main", bundle="1")
    st.add_summary(summary(make_meta(sha="2" * 40, started="2025-01-06T00:00:00Z")), ref="main", bundle="2")
    st.add_summary(summary(make_meta(sha="3" * 40, started="2025-01-07T00:00:00Z")), ref="other", bundle="3")
    df = st.read()
    mid = df.machine.iloc[0]
    assert latest_run(df, machine=mid, ref="main")["sha"] == "2" * 40
    assert latest_run(df, machine=mid)["sha"] == "3" * 40
    assert latest_run(df, machine=mid, ref="main", exclude_sha="2" * 40)["sha"] == "1" * 40
    assert latest_run(df, machine="0000000000") is None
    assert list(ordered(df).run_date) == sorted(df.run_date)


def test_a_run_file_holds_one_run(tmp_path):
    st = HistoryStore(tmp_path / "h")
    rows = rows_from_summary(summary()) + rows_from_summary(summary(make_meta(sha="f" * 40)), run_id="other")
    with pytest.raises(ValueError):
        st.append(rows)


def test_timestamps_without_zone_are_utc():
    rows = rows_from_summary(
        summary(make_meta(started="2025-01-02T03:04:05")), overrides={"committed_at": "2025-01-01T00:00:00"}
    )
    assert rows[0].run_date == dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert rows[0].committed_at.tzinfo is not None


def test_history_keeps_the_load_cause():
    from teperf.history.store import rows_from_summary

    rows = rows_from_summary(summary(make_meta(), [make_row(verdict="inconclusive", verdict_cause="load")]))
    assert rows[0].verdict_cause == "load"
