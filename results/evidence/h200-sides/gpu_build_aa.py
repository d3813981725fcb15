"""A/A of the installed TE against the extension rebuilt from the same source (issue 20, item 6).

A local build of the same source must read the same as the wheel's, or every extension-tier compare
and bisect probe that mixes the two carries the build difference in its delta. Both directions:
installed as base and built as head, then built as base and installed as head.

    python results/evidence/h200-sides/gpu_build_aa.py --repo /tmp/te-src --ref v2.16 --out results/evidence/h200-sides
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from teperf import api
from teperf.config import load_config
from teperf.render import render
from teperf.sides.git import plan_sides


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--ref", default="v2.16")
    ap.add_argument("--out", required=True)
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--directions", default="installed-built,built-installed")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # ref..ref with the extension strategy: the extension of that commit built from its tree (cached)
    built, _ = plan_sides(f"{args.ref}..{args.ref}", repo=args.repo, strategy="extension").make()
    print(f"extension ready in {time.perf_counter() - t0:.0f} s: {built.sys_path[0]}", flush=True)
    installed = api.path_side("base", None, sys.executable)
    config = load_config("pr-thread", {"processes": args.processes, "rounds": 2, "trials": 6, "iters": 50})
    results = {}
    for direction in args.directions.split(","):
        first, second = direction.split("-")
        sides = {"installed": installed, "built": built}
        base = dataclasses.replace(sides[first], label="base")
        head = dataclasses.replace(sides[second], label="head")
        t1 = time.perf_counter()
        path = api.compare(config, base, head, results_dir=str(out), command=["gpu_build_aa.py", direction])
        summary = api.summarize(path)
        text = render(summary, "markdown")
        print(f"== {direction} ({time.perf_counter() - t1:.0f} s)\n{text}", flush=True)
        (out / f"aa-{direction}.md").write_text(text)
        results[direction] = {
            "bundle": str(path),
            "rows": [
                {k: r.get(k) for k in ("module", "recipe", "delta_pct", "ci_low_us", "ci_high_us", "verdict")}
                for r in (row.to_dict() for row in summary.rows)
            ],
            "imported": summary.imported,
            "code_problems": summary.code_problems,
        }
    (out / "aa.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
