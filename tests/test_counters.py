"""Step counters (teperf.worker.counters): exact deltas, A/A equality, reproducibility.

Fixture modules are written into tmp_path as a package ``fixpkg`` whose
forward optionally calls ``helper`` K extra times; ``helper`` calls ``_inner``
once, so K extra helper calls are exactly 2K extra Python function calls and
nothing else (no torch op, autograd node or allocation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from teperf.worker import counters as counters_mod  # noqa: E402
from teperf.worker.counters import KEYS, count_python_calls, count_step  # noqa: E402
from teperf.worker.session import Session  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

MODULE_TEMPLATE = textwrap.dedent(
    """
    import torch

    EXTRA_HELPER_CALLS = {extra}
    EXTRA_OP = {op}


    def _inner(v):
        return v + 1


    def helper(v):
        s = 0
        for i in range(400):
            s += i * v
        return _inner(s)


    class Block(torch.nn.Module):
        def __init__(self, hidden=16, extra=0):
            super().__init__()
            self.lin = torch.nn.Linear(hidden, hidden)
            self.extra = extra

        def forward(self, x):
            for _ in range(EXTRA_HELPER_CALLS + self.extra):
                helper(1)
            if EXTRA_OP:
                x = x + 0.5
            return self.lin(x)


    def make(hidden=16, extra=0):
        return Block(hidden, extra)
    """
)


def write_side(root: Path, package: str = "fixpkg", extra: int = 0, op: bool = False) -> Path:
    pkg = root / package
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(MODULE_TEMPLATE.format(extra=extra, op=op))
    return root


def case(case_id: int = 0, package: str = "fixpkg", kwargs: dict | None = None, warmup: int = 3) -> dict:
    return {
        "id": case_id,
        "backend": "factory",
        "module": "Block",
        "recipe": "fp32",
        "shape": [4, 16],
        "dtype": "float32",
        "mode": "eager",
        "device": "cpu",
        "warmup": warmup,
        "factory": f"{package}.mod:make",
        "kwargs": kwargs or {},
    }


@pytest.fixture
def session(tmp_path, monkeypatch):
    # Unique package names per test: the in-process session shares sys.modules.
    monkeypatch.syspath_prepend(str(tmp_path))
    s = Session(device="cpu", backends=["factory"])
    yield s
    s.close()


def _counters(session: Session, case_id: int) -> dict:
    reply = session.handle({"cmd": "counters", "case_id": case_id})
    assert reply["type"] == "counters"
    return reply["counters"]


def _setup(session: Session, wire: dict) -> None:
    reply = session.handle({"cmd": "setup", "case": wire})
    assert reply["type"] == "ready", reply


# ---- pure Python-call counting (no torch involved) ----


def test_count_python_calls_counts_frames_started():
    def leaf():
        return 1

    def two():
        leaf()
        leaf()

    assert count_python_calls(lambda: None) == 1  # the callable itself
    assert count_python_calls(two) == 3
    assert count_python_calls(lambda: [len(str(i)) for i in range(5)]) in (
        1,
        2,
    )  # C calls never count; 3.12 inlines the comprehension


def test_generator_resumptions_are_not_calls():
    def gen():
        yield 1
        yield 2
        yield 3

    def consume():
        for _ in gen():
            pass

    # consume + the first start of gen; the two resumptions and the final one are not calls
    assert count_python_calls(consume) == 2


def test_context_manager_generator_counts_start_only():
    import contextlib

    @contextlib.contextmanager
    def cm():
        yield

    def use():
        with cm():
            pass

    # use, contextmanager's helper, __init__, __enter__, cm (started), __exit__; cm's resumption is not
    # counted
    assert count_python_calls(use) == 6


# ---- count_step on real steps ----


def test_keys_and_cpu_nones(session, tmp_path):
    write_side(tmp_path, "pkg_keys")
    _setup(session, case(0, "pkg_keys"))
    c = _counters(session, 0)
    assert tuple(c) == KEYS
    assert c["kernel_launches"] is None and c["syncs"] is None
    for key in ("python_calls", "aten_ops", "autograd_nodes", "allocations"):
        assert isinstance(c[key], int) and c[key] > 0, (key, c)
    json.dumps(c)


def test_same_numbers_twice_and_for_a_second_build(session, tmp_path):
    write_side(tmp_path, "pkg_aa")
    _setup(session, case(0, "pkg_aa"))
    _setup(session, case(1, "pkg_aa"))
    first = _counters(session, 0)
    assert _counters(session, 0) == first
    assert _counters(session, 1) == first  # A/A: another instance of the same module


def test_k_extra_helper_calls_are_exactly_2k_python_calls(session, tmp_path):
    k = 7
    write_side(tmp_path, "pkg_k")
    _setup(session, case(0, "pkg_k"))
    _setup(session, case(1, "pkg_k", kwargs={"extra": k}))
    base, head = _counters(session, 0), _counters(session, 1)
    assert head["python_calls"] - base["python_calls"] == 2 * k  # helper + its _inner, K times
    for key in ("aten_ops", "autograd_nodes", "allocations"):
        assert head[key] == base[key], key


def test_one_extra_op_is_one_aten_op_and_one_autograd_node(session, tmp_path):
    write_side(tmp_path / "a", "pkg_op_a", op=False)
    write_side(tmp_path / "b", "pkg_op_b", op=True)
    sys.path[0:0] = [str(tmp_path / "a"), str(tmp_path / "b")]
    try:
        _setup(session, case(0, "pkg_op_a"))
        _setup(session, case(1, "pkg_op_b"))
        base, head = _counters(session, 0), _counters(session, 1)
    finally:
        sys.path.remove(str(tmp_path / "a"))
        sys.path.remove(str(tmp_path / "b"))
    assert head["aten_ops"] - base["aten_ops"] == 1  # aten.add.Tensor
    assert head["autograd_nodes"] - base["autograd_nodes"] == 1  # AddBackward0
    assert head["python_calls"] == base["python_calls"]
    assert head["allocations"] > base["allocations"]


def test_counting_does_not_leave_instrumentation_behind(session, tmp_path):
    write_side(tmp_path, "pkg_clean")
    _setup(session, case(0, "pkg_clean"))
    import gc

    assert gc.isenabled()
    _counters(session, 0)
    assert gc.isenabled()
    assert sys.getprofile() is None
    if hasattr(sys, "monitoring"):
        assert all(sys.monitoring.get_tool(i) is None for i in (2, 3, 4, 5))
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None


def test_counters_without_warm_state_still_stable(tmp_path, monkeypatch):
    # warmup=0 in the case: count_step's own warm steps must make the count stable
    monkeypatch.syspath_prepend(str(tmp_path))
    write_side(tmp_path, "pkg_cold")
    s = Session(device="cpu", backends=["factory"])
    _setup(s, case(0, "pkg_cold", warmup=0))
    step = s.cases[0][0]
    assert count_step(step, False) == count_step(step, False, warm=0)


# ---- fresh processes ----


def _worker_counters(side_dir: Path, cwd: Path, hash_seed: int, cases: list[dict]) -> list[dict]:
    """Start a real ``python -m teperf.worker``, set the cases up, ask for counters."""
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    lines = [
        json.dumps(
            {
                "cmd": "init",
                "core": None,
                "sys_path": [str(side_dir)],
                "device": "cpu",
                "backends": ["factory"],
            }
        )
    ]
    for wire in cases:
        lines.append(json.dumps({"cmd": "setup", "case": wire}))
        lines.append(json.dumps({"cmd": "counters", "case_id": wire["id"]}))
    lines.append(json.dumps({"cmd": "quit"}))
    out = subprocess.run(
        [sys.executable, "-m", "teperf.worker"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        cwd=str(cwd),
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    replies = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert replies[0]["type"] == "hello"
    got = [r["counters"] for r in replies if r.get("type") == "counters"]
    assert len(got) == len(cases), replies
    return got


@pytest.mark.real_worker
def test_reproducible_across_fresh_processes_and_hash_seeds(tmp_path):
    side = write_side(tmp_path / "side")
    wires = [case(0), case(1, kwargs={"extra": 3})]
    first = _worker_counters(side, tmp_path, 1, wires)
    second = _worker_counters(side, tmp_path, 424242, wires)
    assert first == second
    assert first[1]["python_calls"] - first[0]["python_calls"] == 6


@pytest.mark.real_worker
def test_head_tree_with_k_extra_calls_in_fresh_workers(tmp_path):
    k = 5
    base = write_side(tmp_path / "base", extra=0)
    head = write_side(tmp_path / "head", extra=k)
    (b,) = _worker_counters(base, tmp_path, 7, [case(0)])
    (h,) = _worker_counters(head, tmp_path, 7, [case(0)])
    assert h["python_calls"] - b["python_calls"] == 2 * k
    assert {key: h[key] for key in KEYS if key != "python_calls"} == {
        key: b[key] for key in KEYS if key != "python_calls"
    }


def test_setprofile_path_matches_monitoring_semantics(monkeypatch):
    # On 3.12+ both mechanisms exist: they must agree on what a call is.
    if not hasattr(sys, "monitoring"):
        pytest.skip("sys.monitoring needs Python 3.12+; the setprofile path is the one tested above")

    def gen():
        yield 1
        yield 2

    def work():
        for _ in gen():
            pass
        return [i for i in range(3)]

    assert counters_mod._count_monitoring(work) == counters_mod._count_setprofile(work)


COMPILED_TEMPLATE = textwrap.dedent(
    """
    import torch


    @torch.compile(backend="eager")  # dynamo frames without inductor's C++ toolchain
    def gelu_bias(x, b):
        return torch.nn.functional.gelu(x + b)


    class Block(torch.nn.Module):
        def __init__(self, hidden=16):
            super().__init__()
            self.lin = torch.nn.Linear(hidden, hidden)
            self.b = torch.nn.Parameter(torch.zeros(hidden))

        def forward(self, x):
            return gelu_bias(self.lin(x), self.b)


    def make(hidden=16):
        return Block(hidden)
    """
)


def test_counting_leaves_compiled_functions_compiled(session, tmp_path, capfd):
    # TE's jit_fuser functions are torch.compile'd. A TorchDispatchMode would make
    # dynamo skip such frames for the rest of the process (fewer Python calls per
    # step from then on, and different timings in the trials that follow).
    pkg = tmp_path / "pkg_compiled"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(COMPILED_TEMPLATE)
    _setup(session, case(0, "pkg_compiled"))
    step = session.cases[0][0]
    before = count_python_calls(step)
    first = _counters(session, 0)
    assert count_python_calls(step) == before == first["python_calls"]
    assert _counters(session, 0) == first
    assert "changed the module's state" not in capfd.readouterr().err


# ---- compile residue ----


def test_compile_residue_counts_breaks_recompiles_and_guard_failures():
    # backend="eager": dynamo's graphs and guards without inductor's C++ toolchain
    import torch._dynamo

    from teperf.worker.runner import compile_counts_during, isolate_dynamo

    isolate_dynamo()
    state = {"n": 0}

    @torch.compile(backend="eager")
    def broken(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1

    @torch.compile(backend="eager", dynamic=False)
    def guarded(x, k):
        return x * k

    x = torch.ones(4, requires_grad=True)

    def steady():
        broken(x).sum().backward()

    def changing():  # a Python int the guards read, different every step: a recompile per step
        state["n"] += 1
        guarded(x, state["n"]).sum().backward()

    first = compile_counts_during(steady)
    assert first["graphs"] == 2 and first["graph_breaks"] == 1
    got = counters_mod.count_compile(steady, first, cuda=False)
    assert (got["graphs"], got["graph_breaks"], got["recompiles"], got["guard_failures"]) == (2, 1, 0, 0)
    assert len(got["break_reasons"]) == 1 and "graph_break" in got["break_reasons"][0]
    torch._dynamo.config.automatic_dynamic_shapes = False
    try:
        first = compile_counts_during(changing)
        got = counters_mod.count_compile(changing, first, cuda=False)
    finally:
        torch._dynamo.config.automatic_dynamic_shapes = True
    assert got["recompiles"] == 1 and got["guard_failures"] >= 1
    isolate_dynamo()


def test_compile_case_counters_carry_the_residue(session, tmp_path, monkeypatch):
    import functools

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    write_side(tmp_path, "pkg_comp")
    _setup(session, case(0, "pkg_comp"))
    _setup(session, {**case(1, "pkg_comp"), "mode": "compile"})
    eager, compiled = _counters(session, 0), _counters(session, 1)
    assert "graphs" not in eager  # eager cells have no compile residue
    assert compiled["graphs"] == 1 and compiled["graph_breaks"] == 0
    assert compiled["recompiles"] == 0 and compiled["guard_failures"] == 0
    assert compiled["break_reasons"] == []
    assert _counters(session, 1) == compiled


def test_counting_on_the_cpu_loads_neither_dynamo_nor_inductor():
    # torch.profiler.profile's start (hasattr(torch, "_inductor")) and a dispatch mode's first call (torch's
    # _disable_dynamo) each import them: 1.2 s of every counting CPU worker, for the same counts
    code = (
        "import sys, torch; from teperf.worker.counters import count_step; m = torch.nn.Linear(4, 4); "
        "x = torch.randn(2, 4); c = count_step(lambda: m(x).sum().backward(), False); "
        "print(c['aten_ops'] > 0, c['autograd_nodes'] > 0, 'torch._dynamo' in sys.modules, "
        "'torch._inductor' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-4:] == ["True", "True", "False", "False"], proc.stdout
