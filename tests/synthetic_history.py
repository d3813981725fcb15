"""A synthetic nightly history for the tests (the dashboard, change points, explain): like
``teperf nightly``, each night measures one commit against the previous night's, with paired deltas.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
from typing import Mapping, Sequence

import numpy as np

from teperf.history.store import HistoryStore, machine_from_meta
from teperf.records import BundleMeta, HistoryRow

DEFAULT_CELLS = (
    ("Linear", "fp32", 100.0),
    ("LayerNormLinear", "fp32", 160.0),
    ("LayerNormMLP", "fp32", 240.0),
)


@dataclasses.dataclass
class Plan:
    commits: int = 30
    cells: Sequence[tuple[str, str, float]] = DEFAULT_CELLS  # (module, recipe, base host us)
    # (module, recipe, commit index) -> % step
    steps: Mapping[tuple[str, str, int], float] = dataclasses.field(default_factory=dict)
    # (module, recipe) -> % per commit
    drifts: Mapping[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    noise_pct: float = 0.8  # night-to-night noise of the median host time
    machines: Sequence[tuple[str, str | None, str | None]] = (("Synthetic CPU @ 2.0GHz", None, None),)
    subjects: Mapping[int, str] = dataclasses.field(default_factory=dict)  # commit index -> subject
    start: _dt.datetime = _dt.datetime(2025, 1, 1, 2, 0, tzinfo=_dt.timezone.utc)
    ref: str = "main"
    shape: str = "8x2x256"
    seed: int = 0


def sha_of(i: int) -> str:
    return hashlib.sha1(f"synthetic-commit-{i}".encode()).hexdigest()


def true_levels(plan: Plan, module: str, recipe: str, base: float) -> np.ndarray:
    level = np.full(plan.commits, base)
    for (m, r, idx), pct in plan.steps.items():
        if (m, r) == (module, recipe):
            level[idx:] *= 1 + pct / 100.0
    drift = plan.drifts.get((module, recipe))
    if drift:
        level *= 1 + drift / 100.0 * np.arange(plan.commits)
    return level


def rows(plan: Plan) -> list[list[HistoryRow]]:
    """One list of rows per run (commit x machine)."""
    rng = np.random.default_rng(plan.seed)
    runs = []
    levels = {(m, r): true_levels(plan, m, r, b) for m, r, b in plan.cells}
    for mi, (cpu, gpu, driver) in enumerate(plan.machines):
        host = dict(cpu_model=cpu, gpu=gpu, driver=driver, hostname=f"synthetic-{mi}")
        mach = machine_from_meta(BundleMeta(host=host))  # the machine columns as an imported bundle gets them
        measured = {
            key: lv * np.exp(rng.normal(0, plan.noise_pct / 100.0, plan.commits))
            for key, lv in levels.items()
        }
        for i in range(plan.commits):
            date = plan.start + _dt.timedelta(days=i)
            run_id = f"{date:%Y%m%dT%H%M%SZ}_{mach['machine']}_{sha_of(i)[:10]}_s1of1_syn{mi}"
            run = {
                "run_id": run_id,
                "run_kind": "nightly",
                "run_date": date + _dt.timedelta(hours=1),
                "run_status": "complete",
                "ref": plan.ref,
                "sha": sha_of(i),
                "subject": plan.subjects.get(i, f"Commit number {i}"),
                "committed_at": date,
                "base_sha": sha_of(i - 1) if i else None,
                "base_subject": plan.subjects.get(i - 1, f"Commit number {i - 1}") if i else None,
                "base_committed_at": date - _dt.timedelta(days=1) if i else None,
                **mach,
                "shard": "1/1",
                "teperf_version": "synthetic",
            }
            out = []
            for module, recipe, _ in plan.cells:
                head = float(measured[(module, recipe)][i])
                row = {
                    **run,
                    "module": module,
                    "recipe": recipe,
                    "shape": plan.shape,
                    "dtype": "float32",
                    "mode": "eager",
                    "status": "ok",
                    "host_us": head,
                    "host_spread_pct": 2.0,
                    "n_pairs": 6,
                    "n_trials": 36,
                }
                if i:
                    # the night's paired comparison: a fresh base measurement, the same true difference
                    truth = levels[(module, recipe)][i] - levels[(module, recipe)][i - 1]
                    base = head - truth + float(rng.normal(0, head * 0.002))
                    half = head * 0.006
                    delta = head - base
                    verdict = "no change" if -half < delta < half else ("slower" if delta > 0 else "faster")
                    row.update(
                        base_us=base,
                        head_us=head,
                        delta_us=delta,
                        delta_pct=100 * delta / base,
                        ci_low_us=delta - half,
                        ci_high_us=delta + half,
                        ci_low_pct=100 * (delta - half) / base,
                        ci_high_pct=100 * (delta + half) / base,
                        verdict=verdict,
                        mde_pct=1.0,
                        pair_sd_pct=0.5,
                    )
                else:
                    row.update(base_us=head, head_us=None)
                out.append(HistoryRow(**row))
            runs.append(out)
    return runs


def write(store: HistoryStore, plan: Plan) -> list[str]:
    return [store.append(run) for run in rows(plan)]
