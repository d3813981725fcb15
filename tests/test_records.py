"""Typed records (teperf/records.py): every fixture bundle reads, older schemas are upgraded, a newer
one is refused in one line, wrong types are refused; history rows check themselves."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_in_process

from teperf import __version__
from teperf.bundle import Bundle
from teperf.errors import TeperfError
from teperf.history.store import SCHEMA_KEY, HistoryStore, to_table
from teperf.records import (
    KINDS,
    SCHEMA_VERSION,
    BundleMeta,
    FailureRecord,
    HistoryRow,
    RecordError,
    StopRecord,
    TrialRecord,
    UnknownRecord,
    cell_key,
    parse_record,
)
from teperf.schema import ROW_FIELDS

BUNDLES = Path(__file__).parent / "fixtures" / "bundles"
FIXTURES = sorted(p for p in BUNDLES.iterdir() if (p / "meta.json").is_file())


def test_fixtures_cover_the_current_and_the_previous_schema():
    versions = {json.loads((p / "meta.json").read_text()).get("schema", 1) for p in FIXTURES}
    assert {SCHEMA_VERSION - 1, SCHEMA_VERSION} <= versions


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_record_of_a_fixture_reads_as_its_type_and_writes_back(path):
    bundle = Bundle.open(path)
    records = list(bundle.records())
    assert bundle.skipped_lines == 0 and records
    assert not [r for r in records if isinstance(r, UnknownRecord)]
    raw = list(bundle.raw_records())
    for record, line in zip(records, raw):
        assert parse_record(record.to_dict()) == record
        # what was written is kept: a field the line had comes back unchanged
        assert {k: v for k, v in record.to_dict().items() if k in line} == line
    meta = bundle.meta()
    assert meta.schema == SCHEMA_VERSION and meta.sides and meta.cases
    written = json.loads((path / "meta.json").read_text())
    assert meta.to_dict()["config"] == written["config"]  # the typed config is written back as recorded
    assert meta.config.shapes and meta.config.schedule.iters == written["config"]["schedule"]["iters"]


def test_meta_config_reads_typed_and_says_what_it_did_not_record():
    meta = json.loads((BUNDLES / "v1-compare-counters" / "meta.json").read_text())
    raw = {**meta["config"], "core": None, "lanes": "two", "schedule": {"processes": 3, "rounds": True}}
    del raw["stats"]
    config = BundleMeta.from_dict({**meta, "config": raw}).config
    assert config.known("core", "?") is None and config.known("schedule.processes") == 3
    # damaged (a str, a bool for an int) or absent: the default, and known() says it was not recorded
    assert config.lanes == 1 and config.known("lanes") is None and config.known("lanes", "?") == "?"
    assert config.schedule.rounds == 2 and config.known("schedule.rounds") is None
    assert config.stats.metric == "process_cpu" and config.known("stats.metric") is None
    assert config.modules[0].name == meta["config"]["modules"][0]["name"]
    with pytest.raises(AttributeError):
        config.known("schedule.procesess")  # a misspelled key is an error, not a silent None


def test_a_schema_1_failure_record_is_upgraded_on_read():
    # h200 nightly, 2026-11-29: written before lost pairs were retried, so no "final" and no "lost_pairs"
    bundle = Bundle.open(BUNDLES / "v1-run-failures")
    lines = [r for r in bundle.raw_records() if r["kind"] == "failure"]
    assert lines and all("final" not in r and "lost_pairs" not in r for r in lines)
    failures = [r for r in bundle.records() if isinstance(r, FailureRecord)]
    assert len(failures) == len(lines) and all(f.final and f.lost_pairs == [] for f in failures)
    assert bundle.schema == 1


def test_a_record_with_a_field_of_the_wrong_type_is_refused_and_counted(tmp_path):
    good = {
        "kind": "trial",
        "pair": 0,
        "round": 0,
        "trial": 1,
        "side": "base",
        "case_id": 0,
        "iters": 10,
        "process_cpu_ns": 1_000_000,
        "wall_ns": 1_100_000,
        "gpu_ns": None,
        "future_clock_ns": 5,
    }
    trial = parse_record(good)
    assert isinstance(trial, TrialRecord) and trial.extra == {"future_clock_ns": 5}
    assert trial.per_step_us("process_cpu_ns") == 100.0 and trial.per_step_us("sync_ns") is None
    for bad in (
        {**good, "iters": "10"},
        {**good, "iters": 0},
        {**good, "side": None},
        {**good, "pair": True},
        {k: v for k, v in good.items() if k != "wall_ns"},
    ):
        with pytest.raises(RecordError):
            parse_record(bad)
    with pytest.raises(RecordError):
        parse_record({"kind": "setup", "pair": 0, "side": "base", "case_id": 0, "status": "maybe"})
    assert isinstance(parse_record({"kind": "from-the-future", "x": 1}), UnknownRecord)

    path = tmp_path / "b"
    shutil.copytree(BUNDLES / "v1-compare-counters", path)
    with open(path / "records.jsonl", "a") as f:
        f.write(json.dumps({**good, "iters": "10"}) + "\n")
    bundle = Bundle.open(path)
    typed = list(bundle.records())
    assert bundle.skipped_lines == 1 and len(typed) == len(list(bundle.raw_records())) - 1


def test_records_the_engine_writes_have_every_kind():
    assert set(KINDS) == {
        "worker",
        "setup",
        "pair",
        "trial",
        "counters",
        "failure",
        "stop",
        "probe",
        "compile_cache",
        "prewarm",
        "server",
    }
    stop = StopRecord(reason="budget", pairs=3, elapsed_s=12.5, precision_pct=None, budget_s=10.0, open=["a"])
    assert stop.to_dict()["kind"] == "stop" and parse_record(stop.to_dict()) == stop


def _newer(tmp_path, writer="9.1.0") -> Path:
    path = tmp_path / "newer"
    shutil.copytree(BUNDLES / "v1-compare-counters", path)
    meta = json.loads((path / "meta.json").read_text())
    meta.update(schema=SCHEMA_VERSION + 1, teperf_version=writer)
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def test_a_bundle_of_a_newer_schema_is_refused_naming_the_teperf_that_reads_it(tmp_path, capsys):
    path = _newer(tmp_path)
    with pytest.raises(TeperfError) as err:
        Bundle.open(path)
    assert "9.1.0" in err.value.one_line() and __version__ in err.value.one_line()
    for argv in (["report", str(path)], ["report", str(path), "--format", "json"]):
        code, out, err_text = run_in_process(argv, capsys)
        assert code == 2 and out == "" and err_text.count("\n") == 1 and "Traceback" not in err_text
        assert f"schema {SCHEMA_VERSION + 1}" in err_text and "teperf 9.1.0 or newer" in err_text


def test_a_newer_bundle_that_does_not_name_its_teperf_says_a_newer_teperf(tmp_path):
    # issue 59: it read "written by teperf a newer release"
    path = _newer(tmp_path, writer=None)
    with pytest.raises(TeperfError) as err:
        Bundle.open(path)
    assert (
        "written by a newer teperf;" in err.value.one_line()
        and "read it with a newer teperf" in err.value.fix
    )


def test_meta_with_parts_of_the_wrong_type_is_damaged(tmp_path, capsys):
    path = tmp_path / "b"
    shutil.copytree(BUNDLES / "v1-compare-counters", path)
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "schema": "two"}))
    with pytest.raises(TeperfError, match="damaged"):
        Bundle.open(path)
    (path / "meta.json").write_text(json.dumps({**meta, "sides": ["base", "head"]}))
    with pytest.raises(TeperfError, match="damaged"):
        Bundle.open(path).meta()
    with pytest.raises(RecordError):
        BundleMeta.from_dict({**meta, "cases": {"0": {}}})


def test_a_summary_row_is_frozen_and_a_misspelled_field_is_an_error():
    from teperf.summary import summarize

    row = summarize(BUNDLES / "v1-compare-counters").rows[0]
    assert (
        row.key
        == "LayerNormLinear/bf16/8x2x256/eager"
        == cell_key(row.module, row.recipe, [8, 2, 256], "eager")
    )
    with pytest.raises(AttributeError):
        row.verdict_caus  # noqa: B018 (a dict's .get would have read None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.verdict = "faster"
    assert list(row.to_dict())[: len(ROW_FIELDS)] == list(ROW_FIELDS)


# --- history rows ------------------------------------------------------------------------------------


def test_history_rows_check_their_types():
    row = HistoryRow(run_id="r1", module="Linear", host_us=12, n_pairs=3, host_bound=None)
    assert row.host_us == 12 and row.to_dict()["module"] == "Linear"
    for bad in ({"n_pairs": 2.5}, {"host_us": "fast"}, {"host_bound": "yes"}, {"run_id": ""}):
        with pytest.raises(RecordError):
            HistoryRow(**{"run_id": "r1", **bad})
    with pytest.raises(RecordError):
        to_table([{"run_id": "r1", "no_such_column": 1}])


def test_a_history_file_of_a_newer_schema_is_refused(tmp_path):
    store = HistoryStore(tmp_path / "h")
    store.append([HistoryRow(run_id="r1", module="Linear", teperf_version="9.1.0")])
    (path,) = store.files()
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({SCHEMA_KEY: b"99"}), path)
    with pytest.raises(TeperfError, match="teperf 9.1.0 or newer"):
        store.read()
    pq.write_table(table.replace_schema_metadata({}), path)  # a file that does not say reads as schema 1
    assert store.read().module.tolist() == ["Linear"]
    assert isinstance(table, pa.Table)
