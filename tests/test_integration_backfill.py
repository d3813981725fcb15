"""Backfill a fixture history, find its change point, explain it: real git sides, workers and bisect.

Ten commits, a 3 ms busy-wait planted at commit 5 (its size is what two pairs resolve, not the
engine's precision): night 5's paired compare is the change point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gitfixture import HISTORY_CONFIG, git, make_history

ROOT = Path(__file__).resolve().parent.parent
# A small schedule in the config, so that history --explain's bisect uses it too. Workers fork from a server
# per side (2 torch imports a compare, not 4): spawning is tests/test_integration_forkserver.py's subject.
SCHEDULE = """
[schedule]
processes = 2
rounds = 1
trials = 2
iters = 5
warmup = 3
spawn = "forkserver"

[stats]
max_contended_pct = 100
"""


def teperf(tmp_path, history, *args):
    env = {**os.environ, "PYTHONPATH": str(history.site), "TEPERF_CACHE": str(tmp_path / "cache")}
    res = subprocess.run(
        [sys.executable, "-m", "teperf", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def test_backfill_resume_and_explain(tmp_path):
    history = make_history(tmp_path / "fx", n=9, culprit=5, spin_ns=3_000_000)
    git(history.repo, "remote", "add", "origin", "https://github.com/acme/mypkg.git")
    (tmp_path / "cfg.toml").write_text(HISTORY_CONFIG + SCHEDULE)
    common = ["--repo", str(history.repo), "--package", "mypkg", "--config", "cfg.toml", "--history", "hist"]

    first = teperf(tmp_path, history, "nightly", "--backfill", "good..bad", *common, "--results-dir", "res")
    assert "backfill: 10 measured, 0 already in the store" in first.stderr
    assert "left" in first.stderr  # the estimate of the time left
    dry = teperf(tmp_path, history, "nightly", "--backfill", "good..bad", "--dry-run", *common)
    assert "would measure 0 commit(s), one night each, oldest first; 10 already in the store" in dry.stdout
    again = teperf(tmp_path, history, "nightly", "--backfill", "good..bad", *common)
    assert "backfill: 0 measured, 10 already in the store" in again.stderr

    out = teperf(tmp_path, history, "history", "--changes", "--explain", "--format", "json", *common)
    changes = json.loads(out.stdout)
    # on a miss, the nights as measured (each one's paired verdict) say why
    assert len(changes) == 1, teperf(tmp_path, history, "history", *common).stdout
    (change,) = changes
    assert change["direction"] == "slower" and change["first_bad_sha"] == history.culprit
    explanation = change["explanation"]
    assert explanation["status"] == "explained", explanation["answer"]
    top = explanation["culprits"][0]
    assert (
        top["sha"] == history.culprit
        and top["url"] == f"https://github.com/acme/mypkg/commit/{history.culprit}"
    )
    print(f"\nbackfill + explain: {explanation['answer']}")

    # asked again: nothing left to bisect
    again = teperf(tmp_path, history, "history", "--changes", "--explain", *common)
    assert "explain: 0 change point(s) bisected" in again.stderr
    teperf(tmp_path, history, "dashboard", "--history", "hist", "--out", "site")
    assert top["url"] in (tmp_path / "site" / "regressions.html").read_text()
