"""`teperf nightly` for real: git sides on a fixture repo, real workers, the history store.

Small schedule (a few seconds a night); checks what each night is paired with,
that a night with nothing new is skipped, that two shards split the cells, and
that the dashboard builds from what was measured.
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
"""


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("nightly")
    demo = load_demo()
    repo, site, shas = demo.make_repo(root, commits=4, step_at=2, spin_us=40)
    config = root / "tiny.toml"
    config.write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": str(site), "TEPERF_CACHE": str(root / "cache"), "TEPERF_HISTORY": str(root / "history")}
    env.pop("TEPERF_ALLOW_DIRTY", None)

    def nightly(*extra, ref_at=None):
        if ref_at is not None:
            demo.git(repo, "branch", "-f", "nightly", ref_at)
        return subprocess.run(
            [sys.executable, "-m", "teperf", "nightly", "--repo", str(repo), "--ref", "nightly", "--package", "toyte",
             "--strategy", "overlay", "--config", str(config), "--results-dir", str(root / "bundles"), "--format", "json", *extra],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
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

    second = nightly(ref_at=shas[3])  # two commits later: paired with the last nightly's commit, not the parent
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
    out = subprocess.run([sys.executable, "-m", "teperf", "dashboard", "--history", str(root / "history"), "--out", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert "Block" in (tmp_path / "site" / "index.html").read_text()
