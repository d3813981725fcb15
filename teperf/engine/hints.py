"""Hints naming the likely cause of a worker's failure, read from the words teperf.engine.spawn writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from teperf.config import Config

# A SIGKILLed worker in spawn's words: "was killed by SIGKILL" (while waited for) or "is gone (exit -9)".
_SIGKILLED = re.compile(r"SIGKILL|status -9\b|exit -9\b")

_NO_ATTRIBUTE = re.compile(r"AttributeError: module '([\w.]+)' has no attribute '(\w+)'")
OOM_HINT = (
    "it may have been killed for memory (the OOM killer sends SIGKILL): try a smaller --shape or "
    "fewer cases per run"
)
FACTORY_HINT = (
    "check the module factories and that each side's --path/--base-path/--head-path holds their package"
)


def failure_hint(error: str) -> str:
    """The hint for a cell's failure text (a worker killed, hung, or a case that raised)."""
    text = error or ""
    if _SIGKILLED.search(text):
        return OOM_HINT
    if "did not answer within" in text:
        return "a step or set-up took longer than the timeout: raise --timeout if the case is just slow"
    if "was killed by" in text:
        return "something killed the worker (see its log)"
    if missing := _NO_ATTRIBUTE.search(text):  # the module imported: not a path problem, a name in the config
        return (
            f"{missing[1]} has no {missing[2]}: check the factory (or inputs) key that names it in the config"
        )
    return FACTORY_HINT


def start_hint(exc, side, config: Config, log: Path) -> str:
    """The hint for a worker that did not start (no hello)."""
    if getattr(exc, "fix", None):
        return exc.fix
    if getattr(exc, "timed_out", False):
        return (
            f"importing torch/TE took longer than the timeout: raise {config.option('timeout_s')} (see {log})"
        )
    if getattr(exc, "exit_code", None) == -9:
        return f"{OOM_HINT} (see {log})"
    return f"see {log}; check that {side.python} can import torch{_which_torch(side)}"


_FIND_TORCH = (
    "import importlib.util, json, sys; sys.path[0:0] = json.loads(sys.argv[1]); "
    "s = importlib.util.find_spec('torch'); print(s.origin if s else '')"
)


def _which_torch(side) -> str:
    """' (it finds torch at X)', and where X shadows the interpreter's own torch (a torch/ in a side's
    directory, or on PYTHONPATH) that it does: the cause, where "import torch" failing is the symptom."""
    env = {**os.environ, **side.env}
    try:
        proc = subprocess.run(
            [side.python, "-c", _FIND_TORCH, json.dumps(list(side.sys_path))],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    origin = proc.stdout.strip()
    if proc.returncode != 0 or not origin:
        return " (it finds no torch)" if proc.returncode == 0 else ""
    dirs = [*side.sys_path, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    found = Path(origin).resolve()
    shadow = next((d for d in dirs if found.is_relative_to(Path(d).resolve())), None)
    if shadow is None:
        return f" (it finds torch at {origin})"
    where = "PYTHONPATH" if shadow not in side.sys_path else "the side's path"
    return f" (it finds torch at {origin}: a torch in {shadow}, on {where}, shadows the interpreter's own)"
