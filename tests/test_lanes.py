"""Unit tests of parallel lanes: which cores measure (fake topologies), bad --lanes input, how the
lane threads stop, and `report --by-lane` on a stored bundle."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import threading
from pathlib import Path

import pytest
from conftest import ROOT, run_in_process

from teperf import cpus
from teperf.config import load_config
from teperf.cpus import assign_lanes, auto_lanes, check_lanes, parse_cpu_list, physical_cores, spare_cores
from teperf.engine.lanes import LaneStopped, run_lanes
from teperf.errors import TeperfError


def smt(pairs: list[str]):
    """A fake topology: each entry is one physical core's thread_siblings_list."""
    groups = [parse_cpu_list(p) for p in pairs]
    return lambda core: next((g for g in groups if core in g), {core})


SMT8 = smt(["0,4", "1,5", "2,6", "3,7"])  # 4 physical cores, 2 threads each, Linux numbering
NO_SMT = smt([])


def test_physical_cores_group_siblings():
    assert physical_cores(range(8), SMT8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert physical_cores(range(4), NO_SMT) == [[0], [1], [2], [3]]
    # threads this process may not use are no lane's, even where their sibling is
    assert physical_cores([0, 1, 5], SMT8) == [[0], [1, 5]]


def test_lanes_never_share_a_physical_core():
    cores = assign_lanes(4, 7, range(8), SMT8)
    assert cores == [7, 6, 5, 4]  # the configured core first, then from the top down
    assert len({frozenset(SMT8(c)) for c in cores}) == 4
    assert assign_lanes(2, 0, range(8), SMT8) == [0, 7]  # not 4: core 0's sibling
    assert assign_lanes(3, 15, range(16), NO_SMT) == [15, 14, 13]
    assert assign_lanes(1, 3, range(8), SMT8) == [3]


def test_more_lanes_than_physical_cores_is_refused_with_the_fix():
    with pytest.raises(TeperfError) as err:
        assign_lanes(5, 7, range(8), SMT8)
    assert "4 physical cores" in str(err.value) and "SMT siblings" in str(err.value)
    assert "--lanes 4 or fewer" in err.value.fix
    with pytest.raises(TeperfError, match="only 2 physical cores"):
        assign_lanes(3, 1, [0, 1], NO_SMT)


def test_spare_cores_avoid_lanes_and_their_siblings():
    assert spare_cores([7, 6], range(8), SMT8) == [0, 1, 4, 5]
    # every physical core measures: only siblings are left, and they never prestart (issue 34)
    assert spare_cores([7, 6, 5, 4], range(8), SMT8) == []
    assert spare_cores([1, 0], [0, 1], NO_SMT) == []  # the 2-core VM with 2 lanes: no prestart
    assert spare_cores([1], [0, 1], NO_SMT) == [0]  # one lane: as before lanes existed


def test_auto_lanes_rule():
    assert auto_lanes(range(2), NO_SMT) == 1
    assert auto_lanes(range(8), NO_SMT) == 2
    assert auto_lanes(range(16), NO_SMT) == cpus.AUTO_MAX_LANES == 4
    assert auto_lanes(range(64), NO_SMT) == cpus.AUTO_MAX_LANES
    assert auto_lanes(range(16), smt(["0,8", "1,9", "2,10", "3,11", "4,12", "5,13", "6,14", "7,15"])) == 2


@pytest.mark.parametrize("value", ["0", 0, "-1", "two", 1.5, True])
def test_bad_lane_counts_are_refused(value):
    with pytest.raises(TeperfError) as err:
        check_lanes(value, 0)
    assert "--lanes" in str(err.value) and "--lanes" in err.value.fix


def test_config_resolves_lanes():
    assert load_config("default").lanes == 1
    assert load_config("default", {"lanes": "1"}).lanes == 1
    assert load_config("default", {"lanes": "auto"}).lanes == auto_lanes()
    with pytest.raises(TeperfError) as err:
        load_config("default", {"lanes": "999"})
    assert "--lanes 999" in str(err.value) and "or fewer" in err.value.fix
    with pytest.raises(TeperfError, match="lanes must be"):
        from teperf.config import build_config

        build_config({"lanes": 0}, {})


def test_run_lanes_runs_every_lane_in_its_own_thread():
    seen = {}

    def lane(i):
        seen[i] = threading.current_thread().name

    run_lanes(3, lane, threading.Event(), lambda: None)
    assert sorted(seen) == [0, 1, 2] and len(set(seen.values())) == 3


def test_an_error_in_one_lane_stops_the_others_and_kills_every_worker():
    stop = threading.Event()
    kills = []
    waiting = threading.Barrier(2)

    def lane(i):
        waiting.wait(timeout=30)  # both lanes are running
        if i == 0:
            raise ValueError("lane 0 broke")
        stop.wait(timeout=30)  # lane 1 measures until told to stop, as a lane does
        assert stop.is_set()
        raise LaneStopped()

    with pytest.raises(ValueError, match="lane 0 broke"):
        run_lanes(2, lane, stop, lambda: kills.append(1))
    assert stop.is_set() and kills


def test_a_lane_that_ran_out_of_pairs_outlives_the_others():
    """A worker dies with the thread that started it (PR_SET_PDEATHSIG): a lane that is done must not
    end its thread while another lane may measure a pair it started ahead."""
    first_done = threading.Event()
    alive_when_second_ran = []

    def lane(i):
        if i == 0:
            first_done.set()
            return
        first_done.wait(timeout=30)
        alive_when_second_ran.append(
            any(t.name == "teperf-lane0" and t.is_alive() for t in threading.enumerate())
        )

    run_lanes(2, lane, threading.Event(), lambda: None)
    assert alive_when_second_ran == [True]


# ---------------------------------------------------------------- report --by-lane on a stored bundle


def _stored_bundle(path, lane_shift: float):
    """A two-lane compare bundle: cell 0 agrees across lanes, cell 1's lane 1 sees a delta lane 0 does not."""
    path.mkdir()
    (path / "workers").mkdir()
    cases = [
        {"id": i, "module": m, "recipe": "fp32", "shape": [8, 64], "dtype": "float32", "mode": "eager"}
        for i, m in enumerate(["Same", "Split"])
    ]
    meta = {
        "schema": 1,
        "kind": "compare",
        "status": "complete",
        "sides": {"base": {"label": "base"}, "head": {"label": "head"}},
        "cases": cases,
        "host": {"lane_cores": [1, 0]},
        "config": {
            "lanes": 2,
            "device": "cpu",
            "schedule": {"processes": 8, "rounds": 1, "trials": 2, "iters": 10},
            "stats": {"alpha": 0.05, "min_effect_pct": 1.0, "metric": "process_cpu"},
        },
    }
    (path / "meta.json").write_text(json.dumps(meta))
    records = []
    for pair in range(8):
        lane, core = pair % 2, [1, 0][pair % 2]
        records.append({"kind": "pair", "pair": pair, "lane": lane, "core": core, "start_s": 1.0})
        for cid in (0, 1):
            for trial in range(2):
                base = 100.0 + pair  # the level drifts between pairs; pairing cancels it
                head = base * (1 + 0.002 * (pair % 4 - 1.5) + (lane_shift * lane if cid == 1 else 0))
                for side, us in (("base", base), ("head", head)):
                    records.append(
                        {
                            "kind": "trial",
                            "pair": pair,
                            "round": 0,
                            "trial": trial,
                            "side": side,
                            "position": 0,
                            "case_id": cid,
                            "iters": 10,
                            "lane": lane,
                            "core": core,
                            "process_cpu_ns": us * 10_000,
                            "wall_ns": us * 10_000,
                        }
                    )
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_report_by_lane_breaks_each_cell_down_and_flags_lanes_that_differ(tmp_path, capsys):
    from conftest import run_in_process

    bundle = _stored_bundle(tmp_path / "bundle", lane_shift=0.05)
    code, out, _ = run_in_process(["report", str(bundle), "--by-lane", "--format", "json"], capsys)
    assert code == 0
    rows = json.loads(out)["lanes"]
    by = {(r["module"], r["lane"]): r for r in rows}
    assert [r["lane"] for r in rows] == [0, 1, "all", 0, 1, "all"]
    assert (
        by[("Same", 0)]["n_pairs"] == by[("Same", 1)]["n_pairs"] == 4 and by[("Same", "all")]["n_pairs"] == 8
    )
    assert by[("Same", 0)]["core"] == "1" and by[("Same", 1)]["core"] == "0"
    assert by[("Same", "all")]["agree"] == "yes"
    assert by[("Split", "all")]["agree"] == "NO" and by[("Split", "all")]["agree_p"] < 0.05
    assert abs(by[("Split", 1)]["delta_pct"] - 5.0) < 0.5 and abs(by[("Split", 0)]["delta_pct"]) < 0.5

    code, out, _ = run_in_process(["report", str(bundle), "--by-lane", "--format", "markdown"], capsys)
    assert code == 0
    assert "| Split | fp32 | all |" in out and "NO (" in out and "1 of 2 cells differ" in out
    code, out, _ = run_in_process(["report", str(bundle)], capsys)  # the main table points at the breakdown
    assert code == 0 and "--by-lane" in out


def test_report_by_lane_of_a_one_lane_bundle_has_nothing_to_compare(tmp_path, capsys):
    from conftest import run_in_process

    bundle = _stored_bundle(tmp_path / "bundle", lane_shift=0.0)
    lines = [json.loads(line) for line in (bundle / "records.jsonl").read_text().splitlines()]
    for rec in lines:  # a bundle from before lanes: no lane, no core
        rec.pop("lane", None)
        rec.pop("core", None)
    (bundle / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    code, out, _ = run_in_process(["report", str(bundle), "--by-lane", "--format", "csv"], capsys)
    assert code == 0
    assert [line.split(",")[4] for line in out.splitlines()[1:]] == ["0", "all", "0", "all"]
    assert all(line.endswith(",-") for line in out.splitlines()[1:] if ",all," in line)


# ---------------------------------------------------------------- how lanes take pairs


def test_each_lane_starts_its_first_pair_on_spare_cores_and_later_pairs_come_started_ahead(
    monkeypatch, tmp_path
):
    """Lanes 7 and 6 of an 8-core machine, 6 spare cores: enough for each lane's first pair and a pair
    ahead, so each lane's first pair imports on two spare cores of its own (both sides at once), the
    pairs ahead on the next ones (wrapping round where the depth asks for more), and each lane then
    takes the pair numbered next, started ahead."""
    from teperf.bundle import Bundle
    from teperf.engine import coordinator
    from teperf.engine.adaptive import Adaptive
    from teperf.plan import expand
    from teperf.sides import Side

    monkeypatch.setattr(coordinator, "assign_lanes", lambda n, first: [7, 6][:n])
    monkeypatch.setattr(coordinator, "spare_cores", lambda lanes: [0, 1, 2, 3, 4, 5])
    launched = []
    monkeypatch.setattr(
        coordinator.PairTrials, "launch", lambda self, cores: launched.append((self.pair, self, cores))
    )
    config = dataclasses.replace(load_config("default", {"processes": 6, "prestart": "2"}), lanes=2)
    cases = expand(config)
    sides = [Side(label="base", python=sys.executable), Side(label="head", python=sys.executable)]
    bundle = Bundle.create(tmp_path, "compare", {})
    run = coordinator._Run(config, sides, cases, bundle, None, Adaptive(config, cases, 2))
    run.stop_rule.start()
    taken = [run.schedule.take(lane) for lane in (0, 1)]
    assert [(r.pair, r.lane, r.core) for r, _ in taken] == [(0, 0, 7), (1, 1, 6)]
    # lane 0's first pair, the two pairs ahead (prestart 2), lane 1's first pair
    assert [(pair, cores) for pair, _, cores in launched] == [
        (0, [0, 1]),
        (2, [4, 5]),
        (3, [0, 1]),
        (1, [2, 3]),
    ]
    assert [r for r, _ in taken] == [launched[0][1], launched[3][1]]
    third, _ = run.schedule.take(1)
    assert (third.pair, third.core) == (2, 6) and third is launched[1][
        1
    ]  # the runner started ahead, now on lane 1
    assert [r.pair for r in run.schedule.upcoming] == [3, 4] and [pair for pair, _, _ in launched] == [
        0,
        2,
        3,
        1,
        4,
    ]
    bundle.close()


BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


def _copy(tmp_path, name="v1-compare-counters") -> Path:
    path = tmp_path / name
    shutil.copytree(BUNDLES / name, path)
    return path


def test_by_lane_of_a_bundle_that_measured_nothing_says_so(tmp_path, capsys):
    path = _copy(tmp_path)
    (path / "records.jsonl").write_bytes(b"")
    meta = json.loads((path / "meta.json").read_text())
    meta["status"] = "failed"
    (path / "meta.json").write_text(json.dumps(meta))
    code, out, err = run_in_process(["report", str(path), "--by-lane", "--format", "markdown"], capsys)
    assert code == 0 and "no cell was measured" in out and "0 lanes" not in out, (out, err)
