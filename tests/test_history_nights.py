"""Nights: shards of one night merged, and a night with a missing or failed shard never shown as complete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_history_cli import run
from test_history_store import make_meta, make_row, summary

from teperf.history.analysis import analyze
from teperf.history.dashboard import build_site
from teperf.history.nights import nights
from teperf.history.store import HistoryStore, default_night
from teperf.nightly import choose_base

FIXTURES = Path(__file__).parent / "fixtures"
HEAD = "2" * 40


def add_shard(
    st,
    shard,
    modules,
    *,
    sha=HEAD,
    night=None,
    status="complete",
    started="2025-01-02T02:00:00Z",
    bundle=None,
):
    meta = make_meta(sha=sha, base_sha="1" * 40, started=started)
    meta["status"] = status
    rows = [make_row(m, status="ok" if status == "complete" else "failed") for m in modules]
    return st.add_summary(
        summary(meta, rows),
        run_kind="nightly",
        ref="main",
        shard=shard,
        night=night,
        bundle=bundle or f"{shard}-{started}",
    )[0]


def only(st):
    found = nights(st.read())
    assert len(found) == 1
    return found[0]


def test_all_shards_complete_is_one_complete_night(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/2", ["Linear"])
    add_shard(st, "2/2", ["LayerNormMLP"], started="2025-01-02T02:03:00Z")
    n = only(st)
    assert n.complete and n.night == HEAD[:12] == default_night(HEAD) and n.shas == [HEAD]
    assert n.describe() == "complete (2 of 2 shards)"
    cells = analyze(st.read())
    assert {c.module for c in cells} == {"Linear", "LayerNormMLP"}  # both shards' cells, one night
    assert all(c.latest.sha == HEAD and c.latest.night_note is None for c in cells)


def test_missing_and_failed_shards_make_the_night_incomplete(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/4", ["Linear"])
    add_shard(st, "3/4", ["LayerNormMLP"], status="failed", started="2025-01-02T02:01:00Z")
    add_shard(st, "4/4", ["LayerNormLinear"], status="interrupted", started="2025-01-02T02:02:00Z")
    n = only(st)
    assert not n.complete and n.done == 1 and n.missing == [2]
    assert n.describe() == "incomplete: 1 of 4 shards (missing 2/4; 3/4 failed; 4/4 interrupted)"
    notes = {c.module: c.latest.night_note for c in analyze(st.read())}
    assert notes["Linear"] == n.describe()  # even the cells that were measured say their night is short


def test_a_rerun_of_the_failed_shard_completes_the_night(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/2", ["Linear"])
    add_shard(st, "2/2", ["LayerNormMLP"], status="failed", started="2025-01-02T02:01:00Z")
    assert not only(st).complete
    add_shard(
        st, "2/2", ["LayerNormMLP"], started="2025-01-03T09:00:00Z"
    )  # the next day, same commit: same night
    n = only(st)
    assert n.complete and n.runs == 3


def test_a_changed_split_counts_the_newest(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/2", ["Linear"])
    add_shard(st, "1/3", ["Linear"], started="2025-01-02T03:00:00Z")
    n = only(st)
    assert n.count == 3 and n.missing == [2, 3] and not n.complete


def test_named_night_whose_shards_measured_different_commits(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/2", ["Linear"], night="gh-41")
    add_shard(st, "2/2", ["LayerNormMLP"], night="gh-41", sha="3" * 40, started="2025-01-02T02:30:00Z")
    n = only(st)
    assert n.night == "gh-41" and not n.complete and "different commits" in n.describe()


def test_old_history_files_without_nights_still_read():
    """Files written by the code before nights (tests/fixtures/history-v1) read as nights of their commit."""
    st = HistoryStore(FIXTURES / "history-v1")
    df = st.read()
    assert len(df) == 4 and set(df.night) == {"1" * 12, "2" * 12}
    found = {n.night: n for n in nights(df)}
    assert found["1" * 12].complete
    assert found["2" * 12].describe() == "incomplete: 1 of 2 shards (2/2 failed)"


def test_old_files_and_a_new_rerun_make_one_night(tmp_path):
    shutil.copytree(FIXTURES / "history-v1", tmp_path / "h")
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "2/2", ["LayerNormMLP"], started="2025-01-03T00:00:00Z")
    assert {n.night: n.complete for n in nights(st.read())} == {"1" * 12: True, "2" * 12: True}


# ----------------------------------------------------------------------------- what nightly skips


def machine_of(st):
    return st.read().machine.iloc[0]


def test_a_failed_shard_is_measured_again(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/2", ["Linear"])
    add_shard(st, "2/2", ["LayerNormMLP"], status="failed", started="2025-01-02T02:01:00Z")
    df, m = st.read(), machine_of(st)
    assert choose_base(df, machine=m, ref="main", head_sha=HEAD, shard="1/2").skip
    again = choose_base(df, machine=m, ref="main", head_sha=HEAD, shard="2/2")
    assert not again.skip


def test_named_nights_skip_a_commit_another_night_measured_whole(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/2", ["Linear"], night="gh-1")
    m = machine_of(st)
    # gh-1 is short of shard 2: tonight (gh-2) measures both shards again, so gh-2 can be whole
    for shard in ("1/2", "2/2"):
        assert not choose_base(
            st.read(), machine=m, ref="main", head_sha=HEAD, shard=shard, night="gh-2"
        ).skip
    add_shard(st, "2/2", ["LayerNormMLP"], night="gh-1", started="2025-01-02T02:09:00Z")
    skip = choose_base(st.read(), machine=m, ref="main", head_sha=HEAD, shard="1/2", night="gh-3")
    assert skip.skip and "gh-1" in skip.reason
    # a re-run of tonight's own shard that already completed is a no-op too
    assert choose_base(st.read(), machine=m, ref="main", head_sha=HEAD, shard="2/2", night="gh-1").skip


# ----------------------------------------------------------------------------- history and dashboard show it


@pytest.fixture
def short_night(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/1", ["Linear", "LayerNormMLP"], sha="1" * 40, started="2025-01-01T02:00:00Z")
    add_shard(st, "1/2", ["Linear"])  # shard 2/2 (LayerNormMLP) never came back
    return st


def test_history_marks_the_incomplete_night(short_night, capsys):
    code, out, err = run(["history", "--history", short_night.url], capsys)
    assert code == 0, err
    assert "1 of 2 !" in out
    assert (
        f"night {HEAD[:12]} ({HEAD[:10]}) on machine" in out
        and "incomplete: 1 of 2 shards (missing 2/2)" in out
    )
    # filtering to one module must not make its night look short of the other shard's cells
    code, out, _ = run(
        ["history", "--history", short_night.url, "--module", "Linear", "--format", "json"], capsys
    )
    rows = json.loads(out)
    assert {r["night_status"] for r in rows if r["sha"] == HEAD} == {
        "incomplete: 1 of 2 shards (missing 2/2)"
    }
    assert {r["night_status"] for r in rows if r["sha"] == "1" * 40} == {"complete (1 of 1 shard)"}
    code, out, _ = run(["history", "--history", short_night.url, "--nights", "--format", "json"], capsys)
    listed = {r["night"]: r for r in json.loads(out)}
    assert listed[HEAD[:12]]["missing"] == ["2/2"] and listed[HEAD[:12]]["complete"] is False
    assert listed["1" * 12]["complete"] is True
    code, out, _ = run(["history", "--history", short_night.url, "--nights", "--format", "csv"], capsys)
    assert code == 0 and "missing" in out.splitlines()[0]
    code, out, _ = run(["history", "--history", short_night.url, "--nights"], capsys)
    assert code == 0 and "incomplete: 1 of 2 shards" in out


def test_dashboard_marks_the_incomplete_night(short_night, tmp_path, capsys):
    code, out, err = run(["dashboard", "--history", short_night.url, "--out", str(tmp_path / "site")], capsys)
    assert code == 0, err
    assert "incomplete: 1 of 2 shards (missing 2/2)" in out
    index = (tmp_path / "site" / "index.html").read_text()
    assert (
        f"Latest night <code>{HEAD[:12]}</code>" in index
        and "incomplete: 1 of 2 shards (missing 2/2)" in index
    )
    assert f"not in night {HEAD[:12]}" in index  # LayerNormMLP's newest point is the night before
    page = next((tmp_path / "site").glob("machine-*.html")).read_text()
    assert 'id="nights"' in page and "missing 2/2" in page


def test_dashboard_says_nothing_of_shards_when_every_night_is_whole(tmp_path):
    st = HistoryStore(tmp_path / "h")
    add_shard(st, "1/2", ["Linear"])
    add_shard(st, "2/2", ["LayerNormMLP"], started="2025-01-02T02:03:00Z")
    df = st.read()
    build_site(analyze(df), tmp_path / "site", nights=nights(df))
    index = (tmp_path / "site" / "index.html").read_text()
    assert "complete (2 of 2 shards)" in index and "incomplete" not in index and "not in night" not in index
