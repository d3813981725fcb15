"""Clocks around timed steps: process CPU time leads (a CUDA backward runs on autograd's device thread)."""

from __future__ import annotations

import os
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


def _children_cpu_ns() -> int:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


def time_once(fn: Callable[[], None], cuda: bool) -> dict:
    """Clocks around a one-time cost (a first step, a compile), with its children's CPU time (inductor's C++
    compiler, ptxas); on CUDA a first call's GPU work is part of its cost, so the wall time syncs."""
    c0 = _children_cpu_ns()
    p0 = time.process_time_ns()
    t0 = time.thread_time_ns()
    w0 = time.perf_counter_ns()
    fn()
    if cuda:
        import torch

        torch.cuda.synchronize()
    w1 = time.perf_counter_ns()
    t1 = time.thread_time_ns()
    p1 = time.process_time_ns()
    c1 = _children_cpu_ns()
    return {
        "process_cpu_ns": p1 - p0,
        "children_cpu_ns": c1 - c0,
        "thread_cpu_ns": t1 - t0,
        "wall_ns": w1 - w0,
        # where it ran: a prestarted pair sets up on a spare core, a cold pair on the measuring core
        "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }
