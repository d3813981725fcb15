import json, sys, statistics, math
from collections import defaultdict
b = sys.argv[1]
recs = [json.loads(l) for l in open(f"{b}/records.jsonl")]
cases = {}
trials = [r for r in recs if r.get("kind") == "trial"]
print("trial keys:", sorted(trials[0].keys()))
bycase = defaultdict(list)
for t in trials: bycase[t["case_id"]].append(t)
for cid, ts in bycase.items():
    slots = defaultdict(lambda: defaultdict(dict))
    for t in ts:
        us = t["process_cpu_ns"]/t["iters"]/1000; ratio = t["wall_ns"]/t["process_cpu_ns"]
        slots[(t["pair"], t["round"], t["trial"])][t["attempt"]][t["side"]] = (us, ratio, t["thread_cpu_ns"]/t["iters"]/1000)
    clean, cont, first = [], [], []
    rat = []
    for k, att in slots.items():
        for a, got in sorted(att.items()):
            if len(got) < 2: continue
            sides = sorted(got)
            (bu, br, bt), (hu, hr, ht) = got[sides[0]], got[sides[1]]
            d = hu - bu
            rat += [br, hr]
            if a == 0: first.append(d)
            (cont if max(br, hr) > 1.2 else clean).append((d, ht-bt, bu))
    med = lambda xs: statistics.median(xs) if xs else float('nan')
    print(f"case {cid} ({ts[0]['side']}..): couples-attempts clean {len(clean)} med d {med([c[0] for c in clean]):+.1f} (thread {med([c[1] for c in clean]):+.1f}) base {med([c[2] for c in clean]):.0f}; "
          f"contended {len(cont)} med d {med([c[0] for c in cont]):+.1f} base {med([c[2] for c in cont]):.0f}; first attempts {len(first)} med {med(first):+.1f}; "
          f"wall/cpu median {med(rat):.2f} max {max(rat):.2f}")
