"""Real TransformerEngine: ``teperf compare base..head --strategy overlay`` on the installed build.

Makes a git repo whose base commit holds the installed TE package's ``.py``
files and whose head commit adds ~200 us of busy-waiting to
``LayerNormLinear.forward``, then runs the real CLI with the overlay
strategy. Skipped without CUDA or TE. On the H200:

    source .gpu/setup.sh && PYTHONPATH=.:$PYTHONPATH python3 -m pytest -m gpu tests/test_gpu_overlay.py -s

With TEPERF_KEEP_BUNDLE=DIR the bundle is written there (e.g. results/evidence/...).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from gitfixture import commit, git

pytestmark = [pytest.mark.gpu, pytest.mark.te]


def _why_skip() -> str | None:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformer_engine") is None:
        return "needs torch and transformer_engine"
    import torch

    if not torch.cuda.is_available():
        return "CUDA is not available"
    return None


_WHY = _why_skip()
if _WHY:
    pytestmark.append(pytest.mark.skip(reason=_WHY))

SLOWDOWN = """

# --- teperf GPU test: head's LayerNormLinear.forward does ~200 us of extra host work
import time as _teperf_time

_teperf_forward = LayerNormLinear.forward


def _teperf_slow_forward(self, *args, **kwargs):
    end = _teperf_time.perf_counter_ns() + 200_000
    while _teperf_time.perf_counter_ns() < end:
        pass
    return _teperf_forward(self, *args, **kwargs)


LayerNormLinear.forward = _teperf_slow_forward
"""


def test_overlay_on_installed_te_detects_slowdown(tmp_path):
    from teperf.sides.installed import find_installed

    installed = find_installed("transformer_engine", sys.executable)
    repo = tmp_path / "te-repo"
    pkg = repo / "transformer_engine"
    for src in installed.location.rglob("*.py"):
        if "__pycache__" in src.parts:
            continue
        dst = pkg / src.relative_to(installed.location)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    git(repo, "config", "user.name", "teperf tests")
    git(repo, "config", "user.email", "tests@teperf.invalid")
    commit(repo, f"base: installed transformer_engine {installed.version}")
    target = pkg / "pytorch" / "module" / "layernorm_linear.py"
    target.write_text(target.read_text() + SLOWDOWN)
    commit(repo, "head: LayerNormLinear.forward busy-waits 200 us")

    results = Path(os.environ.get("TEPERF_KEEP_BUNDLE") or tmp_path / "results")
    cmd = [
        sys.executable,
        "-m",
        "teperf",
        "compare",
        "main~1..main",
        "--repo",
        str(repo),
        "--strategy",
        "overlay",
        "--backend",
        "te",
        "--device",
        "cuda",
        "--modules",
        "Linear,LayerNormLinear",
        "--recipes",
        "bf16",
        "--shape",
        "8,2,256",
        "--processes",
        "4",
        "--rounds",
        "2",
        "--trials",
        "6",
        "--iters",
        "50",
        "--warmup",
        "20",
        "--no-counters",
        "--format",
        "json",
        "--results-dir",
        str(results),
    ]
    env = {
        **os.environ,
        "TEPERF_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=500)
    elapsed = time.time() - started
    print("$", " ".join(cmd))
    print(proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    rows = {r["module"]: r for r in out["rows"]}
    for r in rows.values():
        print(
            r["module"],
            r["base_us"],
            r["head_us"],
            r["delta_us"],
            r["ci_low_us"],
            r["ci_high_us"],
            r["verdict"],
        )
    bundle = max((p for p in results.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    trials = [
        json.loads(line)
        for line in (bundle / "records.jsonl").read_text().splitlines()
        if '"kind":"trial"' in line or '"kind": "trial"' in line
    ]
    first = min(t["t"] for t in trials)
    print(
        f"command start -> first measured trial: {first - started:.1f} s; whole command {elapsed:.1f} s; "
        f"bundle {bundle}"
    )
    meta = out["meta"]
    head = meta["sides"]["head"]
    assert head["strategy"] == "overlay" and head["installed"] == str(installed.location)
    workers = meta.get("workers", {})
    te_facts = workers.get("head", {}).get("backend_te", {})
    if te_facts:
        print(
            "head worker imported TE from", te_facts.get("location"), "ext", te_facts.get("torch_extension")
        )
        assert te_facts["location"].startswith(head["sys_path"][0])
    assert rows["LayerNormLinear"]["verdict"] == "slower", rows["LayerNormLinear"]
    assert 100 <= rows["LayerNormLinear"]["delta_us"] <= 400
    assert rows["Linear"]["verdict"] in ("no change", "inconclusive"), rows["Linear"]
    (bundle / "COMMANDS.txt").write_text(
        "# made by tests/test_gpu_overlay.py on the GPU machine\n"
        "source .gpu/setup.sh && PYTHONPATH=.:$PYTHONPATH python3 -m pytest -m gpu tests/test_gpu_overlay.py "
        "-s\n"
        f"# the test's repo: base = installed TE {installed.version} .py files, head = + busy-wait in "
        "LayerNormLinear.forward\n$ " + " ".join(cmd) + "\n"
        f"# command start -> first measured trial: {first - started:.1f} s; whole command {elapsed:.1f} s\n"
    )
