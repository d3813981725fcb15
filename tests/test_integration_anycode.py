"""Integration: any PyTorch code base by git refs (issue 24), on a nanoGPT-shaped history: one module
(``model.py``) at the repo root, a factory outside the repo found through PYTHONPATH, token ids from
an inputs factory. Real CLI, real workers."""

from __future__ import annotations

import json
import os

from conftest import run_cli
from gitfixture import make_single_module
from schedules import TINY


def test_single_module_repo_compares_by_git_refs_and_explains_later(tmp_path):
    fx = make_single_module(tmp_path)
    env = {"PYTHONPATH": str(fx.helpers), "TEPERF_CACHE": str(tmp_path / "cache")}
    spec = f"{fx.base}..{fx.head}"

    # No --package: two top-level modules, so teperf cannot tell which is under test, and says so.
    res = run_cli("compare", spec, "--repo", fx.repo, "--config", fx.config, "--plan", env=env, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "cannot tell which package is under test" in res.stderr and "model, train" in res.stderr

    # --package model alone finds model.py; the image is a data file, not a build input.
    res = run_cli(
        "compare", spec, "--repo", fx.repo, "--package", "model", "--config", fx.config, "--plan", env=env
    )
    assert res.returncode == 0, res.stderr
    assert "strategy path" in res.stderr and "(1 python, 1 other)" in res.stderr

    # The newcomer's command: --package model --package-dir . (the module's directory).
    results = tmp_path / "results"
    res = run_cli(
        "compare",
        spec,
        "--repo",
        fx.repo,
        "--package",
        "model",
        "--package-dir",
        ".",
        "--config",
        fx.config,
        *TINY,
        "--format",
        "json",
        "--results-dir",
        results,
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["rows"]
    assert row["status"] == "ok", row
    counters = row["counters"]
    assert counters["head"]["python_calls"] - counters["base"]["python_calls"] == 5  # the planted calls
    (bundle,) = list(results.iterdir())
    sides = json.loads((bundle / "meta.json").read_text())["sides"]
    assert sides["head"]["env"]["PYTHONPATH"] == str(fx.helpers)  # recorded for explain
    assert sides["head"]["strategy"] == "path" and sides["head"]["package_dir"] == "model.py"

    # Later, from a shell without that PYTHONPATH: explain uses the recorded one.
    shell = {**env, "PYTHONPATH": ""}
    res = run_cli("explain", bundle, "--iters", "5", "--repeats", "1", "--format", "json", env=shell)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert not report.get("errors"), report.get("errors")
    res = run_cli("report", bundle, env=shell)
    # the table wraps the line where the path's length puts it (between "PYTHONPATH" and the path, too)
    assert res.returncode == 0 and f"PYTHONPATH{fx.helpers}" in "".join(res.stdout.split())
    assert os.environ.get("PYTHONPATH", "") != str(fx.helpers)  # the test's own shell had no such path
