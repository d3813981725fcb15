"""Clocks read around a timed loop of steps.

Process CPU time is the headline: on CUDA the backward pass runs on
PyTorch's autograd device thread, so the main thread's clock sees about half
of a step (../shared/gpu/README.md). Main-thread CPU and wall time are kept
beside it.
"""

from __future__ import annotations

import time
from typing import Callable


def time_loop(step: Callable[[], None], iters: int, cuda: bool) -> dict:
    events = None
    if cuda:
        import torch

        events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        events[0].record()
    p0 = time.process_time_ns()
    t0 = time.thread_time_ns()
    w0 = time.perf_counter_ns()
    for _ in range(iters):
        step()
    w1 = time.perf_counter_ns()
    t1 = time.thread_time_ns()
    p1 = time.process_time_ns()
    sync_ns = 0
    gpu_ns = None
    if cuda:
        import torch

        events[1].record()
        s0 = time.perf_counter_ns()
        torch.cuda.synchronize()
        sync_ns = time.perf_counter_ns() - s0
        gpu_ns = int(events[0].elapsed_time(events[1]) * 1e6)
    return {
        "iters": iters,
        "process_cpu_ns": p1 - p0,
        "thread_cpu_ns": t1 - t0,
        "wall_ns": w1 - w0,
        "sync_ns": sync_ns,
        "gpu_ns": gpu_ns,
    }
