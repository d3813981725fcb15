"""Backfill's choice of commits and its resume, explained change points: the record, the store's sidecar,
``history --changes --format json`` and the dashboard's culprit links (synthetic store; no workers)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import types

import pytest
import synthetic_history as synthetic
from conftest import run_in_process

from teperf.backfill import Commit, eta, list_commits, select
from teperf.errors import TeperfError
from teperf.history.analysis import analyze
from teperf.history.dashboard import build_from_store
from teperf.history.explain import change_points, commit_url, pending, record
from teperf.history.store import HistoryStore
from teperf.nightly import choose_base
from teperf.records import ExplanationRecord, RecordError

STEP_AT = 20


def commits(n: int, tagged=()) -> list[Commit]:
    return [Commit(f"{i:040x}", f"commit {i}", (f"v{i}",) if i in tagged else ()) for i in range(n)]


def shas(cs) -> list[int]:
    return [int(c.sha, 16) for c in cs]


# ----------------------------------------------------------------------------- selection


def test_select_every_commit_by_default():
    assert shas(select(commits(5))) == [0, 1, 2, 3, 4]


def test_select_tags_keeps_the_ends():
    assert shas(select(commits(10, tagged=(3, 6)), tags=True)) == [0, 3, 6, 9]


def test_select_every_n_counts_from_a_and_ends_at_b():
    assert shas(select(commits(10), every=4)) == [0, 4, 8, 9]
    assert shas(select(commits(10, tagged=(0, 2, 4, 6, 8)), tags=True, every=2)) == [0, 4, 8, 9]


def test_select_refuses_a_zero_step():
    with pytest.raises(TeperfError):
        select(commits(3), every=0)


def test_eta_from_the_nights_so_far():
    assert eta([], 5) == "" and eta([10.0], 0) == ""
    assert eta([10.0, 20.0], 3) == "about 45 s left" and eta([60.0], 10) == "about 10 min left"


def test_list_commits_first_parent_and_tags(tmp_path):
    from gitfixture import make_history

    h = make_history(tmp_path, n=8, culprit=0)
    subprocess.run(["git", "-C", str(h.repo), "tag", "-a", "-m", "x", "rel5", h.shas[5]], check=True)
    listed = list_commits(str(h.repo), "good..bad")
    assert [c.sha for c in listed] == h.shas  # A, then first-parent: a merge's side commit is left out
    tagged = select(list_commits(str(h.repo), "good..bad", tags=True), tags=True)
    assert [c.sha for c in tagged] == [h.shas[0], h.shas[5], h.shas[8]]
    assert tagged[1].tags == ("rel5",)  # an annotated tag names its commit
    with pytest.raises(TeperfError):
        list_commits(str(h.repo), "bad")


# ----------------------------------------------------------------------------- resume


def nightly_rows(sha_list, machine="m1", ref="main"):
    import pandas as pd

    from teperf.records import RUN_COLUMNS

    return pd.DataFrame(
        [
            dict.fromkeys(RUN_COLUMNS)
            | dict(
                machine=machine,
                ref=ref,
                sha=s,
                night=s[:12],
                shard="1/1",
                run_status="complete",
                run_date=pd.Timestamp(2025, 1, 1 + i, tz="UTC"),
                run_id=f"r{i}",
            )
            for i, s in enumerate(sha_list)
        ]
    )


def test_a_commit_in_the_store_is_skipped_so_a_second_run_resumes():
    done = nightly_rows(["a" * 40, "b" * 40])
    skip = choose_base(done, machine="m1", ref="main", head_sha="b" * 40)
    assert skip.skip
    go = choose_base(done, machine="m1", ref="main", head_sha="c" * 40, base_among=["a" * 40])
    assert not go.skip and go.base_sha == "a" * 40  # the previous selected commit, not the newest run


# ----------------------------------------------------------------------------- the record


def result(status="found", explained=True):
    culprit = dict(
        sha="f" * 40,
        short_sha="fffffff",
        subject="slow it down",
        delta_us=12.0,
        share=0.9,
        share_ci=[0.7, 1.1],
        verdict="slower",
        counters={"python_calls": 5},
        index=3,
        row={},
    )
    return {
        "status": status,
        "explained": explained,
        "answer": "explained: 1 commit(s) carry 90%",
        "culprits": [culprit] if explained else [],
        "rest": {"delta_us": 1.3},
        "endpoint": {"delta_us": 13.3},
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    st = HistoryStore(tmp_path_factory.mktemp("h") / "history")
    synthetic.write(st, synthetic.Plan(commits=36, steps={("LayerNormLinear", "fp32", STEP_AT): 8.0}))
    (point,) = change_points(analyze(st.read()))
    st.add_explanation(record(point, result(), "results/bisect-x", "git@github.com:acme/widgets.git"))
    return st


def test_record_round_trip_through_the_store(store):
    (point,) = change_points(analyze(store.read()))
    rec = record(point, result(), "results/bisect-x", "git@github.com:acme/widgets.git")
    assert rec.status == "explained" and rec.culprits[0]["url"] == (
        f"https://github.com/acme/widgets/commit/{'f' * 40}"
    )
    assert set(rec.culprits[0]) == {
        "sha",
        "short_sha",
        "subject",
        "delta_us",
        "share",
        "share_ci",
        "verdict",
        "counters",
        "url",
    }
    store.add_explanation(rec)
    back = store.explanations()
    assert back == {rec.key: rec} and back[rec.key].to_dict() == rec.to_dict()
    assert pending([point], back, point.cell.machine) == []
    assert not [f for f in store.files() if "_explanations" in f]  # the sidecar is no run file


def test_noise_unexplained_and_failed(store):
    (point,) = change_points(analyze(store.read()))
    assert record(point, {"status": "no change", "explained": None}, None, None).status == "noise"
    assert record(point, result(explained=False), None, None).status == "unexplained"
    from teperf.history.explain import failed

    assert pending([point], {point.key: failed(point, "boom")}, point.cell.machine) == [point]
    assert pending([point], {}, "another machine") == []


def test_a_bisect_that_moved_the_other_way_does_not_explain_the_change(store):
    """vq's backfill: a +19.6 % step in the history, GOOD..BAD measured again -3.3 % faster, its one commit
    'explained' at 100 % of that: the step was not reproduced, and the commit is no culprit of it."""
    (point,) = change_points(analyze(store.read()))
    assert point.found.direction == "slower"
    other_way = {**result(), "endpoint": {"verdict": "faster", "delta_us": -17.6}}
    rec = record(point, other_way, None, None)
    assert rec.status == "noise" and rec.culprits == []
    assert (
        rec.answer.startswith("not reproduced: the history's step is slower +")
        and "faster -17.6 us" in rec.answer
    )
    same_way = {**result(), "endpoint": {"verdict": "slower", "delta_us": 13.3}}
    assert record(point, same_way, None, None).status == "explained"


def test_a_record_checks_itself():
    with pytest.raises(RecordError):
        ExplanationRecord(
            key="k", machine="m", module="L", recipe="r", good_sha="a", bad_sha="b", status="maybe", answer=""
        )
    with pytest.raises(TeperfError):
        ExplanationRecord.from_stored({"schema": 99, "key": "k"}, "x.json")


def test_commit_urls():
    sha = "1" * 40
    assert commit_url("https://github.com/o/r.git", sha) == f"https://github.com/o/r/commit/{sha}"
    assert commit_url("ssh://git@github.com/o/r", sha) == f"https://github.com/o/r/commit/{sha}"
    assert commit_url("/srv/git/r.git", sha) is None and commit_url(None, sha) is None


# ----------------------------------------------------------------------------- what shows them


def test_history_json_and_table_carry_the_culprits(store, capsys):
    def history(*args):
        code, out, err = run_in_process(["history", "--history", str(store.url), *args], capsys)
        assert code == 0, err
        return out

    (change,) = json.loads(history("--changes", "--format", "json"))
    assert change["explanation"]["status"] == "explained"
    assert change["explanation"]["culprits"][0]["url"].startswith("https://github.com/acme/widgets/commit/")
    assert "fffffff 90% [70%, 110%]" in history("--changes")
    points = json.loads(history("--format", "json"))
    carried = [p for p in points if p.get("explanation")]
    assert [p["sha"] for p in carried] == [change["first_bad_sha"]]
    assert carried[0]["explanation"]["culprits"][0]["share"] == 0.9


def test_dashboard_links_each_culprit(store, tmp_path):
    build_from_store(store, tmp_path / "site")
    link = f'href="https://github.com/acme/widgets/commit/{"f" * 40}"'
    pages = [p.read_text() for p in (tmp_path / "site").glob("*.html")]
    assert sum(link in page for page in pages) >= 2  # the changes page and the machine's page
    assert any(
        "slow it down" in page and "90% [70%, 110%]" in page and "python_calls +5" in page for page in pages
    )


def test_backfill_stops_when_the_budget_is_spent(monkeypatch, tmp_path):
    """Each night's compare gets what is left of --budget; no night starts once it is spent."""
    import dataclasses
    import types

    from teperf import api, backfill
    from teperf.config import load_config
    from teperf.nightly import BaseChoice
    from teperf.options import MeasureOptions, SideOptions

    now, budgets = [0.0], []
    monkeypatch.setattr(backfill, "list_commits", lambda root, spec, tags: commits(5))
    monkeypatch.setattr("teperf.sides.gitrepo.repo_root", lambda repo: tmp_path)

    def plan(config, sides, *, at, base_among, **kw):
        return types.SimpleNamespace(choice=BaseChoice(at, None, "test"), head_sha=at)

    def night(plan, measure, sides, **kw):
        budgets.append(measure.config.schedule.budget_s)
        now[0] += 60.0
        if plan.head_sha == commits(5)[1].sha:
            raise TeperfError("cannot make this side", "a broken commit")
        return types.SimpleNamespace(unchanged=None)  # measured (api.NightlyResult's field)

    monkeypatch.setattr(api, "plan_nightly", plan)
    monkeypatch.setattr(api, "nightly", night)
    config = load_config("default")
    config = dataclasses.replace(config, schedule=dataclasses.replace(config.schedule, budget_s=100.0))
    lines = []
    result = backfill.backfill(
        config,
        SideOptions(),
        MeasureOptions(config=config),
        spec="a..b",
        ref="main",
        history=str(tmp_path / "h"),
        log=lines.append,
        clock=lambda: now[0],
    )
    assert budgets == [100.0, 40.0] and len(result.measured) == 1 and result.stopped == "the budget is spent"
    assert (
        "1 could not be measured" in result.describe() and "3 left (the budget is spent)" in result.describe()
    )
    assert "not measured: cannot make this side" in lines[2]


def test_explain_stays_within_what_a_backfill_left(monkeypatch, tmp_path, capsys):
    """After a backfill, each bisect's compares get at most what its --budget left; none starts once spent."""
    import teperf.history_bisect as hb

    st = HistoryStore(tmp_path / "history")
    steps = {
        ("LayerNormLinear", "fp32", 12): 8.0,
        ("Linear", "fp32", 24): 8.0,
        ("LayerNormMLP", "fp32", 30): 8.0,
    }
    synthetic.write(st, synthetic.Plan(commits=40, steps=steps))
    points = change_points(analyze(st.read()))
    assert len(points) == 3
    now, budgets = [0.0], []

    def bisect(config, spec, cell, *, budget_s, **kw):
        budgets.append(budget_s)
        now[0] += 250.0
        return tmp_path / f"bisect-{len(budgets)}"

    monkeypatch.setattr(hb, "bisect", bisect)
    monkeypatch.setattr(hb, "load", lambda path: ({"result": result()},))
    monkeypatch.setattr(hb, "GitSideFactory", lambda sides: None)
    monkeypatch.setattr(hb, "local_machine", lambda device: (points[0].cell.machine, None))
    config = types.SimpleNamespace(device="cpu", schedule=types.SimpleNamespace(budget_s=1800.0))
    done = hb.explain_changes(
        str(tmp_path / "history"),
        types.SimpleNamespace(repo=str(tmp_path)),
        types.SimpleNamespace(config=config, results_dir=None),
        functools.partial(print, file=sys.stderr),
        total_s=400.0,
        clock=lambda: now[0],
    )
    assert budgets == [400.0, 150.0] and len(done) == 2
    err = capsys.readouterr().err.splitlines()
    assert "explain: the budget is spent; 1 change point(s) left for the next run" in err
    assert len(pending(points, st.explanations(), points[0].cell.machine)) == 1  # bisected next time
