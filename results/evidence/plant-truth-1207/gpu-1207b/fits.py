"""The fifth session's GPU truth run (issue 56): its table and fits, read from what the run printed.

The run was cut by its time limit before it wrote truth/results.json, so this parses truth.log.xz (and
truth2.log.xz, the arith plant measured again, later and under more load). From the repository root:
    PYTHONPATH=. .venv/bin/python results/evidence/plant-truth-1207/gpu-1207b/fits.py
"""

import lzma
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3] / "benchmarks"))
import plant_truth as p  # noqa: E402

NUM = r"([+-]?\d+(?:\.\d+)?)"
TRUTH = re.compile(rf"^truth (\w+)\s+{NUM} us: {NUM} \+- {NUM} us .*base {NUM} us/step")
TEPERF = re.compile(rf"^teperf (\w+)\s+{NUM} us: {NUM} \[{NUM}, {NUM}\] us .*base {NUM};")


def read(name):
    truth, teperf = {}, {}
    for line in lzma.open(HERE / name, "rt").read().splitlines():
        if m := TRUTH.match(line):
            k, us, t, hw, base = m.groups()
            truth[(k, float(us))] = (float(t), float(hw), float(base))
        elif m := TEPERF.match(line):
            k, us, d, lo, hi, base = m.groups()
            teperf[(k, float(us))] = (float(d), float(lo), float(hi), float(base))
    return truth, teperf


def show(name, x, y):
    f = p.fit_line(x, y)
    print(f"{name}: slope {f['slope']:.3f} +- {f['slope_hw']:.3f}, intercept {f['intercept']:+.1f} "
          f"+- {f['intercept_hw']:.1f} us (n={f['n']})")  # fmt: skip


for log in ("truth.log.xz", "truth2.log.xz"):
    truth, teperf = read(log)
    print(f"## {log}\n")
    # a fixed-work plant's truth at the speed of its compare (plant_truth.truth_at_speed), as the table's
    # "at teperf's speed"; "inside" is read there
    print("| plant | nominal us | truth us (+-95 %) | at teperf's speed | teperf us [95 %] | truth inside "
          "| base us/step |\n|---|---:|---:|---:|---:|---|---:|")  # fmt: skip
    for (k, us), (t, hw, tb) in sorted(truth.items()):
        m = teperf.get((k, us))
        got = f"{m[0]:+.1f} [{m[1]:+.1f}, {m[2]:+.1f}]" if m else "-"
        at, at_hw, scale = p.truth_at_speed(k, {"truth_us": t, "truth_hw_us": hw, "base_us": tb},
                                            m and {"base_us": m[3]})  # fmt: skip
        at_text = f"{at:+.1f} +- {at_hw:.1f} (x {scale:.2f})" if scale != 1.0 else "as measured"
        inside = ("yes" if m[1] <= at <= m[2] else "no") if m else "-"
        print(f"| {k} | {us:g} | {t:+.1f} +- {hw:.1f} | {at_text} | {got} | {inside} | {tb:.0f}, {m[3]:.0f} |"
              if m else f"| {k} | {us:g} | {t:+.1f} +- {hw:.1f} | - | - | - | {tb:.0f}, - |")  # fmt: skip
    print()
    for k in sorted({k for k, _ in truth}):
        sizes = sorted(us for kk, us in truth if kk == k)
        if len(sizes) >= 4:  # 0-200 us: three sizes alone leave one degree of freedom
            show(f"truth ~ nominal, {k}, {sizes[0]:g}-200 us", sizes, [truth[(k, us)][0] for us in sizes])
        both = sorted(us for kk, us in teperf if kk == k and (k, us) in truth)
        if len(both) >= 3:
            show(  # the truth as the table compares it: a fixed-work plant's at its compare's speed
                f"teperf ~ truth, {k}",
                [p.truth_at_speed(k, {"truth_us": truth[(k, us)][0], "truth_hw_us": truth[(k, us)][1],
                                      "base_us": truth[(k, us)][2]}, {"base_us": teperf[(k, us)][3]})[0]
                 for us in both],
                [teperf[(k, us)][0] for us in both],
            )  # fmt: skip
            if len(both) >= 4:
                show(f"teperf ~ nominal, {k}, {both[0]:g}-200 us", both, [teperf[(k, us)][0] for us in both])
    print()
