"""teperf.explain: profile diffs, counter diffs, and ``teperf explain`` end to end."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT, one_error, run_in_process

from teperf.errors import TeperfError
from teperf.explain import capture as ex_capture
from teperf.explain import diff as ex_diff
from teperf.explain import render as ex_render
from teperf.explain.capture import find_case
from teperf.explain.diff import FunctionDelta, by_calls, by_own_time, combine_profiles, diff_profiles
from teperf.explain.render import counters_diff, summary


def row(name, calls, own, cum=None, rel="pkg/mod.py", line=10, file=None):
    return {
        "file": file or f"/somewhere/{rel}",
        "rel": rel,
        "line": line,
        "name": name,
        "calls": calls,
        "own_us": own,
        "cum_us": own if cum is None else cum,
    }


# ---- counters_diff ----


def test_counters_diff_text():
    base = {
        "python_calls": 100,
        "aten_ops": 20,
        "autograd_nodes": 6,
        "kernel_launches": 9,
        "syncs": 0,
        "allocations": 8,
    }
    head = {
        "python_calls": 114,
        "aten_ops": 21,
        "autograd_nodes": 6,
        "kernel_launches": 9,
        "syncs": 0,
        "allocations": 8,
    }
    assert counters_diff(base, head) == "+14 py calls, +1 aten op, 0 kernels"
    head2 = dict(head, syncs=2, allocations=5, autograd_nodes=7)
    assert (
        counters_diff(base, head2)
        == "+14 py calls, +1 aten op, +1 autograd node, 0 kernels, +2 syncs, -3 allocs"
    )
    assert (
        counters_diff(base, base, full=True)
        == "0 py calls, 0 aten ops, 0 autograd nodes, 0 kernels, 0 syncs, 0 allocs"
    )


def test_counters_diff_skips_unmeasurable_and_missing():
    cpu = {
        "python_calls": 10,
        "aten_ops": 5,
        "autograd_nodes": 3,
        "kernel_launches": None,
        "syncs": None,
        "allocations": 4,
    }
    assert counters_diff(cpu, dict(cpu, python_calls=9)) == "-1 py call, 0 aten ops"
    assert counters_diff(None, cpu) == ""
    assert counters_diff(cpu, {}) == ""
    assert ex_diff.counter_deltas(cpu, dict(cpu, aten_ops=7))["aten_ops"] == 2
    assert ex_diff.counter_deltas(cpu, cpu)["kernel_launches"] is None


# ---- profile diffs ----


def test_functions_match_across_trees_by_relative_path_and_name():
    base = [row("f", 1, 5.0, file="/tmp/base/pkg/mod.py", line=10), row("g", 2, 1.0)]
    head = [row("f", 1, 11.0, file="/tmp/head/pkg/mod.py", line=14), row("g", 2, 1.0)]
    deltas = {d.name: d for d in diff_profiles(base, head)}
    assert set(deltas) == {"f", "g"}
    f = deltas["f"]
    assert (f.d_own_us, f.d_calls, f.file, f.line) == (6.0, 0.0, "/tmp/head/pkg/mod.py", 14)
    assert f.where == "pkg/mod.py:14"
    assert deltas["g"].d_own_us == 0


def test_rankings_and_summary():
    base = [
        row("slow", 1, 10.0),
        row("same", 3, 4.0),
        row("dc_init", 2, 1.0, rel="dataclasses.py", line=1),
        row("gone", 1, 2.0),
    ]
    head = [
        row("slow", 1, 16.0),
        row("same", 3, 4.0),
        row("dc_init", 15, 7.5, rel="dataclasses.py", line=1),
        row("<built-in method torch.add>", 1, 0.5, rel="~", line=0),
    ]
    deltas = diff_profiles(base, head)
    assert [d.name for d in by_own_time(deltas, 2)] == ["dc_init", "slow"]
    assert [d.name for d in by_calls(deltas)] == ["dc_init", "gone", "<built-in method torch.add>"]
    text = summary(deltas, n_time=1, n_calls=1)
    # calls first: they repeat exactly
    assert text == "+13 calls of dc_init (dataclasses.py:1), +6.5 us in dc_init (dataclasses.py:1)"
    assert "[not called in base]" in ex_render.render_text(deltas)
    c_function = next(d for d in deltas if d.rel == "~")
    assert c_function.where == ""
    json.dumps(ex_render.to_json(deltas))


def test_calls_tie_is_broken_by_cumulative_time():
    # helper calls inner: both gain K calls; the helper (larger cumulative time) ranks first
    base = [row("step", 1, 1.0, cum=10.0)]
    head = [row("step", 1, 1.0, cum=40.0), row("inner", 7, 0.5, cum=0.5), row("helper", 7, 20.0, cum=20.5)]
    assert [d.name for d in by_calls(diff_profiles(base, head))] == ["helper", "inner"]


def test_no_difference_summary():
    rows = [row("f", 1, 3.0)]
    assert summary(diff_profiles(rows, rows)) == "no function-level difference"


def test_combine_profiles_takes_the_median_per_function():
    a = [row("f", 1, 5.0), row("g", 1, 1.0)]
    b = [row("f", 1, 90.0)]  # a preemption landed in f; g did not run at all
    c = [row("f", 1, 6.0), row("g", 1, 1.2)]
    combined = {r["name"]: r for r in combine_profiles([a, b, c])}
    assert combined["f"]["own_us"] == 6.0
    assert combined["g"]["own_us"] == 1.0  # median of 1.0, 0, 1.2
    assert combine_profiles([a]) == a


def test_find_case():
    meta = {
        "cases": [
            {"id": 0, "module": "Linear", "recipe": "bf16", "shape": [8, 2, 256], "mode": "eager"},
            {"id": 1, "module": "Linear", "recipe": "bf16", "shape": [8, 2, 256], "mode": "cuda-graph"},
            {"id": 2, "module": "LayerNormLinear", "recipe": "bf16", "shape": [8, 2, 256], "mode": "eager"},
        ]
    }
    assert find_case(meta["cases"], "LayerNormLinear/bf16")["id"] == 2
    assert find_case(meta["cases"], "Linear/bf16/8x2x256/cuda-graph")["id"] == 1
    with pytest.raises(TeperfError, match="matches 2 cells"):
        find_case(meta["cases"], "Linear/bf16")
    with pytest.raises(TeperfError, match="no cell"):
        find_case(meta["cases"], "Linear/fp8")
    with pytest.raises(TeperfError, match="several cells"):
        find_case(meta["cases"], None)


def test_function_delta_roundtrip():
    d = FunctionDelta(
        rel="a.py", name="f", file="/x/a.py", line=3, base_calls=1, head_calls=2, in_base=True, in_head=True
    )
    assert d.to_dict()["d_calls"] == 1 and d.to_dict()["where"] == "a.py:3"


# ---- the worker's profile rows ----


def test_profile_rows_shape(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from teperf.worker.profile import profile_step, relative_path

    calls = []

    def leaf():
        calls.append(1)

    def step():
        leaf()
        leaf()

    rows = profile_step(step, 10, cuda=False)
    json.dumps(rows)
    mine = {r["name"]: r for r in rows if r["rel"].endswith("test_explain.py")}
    assert mine["test_profile_rows_shape.<locals>.leaf"]["calls"] == 2.0
    assert mine["test_profile_rows_shape.<locals>.step"]["calls"] == 1.0
    assert all(set(r) == {"file", "rel", "line", "name", "calls", "own_us", "cum_us"} for r in rows)
    owns = [r["own_us"] for r in rows]
    assert owns == sorted(owns, reverse=True)
    assert relative_path("/opt/x/pkg/mod.py", ["/opt/x"]) == "pkg/mod.py"
    assert relative_path("<frozen importlib._bootstrap>", ["/opt/x"]) == "<frozen importlib._bootstrap>"


# ---- end to end: a compare bundle, then teperf explain on it ----

FIXTURE = textwrap.dedent(
    """
    import torch

    EXTRA_HELPER_CALLS = {extra}


    def _inner(v):
        return v + 1


    def helper(v):
        s = 0
        for i in range(3000):
            s += i * v
        return _inner(s)


    class Block(torch.nn.Module):
        def __init__(self, hidden=16):
            super().__init__()
            self.lin = torch.nn.Linear(hidden, hidden)

        def forward(self, x):
            for _ in range(EXTRA_HELPER_CALLS):
                helper(1)
            return self.lin(x)


    def make(hidden=16):
        return Block(hidden)
    """
)

K = 6


def _side(root: Path, extra: int) -> Path:
    pkg = root / "explainpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(FIXTURE.format(extra=extra))
    return root


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    pytest.importorskip("torch")
    from teperf import api
    from teperf.config import load_config

    root = tmp_path_factory.mktemp("explain")
    base = _side(root / "base", 0)
    head = _side(root / "head", K)
    cfg = root / "cfg.toml"
    cfg.write_text(
        textwrap.dedent(
            """
            backend = "torch"
            device = "cpu"
            recipes = ["fp32"]
            shapes = [[4, 16]]
            counters = true
            [modules.Block]
            factory = "explainpkg.mod:make"
            [schedule]
            processes = 1
            rounds = 1
            trials = 2
            iters = 3
            warmup = 2
            """
        )
    )
    config = load_config(str(cfg), {})
    return api.compare(
        config,
        api.path_side("base", str(base)),
        api.path_side("head", str(head)),
        results_dir=str(root / "results"),
    )


@pytest.mark.real_worker
@pytest.mark.statistical  # helper first by own time: live timing
@pytest.mark.alone  # the own-time ranking named torch first once at load 10
def test_explain_puts_the_helper_on_top(bundle):
    report = ex_capture.explain_bundle(bundle, "Block/fp32", iters=20, repeats=3)
    assert report["cell"] == "Block/fp32/4x16/eager"
    counters = report["counters"]
    assert counters["head"]["python_calls"] - counters["base"]["python_calls"] == 2 * K
    assert report["counters_diff"].startswith(f"+{2 * K} py calls, 0 aten ops")
    top_calls = report["diff"]["by_calls"]
    assert [(d["name"], d["d_calls"]) for d in top_calls] == [("helper", K), ("_inner", K)]
    assert top_calls[0]["where"].startswith("explainpkg/mod.py:")
    assert report["diff"]["by_own_time"][0]["name"] == "helper"
    assert (
        report["diff"]["summary"].startswith("+")
        and " in helper (explainpkg/mod.py:" in report["diff"]["summary"]
    )
    assert Path(report["saved_to"]).is_file()

    text = ex_render.render_report(report, n=5)
    ranked = text.split("By own time", 1)[1].splitlines()[2]  # first row under the column header
    assert "helper" in ranked, text


@pytest.mark.real_worker
def test_explain_cli(bundle):
    from click.testing import CliRunner

    from teperf.commands.explain import command

    result = CliRunner().invoke(
        command, [str(bundle), "--cell", "Block/fp32", "--iters", "10", "--repeats", "1", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["diff"]["by_calls"][0]["name"] == "helper"
    assert "profiles" not in out

    bad = CliRunner().invoke(command, [str(bundle), "--cell", "Nope/fp32"])
    assert bad.exit_code != 0 and isinstance(bad.exception, TeperfError)


@pytest.mark.real_worker
def test_bundle_row_carries_counters(bundle):
    from teperf.api import summarize

    (row_,) = summarize(bundle).rows
    assert row_.counters["head"]["python_calls"] - row_.counters["base"]["python_calls"] == 2 * K
    assert counters_diff(row_.counters["base"], row_.counters["head"]) == f"+{2 * K} py calls, 0 aten ops"


def test_compile_residue_in_explain_and_the_tables():
    # compile cells carry graphs, graph breaks (+ reasons), recompiles and guard failures
    from teperf.render import counters_text

    base = {
        "python_calls": 150,
        "aten_ops": 20,
        "graphs": 1,
        "graph_breaks": 0,
        "recompiles": 0,
        "guard_failures": 0,
        "break_reasons": [],
    }
    head = {
        **base,
        "python_calls": 160,
        "graphs": 2,
        "graph_breaks": 1,
        "break_reasons": ["time.perf_counter_ns"],
    }
    assert ex_render.counters_diff(base, head) == "+10 py calls, 0 aten ops, +1 graph, +1 graph break"
    assert ex_render.counters_diff(base, base) == "0 py calls, 0 aten ops, 0 graph breaks"
    assert counters_text({"base": head, "head": None}).endswith(
        "graph_breaks 1, recompiles 0, guard_failures 0"
    )
    report = {
        "cell": "MLP/fp32/8x2x64/compile",
        "core": 1,
        "repeats": 1,
        "iters": 1,
        "sides": ["base", "head"],
        "counters": {"base": base, "head": head},
        "counters_diff": ex_render.counters_diff(base, head),
        "profiles": {"base": [], "head": []},
    }
    text = ex_render.render_report(report)
    assert "  head graph breaks: time.perf_counter_ns" in text and "break_reasons" not in text


def test_own_time_intervals_keep_noise_out_of_the_summary():
    # repeat by repeat: "slow" is +6 us every time, "noisy" swings -620 .. +134 us
    base_runs = [[row("slow", 1, 10.0), row("noisy", 1, 700.0)] for _ in range(3)]
    head_runs = [
        [row("slow", 1, 16.0), row("noisy", 1, 80.0)],
        [row("slow", 1, 16.1), row("noisy", 1, 834.0)],
        [row("slow", 1, 15.9), row("noisy", 1, 650.0)],
    ]
    intervals = ex_diff.own_time_intervals(base_runs, head_runs)
    deltas = ex_diff.apply_intervals(
        diff_profiles(combine_profiles(base_runs), combine_profiles(head_runs)), intervals
    )
    by_name = {d.name: d for d in deltas}
    assert by_name["slow"].own_settled is True and by_name["noisy"].own_settled is False
    assert by_name["noisy"].own_hw_us > 500
    assert summary(deltas) == "+6.0 us +-0.2 us in slow (pkg/mod.py:10)"
    text = ex_render.render_text(deltas)
    assert "~+-" in text  # the noisy line is marked as within its interval
    assert ex_diff.own_time_intervals(base_runs[:1], head_runs[:1]) == {}  # one repeat: no interval


def test_unknown_cell_before_measuring_names_the_config(capsys):
    from conftest import run_in_process

    argv = ["compare", "--base-path", ".", "--head-path", ".", "--explain", "Nope/fp32"]
    code, _, err = run_in_process(argv, capsys)
    assert code == 2 and "no cell 'Nope/fp32' in the config" in err and "bundle" not in err


def test_explain_shows_the_interval_around_its_own_centre():
    from teperf.explain.diff import FunctionDelta
    from teperf.explain.render import render_text, summary

    # the summed profiles moved +103.4 us; the repeats' mean change is +110.0 +- 106.6: settled
    d = FunctionDelta(
        "m.py", "f", "/m.py", 1, base_own_us=10.0, head_own_us=113.4, in_base=True, in_head=True
    )
    d.own_mean_us, d.own_hw_us = 110.0, 106.6
    assert summary([d]) == "+110.0 us +-106.6 us in f (m.py:1)"
    (row,) = [ln for ln in render_text([d]).splitlines() if ln.endswith(" f  m.py:1")]
    assert "+110.0 us" in row, row


def test_explain_says_when_the_machine_is_busy(monkeypatch):
    from teperf import doctor
    from teperf.explain import capture

    busy = doctor.Check("load", "warn", "load average 6.05 on 2 usable cores: the machine is busy")
    monkeypatch.setattr(doctor, "check_load", lambda: busy)
    monkeypatch.setattr(doctor, "check_runnable", lambda core: doctor.Check("runnable", "ok", ""))
    assert "the machine is busy" in capture.machine_load(1) and "own times include" in capture.machine_load(1)
    monkeypatch.setattr(doctor, "check_load", lambda: doctor.Check("load", "ok", ""))
    assert capture.machine_load(1) == ""


def test_explain_refuses_a_core_this_machine_lacks_before_it_looks_at_the_sides(capsys):
    bundle = ROOT / "tests" / "fixtures" / "bundles" / "v1-compare-counters"  # its sides are long gone
    code, out, err = run_in_process(["explain", str(bundle), "--core", "999"], capsys)
    one_error(code, out, err, "core 999 is not available")
