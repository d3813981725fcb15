"""Prints what the engine itself costs, so speed targets are checked by figures,
not by timed unit tests:

  - fresh worker pair: cold start (spawn + import torch + hello) vs prestarted
    (what the coordinator waits for when the next pair was started on another
    core while the current one measured);
  - one protocol round trip (a trial of 1 iteration of a trivial module)
    against the step time it wraps;
  - time from `teperf compare` start to the first measured trial.

Usage: .venv/bin/python benchmarks/engine_costs.py   (CPU; a few seconds)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from teperf.bundle import Bundle  # noqa: E402
from teperf.config import load_config  # noqa: E402
from teperf.engine.spawn import Worker  # noqa: E402
from teperf.plan import expand  # noqa: E402
from teperf.sides import Side  # noqa: E402


def main() -> None:
    cfg = load_config("default", {"modules": ["Linear"], "shapes": [(2, 8)]})
    side = Side("base", sys.executable)
    tmp = Path(tempfile.mkdtemp())
    bundle = Bundle.create(tmp, "bench", {})
    case = expand(cfg)[0]

    cold = []
    for i in range(3):
        t0 = time.perf_counter()
        w = Worker(
            side,
            core=cfg.core,
            device="cpu",
            backends=["torch"],
            hash_seed=i,
            log_path=tmp / f"w{i}.log",
            cwd=tmp,
            timeout_s=120,
        )
        w.wait_ready()
        cold.append(time.perf_counter() - t0)
        w.close()
    print(
        f"cold worker start (spawn + import torch + hello): median {statistics.median(cold):.2f} s over "
        f"{len(cold)}"
    )

    other = [c for c in sorted(__import__("os").sched_getaffinity(0)) if c != cfg.core]
    if other:
        w = Worker(
            side,
            core=other[0],
            device="cpu",
            backends=["torch"],
            hash_seed=9,
            log_path=tmp / "pre.log",
            cwd=tmp,
            timeout_s=120,
        )
        time.sleep(max(cold) + 1)  # the previous pair's trials would run here
        t0 = time.perf_counter()
        w.wait_ready()
        w.pin(cfg.core)
        print(
            f"prestarted worker: coordinator waited {time.perf_counter() - t0:.3f} s (imported on core "
            f"{other[0]}, moved to core {cfg.core})"
        )
        w.close()

    w = Worker(
        side,
        core=cfg.core,
        device="cpu",
        backends=["torch"],
        hash_seed=1,
        log_path=tmp / "rt.log",
        cwd=tmp,
        timeout_s=120,
    )
    w.wait_ready()
    w.request({"cmd": "setup", "case": case.to_wire("cpu", 5)})
    trips, steps = [], []
    for _ in range(200):
        t0 = time.perf_counter_ns()
        reply = w.request({"cmd": "trial", "case_id": case.id, "iters": 1})
        trips.append(time.perf_counter_ns() - t0)
        steps.append(reply["wall_ns"])
    w.close()
    rt = statistics.median(trips) / 1000
    st = statistics.median(steps) / 1000
    n = cfg.schedule.iters
    print(
        f"protocol round trip: {rt - st:.0f} us per trial outside the timed loop (1 step = {st:.0f} us); "
        f"at the default {n} iters x {st:.0f} us that is {100 * (rt - st) / (n * st):.2f}% of a trial's wall "
        "time"
    )

    t0 = time.time()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "teperf",
            "compare",
            "--base-path",
            str(ROOT / "examples/planted/base"),
            "--head-path",
            str(ROOT / "examples/planted/base"),
            "--config",
            "demo",
            "--processes",
            "1",
            "--rounds",
            "1",
            "--trials",
            "2",
            "--iters",
            "10",
            "--warmup",
            "5",
            "--no-counters",
            "--results-dir",
            str(tmp / "first"),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    (b,) = list((tmp / "first").iterdir())
    first = min(
        json.loads(l)["t"] for l in (b / "records.jsonl").read_text().splitlines() if '"kind":"trial"' in l
    )
    print(
        f"teperf compare: {first - t0:.2f} s from command start to the first measured trial (CPU, 3 factory "
        "modules)"
    )
    bundle.close()


if __name__ == "__main__":
    main()
