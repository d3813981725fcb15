"""Diagnose the load bias: +40 us planted, quiet vs hog; truth in-process under the same condition."""
import json, subprocess, sys, os, statistics, math, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import calibration as cal
from collections import defaultdict

tmp = Path("/tmp/i32/work"); tmp.mkdir(parents=True, exist_ok=True)
head = tmp / "head40"
if os.environ.get("AA"): head = cal.BASE
elif not head.exists():
    cal.make_side(head, 40.0, 0.0)
core, hog_core = 1, 0
conds = sys.argv[1].split(",") if len(sys.argv) > 1 else ["quiet", "hog"]
extra = sys.argv[2:] 
BURSTY = """
import random, time
random.seed(1)
while True:
    end = time.perf_counter() + random.uniform(0.002, 0.030)
    while time.perf_counter() < end:
        pass
    time.sleep(random.uniform(0.002, 0.030))
"""
def hog(cond):
    ps = [subprocess.Popen([sys.executable, "-c", cal.HOG, str(hog_core)])]
    if "bursty" in cond:
        ps.append(subprocess.Popen([sys.executable, "-c", BURSTY]))
    return ps
for cond in conds:
  for level_head in [head]:
    h = hog(cond) if cond.startswith("hog") else []
    try:
        tr = cal.truth(head, core)
        out = tmp / f"cmp-{cond}-{int(time.time())}"
        t0 = time.time()
        data = cal.compare("step", head, out, ["--core", str(core), *extra])
        el = time.time() - t0
        tr2 = cal.truth(head, core)
    finally:
        for p in h: p.kill(); p.wait()
    mlp = next(r for r in data["rows"] if r["module"] == "MLP")
    print(f"== {cond}: truth before {tr['per step']:.1f} after {tr2['per step']:.1f} us; compare {el:.0f}s: "
          f"MLP {mlp['delta_us']:+.1f} [{mlp['ci_low_us']:+.1f},{mlp['ci_high_us']:+.1f}] {mlp['verdict']} "
          f"cont {mlp.get('contended_pct')} remeas {mlp.get('remeasured')}; others "
          + ", ".join(f"{r['module']} {r['verdict']} {r['delta_pct']:+.1f}%" for r in data['rows'] if r['module'] != 'MLP'))
    print("   bundle", sorted(out.iterdir())[-1])
