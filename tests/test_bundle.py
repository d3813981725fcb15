"""A bundle on disk (teperf/bundle.py): created, read back, and what reading it says when it is
damaged, cut short, written twice, archived, of a newer schema or not a bundle at all. No worker starts."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from conftest import ROOT, one_error, run_in_process
from test_faults import _bundle, _meta

from teperf.bundle import Bundle
from teperf.errors import TeperfError

BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


def _copy_v1(tmp_path, name="v1-compare-counters") -> Path:
    path = tmp_path / name
    shutil.copytree(BUNDLES / name, path)
    return path


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda p: p.unlink(), "is missing"),
        (lambda p: (p.unlink(), p.mkdir()), "is a directory"),
        (lambda p: p.write_bytes(b""), "holds no records"),
    ],
)
def test_report_says_when_the_records_are_gone(tmp_path, damage, words, capsys):
    path = _copy_v1(tmp_path)
    damage(path / "records.jsonl")
    one_error(*run_in_process(["report", str(path)], capsys), words, "re-run the measurement")


def test_a_permission_problem_says_permission_not_damage(tmp_path, monkeypatch, capsys):
    path = _copy_v1(tmp_path)
    real = Path.read_bytes

    def read_bytes(self):
        if self.name == "meta.json":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)  # the tests run as root, for whom chmod 000 reads
    code, out, err = run_in_process(["report", str(path)], capsys)
    one_error(code, out, err, "permission denied", "chmod")
    assert "damaged" not in err


def test_a_results_dir_that_is_a_file_says_so(tmp_path):
    from teperf.bundle import Bundle

    (tmp_path / "results").write_text("x")
    with pytest.raises(TeperfError) as exc:
        Bundle.create(tmp_path / "results", "run", {})
    assert "a file is in the way" in str(exc.value) and "File exists" not in str(exc.value)


def _cut(tmp_path, name="v2-compare-compile-cpu", keep=60):
    """A copy of a complete bundle whose records.jsonl was cut short after the run (meta says complete)."""
    dst = tmp_path / "cut"
    shutil.copytree(BUNDLES / name, dst)
    lines = (dst / "records.jsonl").read_text().splitlines(keepends=True)
    (dst / "records.jsonl").write_text("".join(lines[:keep]))
    assert json.loads((dst / "meta.json").read_text())["status"] == "complete"
    return dst


def test_a_cut_short_records_file_makes_its_cells_partial_with_a_note(tmp_path, capsys):
    from teperf.summary import summarize

    summary = summarize(_cut(tmp_path))
    assert {r.status for r in summary.rows} == {"partial"}
    assert any(n.startswith("partial ") and "1 of 3 pairs" in n for n in summary.notes), summary.notes


def test_a_results_dir_that_cannot_be_made_names_no_file_in_the_way(tmp_path):
    from teperf.bundle import Bundle
    from teperf.errors import TeperfError

    with pytest.raises(TeperfError) as refused:
        Bundle.create("/proc/teperf-results", "run", {})
    assert "move the file away" not in str(refused.value)
    (tmp_path / "f").write_text("")
    with pytest.raises(TeperfError, match="move the file away"):
        Bundle.create(tmp_path / "f", "run", {})


SRC = ROOT / "tests" / "fixtures" / "bundles" / "v2-compare-compile-cpu"


def _copy(tmp_path, name="b"):
    dst = tmp_path / name
    shutil.copytree(SRC, dst)
    return dst


def _edit_meta(bundle, **changes):
    meta = json.loads((bundle / "meta.json").read_text())
    meta.update(changes)
    (bundle / "meta.json").write_text(json.dumps(meta))


def test_a_trial_with_a_negative_time_is_an_unreadable_line_not_a_traceback(tmp_path):
    from teperf.summary import summarize

    bundle = _copy(tmp_path)
    lines = (bundle / "records.jsonl").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if '"kind":"trial"' in ln)
    trial = json.loads(lines[i])
    trial["process_cpu_ns"] = -trial["process_cpu_ns"]  # ln() of it raised 'math domain error'
    lines[i] = json.dumps(trial)
    (bundle / "records.jsonl").write_text("\n".join(lines) + "\n")
    notes = summarize(bundle).notes
    assert any("skipped 1 unreadable line" in n for n in notes), notes


def test_records_written_twice_count_each_trial_once(tmp_path):
    from teperf.summary.parse import parse

    bundle = _copy(tmp_path)
    text = (bundle / "records.jsonl").read_text()
    once = parse(bundle).total_trials
    (bundle / "records.jsonl").write_text(text + text)
    twice = parse(bundle)
    assert twice.total_trials == once and twice.skipped_lines == len(text.strip().splitlines())


def test_a_schema_newer_than_the_release_that_wrote_it_reads_as_damage_not_as_an_upgrade(tmp_path, capsys):
    from teperf import __version__

    bundle = _copy(tmp_path)
    _edit_meta(bundle, schema=99, teperf_version=__version__)  # it told to read it with this very release
    code, out, err = run_in_process(["report", str(bundle)], capsys)
    one_error(code, out, err, "is damaged", "schema 99")
    assert "or newer" not in err, err


def test_a_meta_json_saved_with_a_bom_reads(tmp_path, capsys):
    bundle = _copy(tmp_path)
    (bundle / "meta.json").write_bytes(b"\xef\xbb\xbf" + (bundle / "meta.json").read_bytes())
    code, out, err = run_in_process(["report", str(bundle)], capsys)
    assert code == 0 and "MLP" in out, err


def test_a_key_of_the_wrong_type_in_meta_json_names_the_type_plainly(tmp_path, capsys):
    bundle = _copy(tmp_path)
    _edit_meta(bundle, sides=["base", "head"])
    code, out, err = run_in_process(["report", str(bundle)], capsys)
    one_error(code, out, err, "sides is list, not dict")


def test_a_bundle_kept_as_an_archive_says_unpack_it(tmp_path, capsys):
    archive = tmp_path / "bundle.tar.xz"  # how results/evidence keeps bundles
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(SRC, arcname="b")
    for argv in (["report"], ["explain"], ["import", "--history", str(tmp_path / "h")]):
        code, out, err = run_in_process([*argv, str(archive)], capsys)
        one_error(code, out, err, "is an archive", "tar -xf")


def test_a_meta_json_that_is_a_broken_link_or_a_directory_is_damage_not_no_bundle(tmp_path, capsys):
    broken, folder = _copy(tmp_path, "broken"), _copy(tmp_path, "folder")
    (broken / "meta.json").unlink()
    (broken / "meta.json").symlink_to(tmp_path / "nowhere")
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()
    for bundle in (broken, folder):
        code, out, err = run_in_process(["report", str(bundle)], capsys)
        one_error(code, out, err, "meta.json is a broken link or a directory", "damaged")


def test_a_results_directory_or_a_file_of_a_bundle_is_answered_with_the_bundle_to_pass(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    _copy(results, "20261205-a"), _copy(results, "20261205-b")
    code, out, err = run_in_process(["report", str(results)], capsys)
    one_error(code, out, err, f"e.g. the last: {results / '20261205-b'}")
    code, out, err = run_in_process(["import", str(results / "20261205-a" / "meta.json")], capsys)
    one_error(code, out, err, f"pass the bundle's directory: {results / '20261205-a'}")


def test_records_counts_skipped_lines(tmp_path):
    path = _bundle(tmp_path, _meta(), b'{"kind":"x"}\n\xff\n{"kind":"y"}\n{"kin')
    bundle = Bundle(path)
    assert [r.to_dict()["kind"] for r in bundle.records()] == ["x", "y"] and bundle.skipped_lines == 2


def test_a_session_writes_its_head_keys_and_its_end_status(tmp_path):
    with Bundle.session(tmp_path, "run", {"cases": []}, command=["teperf", "run"]) as bundle:
        assert bundle.read_meta()["status"] == "running" and (bundle.path / "workers").is_dir()
        bundle.at_end = lambda: {"extra": 1}
    meta = bundle.read_meta()
    assert meta["status"] == "complete" and meta["error"] is None and meta["extra"] == 1
    assert meta["kind"] == "run" and meta["command"] == ["teperf", "run"] and meta["finished_at"]
    with pytest.raises(TeperfError):
        with Bundle.session(tmp_path, "run", {}) as failed:
            raise TeperfError("the factory raised", "fix it")
    assert failed.read_meta()["status"] == "failed" and "the factory raised" in failed.read_meta()["error"]


def test_records_appended_read_back_as_their_types_each_once(tmp_path):
    source = Bundle(BUNDLES / "v2-compare-compile-cpu")
    raw = list(source.raw_records())
    bundle = Bundle.create(tmp_path, "compare", {})
    for record in raw + raw[:3]:  # the first three again: a line written twice is one record
        bundle.append(record)
    bundle.close()
    assert len(list(bundle.raw_records())) == len(raw) and bundle.skipped_lines == 3
    assert [r.to_dict() for r in bundle.records()] == [r.to_dict() for r in source.records()]  # typed alike


def test_a_live_coordinator_is_not_gone_and_a_dead_one_on_this_host_is(tmp_path):
    from teperf.bundle import coordinator_facts, coordinator_gone
    from teperf.records import BundleMeta

    gone = lambda raw: coordinator_gone(BundleMeta.from_dict(raw))  # noqa: E731

    me = {"status": "running", "coordinator": coordinator_facts()}
    assert not gone(me)
    assert not gone({**me, "status": "complete"})  # only a running bundle can be orphaned
    other_host = {**me["coordinator"], "hostname": me["coordinator"]["hostname"] + "-elsewhere"}
    assert not gone({"status": "running", "coordinator": other_host})  # unknown: no
    reused = {**me["coordinator"], "start_ticks": (me["coordinator"]["start_ticks"] or 0) + 1}
    assert gone({"status": "running", "coordinator": reused})  # this pid, another process
