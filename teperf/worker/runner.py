"""Turns a built case into a ``step()``: one forward + ``.sum().backward()``.

Backends only build (module, inputs, autocast); how a step is run in each
mode (eager, cuda-graph, compile) is decided here, once for all backends.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, ContextManager, Optional


@dataclasses.dataclass
class Built:
    module: Any  # torch.nn.Module
    inputs: tuple  # positional tensors; the first one gets requires_grad
    call: Optional[Callable[..., Any]] = None  # (module, *inputs) -> output; default module(*inputs)
    autocast: Optional[Callable[[], ContextManager]] = None  # a fresh context per step
    info: dict = dataclasses.field(default_factory=dict)  # recorded in the bundle per case
    # Backends that need mode-specific preparation (TE's make_graphed_callables)
    # can supply their own graph builder: (built, sample_inputs) -> callable.
    make_graphed: Optional[Callable[["Built"], Callable[..., Any]]] = None
    # Module-level state the forward reads and rewrites between calls (TE's cached attention
    # backend choice). Cases sharing a worker would see each other's: the session saves it
    # after set-up and puts it back before each trial (see Session.restore).
    global_state: Optional[dict] = None


# Enough compiled variants per code object for every compiled case of a worker (TE's
# forwards are shared by all recipes of a module); the default falls back to eager quietly.
DYNAMO_LIMITS = {"cache_size_limit": 64, "recompile_limit": 64, "accumulated_cache_size_limit": 1024,
                 "accumulated_recompile_limit": 1024}


def isolate_dynamo():
    """Forget every other case's compiled code and guards, so that this case compiles as it
    would alone (issue 13: compiled TE attention cases failed when sharing a worker). Cases
    compiled before lose their code too: the session re-warms them, untimed."""
    import torch._dynamo as dynamo

    for key, value in DYNAMO_LIMITS.items():
        if hasattr(dynamo.config, key):
            setattr(dynamo.config, key, max(getattr(dynamo.config, key), value))
    dynamo.reset()


def dynamo_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (to catch a compile inside a timed trial)."""
    import torch._dynamo.utils as dynamo_utils

    return int(dynamo_utils.counters["stats"]["unique_graphs"])


def _first_tensor(out):
    if isinstance(out, (tuple, list)):
        return out[0]
    return out


def make_step(built: Built, mode: str) -> tuple[Callable[[], None], dict]:
    """Return (step, info). ``info`` records what the mode did (e.g. graph breaks)."""
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
        import torch._dynamo as dynamo

        isolate_dynamo()
        try:
            with autocast():
                # through built.call, so modules with extra non-tensor args (GroupedLinear's m_splits) work
                explanation = dynamo.explain(lambda *xs: call(module, *xs))(*built.inputs)
            info["graphs"] = int(explanation.graph_count)
            # torch reports graph_count - 1 breaks, i.e. -1 when dynamo captured nothing
            info["graph_breaks"] = max(0, int(explanation.graph_break_count))
            if info["graphs"] == 0:
                # e.g. TE's Linear-family forwards are wrapped in torch._dynamo.disable
                info["compile_note"] = "dynamo captured no graph: the forward runs eagerly under torch.compile"
            info["break_reasons"] = sorted({str(b.reason)[:200] for b in explanation.break_reasons})[:5]
        except Exception as exc:  # explain is best-effort; the timing still stands
            info["graph_breaks"] = None
            info["explain_error"] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            dynamo.reset()  # what explain traced must not stand beside the real compile
        compiled = torch.compile(module)  # a fresh one per case
        fn = lambda m, *xs: call(compiled, *xs)  # noqa: E731
    elif mode == "cuda-graph":
        if not torch.cuda.is_available():
            raise RuntimeError("mode cuda-graph needs CUDA; use --mode eager on CPU")
        if built.make_graphed is not None:
            graphed = built.make_graphed(built)
        else:
            graphed = torch.cuda.make_graphed_callables(module, tuple(built.inputs))
        fn = lambda m, *xs: graphed(*xs)  # noqa: E731
        info["graphed_by"] = "backend" if built.make_graphed is not None else "torch.cuda.make_graphed_callables"
    else:
        raise ValueError(f"unknown mode {mode!r}")

    def step():
        zero_grads()
        with autocast():
            out = fn(module, *built.inputs)
        _first_tensor(out).sum().backward()

    return step, info
