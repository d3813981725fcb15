"""One worker, one case, one question: the exact step counters of a side (``teperf bisect``'s probe).

Counters repeat exactly, so a probe needs no pairing, no schedule and no
statistics: start the side's worker pinned to the measuring core, set the
case up, ask for ``counters``, quit. ``ForkedProbes`` starts those workers
as forks of a server that imported torch once, so that a probe costs the
package's import and one step, not an interpreter's start (about 1 s, not 10).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from teperf.config import Config
from teperf.engine.spawn import Worker, WorkerError, worker_env
from teperf.plan import Case, hash_seed
from teperf.provenance import packages_under_test
from teperf.sides import Side

# Run in a side's interpreter: import the packages under test from the side's tree, then name every
# top-level module that came from elsewhere (their dependencies: einops, ...), for a server to preload.
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
    """The top-level modules the packages under test import from outside the side's tree (not the
    packages themselves, nor anything named like them: a compiled extension beside them differs by
    commit); [] when that cannot be found (the probes then import them each)."""
    names = [n for n in under_test if n != "torch"]
    if not names:
        return []
    try:
        out = subprocess.run(
            [side.python, "-c", _DEPENDENCIES, json.dumps(list(side.sys_path)), json.dumps(names)],
            env=worker_env(side, seed),
            cwd=str(cwd),
            capture_output=True,
            text=True,
            timeout=300,
        )
        found = json.loads(out.stdout) if out.returncode == 0 else []
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []
    return [n for n in found if not _named_like(n, under_test)]


def _named_like(module: str, packages: list[str]) -> bool:
    """transformer_engine.pytorch and transformer_engine_torch are named like transformer_engine: a
    server must not import them, or every fork would run the server's copy, not its commit's."""
    return any(module.startswith(p) for p in packages if p != "torch")


class ProbeFailed(Exception):
    """The side could not be counted (its worker did not start, the case did not set up); one line."""

    def __init__(self, reason: str, log_tail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail


def count_case(config: Config, side: Side, case: Case, log_path: Path, launcher=None) -> dict:
    """The counters of one fwd+bwd step of ``case`` on ``side`` (teperf.worker.counters); ``launcher``:
    where the worker comes from (a fork server's, ForkedProbes), None for a fresh interpreter."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        worker = Worker(
            side,
            core=config.core,
            device=config.device,
            backends=[case.backend],
            hash_seed=hash_seed(config.seed, 0),
            log_path=log_path,
            cwd=log_path.parent,
            timeout_s=config.schedule.timeout_s,
            launcher=launcher,
        )
    except WorkerError as exc:
        raise ProbeFailed(str(exc), exc.log_tail) from None
    try:
        worker.wait_ready()
        reply = worker.request({"cmd": "setup", "case": case.to_wire(config.device, config.schedule.warmup)})
        if reply.get("type") != "ready":
            raise ProbeFailed(f"set-up failed: {reply.get('error')}", worker.log_tail())
        reply = worker.request({"cmd": "counters", "case_id": case.id})
        if reply.get("type") != "counters":
            raise ProbeFailed(f"counting failed: {reply.get('error')}", worker.log_tail())
        return reply["counters"]
    except WorkerError as exc:
        raise ProbeFailed(str(exc), exc.log_tail) from None
    finally:
        worker.close()


class ForkedProbes:
    """Counter probes forked from servers that imported torch (and nothing of the package under test):
    one server per interpreter and environment, reused by every commit's probe, whose worker puts the
    commit's tree first on sys.path at its init as a fresh one does. Counters count one step after
    set-up and warm-up, so a fork counts what a fresh interpreter counts; a server that cannot start
    leaves its probes to fresh interpreters."""

    def __init__(self, config: Config, cases: list[Case], log_dir: Path):
        self.config, self.cases, self.log_dir = config, cases, Path(log_dir)
        self.servers: dict = {}  # (python, env) -> ForkServer, or None where one could not start
        self.failed: list[str] = []

    def _server(self, side: Side):
        from teperf.engine.coordinator import preload_modules
        from teperf.engine.forkserver import ForkServer, ServerError

        key = (side.python, tuple(sorted(side.env.items())))
        if key not in self.servers:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            neutral = Side("probe", side.python, (), dict(side.env))  # no commit's tree in the server
            under_test = packages_under_test(self.config, [side])
            preload = [
                n for n in preload_modules(self.config, self.cases, []) if not _named_like(n, under_test)
            ]
            preload += dependencies(side, under_test, self.log_dir, hash_seed(self.config.seed, 0))
            try:
                self.servers[key] = ForkServer(
                    neutral,
                    seed=hash_seed(self.config.seed, 0),
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
        from teperf.engine.forkserver import ServerError

        server = self._server(side)

        def launch(log_file):
            try:
                return server.fork(log_file) if server is not None and server.alive() else None
            except ServerError:
                return None  # this probe starts fresh

        return count_case(self.config, side, case, log_path, launcher=launch)

    def close(self) -> None:
        for server in self.servers.values():
            if server is not None:
                server.quit()
                server.reap()
