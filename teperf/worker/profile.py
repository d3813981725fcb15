"""explain's cProfile of a step, a row per function; ``rel`` (the path below its sys.path entry) is a key
base and head copies share. Autograd's device threads are off: per-thread cProfile sees a CUDA backward."""

from __future__ import annotations

import cProfile
import os
import sys
from typing import Callable

LIMIT = 2000  # rows
WARM_STEPS = 2


def profile_step(step: Callable[[], None], iters: int, cuda: bool) -> list[dict]:
    import torch

    iters = max(int(iters), 1)
    for _ in range(WARM_STEPS):
        step()
    if cuda:
        torch.cuda.synchronize()
    profiler = cProfile.Profile()
    with torch.autograd.set_multithreading_enabled(False):
        profiler.enable()
        try:
            for _ in range(iters):
                step()
            if cuda:
                torch.cuda.synchronize()
        finally:
            profiler.disable()
    roots = _path_roots()
    rows = []
    for entry in profiler.getstats():
        code = entry.code
        if isinstance(code, str):  # a C function: cProfile's description of it
            file, rel, line, name = "~", "~", 0, code
        else:
            file, line = code.co_filename, code.co_firstlineno
            name = getattr(code, "co_qualname", code.co_name)
            rel = relative_path(file, roots)
        rows.append(
            {
                "file": file,
                "rel": rel,
                "line": line,
                "name": name,
                "calls": round(entry.callcount / iters, 4),
                "own_us": round(entry.inlinetime * 1e6 / iters, 3),
                "cum_us": round(entry.totaltime * 1e6 / iters, 3),
            }
        )
    rows.sort(key=lambda r: (-r["own_us"], r["rel"], r["name"]))
    return rows[:LIMIT]


def _path_roots() -> list[str]:
    roots = []
    for entry in sys.path:
        try:
            roots.append(os.path.realpath(entry or os.getcwd()))
        except OSError:
            continue
    # The longest root wins, so a site-packages inside a venv beats the venv.
    return sorted(set(roots), key=len, reverse=True)


def relative_path(file: str, roots: list[str]) -> str:
    if file.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return file
    try:
        real = os.path.realpath(file)
    except OSError:
        real = file
    for root in roots:
        if real.startswith(root + os.sep):
            return real[len(root) + 1 :]
    return os.path.basename(file)
