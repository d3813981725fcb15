"""Parallel measuring lanes: which cores measure at once, and running one pair per lane.

A lane is a measuring core. With ``--lanes N`` N process pairs measure at the same
time, each pinned to a core of its own physical core: two lanes on SMT siblings
would share one core's pipeline and caches and slow each other's steps (lanes on
separate cores still share L3 and memory bandwidth: benchmarks/lanes_calibration.py
measures that). Cores that are no lane's (and, while any are left, no lane's
sibling) start the upcoming pairs ahead, as with one lane.

Each lane runs its pairs in its own thread (worker I/O releases the GIL; the
coordinator's own work is small). The lane threads share one lock for the
schedule, the bundle and the progress view. On Ctrl-C/SIGTERM (which reach the
main thread only) the main thread sets ``stop``, kills every worker the run has
started, again and again until the lane threads have ended, and re-raises: no
worker is left behind and the bundle keeps every finished trial.

``--lanes auto`` is ``min(AUTO_MAX_LANES, physical cores // CORES_PER_LANE)``, at
least 1 (README, "Parallel lanes", says why and which figures set the cap).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Optional

from teperf.cpus import available_cores, smt_siblings
from teperf.errors import TeperfError

AUTO_MAX_LANES = (
    4  # the most lanes `auto` picks; raise it only where the lanes benchmark shows calibration holds
)
CORES_PER_LANE = 4  # one core measures, the others start its next pairs (a TE pair imports for 10-30 s)
STOP_SWEEP_S = 0.2  # while stopping, how often every worker of the run is killed again (a lane may have just spawned one)
STOP_WAIT_S = 15.0  # then lane threads still running are abandoned (daemon threads; their workers are killed)

SiblingsOf = Callable[[int], set]


class LaneStopped(Exception):
    """The run is stopping (Ctrl-C, SIGTERM, another lane's error): a lane ends its pair without recording."""


def physical_cores(cores: Iterable[int], siblings_of: SiblingsOf = smt_siblings) -> list[list[int]]:
    """The available hardware threads grouped by physical core, each group sorted, groups in order of
    their first thread. A thread whose topology cannot be read counts as a core of its own."""
    cores = sorted(set(cores))
    available = set(cores)
    groups: list[list[int]] = []
    seen: set[int] = set()
    for core in cores:
        if core in seen:
            continue
        group = sorted((siblings_of(core) | {core}) & available)
        seen.update(group)
        groups.append(group)
    return groups


def assign_lanes(
    n: int,
    first: int,
    cores: Optional[Iterable[int]] = None,
    siblings_of: SiblingsOf = smt_siblings,
    option: str = "--lanes",
) -> list[int]:
    """The measuring core of each lane: lane 0 on ``first`` (the configured core), the others on the
    highest-numbered thread of the other physical cores, from the top down (like the default core).
    More lanes than physical cores: a TeperfError naming the fix."""
    if n == 1:
        return [first]  # one lane: the configured core, as before lanes existed
    cores = available_cores() if cores is None else sorted(set(cores))
    groups = physical_cores(cores, siblings_of)
    if n > len(groups):
        return _too_many(n, groups, option)
    own = next((g for g in groups if first in g), None)
    others = sorted((g for g in groups if g is not own), key=lambda g: g[-1], reverse=True)
    return [first] + [g[-1] for g in others[: n - 1]]


def _too_many(n: int, groups: list[list[int]], option: str):
    count = len(groups)
    threads = sum(len(g) for g in groups)
    smt = f" ({threads} hardware threads: SMT siblings never measure at once)" if threads > count else ""
    raise TeperfError(
        f"{option} {n}: this process may use only {count} physical core{'s' if count != 1 else ''}{smt}",
        f"use {option} {count} or fewer, or {option} auto",
    )


def spare_cores(
    lane_cores: list[int], cores: Optional[Iterable[int]] = None, siblings_of: SiblingsOf = smt_siblings
) -> list[int]:
    """Cores where upcoming pairs may start while the lanes measure: no lane's core, and no lane's SMT
    sibling while other cores are left; empty when every core measures (then no prestart)."""
    cores = available_cores() if cores is None else sorted(set(cores))
    spare = [c for c in cores if c not in lane_cores]
    siblings = set().union(*(siblings_of(c) | {c} for c in lane_cores)) if lane_cores else set()
    return [c for c in spare if c not in siblings] or spare


def auto_lanes(cores: Optional[Iterable[int]] = None, siblings_of: SiblingsOf = smt_siblings) -> int:
    cores = available_cores() if cores is None else cores
    return max(1, min(AUTO_MAX_LANES, len(physical_cores(cores, siblings_of)) // CORES_PER_LANE))


def check_lanes(value, first: int, option: str = "--lanes") -> int:
    """A lane count from the CLI or the TOML (a whole number >= 1, or "auto") -> lanes to run."""
    if value is None or (value == 1 and not isinstance(value, bool)):
        return 1
    if value == "auto":
        return auto_lanes()
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TeperfError(
            f'{option} must be a whole number >= 1 or "auto", got {value!r}',
            f"e.g. {option} 2, or {option} 1 to measure one pair at a time",
        )
    assign_lanes(value, first, option=option)  # enough physical cores?
    return value


def run_lanes(
    n: int, lane: Callable[[int], None], stop: threading.Event, kill_all: Callable[[], None]
) -> None:
    """Run ``lane(i)`` for i in 0..n-1, each in its own thread, until all return. The first error of a
    lane (or Ctrl-C/SIGTERM here in the main thread) stops every lane: ``stop`` is set, ``kill_all``
    ends every worker, and the error is raised here once the lanes have ended (or STOP_WAIT_S passed)."""
    errors: list[BaseException] = []
    returned: list[int] = []
    done = threading.Event()  # a lane thread that ran out of pairs waits for this before it ends

    def body(i: int) -> None:
        try:
            lane(i)
        except LaneStopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)
            stop.set()
        finally:
            returned.append(i)
        # A worker dies with the thread that started it (PR_SET_PDEATHSIG is per thread), and this
        # lane may have started pairs ahead that another lane measures now: end only when all are done.
        done.wait()

    threads = [
        threading.Thread(target=body, args=(i,), name=f"teperf-lane{i}", daemon=True) for i in range(n)
    ]
    try:
        for t in threads:
            t.start()
        while len(returned) < n and not stop.is_set():
            stop.wait(STOP_SWEEP_S)  # interruptible: Ctrl-C and SIGTERM land here
    except BaseException:
        stop.set()
        _stop_lanes(threads, done, kill_all)
        raise
    if stop.is_set():
        _stop_lanes(threads, done, kill_all)
        if errors:
            raise errors[0]
    done.set()
    for t in threads:
        t.join()


def _stop_lanes(threads: list[threading.Thread], done: threading.Event, kill_all: Callable[[], None]) -> None:
    done.set()
    deadline = time.monotonic() + STOP_WAIT_S
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        kill_all()  # again: a lane may have started a worker since the last sweep
        for t in threads:
            t.join(STOP_SWEEP_S / len(threads))
    kill_all()
