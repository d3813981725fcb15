"""Read-only checks of the measuring machine (``teperf doctor``), each a :class:`Check` that never raises
(what cannot be read is ``unknown``). ASLR on is ``ok``: fresh pairs are meant to sample layouts."""

from __future__ import annotations

import glob
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from teperf.cpus import (
    SYS_CPU,
    available_cores,
    claimed_by_others,
    cpu_list_text,
    default_core,
    parse_cpu_list,
    smt_siblings,
)

STATUSES = ("ok", "warn", "fail", "unknown")
PROC = "/proc"
TE_DISTRIBUTIONS = tuple(
    """transformer_engine transformer-engine transformer_engine_torch transformer-engine-cu12
    transformer-engine-cu13""".split()
)


class Check(NamedTuple):
    name: str
    status: str  # ok | warn | fail | unknown
    detail: str
    fix: str = ""

    def to_dict(self) -> dict:
        return self._asdict()


def _read(path: str) -> str | None:
    """The file's text, None where it cannot be read (no cpufreq in a VM, a process gone)."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _safe(name: str, fn: Callable[[], Check]) -> Check:
    return _safe_list(name, lambda: [fn()])[0]


def _safe_list(name: str, fn: Callable[[], list[Check]]) -> list[Check]:
    try:
        return fn()
    except Exception as exc:  # a check must never break doctor or compare
        return [Check(name, "unknown", f"could not check: {type(exc).__name__}: {exc}")]


def check_core(core: int) -> Check:
    cores = available_cores()
    span = f"{len(cores)} usable of {os.cpu_count() or len(cores)} logical cores ({cpu_list_text(cores)})"
    if core not in cores:
        fix = f"pick one of {cpu_list_text(cores)} with --core"
        return Check("core", "fail", f"core {core} is not usable here: {span}", fix)
    if len(cores) == 1:
        detail = f"core {core}; {span}: the coordinator, the OS and the workers share it"
        return Check("core", "warn", detail, "use a machine (or cgroup) with at least 2 cores")
    notes, status, fix = [], "ok", ""
    if siblings := smt_siblings(core, SYS_CPU) - {core}:
        notes.append(f"SMT sibling(s) {cpu_list_text(sorted(siblings))} share its execution units")
        fix = "keep the sibling idle (or disable SMT)"
    if core == 0:
        status, fix = "warn", f"use --core {cores[-1]}"
        notes.append("core 0 takes most interrupts and housekeeping")
    return Check("core", status, "; ".join([f"core {core}", span, *notes]), fix)


def check_governor(core: int) -> Check:
    path = f"{SYS_CPU}/cpu{core}/cpufreq/scaling_governor"
    if (governor := _read(path)) is None:
        return Check("governor", "unknown", f"{path} not readable (no cpufreq here, common in VMs)")
    if governor == "performance":
        return Check("governor", "ok", f"core {core}: performance")
    fix = "sudo cpupower frequency-set -g performance"
    return Check("governor", "warn", f"core {core}: {governor} (clock speed changes with load)", fix)


def check_turbo() -> Check:
    # (file, its value with turbo off, the word): Intel's pstate driver, else cpufreq's generic switch
    for name, off, word in (("intel_pstate/no_turbo", "1", "turbo"), ("cpufreq/boost", "0", "boost")):
        if (value := _read(f"{SYS_CPU}/{name}")) is None:
            continue
        if value == off:
            return Check("turbo", "ok", f"{word} off ({name}={off})")
        on = "0" if off == "1" else "1"
        detail = f"{word} on ({name}={on}): clock depends on temperature and other cores"
        return Check("turbo", "warn", detail, f"echo {off} | sudo tee {SYS_CPU}/{name}")
    return Check("turbo", "unknown", "neither intel_pstate/no_turbo nor cpufreq/boost is readable")


def check_isolation(core: int) -> Check:
    path = f"{SYS_CPU}/isolated"
    try:
        isolated = parse_cpu_list(Path(path).read_text().strip())
    except (OSError, ValueError) as exc:
        return Check("isolation", "unknown", f"{path} not readable ({type(exc).__name__})")
    try:
        nohz = parse_cpu_list(_read(f"{SYS_CPU}/nohz_full") or "")
    except ValueError:
        nohz = set()
    if core in isolated:
        extra = "" if core in nohz else " (not nohz_full: the timer tick still interrupts it)"
        return Check("isolation", "ok", f"core {core} is isolated{extra}")
    if isolated:
        detail = f"core {core} is not isolated; isolated: {cpu_list_text(sorted(isolated))}"
        return Check("isolation", "warn", detail, f"use --core {min(isolated)}")
    detail = "no isolated cores: the OS schedules other work on the measuring core"
    fix = f"boot with isolcpus={core} nohz_full={core} rcu_nocbs={core} (or use a quiet machine)"
    return Check("isolation", "warn", detail, fix)


def check_aslr() -> Check:
    path = f"{PROC}/sys/kernel/randomize_va_space"
    if (value := _read(path)) is None:
        return Check("aslr", "unknown", f"{path} not readable")
    if value == "2":
        detail = "full ASLR (2): each fresh worker pair samples another address-space layout, as intended"
        return Check("aslr", "ok", detail)
    if value == "1":
        return Check("aslr", "ok", "partial ASLR (1): stack/mmap layouts vary between worker pairs")
    why = "every worker gets the same layout, so a layout effect becomes a fixed bias of one side"
    return Check("aslr", "warn", f"ASLR off ({value}): {why}", f"echo 2 | sudo tee {path}")


def check_load() -> Check:
    path = f"{PROC}/loadavg"
    try:
        fields = (_read(path) or "").split()
        load1, load5 = float(fields[0]), float(fields[1])
    except (ValueError, IndexError):
        return Check("load", "unknown", f"{path} not readable")
    ncpu = len(available_cores()) or 1
    detail = f"load average {load1:.2f} (1 min), {load5:.2f} (5 min) on {ncpu} usable cores"
    if load1 > max(1.0, 0.5 * ncpu):
        fix = "wait for other jobs to finish, or measure on a quiet machine"
        return Check("load", "warn", detail + ": the machine is busy", fix)
    return Check("load", "ok", detail)


def _descendants(pids: list[int]) -> set[int]:
    """The processes this one started, and theirs (from each process's ppid, proc(5) field 4)."""
    children: dict[int, list[int]] = {}
    for pid in pids:
        try:
            ppid = int((_read(f"{PROC}/{pid}/stat") or "").rpartition(")")[2].split()[1])
        except (ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def check_runnable(core: int) -> Check:
    """Other runnable (state R) threads last run on ``core``."""
    try:
        pids = [int(p) for p in os.listdir(PROC) if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return Check("runnable", "unknown", f"{PROC} not listable")
    own = _descendants(pids)  # this teperf's own workers are not load on its core
    found = []
    for pid in pids:
        if pid in own:
            continue
        for path in glob.glob(f"{PROC}/{pid}/task/*/stat"):  # none: gone, or not ours to read
            if (stat := _read(path)) is None:
                continue
            # comm may hold spaces and parentheses: split after the last ')'
            head, _, rest = stat.rpartition(")")
            fields = rest.split()  # state and processor: fields 3 and 39 of proc(5)
            if len(fields) >= 37 and fields[0] == "R" and fields[36] == str(core):
                found.append((int(path.split("/")[-2]), head.partition("(")[2]))
    # it may sleep between trials: the claim says it, not the thread state
    if (other := claimed_by_others().get(core)) is not None:
        detail = f"another teperf run (pid {other}) measures on core {core}"
        return Check("runnable", "warn", detail, "let it finish, or pick another --core")
    if not found:
        return Check("runnable", "ok", f"no other runnable thread on core {core}")
    names = ", ".join(f"{name} ({tid})" for tid, name in found[:5]) + (" ..." if len(found) > 5 else "")
    detail = f"{len(found)} other runnable thread(s) on core {core}: {names}"
    return Check("runnable", "warn", detail, "stop them, or pick a quiet core with --core")


def check_clocksource() -> Check:
    path = "/sys/devices/system/clocksource/clocksource0/current_clocksource"
    if (source := _read(path)) is None:
        return Check("clocksource", "unknown", f"{path} not readable")
    if source in ("hpet", "acpi_pm"):
        fix = "use tsc if the kernel offers it (clocksource=tsc)"
        return Check("clocksource", "warn", f"{source}: reading the clock is slow (microseconds)", fix)
    return Check("clocksource", "ok", source)


def _versions(te_names) -> dict:
    """Python, torch and TE versions from metadata, importing nothing (sent as source to a side's python)."""
    import platform
    from importlib import metadata

    def version(*names):
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return None

    return {
        "python": platform.python_version(),
        "torch": version("torch"),
        "transformer_engine": version(*te_names),
    }


def side_versions(python: str) -> dict:
    import inspect

    code = f"import json\n{inspect.getsource(_versions)}\nprint(json.dumps(_versions({TE_DISTRIBUTIONS!r})))"
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=30, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_versions(python: Optional[str] = None) -> list[Check]:
    """torch and TE versions of ``python`` (this interpreter when None)."""
    label = "" if python is None else f" [{python}]"
    try:
        found = _versions(TE_DISTRIBUTIONS) if python is None else side_versions(python)
    except (FileNotFoundError, PermissionError) as exc:
        return [_bad_python(label, f"cannot run the interpreter: {exc}", "an executable python")]
    except (IndexError, ValueError, subprocess.CalledProcessError) as exc:  # ran, but gave no answer
        if isinstance(exc, subprocess.CalledProcessError):
            why = f"exit {exc.returncode}" + (f" ({exc.stderr.strip()[:150]})" if exc.stderr.strip() else "")
        else:
            why = "printed nothing" if isinstance(exc, IndexError) else f"{type(exc).__name__}: {exc}"
        detail = f"the interpreter does not answer like a Python 3: {why.splitlines()[0][:200]}"
        return [_bad_python(label, detail, "a working Python 3 interpreter")]
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        return [
            Check(f"torch{label}", "unknown", f"could not ask the interpreter: {reason}"),
            Check(f"transformer_engine{label}", "unknown", "see torch"),
        ]
    checks = []
    if python is not None:
        checks.append(Check(f"python{label}", "ok", f"Python {found.get('python')}"))
    if torch_version := found.get("torch"):
        checks.append(Check(f"torch{label}", "ok", f"torch {torch_version}"))
    else:
        # the coordinator's own interpreter needs torch only when a side uses it (the default)
        status = "fail" if python is not None else "warn"
        detail = "torch is not installed: workers started with this interpreter cannot run"
        checks.append(Check(f"torch{label}", status, detail, "install torch into this interpreter"))
    te = found.get("transformer_engine")
    no_te = "not installed as a distribution (fine for --backend torch; a side may bring TE on its path)"
    checks.append(Check(f"transformer_engine{label}", "ok", f"TransformerEngine {te}" if te else no_te))
    return checks


def _bad_python(label: str, detail: str, what: str) -> Check:
    fix = f"point --python (and --base-python/--head-python) at {what}"
    return Check(f"python{label}", "fail", detail, fix)


def _nvidia_smi(args: list[str], timeout_s: float = 15.0) -> Optional[str]:
    if (exe := shutil.which("nvidia-smi")) is None:
        return None
    out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        said = (out.stderr or out.stdout).strip()
        raise RuntimeError(said.splitlines()[0] if said else f"exit {out.returncode}")
    return out.stdout


def gpu_and_driver() -> tuple[Optional[str], Optional[str]]:
    """(name, driver version) of the first GPU nvidia-smi lists, or (None, None) when it cannot tell."""
    try:
        out = _nvidia_smi(["--query-gpu=name,driver_version", "--format=csv,noheader"], timeout_s=30.0) or ""
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None, None
    name, _, driver = next(iter(out.strip().splitlines()), "").partition(",")
    return (name.strip() or None), (driver.strip() or None)


def check_gpu_visible() -> Check:
    if (listing := _nvidia_smi(["-L"])) is None:
        driver = "" if os.path.exists("/proc/driver/nvidia/version") else " and no NVIDIA driver loaded"
        detail = f"nvidia-smi not found{driver} (fine for --device cpu)"
        return Check("gpu", "unknown", detail, "install the NVIDIA driver utilities to measure --device cuda")
    gpus = [line.strip() for line in listing.splitlines() if line.strip().startswith("GPU")]
    if not gpus:
        return Check("gpu", "warn", "nvidia-smi lists no GPU", "check the driver and CUDA_VISIBLE_DEVICES")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    extra = f"; CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
    return Check("gpu", "ok", "; ".join(gpus[:4]) + (" ..." if len(gpus) > 4 else "") + extra)


def check_gpu_busy() -> Check:
    usage = _nvidia_smi(["--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits"])
    if usage is None:
        return Check("gpu_busy", "unknown", "nvidia-smi not found")
    apps_query = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]
    apps = _nvidia_smi(apps_query) or ""
    busy = []
    for line in usage.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 3 and fields[1].isdigit() and int(fields[1]) > 5:
            busy.append(f"GPU {fields[0]} at {fields[1]}% ({fields[2]} MiB used)")
    procs = [line.strip() for line in apps.strip().splitlines() if line.strip()]
    if busy or procs:
        detail = "; ".join(busy + [f"process {p}" for p in procs[:5]])
        fix = "wait for the other GPU work to finish: it competes for the GPU and the host"
        return Check("gpu_busy", "warn", detail, fix)
    return Check("gpu_busy", "ok", "GPU idle, no compute processes")


def quick_checks(core: Optional[int] = None, device: str = "cpu") -> list[Check]:
    """The cheap subset (well under a second) that compare runs before measuring, into the bundle's meta."""
    core = default_core(claim=False) if core is None else core  # compare's default core now
    checks = [_safe("core", lambda: check_core(core))]
    if checks[0].status != "fail":  # advice about a core this machine lacks (isolcpus=999) would mislead
        checks += [
            _safe("governor", lambda: check_governor(core)),
            _safe("isolation", lambda: check_isolation(core)),
        ]
    checks += [_safe("turbo", check_turbo), _safe("aslr", check_aslr), _safe("load", check_load)]
    if checks[0].status != "fail":
        checks.append(_safe("runnable", lambda: check_runnable(core)))
    if device.startswith("cuda"):
        checks.append(_safe("gpu_busy", check_gpu_busy))
    return checks


def all_checks(core: Optional[int] = None, pythons: tuple = ()) -> list[Check]:
    this = f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})"
    checks = quick_checks(core) + [_safe("clocksource", check_clocksource), Check("python", "ok", this)]
    checks += _safe_list("versions", lambda: check_versions(None))
    for python in pythons:
        checks += _safe_list(f"versions [{python}]", lambda python=python: check_versions(python))
    return checks + [_safe("gpu", check_gpu_visible), _safe("gpu_busy", check_gpu_busy)]


def worst(checks: list[Check]) -> str:
    return max((c.status for c in checks), key=("ok", "unknown", "warn", "fail").index, default="ok")
