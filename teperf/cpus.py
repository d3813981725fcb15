"""This machine's CPUs: the cores this process may use, SMT siblings, Linux cpu lists, and the one
check of a ``--core`` (config, doctor, explain and the coordinator all ask here)."""

from __future__ import annotations

import os

from teperf.errors import TeperfError

SYS_CPU = "/sys/devices/system/cpu"


def available_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def smt_siblings(core: int, sys_cpu: str = SYS_CPU) -> set[int]:
    """Hardware threads sharing ``core``'s physical core (itself included): work on a
    sibling slows the measuring core down, so prestarted workers stay off them."""
    try:
        with open(f"{sys_cpu}/cpu{core}/topology/thread_siblings_list") as f:
            text = f.read()
    except OSError:
        return {core}
    return parse_cpu_list(text) | {core}


def parse_cpu_list(text: str) -> set[int]:
    """Linux cpu-list syntax: '0-3,8,10-11' -> {0,1,2,3,8,10,11}; '' -> set()."""
    cores: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cores.update(range(int(lo), int(hi) + 1))
        else:
            cores.add(int(part))
    return cores


def cpu_list_text(cores) -> str:
    """The other way round: {0,1,2,3,8} -> '0-3,8'; nothing -> 'none'."""
    cores = sorted(cores)
    if not cores:
        return "none"
    runs, start, prev = [], cores[0], cores[0]
    for c in cores[1:]:
        if c == prev + 1:
            prev = c
            continue
        runs.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = c
    runs.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(runs)


def core_usable(core) -> bool:
    return not isinstance(core, bool) and isinstance(core, int) and core in available_cores()


def check_core(core) -> int:
    """The core to pin workers to: ``core`` if this process may use it (else a TeperfError naming the
    ones it may), default the last usable one."""
    cores = available_cores()
    if core is None:
        return cores[-1]
    if not core_usable(core):
        raise TeperfError(
            f"core {core!r} is not available on this machine", f"use one of: {cpu_list_text(cores)} (--core)"
        )
    return core
