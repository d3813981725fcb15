"""One-time costs (first call, recompile): statistics, summary, every output format, history.

Fast: synthetic bundles. The real workers under torch.compile are in
tests/test_integration_onetime.py."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile

import numpy as np
import pytest
from rich.console import Console
from scipy import stats as sps

from teperf.bundle import Bundle
from teperf.config import Stats, load_config
from teperf.errors import TeperfError
from teperf.render import render
from teperf.schema import ONETIME_FIELDS, ROW_FIELDS
from teperf.stats import break_even_steps, onetime_cell, onetime_pairs_needed, signed_rank_interval
from teperf.summary import summarize


@pytest.mark.parametrize(
    "extra_ms, saving_us, expected",
    [
        (100.0, 50.0, 2000),  # 100 ms back at 50 us a step
        (100.0, 30.0, 3334),  # rounded up: 3333 steps leave 10 us unpaid
        (-5.0, 10.0, 0),  # cheaper up front and faster: pays from the first step
        (100.0, 0.0, "never"),
        (100.0, -20.0, "never"),  # slower per step
        (None, 10.0, None),
        (5.0, None, None),
    ],
)
def test_break_even_steps(extra_ms, saving_us, expected):
    assert break_even_steps(extra_ms, saving_us) == expected


def test_onetime_cell_pairs_are_the_unit():
    cfg = Stats()
    base = {0: 1000.0, 1: 1100.0, 2: 900.0, 3: 1050.0, 4: 980.0, 5: 1020.0}
    head = {p: v * 1.5 for p, v in base.items()}  # 50% slower in every pair
    cell = onetime_cell(base, head, cfg)
    assert cell["n_pairs"] == 6
    assert cell["delta_pct"] == pytest.approx(50.0)
    assert cell["verdict"] == "slower"
    assert cell["head_ms"] - cell["base_ms"] == pytest.approx(cell["delta_ms"])
    # a pair without the other side's figure does not count
    assert onetime_cell(base, {0: 1500.0, 1: 1650.0}, cfg)["n_pairs"] == 2
    one = onetime_cell(base, None, cfg)
    assert one["base_ms"] == pytest.approx(math.exp(sum(math.log(v) for v in base.values()) / 6))
    assert one["n_pairs"] == 6 and one["pair_sd_pct"] > 0


def test_onetime_verdicts_need_six_pairs_and_their_own_minimum_effect():
    cfg = Stats()  # min_effect 1 %, min_effect_once 10 %
    base = {p: 1000.0 + 10 * p for p in range(8)}
    wobble = [1.02, 1.03, 1.025, 1.035, 1.02, 1.03, 1.028, 1.022]  # +2.7 %: an A/A's one-time noise
    head = {p: base[p] * w for p, w in zip(base, wobble)}
    # the interval excludes 0 and the change is over --min-effect, but not over --min-effect-once
    assert onetime_cell(base, head, cfg)["verdict"] == "no change"
    assert onetime_cell(base, head, Stats(min_effect_once_pct=1.0))["verdict"] == "slower"
    # under six pairs (at alpha 0.05 the signed-rank interval needs them): no verdict at all, however clear
    few = {p: base[p] for p in range(5)}
    cell = onetime_cell(few, {p: v * 2 for p, v in few.items()}, cfg)
    assert cell["verdict"] == "too few pairs" and cell["bound_pct"] is None and cell["ci_low_ms"] is None
    assert cell["delta_pct"] == pytest.approx(100.0)  # the figures are still there
    six = {p: base[p] for p in range(6)}
    assert onetime_cell(six, {p: v * 2 for p, v in six.items()}, cfg)["verdict"] == "slower"


def test_signed_rank_interval_is_exact():
    # n = 6: the only 95 % interval is [min, max] (2 / 2**6 = 3.1 %); n = 5 has none (6.25 % > 5 %)
    x = [0.3, -0.1, 0.2, 0.05, 0.4, 0.1]
    est, low, high, p = signed_rank_interval(x, 0.05)
    assert (low, high) == (min(x), max(x)) and p > 0.05  # the interval holds 0
    walsh = sorted((a + b) / 2 for i, a in enumerate(x) for b in x[i:])
    assert est == pytest.approx(float(np.median(walsh)))
    assert signed_rank_interval(x[:5], 0.05) is None
    assert onetime_pairs_needed(0.05) == 6 and onetime_pairs_needed(0.01) == 8
    # n = 12: the table's critical value 13 drops the 13 lowest and highest Walsh averages
    y = np.random.default_rng(3).normal(size=12)
    w = np.sort([(y[i] + y[j]) / 2 for i in range(12) for j in range(i, 12)])
    assert signed_rank_interval(y, 0.05)[1:3] == (pytest.approx(w[13]), pytest.approx(w[-14]))
    # its p-value is scipy's exact Wilcoxon test, and <= alpha exactly when the interval at alpha excludes 0
    for seed in range(40):
        z = np.random.default_rng(seed).normal(0.5, 1, size=9)
        p = signed_rank_interval(z, 0.05)[3]
        assert p == pytest.approx(sps.wilcoxon(z, method="exact").pvalue)
        for alpha in (0.01, 0.02, 0.05, 0.1):
            _, low, high, _ = signed_rank_interval(z, alpha)
            assert (p <= alpha) == (low > 0 or high < 0)


def _onetime_draws(rng, n_pairs, factor=1.0, tail="lognormal"):
    """Seeded one-time costs of one cell: a level per pair (both sides), a heavy-tailed draw per process."""
    level = 100.0 * np.exp(rng.normal(0, 0.3, n_pairs))  # the machine's state moves both sides of a pair
    if tail == "lognormal":
        noise = np.exp(rng.normal(0, 0.15, (2, n_pairs)))
    else:  # Pareto: now and then a first call that faults in pages or waits on a lock costs a lot more
        noise = 1 + 0.05 * rng.pareto(1.5, (2, n_pairs))
    base = dict(enumerate(level * noise[0]))
    return base, dict(enumerate(level * noise[1] * factor))


@pytest.mark.parametrize("tail", ["lognormal", "pareto"])
@pytest.mark.parametrize("n_pairs", [6, 10])
def test_onetime_aa_false_verdicts_at_most_five_percent(tail, n_pairs):
    rng = np.random.default_rng(32)
    verdicts = [
        onetime_cell(*_onetime_draws(rng, n_pairs, tail=tail), Stats())["verdict"] for _ in range(1500)
    ]
    false = sum(v in ("slower", "faster") for v in verdicts) / len(verdicts)
    assert false <= 0.05, false


@pytest.mark.parametrize("tail", ["lognormal", "pareto"])
def test_onetime_planted_twice_the_min_effect_is_detected(tail):
    rng = np.random.default_rng(7)
    cells = []
    for _ in range(400):
        base, head = _onetime_draws(rng, 12, tail=tail)
        aa = onetime_cell(base, head, Stats())  # the min effect this noise gives (the A/A spread)
        factor = 1 + 2 * aa["min_effect_pct"] / 100
        cells.append((factor, onetime_cell(base, {p: v * factor for p, v in head.items()}, Stats())))
    slower = sum(c["verdict"] == "slower" for _, c in cells) / len(cells)
    covered = sum(c["ci_low_pct"] <= (f - 1) * 100 <= c["ci_high_pct"] for f, c in cells) / len(cells)
    assert slower >= 0.8, slower
    assert covered >= 0.93, covered  # the interval holds the planted size as often as it promises


def test_onetime_min_effect_is_the_larger_of_the_floor_and_the_spread():
    rng = np.random.default_rng(1)
    base, head = _onetime_draws(rng, 12)
    cell = onetime_cell(base, head, Stats())
    logs = np.log([head[p] / base[p] for p in base])
    spread = (math.exp(1.4826 * float(np.median(np.abs(logs - np.median(logs))))) - 1) * 100
    assert cell["min_effect_pct"] == pytest.approx(max(10.0, spread), rel=0.3)
    assert onetime_cell(base, head, Stats(min_effect_once_pct=80.0))["min_effect_pct"] == 80.0


def test_onetime_cell_one_pair_has_no_interval():
    cell = onetime_cell({0: 10.0}, {0: 12.0}, Stats())
    assert cell["ci_low_ms"] is None and cell["delta_pct"] == pytest.approx(20.0)


def test_compile_cache_option_is_validated():
    assert load_config(None, {}).compile_cache == "cold"
    assert load_config(None, {"compile_cache": "warm"}).compile_cache == "warm"
    with pytest.raises(TeperfError, match="compile cache"):
        load_config(None, {"compile_cache": "lukewarm"})


# ----------------------------------------------------------------------------- synthetic bundles


def _clocks(ms: float, core: int = 1, **extra) -> dict:
    ns = int(ms * 1e6)
    return {
        "process_cpu_ns": ns // 2,
        "children_cpu_ns": ns - ns // 2,
        "thread_cpu_ns": ns // 2,
        "wall_ns": ns,
        "cores": [core],
        **extra,
    }


def _bundle(
    tmp_path, sides=("base", "head"), head_factor=1.0, pairs=8, eager_graphs=0, cache_mode="cold"
) -> Bundle:
    cfg = load_config(None, {"modules": ["Linear"], "modes": ["eager", "compile"], "core": None})
    meta = {
        "kind": "compare" if len(sides) == 2 else "run",
        "config": cfg.to_dict(),
        "sides": {s: {"label": s} for s in sides},
        "cases": [
            {
                "id": 0,
                "module": "Linear",
                "recipe": "fp32",
                "shape": [8, 2, 64],
                "dtype": "float32",
                "mode": "eager",
            },
            {
                "id": 1,
                "module": "Linear",
                "recipe": "fp32",
                "shape": [8, 2, 64],
                "dtype": "float32",
                "mode": "compile",
            },
        ],
    }
    bundle = Bundle.create(tmp_path / "results", meta["kind"], meta)
    core = cfg.core
    bundle.append({"kind": "compile_cache", "mode": cache_mode, "dir": "/tmp/x"})
    for pair in range(pairs):
        for side in sides:
            f = head_factor if side == "head" else 1.0
            eager = {"first_call": _clocks(2.0 * f * (1 + pair / 100), core)}
            if eager_graphs:  # the library torch.compiled a helper inside the eager step
                eager["first_call"]["graphs"] = eager_graphs
            comp = {
                "first_call": _clocks(
                    3000.0 * f * (1 + pair / 50),
                    core,
                    cache={"mode": "cold", "dir": f"/tmp/{pair}{side}", "files_before": 0},
                ),
                "recompile": _clocks(
                    900.0 * f,
                    core,
                    what="first step under torch.autocast('cpu', dtype=torch.bfloat16)",
                    graphs=1,
                ),
            }
            for cid, info in ((0, eager), (1, comp)):
                bundle.append(
                    {
                        "kind": "setup",
                        "pair": pair,
                        "side": side,
                        "case_id": cid,
                        "status": "ready",
                        "info": info,
                    }
                )
            for cid, us in ((0, 100.0), (1, 60.0)):
                for trial in range(2):
                    bundle.append(
                        {
                            "kind": "trial",
                            "pair": pair,
                            "round": 0,
                            "trial": trial,
                            "side": side,
                            "case_id": cid,
                            "iters": 10,
                            "process_cpu_ns": int(us * f * 10 * 1000 * (1 + trial / 100)),
                            "thread_cpu_ns": 1,
                            "wall_ns": int(us * 10 * 1000),
                            "sync_ns": 0,
                        }
                    )
    bundle.close()
    bundle.update_meta(status="complete")
    return bundle


def test_compare_summary_has_paired_onetime_figures(tmp_path):
    bundle = _bundle(tmp_path, head_factor=1.25)
    s = summarize(bundle.path)
    eager, comp = s.rows
    # 5 cells (2 per step, 2 first calls, 1 recompile): at 8 pairs every one-time cell can pass 0.05 / 5
    assert comp.first_call_n_pairs == 8 and comp.first_call_verdict == "slower"
    assert comp.first_call_delta_pct == pytest.approx(25.0)
    assert comp.recompile_base_ms == pytest.approx(900.0) and comp.recompile_delta_pct == pytest.approx(25.0)
    assert eager.recompile_base_ms is None and eager.first_call_base_ms == pytest.approx(2.0, rel=0.05)
    assert any("compile cache cold" in n for n in s.onetime_notes)
    assert any("graphs compiled by it: 1" in n for n in s.onetime_notes)
    # at 6 pairs none can (2 / 2**6 > 0.05 / 2): left out, so the per-step cells keep 0.05 / 2
    six = summarize(_bundle(tmp_path / "six", head_factor=1.25, pairs=6).path)
    assert {r.first_call_verdict for r in six.rows} == {"too few pairs"}
    assert six.levels.family == 2 and any("from 8 pairs on" in n for n in six.onetime_notes)


def test_metric_picks_the_onetime_clock(tmp_path):
    bundle = _bundle(tmp_path)
    wall = summarize(bundle.path, Stats(metric="wall")).rows[1]
    thread = summarize(bundle.path, Stats(metric="thread_cpu")).rows[1]
    assert thread.first_call_base_ms == pytest.approx(wall.first_call_base_ms / 2, rel=1e-3)


def test_onetime_table_in_every_format(tmp_path):
    s = summarize(_bundle(tmp_path, head_factor=1.25).path)
    md = render(s, "markdown")
    assert "**one-time costs**" in md and "| Linear | fp32 | compile | recompile |" in md
    assert "first call" in md and "slower" in md.split("**one-time costs**")[1]
    console = Console(record=True, width=250)
    render(s, "table", console=console)
    text = console.export_text()
    assert "one-time costs" in text and "recompile" in text
    data = json.loads(render(s, "json"))
    row = data["rows"][1]
    assert set(ONETIME_FIELDS) <= set(row) and row["first_call_verdict"] == "slower"
    assert data["onetime_notes"]
    rows = list(csv.DictReader(io.StringIO(render(s, "csv"))))
    assert list(rows[0]) == list(ROW_FIELDS)
    assert float(rows[1]["recompile_head_ms"]) == pytest.approx(900.0 * 1.25)


def test_run_table_gives_the_break_even(tmp_path):
    s = summarize(_bundle(tmp_path, sides=("run",)).path)
    eager, comp = s.rows
    assert comp.saving_per_step_us == pytest.approx(40.0, rel=0.02)
    assert comp.onetime_extra_ms == pytest.approx(comp.first_call_base_ms - eager.first_call_base_ms)
    assert comp.break_even_steps == break_even_steps(comp.onetime_extra_ms, comp.saving_per_step_us)
    assert isinstance(comp.break_even_steps, int) and comp.break_even_steps > 70000
    assert eager.break_even_steps is None
    md = render(s, "markdown")
    assert "break-even (steps)" in md and f"{comp.break_even_steps:,}" in md


def test_bundle_without_onetime_records_renders_as_before(tmp_path):
    bundle = _bundle(tmp_path)
    lines = [json.loads(l) for l in (bundle.path / "records.jsonl").read_text().splitlines()]
    for rec in lines:
        if rec["kind"] == "setup":
            rec["info"] = {}
    (bundle.path / "records.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in lines if r["kind"] != "compile_cache")
    )
    s = summarize(bundle.path)
    assert s.rows[1].first_call_base_ms is None and not s.onetime_notes
    assert "one-time costs" not in render(s, "markdown")


def test_history_rows_carry_the_onetime_cost(tmp_path):
    from teperf.history.store import HistoryStore

    s = summarize(_bundle(tmp_path, head_factor=1.25).path)
    st = HistoryStore(tmp_path / "h")
    st.add_summary(s, run_kind="nightly", bundle="x")
    df = st.read()
    comp = df[df["mode"] == "compile"].iloc[0]
    assert comp.first_call_ms == pytest.approx(s.rows[1].first_call_head_ms)
    assert comp.first_call_delta_pct == pytest.approx(25.0) and comp.first_call_verdict == "slower"
    assert comp.recompile_ms == pytest.approx(900.0 * 1.25)
    assert math.isnan(df[df["mode"] == "eager"].iloc[0].recompile_ms)


# ----------------------------------------------------------------------------- worker pieces, in this process


def test_each_compile_case_compiles_anew_after_isolate_dynamo():
    """The session calls isolate_dynamo before each compile case's timed first call: without it
    dynamo would hand the second module of one class and shape the first one's graph."""
    torch = pytest.importorskip("torch")
    from teperf.worker.runner import compile_counts_during, isolate_dynamo

    x = torch.randn(4, 8)
    isolate_dynamo()  # whatever other tests compiled in this process

    def graphs(module):
        compiled = torch.compile(module, backend="eager")  # dynamo's caching is the point, not inductor
        return compile_counts_during(lambda: compiled(x))["graphs"]

    assert graphs(torch.nn.Linear(8, 8)) == 1 and graphs(torch.nn.Linear(8, 8)) == 0
    isolate_dynamo()
    assert graphs(torch.nn.Linear(8, 8)) == 1


def test_an_eager_first_call_that_compiles_inside_the_library_says_so(tmp_path):
    """TE torch.compiles its fused helpers on a module's first eager step (LayerNormMLP bf16: 5.7-8.1 s of
    CPU a worker on an H100); the worker counts dynamo's graphs around that call and the footer names it."""
    torch = pytest.importorskip("torch")
    from teperf.worker.runner import Built, isolate_dynamo
    from teperf.worker.session import Session

    class Calls(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, t):
            return self.fn(t)

    isolate_dynamo()
    helper = torch.compile(lambda t: t * 2, backend="eager")  # compiled lazily, at its first call
    session = Session("cpu", [])
    infos = {}
    for cid, fn in ((0, helper), (1, lambda t: t * 2)):
        built = Built(module=Calls(fn), inputs=(torch.ones(2, requires_grad=True),))
        infos[cid] = {}
        session._first_call({"id": cid, "mode": "eager"}, built, infos[cid])
    assert infos[0]["first_call"]["graphs"] == 1 and "graphs" not in infos[1]["first_call"]

    assert not any("inside the library" in n for n in summarize(_bundle(tmp_path / "a").path).onetime_notes)
    noted = summarize(_bundle(tmp_path / "b", eager_graphs=2).path).onetime_notes
    assert any("inside the library" in n and n.endswith("in a warm cache pays less") for n in noted)
    # a warm run's workers share one cache per side: no claim that each compiled cold
    warm = summarize(_bundle(tmp_path / "c", eager_graphs=2, cache_mode="warm").path).onetime_notes
    assert any(
        n.endswith("(it compiles part of its code on first use, e.g. TE's fused helpers)") for n in warm
    )
    assert any(
        n.startswith("first calls that ran torch.compile inside the library: Linear fp32 eager (")
        for n in noted
    )


def test_first_call_meets_a_fresh_processes_global_state():
    """A case's first call sees the module-level state (TE's attention backend choice) as a fresh
    process has it, not what an earlier case left; its trials get its own state back."""
    pytest.importorskip("torch")
    from teperf.worker.runner import Built
    from teperf.worker.session import Session

    shared = {"chosen": None}
    seen = []

    class Module:
        def parameters(self):
            return []

        def __call__(self, x):
            seen.append(shared["chosen"])
            shared["chosen"] = shared["chosen"] or f"picked by {self.name}"
            return x

    import torch

    session = Session("cpu", [])
    for cid, name in ((0, "first"), (1, "second")):
        module = Module()
        module.name = name
        built = Built(module=module, inputs=(torch.ones(2, requires_grad=True),), global_state=shared)
        step, _info = session._first_call({"id": cid, "mode": "eager"}, built, {})
        session.cases[cid] = (step, built, {})
        session.saved_state[cid] = dict(shared)
    assert seen == [None, None]  # the second case chose for itself too
    session.ready(0)
    assert shared["chosen"] == "picked by first"


def test_compile_cache_cold_and_warm(tmp_path, monkeypatch):
    from teperf.worker.compile_cache import CompileCache

    for var in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS"):
        monkeypatch.delenv(var, raising=False)
    cold = CompileCache({"mode": "cold", "parent": str(tmp_path)})
    one, two = cold.use("case1"), cold.use("case2")
    assert one["dir"] != two["dir"] and one["files_before"] == two["files_before"] == 0
    assert (
        os.environ["TORCHINDUCTOR_CACHE_DIR"] == two["dir"]
        and os.environ["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    )
    other = CompileCache({"mode": "cold", "parent": str(tmp_path)})
    assert other.root != cold.root  # a fresh directory per worker process
    cold.close()
    assert not os.path.exists(cold.root) and os.path.exists(other.root)
    shared = tmp_path / "warm" / "base"
    (shared / "case1").mkdir(parents=True)
    (shared / "case1" / "artifact").write_text("x")
    warm = CompileCache({"mode": "warm", "dir": str(shared)})
    assert warm.use("case1") == {"mode": "warm", "dir": str(shared / "case1"), "files_before": 1}
    warm.close()
    assert (shared / "case1" / "artifact").exists()  # the run's directory is the coordinator's to remove
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    lazy = CompileCache(None)  # a run without compile cases: no directory unless inductor writes one
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(lazy.root, "process")
    assert lazy.root.startswith(str(tmp_path / "tmp")) and not os.listdir(tmp_path / "tmp")
    os.makedirs(os.path.join(lazy.root, "process"))  # what inductor's cache_dir() does on its first write
    lazy.close()
    assert not os.listdir(tmp_path / "tmp")


def _drop(bundle: Bundle, keep) -> None:
    lines = [json.loads(l) for l in (bundle.path / "records.jsonl").read_text().splitlines()]
    (bundle.path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines if keep(r)))


def test_a_lost_pair_counts_for_no_onetime_figure(tmp_path):
    """CellRetries: a worker that died costs the cell that pair, its first call included."""
    bundle = _bundle(tmp_path, head_factor=1.25, pairs=9)
    # pair 1's head worker died during the compile cell's trials: no head trials there, a failure record
    _drop(
        bundle,
        lambda r: not (r["kind"] == "trial" and r["pair"] == 1 and r["side"] == "head" and r["case_id"] == 1),
    )
    with open(bundle.path / "records.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "kind": "failure",
                    "pair": 1,
                    "side": "head",
                    "case_id": 1,
                    "error": "worker died",
                    "final": False,
                    "lost_pairs": [1],
                }
            )
            + "\n"
        )
    s = summarize(bundle.path)
    eager, comp = s.rows
    assert comp.status == "partial" and comp.n_pairs == 8
    assert comp.first_call_n_pairs == 8 and comp.recompile_n_pairs == 8
    assert eager.first_call_n_pairs == 9  # the other cell kept the pair
    md = render(s, "markdown")
    assert "| 8 | slower |" in md.split("**one-time costs**")[1]


def test_a_cell_whose_every_pair_was_lost_has_no_onetime_figure(tmp_path):
    bundle = _bundle(tmp_path, pairs=2)
    with open(bundle.path / "records.jsonl", "a") as f:
        for pair in (0, 1):
            f.write(
                json.dumps(
                    {
                        "kind": "failure",
                        "pair": pair,
                        "side": "base",
                        "case_id": 1,
                        "error": "hung",
                        "final": pair == 1,
                        "lost_pairs": list(range(pair + 1)),
                    }
                )
                + "\n"
            )
    s = summarize(bundle.path)
    comp = s.rows[1]
    assert comp.first_call_base_ms is None and comp.recompile_base_ms is None
    for fmt in ("markdown", "json", "csv"):
        assert render(s, fmt)
    assert "| compile | recompile |" not in render(s, "markdown")


def test_precision_runs_render_onetime_rows_with_their_pairs(tmp_path):
    """--precision: cells settle after different numbers of pairs; the one-time table says how many
    each rests on and the inconclusive verdict carries its bound, as in the per-step table."""
    bundle = _bundle(tmp_path, pairs=8)
    meta = json.loads((bundle.path / "meta.json").read_text())
    meta["config"]["schedule"].update(precision_pct=1.0, budget_s=600, min_pairs=3)
    (bundle.path / "meta.json").write_text(json.dumps(meta))
    # the eager cell settled after 3 pairs: pairs 3 to 7 set it up (started ahead) but ran no trials of it
    _drop(bundle, lambda r: not (r["kind"] == "trial" and r["case_id"] == 0 and r["pair"] >= 3))
    lines = [json.loads(l) for l in (bundle.path / "records.jsonl").read_text().splitlines()]
    for r in lines:  # the compile cell's head first calls scatter by pair: no interval inside +-1%
        if r["kind"] == "setup" and r["side"] == "head" and r["case_id"] == 1:
            r["info"]["first_call"] = _clocks(
                3000.0 * (1.2, 0.9, 1.1, 0.95, 1.0, 1.05, 0.92, 1.08)[r["pair"]]
            )
    (bundle.path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with open(bundle.path / "records.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "kind": "stop",
                    "reason": "precision reached",
                    "pairs": 8,
                    "elapsed_s": 30.0,
                    "precision_pct": 1.0,
                    "budget_s": 600,
                    "open": [],
                }
            )
            + "\n"
        )
    s = summarize(bundle.path)
    eager, comp = s.rows
    assert eager.n_pairs == 3 and comp.n_pairs == 8 and s.show_pairs
    assert eager.first_call_n_pairs == 8  # every pair that set the cell up
    assert comp.first_call_verdict == "inconclusive" and comp.first_call_bound_pct is not None
    assert comp.recompile_verdict == "no change"
    onetime_md = render(s, "markdown").split("**one-time costs**")[1]
    assert "| 8 | inconclusive (up to" in onetime_md and "| 8 | no change |" in onetime_md
    data = json.loads(render(s, "json"))
    assert {"first_call_bound_pct", "first_call_n_pairs"} <= set(data["rows"][1])
    assert "noisy" not in render(s, "markdown")


def test_warm_cache_note_counts_first_calls_that_hit_for_every_graph():
    from teperf.summary.notes import warm_cache_text

    def cache(hit=0, miss=0, bypass=0, autograd_bypass=0):
        return {"files_before": 9, "fxgraph_hit": hit, "fxgraph_miss": miss, "fxgraph_bypass": bypass,
                "autograd_hit": 0, "autograd_miss": 0, "autograd_bypass": autograd_bypass}  # fmt: skip

    assert warm_cache_text([cache(hit=2), cache(hit=2)], 2) == (
        "2 of 2 compile first calls found every graph they compiled in it"
    )
    text = warm_cache_text([cache(hit=2), cache(hit=1, miss=1), cache(bypass=1), cache()], 4)
    assert text.startswith("1 of 4 compile first calls found every graph")
    assert "1 compiled graphs anew" in text and "1 bypassed a cache" in text and "1 compiled nothing" in text
    # a bundle from before the counters: whether the directory held files
    assert warm_cache_text([{"files_before": 3}, {"files_before": 0}], 1) == (
        "1 of 2 compile first calls found it filled"
    )


def test_onetime_no_change_keeps_the_floor_when_the_spread_raises_the_bar():
    # make demo's Linear first call: a wide A/A spread raised the min effect, and the wide interval
    # inside that raised band once read "no change"; only the bar for slower/faster moves with the spread
    base = {p: 1.0 for p in range(20)}
    head = {p: math.exp(0.5 * ((p + 0.5) / 10 - 1) * 1.7) for p in range(20)}  # log ratios spread +-0.85
    cell = onetime_cell(base, head, Stats())
    assert (
        cell["ci_low_pct"] < -10 and cell["ci_high_pct"] > 10 < cell["min_effect_pct"] - cell["ci_high_pct"]
    )
    assert cell["verdict"] == "inconclusive" and abs(cell["bound_pct"]) > 10
    tight = {p: 1.0 + (p - 3.5) / 100 for p in range(20)}  # inside the 10 % floor
    assert onetime_cell(base, tight, Stats())["verdict"] == "no change"
