#!/usr/bin/env python3
"""A small nightly on the CPU, end to end, with no GPU and no network.

1. Makes a throw-away git repository of a tiny PyTorch package, ``toyte``, with
   one commit per day; from commit ``--step-at`` on, ``toyte.blocks.Block``'s
   forward busy-waits ``--spin-us`` microseconds (a planted host regression).
   One commit subject carries HTML (``<script>``...) to show it is escaped.
2. For each commit in order, moves the fixture's ``main`` to it and runs the
   real ``teperf nightly --ref main`` (git sides, overlay strategy), which pairs
   the commit with the previous night's and appends to a history store.
3. Builds the dashboard: ``<out>/site/index.html``.

    python examples/nightly_demo.py                 # ~3-4 minutes on 2 cores
    python examples/nightly_demo.py --commits 12 --out /tmp/nightly-demo
    python examples/nightly_demo.py --synthetic     # no measuring: a synthetic 40-night history

Then open ``<out>/site/index.html`` in a browser (file://, works offline).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GIT_ENV = {
    "GIT_AUTHOR_NAME": "teperf demo",
    "GIT_AUTHOR_EMAIL": "demo@teperf.invalid",
    "GIT_COMMITTER_NAME": "teperf demo",
    "GIT_COMMITTER_EMAIL": "demo@teperf.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}

BLOCKS = '''\
"""toyte: a stand-in for TransformerEngine in teperf's nightly demo (commit {i})."""
import time

import torch
from torch import nn

SPIN_NS = {spin_ns}  # host-side work added to every forward (the planted regression)


def _spin(ns):
    # CPU time, not wall time: the plant keeps its size when the machine is loaded
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


class Block(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, x):
        if SPIN_NS:
            _spin(SPIN_NS)
        return torch.relu(self.fc(self.norm(x)))


def make_block(hidden=64):
    return Block(hidden)


def make_linear(hidden=64):
    return nn.Linear(hidden, hidden)
'''

CONFIG = """\
# nightly demo: one block that changes with the commits, one control that does not
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[8, 2, 64]]

[modules.Block]
factory = "toyte.blocks:make_block"
kwargs = {{ hidden = 64 }}

[modules.Control]
factory = "toyte.blocks:make_linear"
kwargs = {{ hidden = 64 }}

[schedule]
processes = {processes}
rounds = 2
trials = 3
iters = {iters}
warmup = 20
"""

SUBJECTS = {
    3: 'Escape test: subject with <script>alert("pwned")</script> & <b>tags</b>',
}


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    full = {**os.environ, **GIT_ENV, **(env or {})}
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=full)
    if out.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout.strip()


def make_repo(root: Path, commits: int, step_at: int, spin_us: int) -> tuple[Path, Path, list[str]]:
    """The fixture repo (one commit a day) and an 'installed' copy of its first commit."""
    repo = root / "toyte-repo"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "commit.gpgsign", "false")
    (repo / "README.md").write_text("# toyte\nA stand-in package for teperf's nightly demo.\n")
    pkg = repo / "toyte"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('"""toyte"""\n')
    start = dt.datetime(2025, 3, 1, 21, 0, tzinfo=dt.timezone.utc)
    shas = []
    for i in range(commits):
        spin_ns = spin_us * 1000 if i >= step_at else 0
        (pkg / "blocks.py").write_text(BLOCKS.format(i=i, spin_ns=spin_ns))
        (repo / "CHANGES.md").write_text(f"commit {i}\n")
        if i == step_at:
            subject = f"Block: validate inputs on every call (adds ~{spin_us} us host work)"
        else:
            subject = SUBJECTS.get(i, f"Routine change number {i}")
        date = (start + dt.timedelta(days=i)).isoformat()
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        shas.append(git(repo, "rev-parse", "HEAD"))
    # the "installed" build the overlay strategy puts each side's .py files on
    site = root / "site-packages"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir()
    git(repo, "checkout", "-q", shas[0])
    shutil.copytree(pkg, site / "toyte")
    dist = site / "toyte-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyte\nVersion: 0.1.0\n")
    (dist / "top_level.txt").write_text("toyte\n")
    (dist / "RECORD").write_text("")
    git(repo, "checkout", "-q", "main")
    return repo, site, shas


def teperf(*args: str, env: dict) -> None:
    cmd = [sys.executable, "-m", "teperf", *args]
    print("+ teperf " + " ".join(args), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"teperf {args[0]} failed (exit {proc.returncode})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out",
        default=str(ROOT / "results" / "nightly-demo"),
        help="work directory (default results/nightly-demo)",
    )
    ap.add_argument("--commits", type=int, default=12)
    ap.add_argument("--step-at", type=int, default=8, help="first commit with the planted slowdown")
    ap.add_argument("--spin-us", type=int, default=40)
    ap.add_argument("--processes", type=int, default=2, help="worker pairs per night")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument(
        "--synthetic",
        action="store_true",
        help="no measuring: write a synthetic 40-night history and build the site",
    )
    args = ap.parse_args(argv)

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    history = out / "history"
    site = out / "site"
    if history.exists():
        shutil.rmtree(history)
    env = {**os.environ, "TEPERF_HISTORY": str(history), "PYTHONPATH": ""}
    env.pop("TEPERF_ALLOW_DIRTY", None)
    started = time.perf_counter()

    if args.synthetic:
        sys.path.insert(0, str(ROOT))
        from teperf.history import synthetic
        from teperf.history.store import HistoryStore

        plan = synthetic.Plan(
            commits=40,
            steps={("LayerNormLinear", "fp32", 24): 6.0, ("Linear", "fp32", 30): -5.0},
            drifts={("LayerNormMLP", "fp32"): 0.3},
            subjects={24: 'Escape test: <script>alert("pwned")</script> in a subject'},
            machines=(("Synthetic CPU @ 2.0GHz", None, None), ("Synthetic Xeon", "NVIDIA H200", "570.124")),
        )
        synthetic.write(HistoryStore(history), plan)
    else:
        if args.commits < 2 * 3 + 1 or not 3 <= args.step_at <= args.commits - 3:
            raise SystemExit(
                "need --commits >= 7 and 3 <= --step-at <= commits-3 (E-divisive wants >= 3 nights each side)"
            )
        repo, site_packages, shas = make_repo(out, args.commits, args.step_at, args.spin_us)
        config = out / "nightly-demo.toml"
        config.write_text(CONFIG.format(processes=args.processes, iters=args.iters))
        env.update(
            PYTHONPATH=str(site_packages),  # the "installed" toyte the overlay sits on
            TEPERF_CACHE=str(out / "cache"),
        )
        for i, sha in enumerate(shas):
            git(repo, "branch", "-f", "nightly", sha)  # the watched branch moves on, one commit a night
            print(f"\n=== night {i + 1}/{len(shas)}: {sha[:10]} ===", flush=True)
            teperf(
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
                str(out / "bundles"),
                "--format",
                "markdown",
                env=env,
            )
        teperf("history", "--changes", env=env)
    teperf("dashboard", "--out", str(site), env=env)
    print(f"\ndone in {time.perf_counter() - started:.0f}s: open {site / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
