"""Do verdicts hold on a loaded machine? Runs `teperf compare --config demo` (Linear and LayerNormLinear the
same code on both sides: A/A; MLP's head busy-waits 100 us: planted) with a CPU hog beside it, and without,
interleaved run by run, and prints per condition:

- A/A false changes: cells of Linear/LayerNormLinear called slower or faster;
- inconclusive (load): cells whose couples shared their core too often even after re-measuring;
- the planted change: its estimate against its size (within 25 %?) and its verdict;
- the share of trials that shared the measuring core, couples measured again, couples left out;
- the same bundles read the way teperf did before issue 22 (every first attempt averaged in, contended
  or not): what re-measuring and leaving out changed.

Asserts nothing (figures, not a test). The hog is one busy Python process pinned to a core other than
the measuring one (`--hog-core`, default: the first core that is not --core); `--hog-core same` puts it
on the measuring core itself.

    .venv/bin/python benchmarks/load_contention.py [--runs 3] [--hog-core N|same] [--out DIR]
        [-- extra teperf compare args, e.g. --processes 6 --rounds 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from teperf.config import Stats  # noqa: E402
from teperf.cpus import available_cores  # noqa: E402
from teperf.records import TrialRecord  # noqa: E402
from teperf.stats import compare_cell  # noqa: E402
from teperf.summary import parse  # noqa: E402

PLANTED = ROOT / "examples" / "planted"
PLANTED_CELL, PLANTED_US = "MLP", 100.0
HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def start_hog(core: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOG, str(core)])


def compare(out: Path, extra: list[str]) -> tuple[dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "teperf", "compare", "--config", "demo", "--no-counters",
         "--base-path", str(PLANTED / "base"), "--head-path", str(PLANTED / "head"),
         "--format", "json", "--results-dir", str(out), *extra],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if not proc.stdout.strip():
        raise SystemExit(f"teperf compare failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout), time.monotonic() - t0


def before_issue22(bundle: Path) -> dict:
    """module -> (delta_pct, delta_us, verdict) read as before: every first attempt's couples, contended or not."""
    parsed = parse(bundle)
    stats = Stats()
    base, head = parsed.base_label, parsed.head_label
    out = {}
    for case in parsed.cases:
        slots = defaultdict(dict)
        for t in parsed.cell(case.id).trials:
            if t.attempt == 0:
                slots[(t.pair, t.round, t.trial)][t.side] = t.per_step_us("process_cpu_ns")
        times, couples = {base: defaultdict(list), head: defaultdict(list)}, defaultdict(list)
        for (pair, _, _), c in slots.items():
            for side, v in c.items():
                times[side][pair].append(v)
            if base in c and head in c:
                couples[pair].append((c[base], c[head]))
        row = compare_cell(times[base], times[head], stats, couples)
        out[case.module] = (row.get("delta_pct"), row.get("delta_us"), row.get("verdict"))
    return out


def shared_share(bundle: Path) -> tuple[int, int]:
    parsed = parse(bundle)
    trials = [t for c in parsed.cells.values() for t in c.trials if isinstance(t, TrialRecord)]
    return sum(t.contended(parsed.device) for t in trials), len(trials)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per condition (hog, quiet), interleaved")
    ap.add_argument("--hog-core", default=None, help="core of the hog (default: another than --core); 'same'")
    ap.add_argument("--core", type=int, default=None, help="measuring core (default: teperf's)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench-load"))
    ap.add_argument("extra", nargs="*", help="extra teperf compare args (after --)")
    args = ap.parse_args()
    cores = available_cores()
    core = args.core if args.core is not None else cores[-1]
    hog_core = core if args.hog_core == "same" else int(args.hog_core or next(c for c in cores if c != core))
    extra = ["--core", str(core), *args.extra]
    out = Path(args.out)
    print(
        f"measuring core {core}, hog on core {hog_core}; compare --config demo {' '.join(extra)}", flush=True
    )
    results = defaultdict(list)  # condition -> [(rows by module, old by module, shared, trials, seconds)]
    for run in range(args.runs):
        for condition in ("hog", "quiet"):
            hog = start_hog(hog_core) if condition == "hog" else None
            try:
                data, seconds = compare(out / condition, extra)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
            bundle = sorted((out / condition).iterdir(), key=os.path.getmtime)[-1]  # the one just written
            rows = {r["module"]: r for r in data["rows"]}
            old = before_issue22(bundle)
            shared, total = shared_share(bundle)
            results[condition].append((rows, old, shared, total, seconds))
            line = ", ".join(
                f"{m} {r['delta_us']:+.1f} us {r['verdict']}"
                + (" (load)" if r.get("verdict_cause") == "load" else "")
                + f" [{r.get('contended_pct') or 0:.0f}% left out, {r.get('remeasured') or 0} again;"
                f" before: {old[m][1]:+.1f} us {old[m][2]}]"
                for m, r in rows.items()
            )
            print(f"run {run + 1} {condition}: {seconds:.0f} s, {shared}/{total} trials shared the core; {line}",
                  flush=True)  # fmt: skip
    print()
    for condition, runs in results.items():
        aa = [(r[m], old[m]) for r, old, *_ in runs for m in r if m != PLANTED_CELL]
        false_now = sum(r["verdict"] in ("slower", "faster") for r, _ in aa)
        false_before = sum(o[2] in ("slower", "faster") for _, o in aa)
        load = sum(r.get("verdict_cause") == "load" for r, _ in aa)
        planted = [(r[PLANTED_CELL], old[PLANTED_CELL]) for r, old, *_ in runs]
        within = sum(abs(p["delta_us"] - PLANTED_US) <= 0.25 * PLANTED_US for p, _ in planted)
        within_before = sum(abs(o[1] - PLANTED_US) <= 0.25 * PLANTED_US for _, o in planted)
        shared = sum(s for *_, s, _t, _sec in runs)
        total = sum(t for *_, t, _sec in runs)
        print(f"{condition}: {len(runs)} runs, {100 * shared / max(total, 1):.0f}% of trials shared the core")
        print(f"  A/A cells: {false_now} of {len(aa)} false changes ({false_before} read as before), "
              f"{load} inconclusive (load)")  # fmt: skip
        print(
            f"  planted {PLANTED_CELL} +{PLANTED_US:g} us: estimates "
            + ", ".join(f"{p['delta_us']:+.1f}" for p, _ in planted)
            + f" us ({within} of {len(planted)} within 25%); verdicts "
            + ", ".join(
                p["verdict"] + (" (load)" if p.get("verdict_cause") == "load" else "") for p, _ in planted
            )
        )
        print(
            "  read as before: "
            + ", ".join(f"{o[1]:+.1f}" for _, o in planted)
            + f" us ({within_before} of {len(planted)} within 25%)"
        )
        med = statistics.median([p["delta_us"] for p, _ in planted])
        if not math.isnan(med):
            print(
                f"  median planted estimate {med:+.1f} us; median run {statistics.median(r[-1] for r in runs):.0f} s"
            )


if __name__ == "__main__":
    main()
