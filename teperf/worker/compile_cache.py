"""Inductor's and Triton's on-disk caches per case: cold, empty per worker; warm, filled beforehand.
TORCHINDUCTOR_COMPILE_THREADS=1 keeps compiling in this process, on teperf's clocks."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

# torch._dynamo.utils.counters: per graph, each cache hits, misses or is bypassed (cannot key or pickle it).
CACHE_COUNTERS = {
    f"{cache}_{kind}": (group, f"{cache}_cache_{kind}")  # fxgraph_hit: ("inductor", "fxgraph_cache_hit")
    for cache, group in (("fxgraph", "inductor"), ("autograd", "aot_autograd"))
    for kind in ("hit", "miss", "bypass")
}


def cache_counts() -> dict:
    """The compile caches' counters so far in this process ({} before dynamo was imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {}
    return {key: int(utils.counters[group][name]) for key, (group, name) in CACHE_COUNTERS.items()}


def counts_since(before: dict) -> dict:
    """What the compile caches counted since ``before`` (cache_counts() then)."""
    return {key: value - before.get(key, 0) for key, value in cache_counts().items()}


def count_files(path: str) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


class CompileCache:
    def __init__(self, spec: dict | None):
        spec = dict(spec or {})
        self.mode = spec.get("mode") or "cold"
        self.owned = self.mode == "cold"
        if self.owned and spec.get("parent"):
            # inside the run's directory: removed with it even if this worker is killed
            self.root = tempfile.mkdtemp(prefix="teperf-inductor-", dir=spec["parent"])
        elif self.owned:  # a run without compile cases: made by inductor only if something compiles after
            # all (a forked worker leaves without atexit, a killed one without anything)
            name = f"teperf-inductor-{os.getpid()}-{os.urandom(4).hex()}"
            self.root = os.path.join(tempfile.gettempdir(), name)
        if self.owned:
            atexit.register(self.close)
        else:
            self.root = spec["dir"]
        self.warmup_dir = spec.get("process_warmup_dir") or os.path.join(self.root, "process-warmup")
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        self.use("process")

    def use_process_warmup(self) -> None:
        self._point(self.warmup_dir)

    def use(self, tag: str) -> dict:
        """Point the caches at ``root/tag`` and forget what inductor holds in memory."""
        path = os.path.join(self.root, tag)
        self._point(path)
        return {"mode": self.mode, "dir": path, "files_before": count_files(path)}

    def _point(self, path: str) -> None:
        if os.path.isdir(self.root):  # else inductor makes it, where it compiles at all
            os.makedirs(path, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
        os.environ["TRITON_CACHE_DIR"] = os.path.join(path, "triton")
        if "torch._inductor.utils" in sys.modules:  # nothing to clear before inductor was ever imported
            utils = sys.modules["torch._inductor.utils"]
            clear = getattr(utils, "clear_caches", None) or getattr(utils, "clear_inductor_caches", None)
            if clear is not None:
                clear()

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.root, ignore_errors=True)
            self.owned = False
