"""The A/A bundles' couples by position: which side ran first in a couple, and which process started first.

python position.py DIR...  (compare bundles of an A/A run: the same code on both sides)
"""
import glob
import json
import math
import statistics
import sys
from collections import defaultdict

by_position, by_start = defaultdict(list), defaultdict(list)
for root in sys.argv[1:]:
    for bundle in sorted(glob.glob(f"{root}/*/records.jsonl")):
        recs = [json.loads(line) for line in open(bundle)]
        pid = {(r["pair"], r["side"]): r["hello"]["pid"] for r in recs if r.get("kind") == "worker"}
        couples = defaultdict(dict)
        for t in recs:
            if t.get("kind") == "trial" and t["attempt"] == 0:
                couples[(t["case_id"], t["pair"], t["round"], t["trial"])][t["side"]] = t
        pairs = defaultdict(list)
        for (case, pair, _, _), s in couples.items():
            if len(s) == 2:
                lr = 100 * math.log(s["head"]["process_cpu_ns"] / s["base"]["process_cpu_ns"])
                by_position["head first" if s["head"]["position"] == 0 else "base first"].append(lr)
                pairs[(case, pair)].append(lr)
        for (case, pair), lrs in pairs.items():
            first = "base" if pid[(pair, "base")] < pid[(pair, "head")] else "head"
            by_start[(case, f"{first} process started first")].append(statistics.median(lrs))
print("couples: ln(head/base) % by which side ran first in the couple")
for k, v in sorted(by_position.items()):
    print(f"  {k}: {len(v)} couples, median {statistics.median(v):+.2f} %")
print("pairs: median couple ln(head/base) % by which process of the pair started first, per case")
for k, v in sorted(by_start.items()):
    print(f"  case {k[0]} {k[1]}: {len(v)} pairs, mean {statistics.mean(v):+.2f} %")
