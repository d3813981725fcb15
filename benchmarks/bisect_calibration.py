"""teperf bisect on histories whose answer is known (issue 31): which commits it names, their time shares,
whether the shares add up to GOOD..BAD's measured delta, probes and wall time. Figures, not asserts.

  calls+spin  8 commits: 60 cheap Python calls at commit 2, a 150 us CPU-time spin at 6 (no counter)
  many        64 commits: 56 that change the Python calls (+-3..9 each), spins of 300 and 150 us at 20
              and 47 (50+ change points; the counters must name every one, time the two spins)
  vq          vector-quantize-pytorch 1.14.0..1.22.0 (../shared/repos, vq.toml): d3dd5e5 must come first
  xt          x-transformers 1.16.8..2.16.1 (../shared/repos, x-transformers.toml): time culprits first, every
              counter change point with its time share, in <= 15 min

    python benchmarks/bisect_calibration.py [calls+spin many vq] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
SHARED_REPOS = ROOT.parent / "shared" / "repos"
SCHEDULE = ["--processes", "3", "--rounds", "1", "--trials", "4", "--iters", "20", "--warmup", "5"]


def run_bisect(repo: Path, spec: str, cell: str, config: Path, results: Path, env: dict, extra=()) -> dict:
    argv = [sys.executable, "-m", "teperf", "bisect", spec, "--cell", cell, "--repo", str(repo)]
    argv += ["--config", str(config), "--format", "json", "--results-dir", str(results), *extra]
    t0 = time.perf_counter()
    res = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if res.returncode not in (0, 1, 3, 4):  # teperf bisect --help: an answer; 2 and signals are not
        raise SystemExit(f"bisect failed ({res.returncode}): {res.stderr[-3000:]}")
    out = json.loads(res.stdout)
    out["wall"], out["exit"], out["text"] = wall, res.returncode, res.stderr
    return out


def show(name: str, out: dict, expect: list[str], counter_changes: int | None = None) -> None:
    result = out["meta"]["result"]
    end = result.get("endpoint") or {}
    culprits = out["culprits"]
    named = [c["short_sha"] for c in culprits]
    print(f"\n== {name}: {out['answer']}")
    print(f"   wall {out['wall']:.0f} s; {result.get('compares')} compares ({result.get('timing_s')} s); "
        "counter probes "
          f"{result.get('counter_probes')} at {result.get('counter_probe_s')} s each (median)")  # fmt: skip
    print(f"   GOOD..BAD {end.get('delta_us', 0):+.1f} us [{end.get('ci_low_us', 0):+.1f}, "
          f"{end.get('ci_high_us', 0):+.1f}]; steps add up to {result.get('steps_us')} us, inside the "
              "interval: "
          f"{result.get('steps_within_interval')}")  # fmt: skip
    for c in culprits:
        lo, hi = c.get("share_ci") or (None, None)
        print(f"   {c['short_sha']} {c['subject'][:50]!r}: {c['delta_us']:+.1f} us, share {c['share']:.0%} "
              f"[{lo:.0%}, {hi:.0%}], counters {c.get('counters')}")  # fmt: skip
    print(
        f"   expected first: {expect[0]}; named: {named}; first right: "
        f"{bool(named) and named[0] == expect[0]}"
    )
    if counter_changes is not None:
        found = len(result.get("counter_changes") or [])
        print(f"   counter change points named: {found} of {counter_changes}")


def calls_and_spin(tmp: Path, results: Path) -> None:
    from gitfixture import HISTORY_CONFIG, make_history

    history = make_history(tmp / "cs", n=8, steps={2: {"extra_calls": 60}, 6: {"spin_ns": 150_000}})
    config = tmp / "cs.toml"
    config.write_text(HISTORY_CONFIG)
    env = {**_env(), "PYTHONPATH": str(history.site)}
    out = run_bisect(
        history.repo, "good..bad", "MLP/fp32", config, results, env, ["--package", "mypkg", *SCHEDULE]
    )
    show("calls+spin", out, [history.shas[6][:7], history.shas[2][:7]], counter_changes=1)


def many(tmp: Path, results: Path) -> None:
    from gitfixture import HISTORY_CONFIG, make_history

    steps: dict = {}
    calls = 20
    for i in range(1, 65):
        if i % 8 != 0:  # 56 commits change the calls, up and down
            calls = max(0, calls + (3 + i % 7) * (1 if i % 3 else -1))
            steps[i] = {"extra_calls": calls}
    steps[20] = {**steps.get(20, {}), "spin_ns": 300_000}
    steps[47] = {**steps.get(47, {}), "spin_ns": 450_000}
    history = make_history(tmp / "many", n=64, steps=steps)
    config = tmp / "many.toml"
    config.write_text(HISTORY_CONFIG)
    env = {**_env(), "PYTHONPATH": str(history.site)}
    out = run_bisect(
        history.repo, "good..bad", "MLP/fp32", config, results, env, ["--package", "mypkg", *SCHEDULE]
    )
    changed = sum(1 for i in range(1, 65) if i % 8 != 0)
    show("many", out, [history.shas[20][:7], history.shas[47][:7]], counter_changes=changed)


def _clone(name: str, bundle_file: str, tmp: Path) -> Path | None:
    """A real history from ../shared/repos, cloned under ``tmp`` (None, said, where it is not there)."""
    bundle = SHARED_REPOS / bundle_file
    if not bundle.exists():
        print(f"\n== {name}: skipped ({bundle} not found)")
        return None
    repo = tmp / name
    subprocess.run(["git", "clone", "-q", str(bundle), str(repo)], check=True)
    return repo


def vq(tmp: Path, results: Path) -> None:
    repo = _clone("vq", "vector-quantize-pytorch.bundle", tmp)
    if repo is None:
        return
    out = run_bisect(repo, "1.14.0..1.22.0", "VQ/fp32", SHARED_REPOS / "vq.toml", results, _env())
    show("vq 1.14.0..1.22.0", out, ["d3dd5e5", "56f20dc"])


def xt(tmp: Path, results: Path) -> None:
    repo = _clone("xt", "x-transformers.bundle", tmp)
    if repo is None:
        return
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "2.16.1"], check=True)
    config = SHARED_REPOS / "x-transformers.toml"
    out = run_bisect(repo, "1.16.8..2.16.1", "Encoder/fp32", config, results, _env())
    show("xt 1.16.8..2.16.1", out, [c["short_sha"] for c in out["culprits"]] or ["?"])
    print(f"   exit {out['exit']}; counter change points {len(out['counter_changes'])}, counter-only movers "
          f"{len(out['counter_movers'])}, small movers {len(out['small_movers'])}, undecided "
          f"{len(out['unresolved'])}, counter segments under 1 % not narrowed "
          f"{len(out['counter_unresolved'])}")  # fmt: skip


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


CASES = {"calls+spin": calls_and_spin, "many": many, "vq": vq, "xt": xt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", metavar="CASE", help=f"of {', '.join(CASES)}; default: all of them")
    ap.add_argument("--results", type=Path, help="keep the bundles here (default: a temporary directory)")
    args = ap.parse_args()
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}: choose from {', '.join(CASES)}")
    with tempfile.TemporaryDirectory() as tmp:
        results = args.results or Path(tmp) / "results"
        for name in args.cases or CASES:
            CASES[name](Path(tmp), results / name)


if __name__ == "__main__":
    main()
