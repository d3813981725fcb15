"""Deterministic counts of what one fwd+bwd step does, one counter per pass so that one's instrumentation
never shows in another's; the garbage collector and autograd's device threads are off, so a CUDA backward
runs on the calling thread. A counter not measurable here is None, never a guess."""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Callable, Optional

KEYS = ("python_calls", "aten_ops", "autograd_nodes", "kernel_launches", "syncs", "allocations")
WARM_STEPS = 2

LAUNCH_NAMES = tuple(
    """cudaLaunchKernel cudaLaunchKernelExC cudaLaunchKernelEx cuLaunchKernel cuLaunchKernelEx
    cudaLaunchCooperativeKernel cudaLaunchCooperativeKernelMultiDevice
    cudaGraphLaunch cuGraphLaunch""".split()
)
SYNC_NAMES = tuple(
    """cudaDeviceSynchronize cudaStreamSynchronize cudaEventSynchronize cudaMemcpy cudaMemcpy2D
    cuCtxSynchronize cuStreamSynchronize cuEventSynchronize""".split()
)
NODE_PREFIX = "autograd::engine::evaluate_function: "


def count_step(step: Callable[[], None], cuda: bool, warm: int = WARM_STEPS) -> dict:
    import torch

    for _ in range(warm):
        step()
    if cuda:
        torch.cuda.synchronize()
    counts: dict = dict.fromkeys(KEYS)
    with _steady():
        counts["python_calls"] = count_python_calls(step)
        counts["aten_ops"] = _count_aten_ops(step)
        nodes, launches, syncs, cpu_allocs = _profiler_pass(step, cuda)  # launches, syncs: None on CPU
        counts.update(autograd_nodes=nodes, kernel_launches=launches, syncs=syncs)
        counts["allocations"] = _count_cuda_allocations(step) if cuda else cpu_allocs
        after = count_python_calls(step)
    if after != counts["python_calls"]:
        print(
            f"teperf counters: warning: the step's Python calls went from {counts['python_calls']} to "
            f"{after} while counting; an instrumentation pass changed the module's state",
            file=sys.stderr,
        )
    return counts


def count_compile(step: Callable[[], None], first_call: dict, cuda: bool) -> dict:
    """The compile residue: ``first_call`` is what the first call compiled (runner.compile_counts_during);
    one more step counts recompiles and guard failures."""
    import torch
    import torch._dynamo.utils as dynamo_utils

    def state() -> tuple[int, int]:
        frames = int(dynamo_utils.counters["frames"]["total"])
        failures = sum(len(v) for v in dynamo_utils.guard_failures.values())
        return frames, failures

    step()  # whatever re-warming the session did is behind us
    frames0, failures0 = state()
    step()
    if cuda:
        torch.cuda.synchronize()
    frames1, failures1 = state()
    return {
        "graphs": first_call.get("graphs"),
        "graph_breaks": first_call.get("graph_breaks"),
        "recompiles": frames1 - frames0,
        "guard_failures": failures1 - failures0,
        "break_reasons": list(first_call.get("break_reasons") or []),
    }


@contextlib.contextmanager
def _steady():
    import torch

    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        with torch.autograd.set_multithreading_enabled(False):
            yield
    finally:
        if was_enabled:
            gc.enable()


_GEN_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


def count_python_calls(fn: Callable[[], object]) -> int:
    """Python frames started while ``fn()`` runs, ``fn`` itself included (torch-free: testable anywhere)."""
    return _count_monitoring(fn) if hasattr(sys, "monitoring") else _count_setprofile(fn)


def _count_monitoring(fn) -> int:
    mon = sys.monitoring
    tool = next((t for t in (mon.PROFILER_ID, 3, 4, 5) if mon.get_tool(t) is None), None)
    if tool is None:
        raise RuntimeError("no free sys.monitoring tool id for counting Python calls")
    mon.use_tool_id(tool, "teperf-counters")
    n = 0

    def on_start(code, offset):
        nonlocal n
        n += 1

    try:
        mon.register_callback(tool, mon.events.PY_START, on_start)
        mon.set_events(tool, mon.events.PY_START)
        try:
            fn()
        finally:
            mon.set_events(tool, 0)
    finally:
        mon.register_callback(tool, mon.events.PY_START, None)
        mon.free_tool_id(tool)
    return n


def _count_setprofile(fn) -> int:
    import opcode

    resume = opcode.opmap.get("RESUME")
    n = 0
    resumed = 0

    def on_event(frame, event, arg):
        nonlocal n, resumed
        if event == "call":
            n += 1
            code = frame.f_code
            if code.co_flags & _GEN_FLAGS:
                # 3.11: fires on every (re)entry; a re-entry stops at RESUME with a non-zero argument
                lasti = frame.f_lasti
                if resume is not None and lasti >= 0:
                    raw = code.co_code
                    if raw[lasti] == resume and raw[lasti + 1] != 0:
                        resumed += 1
                elif lasti > 0:  # <= 3.10: a fresh frame has f_lasti == -1
                    resumed += 1

    old = sys.getprofile()
    sys.setprofile(on_event)
    try:
        fn()
    finally:
        sys.setprofile(old)
    return n - resumed


def _count_aten_ops(step) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        n = 0

        if "torch._dynamo" not in sys.modules:
            # torch >= 2.10 wraps a mode's __torch_dispatch__ in _disable_dynamo, whose first call imports
            # dynamo (1 s of a CPU worker); with nothing compiled there is nothing to disable. Where dynamo is
            # loaded, torch's wrapper stays. The opt-out is the one _should_skip_dynamo's docstring gives.
            _should_skip_dynamo = classmethod(lambda cls: False)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    mode = Counting()
    with _dynamo_eager(), mode:
        step()
    return mode.n


def _dynamo_eager():
    """Run torch.compile'd functions eagerly for the dispatch-mode pass: seeing a TorchDispatchMode, dynamo
    marks the frame skipped for good (TE LayerNormMLP bf16's bias-GeLU then ran eagerly in every later
    step); ``set_stance("force_eager")`` bypasses it for this step and leaves its caches alone."""
    if "torch._dynamo" not in sys.modules:  # nothing compiled (importing it would cost seconds)
        return contextlib.nullcontext()
    with contextlib.suppress(Exception):
        import torch.compiler

        set_stance = getattr(torch.compiler, "set_stance", None)
        if set_stance is not None:
            return set_stance("force_eager")
    return contextlib.nullcontext()


def _profiler_pass(step, cuda: bool):
    """(autograd nodes, launches, syncs, CPU allocations) of one step, less an empty step's on CUDA (the
    profiler and our trailing synchronize add cudaDeviceSynchronize calls)."""
    nodes, launches, syncs, allocs = _profile_counts(step, cuda)
    if not cuda:
        return nodes, None, None, allocs
    _, base_launches, base_syncs, _ = _profile_counts(lambda: None, cuda)
    if base_syncs == 0:
        # not even our trailing synchronize was recorded: the profiler sees no CUDA calls here (no CUPTI)
        return nodes, None, None, None
    return nodes, launches - base_launches, syncs - base_syncs, None


def _profile_counts(fn, cuda: bool):
    import torch

    if cuda:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False)
    else:
        # On the CPU, the Kineto profiler that torch.profiler.profile wraps, used directly: the wrapper's
        # start asks hasattr(torch, "_inductor"), which imports inductor and dynamo (1 s of a CPU worker).
        # On CUDA the wrapper stays: its start also prepares CUPTI for CUDA graphs. The same events.
        prof = torch.autograd.profiler.profile(use_kineto=True, profile_memory=True, record_shapes=False)
    with prof:
        fn()
        if cuda:
            torch.cuda.synchronize()  # so every launch is flushed; calibrated away
    nodes = launches = syncs = allocs = 0
    kineto = prof.profiler if cuda else prof  # the wrapper keeps the Kineto profiler it started
    for event in kineto.kineto_results.events():
        name = event.name()
        if name.startswith(NODE_PREFIX):
            nodes += 1
        elif name == "[memory]":
            if event.nbytes() > 0 and "CPU" in str(event.device_type()):
                allocs += 1
        elif name in LAUNCH_NAMES:
            launches += 1
        elif name in SYNC_NAMES:
            syncs += 1
    return nodes, launches, syncs, allocs


def _count_cuda_allocations(step) -> Optional[int]:
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_stats().get("allocation.all.allocated")
    step()
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats().get("allocation.all.allocated")
    return None if before is None or after is None else int(after - before)
