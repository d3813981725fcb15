"""What each side's interpreter finds before a run (:func:`preflight`); bisect's probe: one case's exact
step counters, forked from a server that imported torch once (:class:`ForkedProbes`: 1 s a probe, not 10)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

from teperf.config import Config
from teperf.engine.forkserver import ForkServer, ServerError, preload_modules
from teperf.engine.oneshot import StepFailed, one_worker
from teperf.engine.spawn import WorkerError, _closing, check_python, worker_code_dir, worker_env
from teperf.errors import TeperfError
from teperf.plan import Case, hash_seed, measured_packages, packages_under_test
from teperf.sides import Side

PREFLIGHT_TIMEOUT_S = 120.0

# Run in the side's interpreter: finds, never imports (importing torch and TE costs 10 s, find_spec ms).
_PREFLIGHT = r"""
import json, sys
out = {"python": sys.version.split()[0], "executable": sys.executable, "prefix": sys.prefix, "found": {}}
if sys.version_info < (3, 9):  # said before anything an old Python fails on (2.7: importlib.util)
    out["too_old"] = True
    print(json.dumps(out))
    sys.exit(0)
import importlib.util
sys.path[0:0] = json.loads(sys.argv[1])
for name in json.loads(sys.argv[2]):
    try:
        spec = importlib.util.find_spec(name)
    except Exception as exc:
        spec, out["found"][name] = None, "error: %s: %s" % (type(exc).__name__, exc)
        continue
    out["found"][name] = spec and (spec.origin or next(iter(spec.submodule_search_locations or []), None))
print(json.dumps(out))
"""


def _run_script(side: Side, script: str, names: list[str], cwd, seed: int, timeout: float):
    """``script`` run in the side's interpreter, given the side's tree and ``names`` (JSON arguments)."""
    return subprocess.run(
        [side.python, "-c", script, json.dumps(list(side.sys_path)), json.dumps(names)],
        cwd=str(cwd),
        env=worker_env(side, seed),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def _where_else(side: Side) -> str:
    """The options that point ``side`` elsewhere (a git side's tree is the ref's: only PYTHONPATH adds)."""
    if "ref" in side.description:
        return (
            "put the directory that holds it on PYTHONPATH (git sides import the ref's tree and PYTHONPATH)"
        )
    flag = f"--{side.label}-" if side.label in ("base", "head") else "--"
    return f"point {flag}python/{flag}path at one that has it"


def has_nvidia_gpu() -> bool:
    """Whether an NVIDIA driver is loaded or nvidia-smi is on PATH (never imports torch)."""
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def preflight(config, sides: Iterable[Side], hash_seed: int = 0) -> dict[str, dict]:
    """Where each side's interpreter finds torch, the packages under test and teperf's worker; TeperfError."""
    sides = list(sides)
    wanted = ["torch", *measured_packages(config, sides), "teperf.worker"]
    found: dict[str, dict] = {}
    for side in sides:
        check_python(side.python)
        with tempfile.TemporaryDirectory(prefix="teperf-preflight-") as cwd:
            try:
                proc = _run_script(side, _PREFLIGHT, wanted, cwd, hash_seed, PREFLIGHT_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise TeperfError(
                    f"{side.label}'s interpreter {side.python} could not be asked what it imports: {exc}",
                    "check that it runs (`PYTHON -c 'import sys'`)",
                )
        try:
            facts = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            said = [line.strip() for line in proc.stderr.splitlines() if line.strip()] or ["(no output)"]
            # a traceback ends with its cause; a launcher (a pyenv shim, a shell) starts with it
            cause = said[-1] if said[0].startswith("Traceback") else said[0]
            raise TeperfError(
                f"{side.label}'s interpreter {side.python} fails to start (exit {proc.returncode}): {cause}",
                "point the side at a working Python 3 interpreter",
            )
        if facts.get("too_old"):  # its symptoms would be "No module named util", "install torch", ...
            flag = f"--{side.label}-python" if side.label in ("base", "head") else "--python"
            raise TeperfError(
                f"{side.label}'s interpreter {side.python} is Python {facts['python']}; teperf's workers "
                "need Python 3.9 or newer",
                f"point {flag} at a Python >= 3.9 that has torch",
            )
        missing = [
            name for name in wanted if not facts["found"].get(name) or "error:" in str(facts["found"][name])
        ]
        if "transformer_engine" in missing and config.device == "cuda" and not has_nvidia_gpu():
            # the cause is the machine, not the environment: installing TE would not make a GPU
            raise TeperfError(
                "this config measures TransformerEngine on a CUDA GPU, and this machine has none (no NVIDIA "
                f"driver; {side.label}'s interpreter also lacks transformer_engine)",
                "run it on a GPU machine with transformer_engine installed, or measure on the CPU: "
                "--config demo, or your own modules with --backend torch --device cpu",
            )
        if missing:
            what = {"teperf.worker": "teperf's worker code (a Python >= 3.9 that can read it)"}
            names = ", ".join(what.get(m, m) for m in missing)
            fix = (
                f"install torch into that environment ({side.python} -m pip install torch)"
                if missing == ["torch"]
                else f"install {names} into that environment, or {_where_else(side)}"
            )
            raise TeperfError(
                f"{side.label}'s interpreter {side.python} ({facts['prefix']}) lacks {names}", fix
            )
        facts["found"].pop("teperf.worker", None)
        worker_dir = worker_code_dir()
        for name, origin in list(facts["found"].items()):
            if origin and str(origin).startswith(worker_dir):
                raise TeperfError(
                    f"{side.label} would import {name} from teperf's worker code directory", "report this bug"
                )
        found[side.label] = facts
    return found


# Run in a side's interpreter: the top-level modules the packages under test import from outside its tree.
_DEPENDENCIES = """
import importlib, json, os, sys
tree, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.path[0:0] = tree
for name in names:
    importlib.import_module(name)
roots = [os.path.realpath(p) for p in tree]
def outside(mod):
    f = getattr(mod, "__file__", None)
    return bool(f) and not any(os.path.realpath(f).startswith(r + os.sep) for r in roots)
print(json.dumps(sorted(n for n, m in list(sys.modules.items())
                        if "." not in n and not n.startswith("_") and outside(m))))
"""


def dependencies(side: Side, under_test: list[str], cwd: Path, seed: int) -> list[str]:
    """The top-level modules the packages under test import from outside the side's tree, but none named
    like them (a compiled extension beside them differs by commit); [] when that cannot be found."""
    names = [n for n in under_test if n != "torch"]
    if not names:
        return []
    try:
        out = _run_script(side, _DEPENDENCIES, names, cwd, seed, 300)
        found = json.loads(out.stdout) if out.returncode == 0 else []
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []
    return [n for n in found if not _named_like(n, under_test)]


def _named_like(module: str, packages: list[str]) -> bool:
    """A server must not import these (transformer_engine_torch too), or forks would run its copy."""
    return any(module.startswith(p) for p in packages if p != "torch")


class ProbeFailed(Exception):
    """The side could not be counted (its worker did not start, the case did not set up); one line."""

    def __init__(self, reason: str, log_tail: str = ""):
        super().__init__(reason)
        self.reason, self.log_tail = reason, log_tail


def count_case(config: Config, side: Side, case: Case, log_path: Path, launcher=None) -> dict:
    """The counters of one fwd+bwd step of ``case`` on ``side``; ``launcher``: ForkedProbes' fork, or None."""
    log_path = Path(log_path)
    try:
        with one_worker(
            config, side, log_path.parent, backends=[case.backend], log_name=log_path.name, launcher=launcher
        ) as worker:
            try:
                worker.ready()
                worker.setup(case)
                return worker.counters(case)
            except StepFailed as exc:
                raise ProbeFailed(str(exc), worker.log_tail()) from None
    except WorkerError as exc:
        raise ProbeFailed(str(exc), exc.log_tail) from None


class ForkedProbes:
    """Probes forked from a server per interpreter and environment; without one, from fresh interpreters."""

    def __init__(self, config: Config, cases: list[Case], log_dir: Path):
        self.config, self.cases, self.log_dir = config, cases, Path(log_dir)
        self.servers: dict = {}  # (python, env) -> ForkServer, or None where one could not start
        self.failed: list[str] = []

    def _server(self, side: Side):
        key = (side.python, tuple(sorted(side.env.items())))
        if key not in self.servers:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            under_test = packages_under_test(self.config, [side])
            preload = [n for n in preload_modules(self.cases) if not _named_like(n, under_test)]
            seed = hash_seed(self.config.seed, 0)
            preload += dependencies(side, under_test, self.log_dir, seed)
            try:
                self.servers[key] = ForkServer(
                    Side("probe", side.python, (), dict(side.env)),  # no commit's tree in the server
                    seed=seed,
                    preload=list(dict.fromkeys(preload)),
                    log_path=self.log_dir / f"probe-server-{len(self.servers)}.log",
                    cwd=self.log_dir,
                    core=None,
                    timeout_s=self.config.schedule.timeout_s,
                )
            except ServerError as exc:
                self.servers[key] = None
                self.failed.append(str(exc))
        return self.servers[key]

    def count(self, side: Side, case: Case, log_path: Path) -> dict:
        server = self._server(side)

        def launch(fds, popen):
            with _closing(*fds[:2]):
                with contextlib.suppress(ServerError):  # else this probe starts fresh
                    if server is not None and server.alive():
                        return server.fork(fds)
                return popen()

        return count_case(self.config, side, case, log_path, launcher=launch)

    def close(self) -> None:
        for server in self.servers.values():
            if server is not None:
                server.quit()
                server.reap()
