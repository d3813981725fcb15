"""Backfill a fixture history, find its change point, explain it: real git sides, workers and bisect.

Four nights (GOOD and three commits), a 3 ms busy-wait planted at commit 2 (its size is what a few pairs
resolve, not the engine's precision): night 2's paired compare against night 1 is the change point, with an
unchanged night on either side. Change points come from each night's paired compare (history/analysis.py),
so more nights add only chances of a false step, and a compare each (six nights were a third more time);
the levels' own search over longer histories is tests/test_history_changepoint.py's.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_in_process
from gitfixture import HISTORY_CONFIG, git, make_history

from teperf.bisect import timing

# A small schedule in the config, so that history --explain's bisect uses it too. Workers fork from a server
# per side and pair (3 pairs in 3 generations: a verdict needs 3 units); spawning is
# tests/test_integration_forkserver.py's subject.
SCHEDULE = """
[schedule]
processes = 3
rounds = 1
trials = 2
iters = 5
warmup = 3
spawn = "forkserver"
server_pairs = 1

[stats]
max_contended_pct = 100
"""


def teperf(capsys, *args):
    """The real CLI entry point in this process (its workers are real processes): (stdout, stderr)."""
    code, out, err = run_in_process(list(args), capsys)
    assert code == 0, err[-3000:]
    return out, err


@pytest.mark.statistical  # the nights' change point and its culprit are found by live timing (a 3 ms spin)
def test_backfill_resume_and_explain(tmp_path, monkeypatch, capsys):
    # explain's bisect spans one commit (night 1..night 2): GOOD..BAD is its only part, so no part is measured
    # with MIN_TRIAL_S's trials; a longer MIN_TRIAL_S (100 ms: each slow trial was 6 s of spinning; 20 ms
    # still cost a compare, 6 torch imports) would only measure GOOD..BAD a second time. Its subject is which
    # commit, not the trials' length: that they last MIN_TRIAL_S and GOOD..BAD is measured again with them is
    # tests/test_bisect.py's (a fake compare)
    monkeypatch.setattr(timing, "MIN_TRIAL_S", 0.0)
    history = make_history(tmp_path / "fx", n=3, culprit=2, spin_ns=3_000_000)
    monkeypatch.setenv("PYTHONPATH", str(history.site))
    monkeypatch.setenv("TEPERF_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    git(history.repo, "remote", "add", "origin", "https://github.com/acme/mypkg.git")
    (tmp_path / "cfg.toml").write_text(HISTORY_CONFIG + SCHEDULE)
    common = ["--repo", str(history.repo), "--package", "mypkg", "--config", "cfg.toml", "--history", "hist"]

    _, err = teperf(capsys, "nightly", "--backfill", "good..bad", *common, "--results-dir", "res")
    assert "backfill: 4 measured, 0 already in the store" in err
    assert "left" in err  # the estimate of the time left
    out, _ = teperf(capsys, "nightly", "--backfill", "good..bad", "--dry-run", *common)
    assert "would measure 0 commit(s), one night each, oldest first; 4 already in the store" in out
    _, err = teperf(capsys, "nightly", "--backfill", "good..bad", *common)
    assert "backfill: 0 measured, 4 already in the store" in err

    out, _ = teperf(capsys, "history", "--changes", "--explain", "--format", "json", *common)
    changes = json.loads(out)
    # on a miss, the nights as measured (each one's paired verdict) say why
    # the history's table on a miss (no --config: history alone takes none)
    assert len(changes) == 1, run_in_process(["history", "--history", "hist"], capsys)[1]
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
    _, err = teperf(capsys, "history", "--changes", "--explain", *common)
    assert "explain: 0 change point(s) bisected" in err
    teperf(capsys, "dashboard", "--history", "hist", "--out", "site")
    assert top["url"] in (tmp_path / "site" / "regressions.html").read_text()
