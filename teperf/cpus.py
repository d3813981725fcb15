"""This machine's CPUs: usable cores, SMT siblings, cpu lists, ``--core`` and the ``--lanes`` cores."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import platform
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Optional

from teperf.errors import TeperfError
from teperf.log import stderr_log

SYS_CPU = "/sys/devices/system/cpu"


def available_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def smt_siblings(core: int, sys_cpu: str = SYS_CPU) -> set[int]:
    """Hardware threads sharing ``core``'s physical core (itself included), which slow it down."""
    try:
        return parse_cpu_list(Path(f"{sys_cpu}/cpu{core}/topology/thread_siblings_list").read_text()) | {core}
    except OSError:
        return {core}


def parse_cpu_list(text: str) -> set[int]:
    """Linux cpu-list syntax: '0-3,8,10-11' -> {0,1,2,3,8,10,11}; '' -> set()."""
    cores: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return cores


def cpu_list_text(cores) -> str:
    """The other way round: {0,1,2,3,8} -> '0-3,8'; nothing -> 'none'."""
    runs = []
    for _, group in itertools.groupby(enumerate(sorted(cores)), key=lambda ic: ic[1] - ic[0]):
        run = [c for _, c in group]  # consecutive cores
        runs.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ",".join(runs) or "none"


def core_usable(core) -> bool:
    return not isinstance(core, bool) and isinstance(core, int) and core in available_cores()


# the note that this process measures on a core another run claimed (every core was claimed), and whether it
# was said: said when measuring starts, so that a refusal of bad input after the config's load stays one line
_SHARED: dict = {"note": "", "said": False}
_CLAIMS: dict = {}  # core -> the open file whose flock claims it for this process's life (the OS frees it)


def _claim_file(core) -> Path:
    base = os.environ.get("TEPERF_RUNTIME_DIR") or os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / "teperf-cores" / f"core{core}"


def claim_core(core: int) -> bool:
    """Claim ``core`` for this process (False: another teperf run holds it, or no claim can be made)."""
    try:
        _claim_file(core).parent.mkdir(parents=True, exist_ok=True)
        f = _CLAIMS.get(core) or open(_claim_file(core), "a+")
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    f.truncate(0), f.write(str(os.getpid())), f.flush()
    _CLAIMS[core] = f
    return True


def claimed_by_others() -> dict[int, str]:
    """Cores other teperf runs measure on now -> the pid that claimed each."""
    out = {}
    for core in set(available_cores()) - set(_CLAIMS):
        try:
            with open(_claim_file(core)) as f:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)  # taken at once: nobody holds it
        except BlockingIOError:
            out[core] = _claim_file(core).read_text().strip() or "?"
        except OSError:
            continue
    return out


def default_core(claim: bool = True) -> int:
    """The last usable core that no other teperf run has claimed (two runs on one machine must not measure
    on each other's core), claimed for this process; ``claim=False`` only looks (doctor changes nothing)."""
    cores = available_cores()
    others = () if claim else claimed_by_others()
    free = claim_core if claim else (lambda c: c not in others)
    core = next((c for c in reversed(cores) if free(c)), None)
    held = claimed_by_others() if core is None and claim else {}
    if set(cores) <= set(held) and not _SHARED["note"]:  # measuring beside another run times its load
        _SHARED["note"] = (
            f"every core is claimed by another teperf run; core {cores[-1]} is shared with pid "
            f"{held[cores[-1]]}, whose load the figures will count (wait for it to finish, or pass --core N)"
        )
    return cores[-1] if core is None else core


def say_shared_core() -> None:
    """Say once, as measuring starts, that the default core is shared with another run (``default_core``)."""
    if _SHARED["note"] and not _SHARED["said"]:
        _SHARED["said"] = True
        stderr_log(_SHARED["note"])


def check_core(core) -> int:
    """The core to pin workers to: ``core`` if this process may use it, default ``default_core()``."""
    cores = available_cores()
    if core is None:
        return default_core()
    if not core_usable(core):
        raise TeperfError(
            f"core {core!r} is not available on this machine", f"use one of: {cpu_list_text(cores)} (--core)"
        )
    claim_core(core)  # told to: measure there anyway, but keep later runs' defaults off it
    return core


AUTO_MAX_LANES = 4  # the most `auto` picks; raise it only where the lanes benchmark shows calibration holds
CORES_PER_LANE = 4  # one core measures, the others start its next pairs (a TE pair imports for 10-30 s)
SiblingsOf = Callable[[int], set]


def physical_cores(cores: Iterable[int], siblings_of: SiblingsOf = smt_siblings) -> list[list[int]]:
    """The hardware threads grouped by physical core, in order of their first thread (sorted)."""
    available = set(cores)
    groups: list[list[int]] = []
    for core in sorted(available):
        if not any(core in group for group in groups):
            groups.append(sorted((siblings_of(core) | {core}) & available))
    return groups


def assign_lanes(
    n: int,
    first: int,
    cores: Optional[Iterable[int]] = None,
    siblings_of: SiblingsOf = smt_siblings,
    option: str = "--lanes",
) -> list[int]:
    """Each lane's measuring core: lane 0 on ``first``, the others on other physical cores' top threads."""
    if n == 1:
        return [first]  # one lane: the configured core, as before lanes existed
    cores = available_cores() if cores is None else sorted(set(cores))
    groups = physical_cores(cores, siblings_of)
    count = len(groups)
    if n > count:
        threads = sum(len(g) for g in groups)
        smt = f" ({threads} hardware threads: SMT siblings never measure at once)" if threads > count else ""
        raise TeperfError(
            f"{option} {n}: this process may use only {count} physical core{'s' if count != 1 else ''}{smt}",
            f"use {option} {count} or fewer, or {option} auto",
        )
    own = next((g for g in groups if first in g), None)
    others = sorted((g for g in groups if g is not own), key=lambda g: g[-1], reverse=True)
    return [first] + [g[-1] for g in others[: n - 1]]


def spare_cores(
    lane_cores: list[int], cores: Optional[Iterable[int]] = None, siblings_of: SiblingsOf = smt_siblings
) -> list[int]:
    """Cores where upcoming pairs may start: never a lane's core or its SMT sibling (it would slow it)."""
    cores = available_cores() if cores is None else sorted(set(cores))
    siblings = set().union(*(siblings_of(c) | {c} for c in lane_cores)) if lane_cores else set()
    others = claimed_by_others()  # another teperf run measures there: starting pairs would load it
    return [c for c in cores if c not in lane_cores and c not in siblings and c not in others]


def auto_lanes(cores: Optional[Iterable[int]] = None, siblings_of: SiblingsOf = smt_siblings) -> int:
    """A lane per CORES_PER_LANE physical cores no other teperf run measures on, at most AUTO_MAX_LANES."""
    cores = set(available_cores()) - set(claimed_by_others()) if cores is None else cores
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


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"
