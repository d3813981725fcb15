"""`teperf nightly` for real: git sides on a fixture repo, real workers, the history store.

Small schedule (a few seconds a night; workers fork from a server per side, as spawning is not the subject
here); checks what each night is paired with, that a night with nothing new is skipped, that two shards
split the cells, and that the dashboard builds from what was measured.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from teperf.history.store import HistoryStore

ROOT = Path(__file__).resolve().parent.parent


def load_demo():
    spec = importlib.util.spec_from_file_location("nightly_demo", ROOT / "examples" / "nightly_demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CONFIG = """\
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[4, 2, 32]]

[modules.Block]
factory = "toyte.blocks:make_block"
kwargs = { hidden = 32 }

[modules.Control]
factory = "toyte.blocks:make_linear"
kwargs = { hidden = 32 }

[schedule]
processes = 2
rounds = 1
trials = 2
iters = 20
warmup = 5
spawn = "forkserver"
"""


def fixture_repo(root: Path, commits: int):
    """The demo's toyte repository (a 40 us step at commit 2) and the tiny config: (demo, repo, site, shas,
    config)."""
    demo = load_demo()
    repo, site, shas = demo.make_repo(root, commits=commits, step_at=2, spin_us=40)
    config = root / "tiny.toml"
    config.write_text(CONFIG)
    return demo, repo, site, shas, config


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("nightly")
    demo, repo, site, shas, config = fixture_repo(root, 4)
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "TEPERF_CACHE": str(root / "cache"),
        "TEPERF_HISTORY": str(root / "history"),
    }
    env.pop("TEPERF_ALLOW_DIRTY", None)

    def nightly(*extra, ref_at=None):
        if ref_at is not None:
            demo.git(repo, "branch", "-f", "nightly", ref_at)
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "teperf",
                "nightly",
                "--repo",
                str(repo),
                "--ref",
                "nightly",
                "--package",
                "toyte",
                "--strategy",
                "overlay",
                "--config",
                str(config),
                "--results-dir",
                str(root / "bundles"),
                "--format",
                "json",
                *extra,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    return root, repo, shas, nightly


def test_nightly_pairs_night_after_night(fixture):
    root, repo, shas, nightly = fixture
    store = HistoryStore(root / "history")

    first = nightly(ref_at=shas[1])
    assert first.returncode == 0, first.stderr
    assert "first parent" in first.stderr
    df = store.read()
    assert set(df.sha) == {shas[1]} and set(df.base_sha) == {shas[0]} and set(df.ref) == {"nightly"}
    assert set(df.module) == {"Block", "Control"} and set(df.run_kind) == {"nightly"}

    again = nightly()
    assert again.returncode == 0 and "nothing new" in again.stderr
    assert len(store.files()) == 1

    second = nightly(
        ref_at=shas[3]
    )  # two commits later: paired with the last nightly's commit, not the parent
    assert second.returncode == 0, second.stderr
    df = store.read()
    night2 = df[df.sha == shas[3]]
    assert set(night2.base_sha) == {shas[1]}
    assert len(set(df.machine)) == 1
    # the planted 40 us busy-wait arrived between the two nights (commit 2)
    block = night2[night2.module == "Block"].iloc[0]
    assert block.delta_us > 20, block.to_dict()


def test_shards_split_the_cells(fixture):
    root, repo, shas, nightly = fixture
    hist = root / "sharded"
    results = [nightly("--shard", f"{i}/2", "--history", str(hist), ref_at=shas[3]) for i in (1, 2)]
    for r in results:
        assert r.returncode == 0, r.stderr
    df = HistoryStore(hist).read()
    assert sorted(df.module) == ["Block", "Control"]
    assert sorted(df.shard) == ["1/2", "2/2"]
    assert df.groupby("shard").module.nunique().tolist() == [1, 1]
    assert set(df.base_sha) == {shas[2]}  # both shards: the head's parent (no earlier night in this store)
    again = nightly("--shard", "2/2", "--history", str(hist))
    assert again.returncode == 0 and "nothing new" in again.stderr


def test_dashboard_from_measured_history(fixture, tmp_path):
    root, *_ = fixture
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "teperf",
            "dashboard",
            "--history",
            str(root / "history"),
            "--out",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert "Block" in (tmp_path / "site" / "index.html").read_text()


def test_shards_are_one_night(fixture):
    from teperf.history.nights import nights

    root, *_ = fixture
    (night,) = nights(HistoryStore(root / "sharded").read())
    assert night.complete and night.count == 2 and night.shards == {1: "complete", 2: "complete"}


def test_an_interrupted_shard_is_recorded_as_interrupted(fixture, tmp_path):
    """Ctrl-C (Slurm's --signal=INT near the time limit) leaves the shard in the history, marked
    interrupted."""
    import json
    import signal
    import time

    from teperf.history.nights import nights

    root, repo, shas, _ = fixture
    hist, results = tmp_path / "h", tmp_path / "bundles"
    env = {**os.environ, "PYTHONPATH": str(root / "site-packages"), "TEPERF_CACHE": str(root / "cache")}
    env.pop("TEPERF_ALLOW_DIRTY", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "teperf",
            "nightly",
            "--repo",
            str(repo),
            "--ref",
            "nightly",
            "--package",
            "toyte",
            "--strategy",
            "overlay",
            "--config",
            str(root / "tiny.toml"),
            "--processes",
            "50",
            "--results-dir",
            str(results),
            "--format",
            "json",
            "--history",
            str(hist),
            "--shard",
            "2/2",
            "--night",
            "ci-9",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(
            signal.SIGINT, signal.SIG_DFL
        ),  # see test_ctrl_c_keeps_every_measured_trial
    )
    deadline = time.monotonic() + 300  # wait (by content) until trials are on disk
    while time.monotonic() < deadline and proc.poll() is None:
        records = list(results.glob("*/records.jsonl"))
        if records and sum('"kind":"trial"' in line for line in records[0].read_text().splitlines()) >= 4:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "added to the history as an interrupted shard" in err
    df = HistoryStore(hist).read()
    assert set(df.run_status) == {"interrupted"} and set(df.night) == {"ci-9"} and set(df.shard) == {"2/2"}
    (night,) = nights(df)
    assert night.describe() == "incomplete: 0 of 2 shards (missing 1/2; 2/2 interrupted)"
    bundle = json.loads((next(results.glob("*/meta.json"))).read_text())
    assert bundle["nightly"]["night"] == "ci-9"
