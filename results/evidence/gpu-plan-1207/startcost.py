"""What a fresh worker spends before it measures, per case, from a compare bundle's setup records:
seconds of set-up (building the module, its first call, the warm-up) and the first call's process CPU.
Usage: python startcost.py BUNDLE_DIR... (each holding records.jsonl)."""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

for bundle in sys.argv[1:]:
    records = [json.loads(line) for line in (Path(bundle) / "records.jsonl").open()]
    meta = json.loads((Path(bundle) / "meta.json").read_text())
    names = {c["id"]: f"{c['module']}/{c['recipe']}" for c in meta["cases"]}
    cases, workers = defaultdict(list), defaultdict(float)
    for r in records:
        if r["kind"] == "setup" and r["status"] == "ready":
            info = r["info"]
            cases[r["case_id"]].append((info["setup_s"], info["first_call"]["process_cpu_ns"] / 1e9))
            workers[(r["pair"], r["side"])] += info["setup_s"]
    starts = [r["start_s"] for r in records if r["kind"] == "pair"]
    print(
        f"{bundle}: {len(workers)} workers; a worker's set-up of its cases {statistics.median(workers.values()):.1f} s "
        f"(median); a pair's start {statistics.median(starts):.1f} s (median, started ahead or not)"
    )
    for case_id, rows in sorted(cases.items()):
        print(
            f"  {names.get(case_id, case_id):32s} set-up {statistics.median(s for s, _ in rows):5.2f} s   "
            f"first call {statistics.median(f for _, f in rows):5.2f} s of CPU"
        )
