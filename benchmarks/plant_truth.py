"""A planted N us against an in-process truth (issue 56, the CPU half): teperf's response curve.

A probe module (LayerNorm -> Linear at [8,2,256], eager, fp32) whose forward calls a plant when the package's
``ON`` flag is set. Three plants:
- ``thread``: spin until ``time.thread_time_ns`` has advanced N us (the demo's plant: one system call a lap);
- ``perf``: spin until ``time.perf_counter_ns`` has advanced N us (vDSO, no system call; wall time, so a
  preempted spin costs less CPU than N);
- ``arith``: a pure-arithmetic Python loop of a fixed number of laps, calibrated once (in a pinned process) to
  take about N us of thread CPU time; the count, not a clock, fixes it.

**Truth:** the plant's cost in ONE worker-like process: teperf's own ``Session`` (threads=1, the process
warm-up, the case's first call and warm-up, gc as the worker leaves it) on a pinned core, its trials timed by
``Session.trial`` (``clocks.time_loop``: process CPU time, the headline clock), the plant toggled between
trials in ABBA blocks (off on on off); each block gives (on - off) per step, the truth is their mean with a
Student t interval, blocks added until the half-width is within +-2 % (or +-0.25 us) or the time cap.

**Measured:** `teperf compare --base-path B --head-path H` where B and H are the same package with ``ON``
False and True (a fixed schedule, --max-contended 100, --format json); from its bundle also the raw additive
difference of the sides' mean per-step times (what the estimator would say without ratios and medians).

Prints the table (plant, nominal, truth, teperf with interval, raw) and the fits of teperf's estimate against
the truth and against the nominal size (slope, intercept, their 95 % t intervals). Figures, not asserts
(tests/test_plant_truth.py tests the pure parts).

    .venv/bin/python benchmarks/plant_truth.py [--sizes 0,12,25,50,100,200] [--kinds thread,perf,arith]
        [--teperf-kinds thread] [--processes 8] [--out DIR] [-- more compare arguments]
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PACKAGE = "plant_probe"
HIDDEN = 256
SHAPE = [8, 2, HIDDEN]
KINDS = ("thread", "perf", "arith")
# a fixed amount of work: its cost in us follows the machine's speed of the minute, and truth and teperf run
# minutes apart, so its truth is rescaled by their base steps (also fixed work) before they are compared; a
# clock plant's cost is fixed in us and is compared as measured
FIXED_WORK = ("arith",)


def truth_at_speed(kind: str, truth: dict, measured: dict | None) -> tuple[float, float, float]:
    """(truth us, its half-width, the scale): for a fixed-work plant at the speed of teperf's compare (its
    base step over the truth's), else as measured (scale 1)."""
    scale = 1.0
    if kind in FIXED_WORK and measured and measured.get("base_us") and truth.get("base_us"):
        scale = measured["base_us"] / truth["base_us"]
    return truth["truth_us"] * scale, truth["truth_hw_us"] * scale, scale


TORCH_PROBE = """

class Probe(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, hidden)

    def forward(self, x):
        if ON:
            planted()
        return self.fc(self.norm(x))


def make_probe(hidden={hidden}):
    return Probe(hidden)
"""
# The GPU half: TE's LayerNormLinear with the plant at the top of its forward, as scripts/gpu/te_plants.py's
# lnl-forward wraps it (one more Python frame a step); built by the factory backend in bf16 on the GPU.
TE_PROBE = """
import transformer_engine.pytorch as te


class Probe(te.LayerNormLinear):
    def forward(self, *args, **kwargs):
        if ON:
            planted()
        return super().forward(*args, **kwargs)


def make_probe(hidden={hidden}):
    return Probe(hidden, 3 * hidden)
"""
PROBE = '''"""teperf's plant probe (benchmarks/plant_truth.py): LayerNorm -> Linear, a plant in forward."""

import time

import torch.nn as nn

ON = {on}  # the plant runs in forward (head: True, base: False; the truth harness toggles it)
KIND = {kind!r}  # thread | perf | arith
US = {us!r}  # nominal size (thread, perf: the clock's us; arith: what LAPS took when calibrated)
LAPS = {laps}  # arith: loop laps
MEASURE = False  # the truth harness sets it to time the plant's own CPU (SPENT[0], ns)
SPENT = [0]


def plant():
    if KIND == "thread":
        end = time.thread_time_ns() + int(US * 1000)
        while time.thread_time_ns() < end:
            pass
    elif KIND == "perf":
        end = time.perf_counter_ns() + int(US * 1000)
        while time.perf_counter_ns() < end:
            pass
    else:
        acc = 0
        for i in range(LAPS):
            acc += i * i
        return acc


def planted():
    if MEASURE:  # the truth harness's diagnosis: the plant's own thread CPU time
        t0 = time.thread_time_ns()
        plant()
        SPENT[0] += time.thread_time_ns() - t0
    else:
        plant()
'''


def write_side(root: Path, on: bool, kind: str, us: float, laps: int, te: bool = False) -> Path:
    """A side directory holding the probe package (``root/plant_probe/__init__.py``); ``te``: TE's
    LayerNormLinear on the GPU instead of the torch probe."""
    pkg = root / PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(
        (PROBE + (TE_PROBE if te else TORCH_PROBE)).format(
            on=on, kind=kind, us=float(us), laps=int(laps), hidden=HIDDEN
        )
    )
    return root


# ---------------------------------------------------------------- pure logic (tests/test_plant_truth.py)


def abba_order(blocks: int) -> list[bool]:
    """The plant's state per trial, ``blocks`` ABBA blocks: off on on off, off on on off, ... (a linear drift
    inside a block cancels in its (on - off))."""
    return [state for _ in range(blocks) for state in (False, True, True, False)]


def block_deltas(order: list[bool], per_step: list[float]) -> list[float]:
    """(mean on - mean off) per complete ABBA block of 4 trials, in the trials' unit."""
    out = []
    for i in range(0, len(per_step) - len(per_step) % 4, 4):
        states, times = order[i : i + 4], per_step[i : i + 4]
        if list(states) not in ([False, True, True, False], [True, False, False, True]):
            raise ValueError(f"block at trial {i} is not ABBA: {states}")
        on = [t for s, t in zip(states, times) if s]
        off = [t for s, t in zip(states, times) if not s]
        out.append((on[0] + on[1]) / 2 - (off[0] + off[1]) / 2)
    return out


def t_mean(values: list[float], alpha: float = 0.05) -> tuple[float, float]:
    """(mean, half-width of its 1 - alpha Student t interval); inf for fewer than 2 values."""
    from teperf.stats import t_interval

    mean, half, _, _ = t_interval(values, alpha)
    return mean, half


def fit_line(x: list[float], y: list[float], alpha: float = 0.05) -> dict:
    """Ordinary least squares y = intercept + slope * x with 1 - alpha t half-widths (n - 2 dof; NaN with
    fewer than 3 points)."""
    from teperf.stats import t_quantile

    n = len(x)
    if n < 2 or len(y) != n:
        raise ValueError("fit_line needs two or more (x, y) points")
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    if sxx == 0:
        raise ValueError("fit_line needs two distinct x")
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx
    intercept = my - slope * mx
    resid = [b - intercept - slope * a for a, b in zip(x, y)]
    out = {"slope": slope, "intercept": intercept, "n": n, "slope_hw": math.nan, "intercept_hw": math.nan}
    if n > 2:
        s2 = sum(r * r for r in resid) / (n - 2)
        tcrit = t_quantile(1 - alpha / 2, n - 2)
        out["slope_hw"] = tcrit * math.sqrt(s2 / sxx)
        out["intercept_hw"] = tcrit * math.sqrt(s2 * (1 / n + mx * mx / sxx))
    return out


def switch_fit(order: list[bool], per_step: list[float], switches: list[float]) -> dict:
    """Least squares of the trials' per-step time on (1, plant on, involuntary context switches per step):
    the plant's cost net of the switches it brings, and what one switch costs (both in per_step's unit)."""
    import numpy as np

    x = np.column_stack([np.ones(len(order)), np.asarray(order, float), np.asarray(switches, float)])
    coef, *_ = np.linalg.lstsq(x, np.asarray(per_step, float), rcond=None)
    return {"intercept": float(coef[0]), "plant_us": float(coef[1]), "us_per_switch": float(coef[2])}


def raw_delta(records: list[dict]) -> dict | None:
    """From a bundle's trial records (one cell): the sides' additive per-step difference (us) of process CPU
    time, the mean over pairs of (mean head - mean base), and of (median head - median base)."""
    import statistics

    sides: dict = {}
    for r in records:
        if r.get("kind") == "trial" and r.get("process_cpu_ns") is not None and r.get("iters"):
            per_step = r["process_cpu_ns"] / r["iters"] / 1e3
            sides.setdefault(r["pair"], {}).setdefault(r["side"], []).append(per_step)
    pairs = [p for p, s in sides.items() if s.get("base") and s.get("head")]
    if not pairs:
        return None
    mean_d = [statistics.fmean(sides[p]["head"]) - statistics.fmean(sides[p]["base"]) for p in pairs]
    med_d = [statistics.median(sides[p]["head"]) - statistics.median(sides[p]["base"]) for p in pairs]
    return {"mean_us": statistics.fmean(mean_d), "median_us": statistics.fmean(med_d), "pairs": len(pairs)}


def couples_of(records: list[dict]) -> dict:
    """pair -> [(base, head) per-step us] of a bundle's trial couples (key: pair, round, trial; of several
    attempts the last one with both sides)."""
    slots: dict = {}
    for r in records:
        if r.get("kind") == "trial" and r.get("process_cpu_ns") is not None and r.get("iters"):
            key = (r["pair"], r.get("round", 0), r.get("trial", 0))
            slots.setdefault(key, {}).setdefault(r.get("attempt", 0), {})[r["side"]] = (
                r["process_cpu_ns"] / r["iters"] / 1e3
            )
    out: dict = {}
    for (pair, *_), attempts in sorted(slots.items()):
        whole = [a for a, sides in attempts.items() if "base" in sides and "head" in sides]
        if whole:
            sides = attempts[max(whole)]
            out.setdefault(pair, []).append((sides["base"], sides["head"]))
    return out


def estimators(couples: dict) -> dict:
    """Per-step deltas (us) from the same couples by several estimators: teperf's (geometric mean of the
    pairs' base medians x (exp(mean over pairs of the median couple log ratio) - 1)), the same with the mean
    log ratio, the ratio of the sides' means, and the additive mean and median of (head - base)."""
    import statistics

    pairs = sorted(p for p, c in couples.items() if c)
    if not pairs:
        return {}
    base_g = math.exp(statistics.fmean(math.log(statistics.median(b for b, _ in couples[p])) for p in pairs))
    med_log = statistics.fmean(statistics.median(math.log(h / b) for b, h in couples[p]) for p in pairs)
    mean_log = statistics.fmean(statistics.fmean(math.log(h / b) for b, h in couples[p]) for p in pairs)
    means = [
        (statistics.fmean(b for b, _ in couples[p]), statistics.fmean(h for _, h in couples[p]))
        for p in pairs
    ]
    return {
        "teperf_us": base_g * math.expm1(med_log),
        "mean_log_us": base_g * math.expm1(mean_log),
        "ratio_of_means_us": statistics.fmean(b for b, _ in means)
        * math.expm1(statistics.fmean(math.log(h / b) for b, h in means)),
        "mean_diff_us": statistics.fmean(statistics.fmean(h - b for b, h in couples[p]) for p in pairs),
        "median_diff_us": statistics.fmean(statistics.median(h - b for b, h in couples[p]) for p in pairs),
        "base_us": base_g,
    }


# ---------------------------------------------------------------- the worker-like child (the truth)

CHILD_FLAG = "--child"


def child(spec: dict) -> dict:
    """Runs in a fresh interpreter: pin first (as the worker does, before torch), teperf's Session, one case;
    then per (kind, size) ABBA blocks of Session.trial with the plant toggled."""
    core = spec.get("core")
    if core is not None:
        os.sched_setaffinity(0, {int(core)})
    sys.path.insert(0, spec["side"])
    import importlib
    import resource

    from teperf.worker.session import Session

    te = bool(spec.get("te"))
    session = Session(device="cuda" if te else "cpu", backends=["factory"])
    probe = importlib.import_module(PACKAGE)
    probe.ON = False
    recipe = "bf16" if te else "fp32"
    case = {"id": 0, "backend": "factory", "recipe": recipe, "mode": "eager", "shape": SHAPE,
            "factory": f"{PACKAGE}:make_probe", "kwargs": {}, "warmup": spec["warmup"]}  # fmt: skip
    ready = session.setup(case)
    if ready.get("type") != "ready":
        raise RuntimeError(f"set-up failed: {ready}")
    if core is not None:
        session.pin(int(core))
    out: dict = {"laps_per_us": None, "results": []}
    if spec.get("calibrate_arith"):
        out["laps_per_us"] = calibrate_laps(probe)
    iters = spec["iters"]
    for job in spec["jobs"]:
        probe.KIND, probe.US, probe.LAPS = job["kind"], float(job["us"]), int(job["laps"])
        probe.ON = True
        session.trial(0, iters)  # warm the plant's own code path, untimed
        probe.MEASURE = bool(spec.get("measure_plant"))
        per_step, clocks, order = [], {"thread": [], "wall": [], "switches": [], "own": []}, []
        t_end = time.monotonic() + spec["max_s"]
        blocks = 0
        while True:
            for state in abba_order(1):
                probe.ON = state
                n0 = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
                probe.SPENT[0] = 0
                got = session.trial(0, iters)
                n1 = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
                clocks["own"].append(probe.SPENT[0] / iters / 1e3)
                clocks["switches"].append((n1 - n0) / iters)
                order.append(state)
                per_step.append(got["process_cpu_ns"] / iters / 1e3)
                clocks["thread"].append(got["thread_cpu_ns"] / iters / 1e3)
                clocks["wall"].append(got["wall_ns"] / iters / 1e3)
            blocks += 1
            if blocks >= spec["min_blocks"]:
                mean, hw = t_mean(block_deltas(order, per_step))
                if hw <= max(spec["rel"] * abs(mean), spec["abs_us"]) or time.monotonic() > t_end:
                    break
        probe.ON = False
        d = block_deltas(order, per_step)
        mean, hw = t_mean(d)
        off = [t for s, t in zip(order, per_step) if not s]
        net = switch_fit(order, per_step, clocks["switches"])
        out["results"].append(
            {
                **job,
                "truth_us": mean,
                "truth_hw_us": hw,
                "truth_median_us": sorted(d)[len(d) // 2],
                "thread_us": t_mean(block_deltas(order, clocks["thread"]))[0],
                "wall_us": t_mean(block_deltas(order, clocks["wall"]))[0],
                "base_us": sorted(off)[len(off) // 2],
                # involuntary context switches per step the plant adds, what one costs (least squares over
                # the trials), and the plant's cost with them taken out
                "switches_per_step": t_mean(block_deltas(order, clocks["switches"]))[0],
                "base_switches_per_step": sum(c for s, c in zip(order, clocks["switches"]) if not s)
                / len(off),
                "us_per_switch": net["us_per_switch"],
                "net_us": net["plant_us"],
                # with measure_plant: the plant's own thread CPU per step, and the rest of the step's change
                "own_us": t_mean(block_deltas(order, clocks["own"]))[0]
                if spec.get("measure_plant")
                else None,
                "blocks": blocks,
                "iters": iters,
            }
        )
    return out


def calibrate_laps(probe, target_us: float = 1000.0, repeats: int = 21) -> float:
    """Laps of the arith loop per us of thread CPU: the fastest of ``repeats`` runs of a ~1 ms loop."""
    probe.KIND, probe.LAPS = "arith", 20000
    probe.plant()
    best = math.inf
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        probe.plant()
        best = min(best, (time.thread_time_ns() - t0) / 1e3)
    laps = max(1, int(20000 * target_us / best))
    probe.LAPS = laps
    best = math.inf
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        probe.plant()
        best = min(best, (time.thread_time_ns() - t0) / 1e3)
    return laps / best


def run_child(spec: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, json.dumps(spec)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"truth child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- teperf's estimate

CONFIG = """backend = "torch"
device = "{device}"
recipes = ["{recipe}"]
shapes = [[{shape}]]

[modules.Probe]
factory = "{package}:make_probe"
"""


def run_compare(
    work: Path, kind: str, us: float, laps: int, schedule: list[str], extra: list[str], te: bool = False
) -> dict:
    """teperf compare of the probe without and with the plant; its Probe cell, plus the raw differences."""
    tag = f"{kind}-{us:g}"
    base = write_side(work / tag / "base", False, kind, us, laps, te)
    head = write_side(work / tag / "head", True, kind, us, laps, te)
    config = work / "probe.toml"
    config.write_text(
        CONFIG.format(
            shape=", ".join(map(str, SHAPE)),
            package=PACKAGE,
            device="cuda" if te else "cpu",
            recipe="bf16" if te else "fp32",
        )
    )
    results = work / tag / "results"
    cmd = [sys.executable, "-m", "teperf", "compare", "--config", str(config), "--no-counters",
           "--base-path", str(base), "--head-path", str(head), *schedule, "--max-contended", "100",
           *extra, "--format", "json", "--results-dir", str(results)]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        stdout, stderr = proc.communicate()
    except KeyboardInterrupt:
        # the compare is a child, not in the signal's way under `timeout` or `kill`: pass the interrupt on,
        # so that its workers stop now rather than load the machine under the next measurement
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    if proc.returncode not in (0, 1) or not stdout.strip():
        raise RuntimeError(f"compare failed ({proc.returncode}): {stderr[-1500:]}")
    data = json.loads(stdout)
    cell = next(c for c in data["rows"] if c.get("module") == "Probe")
    got = {k: cell.get(k) for k in ("delta_us", "ci_low_us", "ci_high_us", "base_us", "delta_pct", "verdict")}
    got.update(n_pairs=cell.get("n_pairs"), wall_s=round(time.monotonic() - t0, 1))
    bundles = [p for p in results.rglob("records.jsonl")]
    if bundles:
        records = [json.loads(line) for line in bundles[0].read_text().splitlines() if line.strip()]
        got["raw"] = raw_delta(records)
        got["estimators"] = estimators(couples_of(records))
        got["bundle"] = str(bundles[0].parent)
    return got


# ---------------------------------------------------------------- main


def fmt(v, spec="+.1f"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0,12,25,50,100,200", help="nominal plant sizes, us")
    ap.add_argument("--kinds", default="thread,perf,arith", help="plants whose truth is measured")
    ap.add_argument("--teperf-kinds", default="thread", help="plants teperf compare measures ('' for none)")
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--schedule", default="--rounds 2 --trials 6 --iters 50 --warmup 30")
    ap.add_argument("--iters", type=int, default=50, help="steps per truth trial (teperf's default)")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--max-s", type=float, default=20.0, help="truth: seconds per plant at most")
    ap.add_argument("--min-blocks", type=int, default=30)
    ap.add_argument("--rel", type=float, default=0.02, help="truth: target half-width, share of the cost")
    ap.add_argument("--abs-us", type=float, default=0.25, help="truth: ... or this many us, the larger")
    ap.add_argument(
        "--measure-plant",
        action="store_true",
        help="truth: also time the plant's own thread CPU inside forward (two more clock calls a step)",
    )
    ap.add_argument(
        "--te", action="store_true", help="the probe is TE's LayerNormLinear on the GPU, bf16 (the GPU half)"
    )
    ap.add_argument("--core", type=int, default=None, help="core of the truth child (default: the last)")
    ap.add_argument("--out", type=Path, help="write results.json and table.md here")
    ap.add_argument(
        "--reanalyse", type=Path, metavar="DIR", help="only recompute the tables of a run's --out"
    )
    ap.add_argument("extra", nargs="*", help="more teperf compare arguments (after --)")
    args = ap.parse_args()
    if args.reanalyse:
        return reanalyse(args.reanalyse)
    sizes = [float(s) for s in args.sizes.split(",") if s]
    kinds = [k for k in args.kinds.split(",") if k]
    tkinds = [k for k in args.teperf_kinds.split(",") if k]
    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    started = time.time()
    load0 = os.getloadavg()

    # 1. the arith loop's laps per us, once, in a pinned worker-like process
    calib = run_child({"side": str(ROOT), "core": core, "warmup": 5, "iters": 1, "jobs": [],
                       "calibrate_arith": True, "max_s": 0, "min_blocks": 1, "rel": 1, "abs_us": 1e9,
                       "te": args.te} | _probe_dir(args.te))  # fmt: skip
    laps_per_us = calib["laps_per_us"]
    laps = {us: max(1, round(us * laps_per_us)) for us in sizes}
    print(f"arith: {laps_per_us:.2f} laps per us of thread CPU (fastest of 21 runs)", flush=True)

    # 2. the truth, every kind x size in one worker-like process
    jobs = [{"kind": k, "us": us, "laps": laps[us]} for k in kinds for us in sizes]
    spec = {"core": core, "warmup": args.warmup, "iters": args.iters, "jobs": jobs, "max_s": args.max_s,
            "min_blocks": args.min_blocks, "rel": args.rel, "abs_us": args.abs_us,
            "measure_plant": args.measure_plant, "te": args.te} | _probe_dir(args.te)  # fmt: skip
    truth = {(r["kind"], r["us"]): r for r in run_child(spec)["results"]}
    for r in truth.values():
        print(
            f"truth {r['kind']:6} {r['us']:5g} us: {r['truth_us']:+.2f} +- {r['truth_hw_us']:.2f} us "
            f"(thread {r['thread_us']:+.2f}, wall {r['wall_us']:+.2f}; base {r['base_us']:.1f} us/step, "
            f"{r['blocks']} blocks; +{r['switches_per_step']:.3f} switches/step of "
            f"{r['base_switches_per_step']:.3f}, {r['us_per_switch']:.0f} us each, "
            f"net {r['net_us']:+.1f} us"
            + (
                f"; the plant's own {r['own_us']:.1f} us, the rest {r['truth_us'] - r['own_us']:+.1f} us)"
                if r.get("own_us") is not None
                else ")"
            ),
            flush=True,
        )

    # 3. teperf's estimate
    schedule = ["--processes", str(args.processes), *args.schedule.split()]
    measured = {}
    with tempfile.TemporaryDirectory(prefix="plant-truth-") as tmp:
        work = Path(args.out or tmp) / "compares" if args.out else Path(tmp)
        todo = [(k, us) for k in tkinds for us in sizes]
        for k, us in todo:
            try:
                got = run_compare(work, k, us, laps[us], schedule, args.extra, args.te)
            except KeyboardInterrupt:
                print(f"interrupted: {len(measured)} of {len(todo)} compares measured; the tables hold those")
                break
            measured[(k, us)] = got
            raw = got.get("raw") or {}
            print(
                f"teperf {k:6} {us:5g} us: {fmt(got['delta_us'])} [{fmt(got['ci_low_us'])}, "
                f"{fmt(got['ci_high_us'])}] us (raw mean {fmt(raw.get('mean_us'))}, median "
                f"{fmt(raw.get('median_us'))}; base {fmt(got['base_us'], '.1f')}; {got['wall_s']} s)",
                flush=True,
            )

    table = render(sizes, kinds, tkinds, truth, measured)
    rows = [{"kind": k, "us": us, **v} for (k, us), v in measured.items()]
    if rows:
        table += "\n\n" + estimator_table(rows, truth)
    print()
    print(table)
    meta = {"started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)), "load_before": load0,
            "load_after": os.getloadavg(), "cpus": os.cpu_count(), "core": core, "laps_per_us": laps_per_us,
            "argv": sys.argv[1:], "te": args.te, "wall_s": round(time.time() - started, 1)}  # fmt: skip
    print(f"\nload average {load0[0]:.1f} before, {meta['load_after'][0]:.1f} after; {meta['wall_s']} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text(table + "\n")
        dump = {
            "meta": meta,
            "truth": [dict(r) for r in truth.values()],
            "teperf": [{"kind": k, "us": us, **v} for (k, us), v in measured.items()],
        }
        (args.out / "results.json").write_text(json.dumps(dump, indent=1) + "\n")


def estimator_table(rows: list[dict], truth: dict) -> str:
    """Per teperf compare: its estimate and the other estimators on the same couples, against the truth."""
    lines = [
        "| plant | nominal us | truth us | teperf (median log ratio) | mean log ratio | ratio of means "
        "| mean (head - base) | median (head - base) | base us/step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        e = r.get("estimators") or {}
        t = truth.get((r["kind"], r["us"]))
        lines.append(
            f"| {r['kind']} | {r['us']:g} | {fmt(t and t['truth_us'])} | {fmt(e.get('teperf_us'))} "
            f"| {fmt(e.get('mean_log_us'))} | {fmt(e.get('ratio_of_means_us'))} "
            f"| {fmt(e.get('mean_diff_us'))} | {fmt(e.get('median_diff_us'))} "
            f"| {fmt(e.get('base_us'), '.1f')} |"
        )
    return "\n".join(lines)


def reanalyse(out: Path) -> None:
    """Recompute the estimators from the kept bundles of a run (``--out DIR``) and print both tables."""
    kept = out / "results.json"
    # the evidence keeps it xz-compressed
    text = kept.read_text() if kept.exists() else lzma.open(out / "results.json.xz", "rt").read()
    dump = json.loads(text)
    truth = {(r["kind"], r["us"]): r for r in dump["truth"]}
    for row in dump["teperf"]:
        bundle = Path(row.get("bundle") or "")
        if (bundle / "records.jsonl").exists():
            records = [
                json.loads(x) for x in (bundle / "records.jsonl").read_text().splitlines() if x.strip()
            ]
            row["estimators"] = estimators(couples_of(records))
    measured = {(r["kind"], r["us"]): r for r in dump["teperf"]}
    sizes = sorted({r["us"] for r in dump["truth"]} | {r["us"] for r in dump["teperf"]})
    kinds = list(dict.fromkeys(r["kind"] for r in dump["truth"]))
    tkinds = list(dict.fromkeys(r["kind"] for r in dump["teperf"]))
    table = render(sizes, kinds, tkinds, truth, measured) + "\n\n" + estimator_table(dump["teperf"], truth)
    print(table)
    (out / "table.md").write_text(table + "\n")
    text = json.dumps(dump, indent=1) + "\n"
    if kept.exists():
        kept.write_text(text)
    else:
        with lzma.open(out / "results.json.xz", "wt") as f:
            f.write(text)


def _probe_dir(te: bool = False) -> dict:
    """A side directory with the probe package for the truth child (off, thread; the child sets the rest)."""
    d = Path(tempfile.mkdtemp(prefix="plant-probe-"))
    write_side(d, False, "thread", 0, 1, te)
    return {"side": str(d)}


def render(sizes, kinds, tkinds, truth, measured) -> str:
    lines = [
        "| plant | nominal us | truth us (+-95 %) | truth thread/wall us | at teperf's speed (x base ratio) "
        "| teperf us [95 %] | inside | raw mean/median us | est / truth |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for k in kinds:
        for us in sizes:
            t = truth.get((k, us))
            m = measured.get((k, us))
            if t is None:
                continue
            est = m and m.get("delta_us")
            raw = (m or {}).get("raw") or {}
            at, at_hw, scale = truth_at_speed(k, t, m)
            ratio = est / at if est is not None and at > 1 else None
            inside = "-" if est is None else ("yes" if m["ci_low_us"] <= at <= m["ci_high_us"] else "no")
            lines.append(
                f"| {k} | {us:g} | {t['truth_us']:+.2f} +- {t['truth_hw_us']:.2f} | {t['thread_us']:+.1f} / "
                f"{t['wall_us']:+.1f} | "
                + (f"{at:+.2f} +- {at_hw:.2f} (x {scale:.2f})" if scale != 1.0 else "as measured")
                + " | "
                + (f"{fmt(est)} [{fmt(m['ci_low_us'])}, {fmt(m['ci_high_us'])}]" if m else "-")
                + f" | {inside} | {fmt(raw.get('mean_us'))} / {fmt(raw.get('median_us'))}"
                + f" | {fmt(ratio, '.3f')} |"
            )
    for k in tkinds:
        done = [
            us for us in sizes if (k, us) in truth and measured.get((k, us), {}).get("delta_us") is not None
        ]
        pts = [(us, truth_at_speed(k, truth[(k, us)], measured[(k, us)])[0], measured[(k, us)]["delta_us"])
               for us in done]  # fmt: skip
        if len(pts) < 3:
            continue
        lines.append("")
        # the truth at teperf's speed (fixed-work plants); the truth's own slope below is as measured
        for name, xs in (("truth", [p[1] for p in pts]), ("nominal", [p[0] for p in pts])):
            f = fit_line(xs, [p[2] for p in pts])
            lines.append(
                f"{k}: teperf = {f['intercept']:+.2f} (+-{f['intercept_hw']:.2f}) + {f['slope']:.4f} "
                f"(+-{f['slope_hw']:.4f}) x {name}  ({f['n']} plants)"
            )
        f = fit_line([p[0] for p in pts], [truth[(k, p[0])]["truth_us"] for p in pts])
        lines.append(
            f"{k}: truth = {f['intercept']:+.2f} (+-{f['intercept_hw']:.2f}) + {f['slope']:.4f} "
            f"(+-{f['slope_hw']:.4f}) x nominal"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == CHILD_FLAG:
        print(json.dumps(child(json.loads(sys.argv[2]))))
    else:
        main()
