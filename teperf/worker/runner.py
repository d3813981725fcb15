"""Turns a built case into a ``step()``: one forward + ``.sum().backward()``, in each mode (eager,
cuda-graph, compile), decided here once for all backends."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import sys
import warnings
from typing import Any, Callable, ContextManager, Optional


@dataclasses.dataclass
class Built:
    module: Any  # torch.nn.Module
    inputs: tuple  # positional tensors; the first one gets requires_grad
    call: Optional[Callable[..., Any]] = None  # (module, *inputs) -> output; default module(*inputs)
    autocast: Optional[Callable[[], ContextManager]] = None  # a fresh context per step
    info: dict = dataclasses.field(default_factory=dict)  # recorded in the bundle per case
    make_graphed: Optional[Callable[["Built"], Callable[..., Any]]] = None  # the backend's own graphing
    # Module-level state the forward reads and rewrites (TE's attention backend choice): the session
    # keeps one copy per case, so that cases sharing a worker never see each other's (Session.ready).
    global_state: Optional[dict] = None
    # Another autocast to switch to once after the first compiled call (what a recompile costs when
    # the recipe changes at run time); None: the backend has none to offer here.
    alt_autocast: Optional[Callable[[], ContextManager]] = None
    alt_autocast_what: Optional[str] = None
    # Called once after the first step (TE records the attention backend that call picked).
    after_first_call: Optional[Callable[["Built"], None]] = None


# Enough compiled variants per code object for every compiled case of a worker (TE's forwards are shared
# by all recipes of a module); the default falls back to eager quietly.
DYNAMO_LIMITS = {
    "cache_size_limit": 64,
    "recompile_limit": 64,
    "accumulated_cache_size_limit": 1024,
    "accumulated_recompile_limit": 1024,
}


def isolate_dynamo():
    """Forget every other case's compiled code and guards, so that this case compiles as it would alone
    (compiled TE attention cases failed when sharing a worker); the session re-warms the others, untimed."""
    import torch._dynamo as dynamo

    for key, value in DYNAMO_LIMITS.items():
        if hasattr(dynamo.config, key):
            setattr(dynamo.config, key, max(getattr(dynamo.config, key), value))
    dynamo.reset()


def dynamo_counts() -> tuple[int, dict]:
    """Graphs dynamo has compiled in this process so far, and its graph breaks by reason."""
    import torch._dynamo.utils as dynamo_utils

    return int(dynamo_utils.counters["stats"]["unique_graphs"]), dict(dynamo_utils.counters["graph_break"])


def dtype_autocast(device: str) -> tuple[Callable[[], ContextManager], str]:
    """A generic other autocast state: torch.autocast to a lower precision on the device."""
    import torch

    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    dtype = torch.float16 if kind == "cuda" else torch.bfloat16
    return (lambda: torch.autocast(kind, dtype=dtype)), f"torch.autocast({kind!r}, dtype={dtype})"


def make_step(built: Built, mode: str) -> tuple[Callable[..., None], dict]:
    """(step, info about what the mode did). Nothing is compiled here: the first ``step()`` pays it (the
    session times it). ``step(autocast=f)`` runs one step under another autocast factory."""
    import torch

    module = built.module
    call = built.call or (lambda m, *xs: m(*xs))
    autocast = built.autocast or contextlib.nullcontext
    params = [p for p in module.parameters() if p.requires_grad]
    info: dict = {}

    def zero_grads():
        # set_to_none keeps memory flat and is what training loops do
        for p in params:
            p.grad = None
        for x in built.inputs:
            if isinstance(x, torch.Tensor) and x.grad is not None:
                x.grad = None

    if mode == "eager":
        fn = call
    elif mode == "compile":
        compiled = torch.compile(module)  # a fresh one per case, after Session's isolate_dynamo
        fn = lambda m, *xs: call(compiled, *xs)  # noqa: E731
    elif mode == "cuda-graph":
        if not torch.cuda.is_available():
            raise RuntimeError("mode cuda-graph needs CUDA; use --mode eager on CPU")
        if built.make_graphed is not None:
            graphed = built.make_graphed(built)
        else:
            graphed = torch.cuda.make_graphed_callables(module, tuple(built.inputs))
        fn = lambda m, *xs: graphed(*xs)  # noqa: E731
        info["graphed_by"] = (
            "backend" if built.make_graphed is not None else "torch.cuda.make_graphed_callables"
        )
    else:
        raise ValueError(f"unknown mode {mode!r}")

    def step(autocast=autocast):
        zero_grads()
        with autocast():
            out = fn(module, *built.inputs)
        (out[0] if isinstance(out, (tuple, list)) else out).sum().backward()

    return step, info


def compile_counts_during(fn: Callable[[], None]) -> dict:
    """What dynamo compiled while ``fn`` ran: graphs, graph breaks and their reasons (from its counters:
    dynamo.explain would trace before the timed first call, taking part of the compile out of it)."""
    graphs0, breaks0 = dynamo_counts()
    fn()
    graphs1, breaks1 = dynamo_counts()
    new_breaks = {k: v - breaks0.get(k, 0) for k, v in breaks1.items() if v - breaks0.get(k, 0) > 0}
    info = {
        "graphs": graphs1 - graphs0,
        "graph_breaks": sum(new_breaks.values()),
        "break_reasons": sorted(str(k)[:200] for k in new_breaks)[:5],
    }
    if info["graphs"] == 0:
        # e.g. TE's Linear-family forwards are wrapped in torch._dynamo.disable
        info["compile_note"] = "dynamo captured no graph: the forward runs eagerly under torch.compile"
    return info


def module_class(name: str) -> str:
    """The class a module name builds: ``GroupedLinear[num_gemms=4]`` (a --sweep value) -> GroupedLinear."""
    return name.split("[", 1)[0]


def import_object(spec: str):
    """'pkg.mod:attr' -> the attribute, imported in this (the side's) interpreter."""
    mod_name, _, attr = spec.partition(":")
    return functools.reduce(getattr, attr.split("."), importlib.import_module(mod_name))


def end_failed_capture(torch) -> str | None:
    """After a CUDA-graph capture that failed: None when random numbers work again, else why not.

    CUDAGraph.capture_end raises before its epilogue when the capture was invalidated (a host sync inside
    it), so the RNG generators it registered stay "capturing" and every later random op in the process
    fails ("Offset increment outside graph capture encountered unexpectedly"). An empty capture on a side
    stream, with the same generators registered, runs the prologue and epilogue again."""
    generators = []
    te_rng = sys.modules.get("transformer_engine.pytorch.distributed")  # TE's tracker's graph-safe states
    with contextlib.suppress(Exception):
        generators = [g for g in te_rng.get_all_rng_states().values() if isinstance(g, torch.Generator)]
    with contextlib.suppress(Exception):
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        for g in generators:
            with contextlib.suppress(Exception):
                graph.register_generator_state(g)
        with warnings.catch_warnings(), torch.cuda.stream(stream):
            warnings.simplefilter("ignore")  # "the CUDA graph is empty": it is meant to be
            graph.capture_begin()
            graph.capture_end()
    try:
        torch.rand(1, device="cuda")
        torch.cuda.synchronize()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return None
