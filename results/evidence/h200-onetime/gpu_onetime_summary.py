"""Summary of results/evidence/h200-onetime/gpu_onetime.sh's output directory: one-time A/A verdicts under issue 32's rule per mode
and cost, and the warm-cache job's hits per compile first call. Stdlib + scipy (no torch).

    python3 results/evidence/h200-onetime/gpu_onetime_summary.py OUT > OUT/summary.md
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from scipy.stats import binomtest

COSTS = ("first_call", "recompile")
FIGURES = ("verdict", "n_pairs", "min_effect_pct", "pair_sd_pct", "delta_pct")


def wilson_interval(k: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion k / n (scipy's); (0, 1) where n is 0."""
    return tuple(map(float, binomtest(k, n).proportion_ci(method="wilson"))) if n else (0.0, 1.0)


def runs(out: Path, say: bool = False):
    """(job, run number, its JSON) for every run that wrote one; ``say``: name those that did not."""
    for path in sorted(out.glob("*/*.json")):
        try:
            yield path.parent.name, path.stem, json.loads(path.read_text())
        except (ValueError, OSError):
            if say:
                print(f"- {path}: no JSON (cut short or failed: see {path.with_suffix('.err')})\n")


def median(values) -> str:
    values = [v for v in values if v is not None]
    return f"{statistics.median(values):.1f}" if values else "-"


def verdict_table(out: Path) -> int:
    groups = defaultdict(list)  # (mode + cache, cost) -> figures of a cell
    tables = called = 0  # compares, and those with any slower/faster (per step or one-time)
    for job, _, data in runs(out, say=True):
        warm = " (warm cache)" if job == "warm" else ""
        verdicts = []
        for row in data.get("rows", []):
            if row.get("verdict"):
                groups[(row["mode"] + warm, "per step")].append({k: row.get(k) for k in FIGURES})
                verdicts.append(row["verdict"])
            for cost in COSTS:
                if row.get(f"{cost}_n_pairs"):
                    groups[(row["mode"] + warm, cost)].append({k: row.get(f"{cost}_{k}") for k in FIGURES})
                    verdicts.append(row.get(f"{cost}_verdict"))
        tables += 1
        called += any(v in ("slower", "faster") for v in verdicts)
    print(
        "| mode | cost | cells | with a verdict | slower | faster | false rate [95% Wilson] | no change | "
        "inconclusive | too few pairs | median pairs | median min effect % | median pair sd % |"
    )
    print("|" + "---|" * 13)
    total = false_total = decided_total = 0
    step_cells = step_false = 0
    for (mode, cost), cells in sorted(groups.items()):
        verdicts = [c["verdict"] or "" for c in cells]
        decided = [v for v in verdicts if not v.startswith("too few")]
        slower, faster = verdicts.count("slower"), verdicts.count("faster")
        low, high = wilson_interval(slower + faster, len(decided))
        rate = f"{(slower + faster) / len(decided):.1%} [{low:.1%}, {high:.1%}]" if decided else "-"
        print(f"| {mode} | {cost} | {len(cells)} | {len(decided)} | {slower} | {faster} | {rate} | "
              f"{verdicts.count('no change')} | {sum(v.startswith('inconclusive') for v in verdicts)} | "
              f"{len(verdicts) - len(decided)} | {median(c['n_pairs'] for c in cells)} | "
              f"{median(c['min_effect_pct'] for c in cells)} | "
              f"{median(c['pair_sd_pct'] for c in cells)} |")  # fmt: skip
        if cost == "per step":
            step_cells, step_false = step_cells + len(decided), step_false + slower + faster
            continue
        total, decided_total, false_total = (
            total + len(cells),
            decided_total + len(decided),
            false_total + slower + faster,
        )
    low, high = wilson_interval(false_total, decided_total)
    print(f"\nall: {total} one-time A/A cells ({'at least' if total >= 64 else 'FEWER than'} 64), "
        f"{decided_total} "
          f"with a verdict, {false_total} slower/faster: {false_total / max(1, decided_total):.1%} "
          f"[{low:.1%}, {high:.1%}] (target <= 5%)")  # fmt: skip
    low, high = wilson_interval(step_false, step_cells)
    rate = step_false / max(1, step_cells)
    print(f"per step: {step_cells} A/A cells, {step_false} slower/faster: {rate:.1%} [{low:.1%}, {high:.1%}]")
    low, high = wilson_interval(called, tables)
    print(f"tables: {tables} A/A compares, {called} with any slower/faster: {called / max(1, tables):.1%} "
          f"[{low:.1%}, {high:.1%}] (the table rule's target <= 5%)")  # fmt: skip
    return total


def cache_line(cache: dict) -> tuple[bool, str]:
    """Whether a compile first call found every graph it compiled in the cache, and what it found."""
    graphs = sum(cache.get(f"fxgraph_{k}", 0) for k in ("hit", "miss", "bypass"))
    counts = ", ".join(f"{k} {cache[k]}" for k in sorted(cache) if k.endswith(("_hit", "_miss", "_bypass")))
    if "fxgraph_hit" not in cache:
        return False, f"no cache counters (files before: {cache.get('files_before')})"
    if not graphs:
        return False, f"compiled nothing inductor caches ({counts})"
    hit = cache.get("fxgraph_hit") == graphs
    return hit, ("hit: " if hit else "MISS: ") + counts


def warm_table(out: Path) -> None:
    print("\n## warm compile cache: every compile first call\n")
    for bundle in sorted(p.parent for p in out.glob("warm/*/*/records.jsonl")):
        cases = {c["id"]: c for c in json.loads((bundle / "meta.json").read_text())["cases"]}
        hits = n = 0
        for line in (bundle / "records.jsonl").read_text().splitlines():
            r = json.loads(line)
            first = (r.get("info") or {}).get("first_call") if r.get("kind") == "setup" else None
            if not isinstance(first, dict) or not isinstance(first.get("cache"), dict):
                continue
            c = cases[r["case_id"]]
            hit, text = cache_line(first["cache"])
            hits, n = hits + hit, n + 1
            print(f"- pair {r.get('pair')} {r['side']} {c['module']} {c['recipe']}: {text}")
        print(f"\n{hits} of {n} warm compile first calls found every graph in the cache ({bundle.name})")
    for _, _, data in (x for x in runs(out) if x[0] == "warm"):
        for note in data.get("onetime_notes", []):
            if note.startswith("compile cache"):
                print(f"the run's footer: {note}")


def main() -> None:
    out = Path(sys.argv[1])
    print("# one-time A/A on the H200 (results/evidence/h200-onetime/gpu_onetime.sh)\n")
    for _, _, data in runs(out):
        rule = [n for n in data.get("onetime_notes", []) if n.startswith("verdicts:")]
        if rule:
            print(f"rule: {rule[0]}; table levels of this run: {data.get('table_levels')}\n")
            break
    verdict_table(out)
    warm_table(out)


if __name__ == "__main__":
    main()
