"""The worker's state: the cases built in this process and how to answer commands."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time


class StartError(Exception):
    """This worker cannot measure here at all (e.g. no CUDA); ``fix`` says what to do."""

    def __init__(self, problem: str, fix: str):
        super().__init__(problem)
        self.fix = fix


FIRST_CALL_WHAT = {
    "eager": "first fwd+bwd step",
    "compile": "torch.compile + first fwd+bwd step (dynamo trace, AOT autograd, inductor compile of fwd and "
    "bwd)",
    "cuda-graph": "graph capture (with its own warm-up steps) + first replayed fwd+bwd step",
}


class Session:
    def __init__(self, device: str, backends: list, compile_cache=None):
        import torch

        from teperf.worker.compile_cache import CompileCache

        torch.set_num_threads(1)
        self.torch = torch
        self.device = device
        self.cuda = device.startswith("cuda")
        if self.cuda and not torch.cuda.is_available():
            raise StartError(
                f"device cuda asked for, but this torch ({torch.__version__}) sees no CUDA device",
                "run on a machine with a GPU and a CUDA build of torch, or use --device cpu --backend torch",
            )
        self.backend_names = list(backends)
        self.cases: dict = {}  # case_id -> (step, built, info)
        self.saved_state: dict = {}  # case_id -> its copy of Built.global_state after set-up
        self.pristine_state: dict = {}  # id(Built.global_state) -> its contents before any case's first call
        self.warmed_at: dict = {}  # case_id -> dynamo epoch it was last warmed in
        self.warmups: dict = {}  # case_id -> warm-up steps
        self.dynamo_epoch = 0  # bumped whenever a case's set-up resets dynamo
        self.compile_cache = compile_cache or CompileCache(None)
        self.warmed: set = set()  # process-level warm-ups done (see _process_warmup)
        self.rng_broken: str | None = None  # why later cases cannot be set up (see runner.end_failed_capture)

    def hello(self) -> dict:
        torch = self.torch
        facts = {
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "platform": platform.platform(),
            "torch": torch.__version__,
            "torch_file": os.path.dirname(torch.__file__),
            "threads": torch.get_num_threads(),
            "hash_seed": os.environ.get("PYTHONHASHSEED"),
            "device": self.device,
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        }
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            facts.update(
                gpu=torch.cuda.get_device_name(0),
                gpu_capability=list(torch.cuda.get_device_capability(0)),
                gpu_memory_gib=round(props.total_memory / 2**30, 1),
                cuda=torch.version.cuda,
                cuda_initialized=torch.cuda.is_initialized(),
                driver=None,
            )
            with contextlib.suppress(Exception):
                facts["driver"] = _driver_version()
        from teperf.worker.backends import get_backend

        for name in self.backend_names:
            if (describe := getattr(get_backend(name), "describe", None)) is not None:
                facts[f"backend_{name}"] = describe()
        return facts

    def handle(self, message: dict) -> dict:
        cmd = message["cmd"]
        if cmd == "setup":
            return self.setup(message["case"])
        if cmd == "trial":
            return self.trial(message["case_id"], int(message["iters"]))
        if cmd == "warm":
            self._steps(self.ready(message["case_id"]), int(message["steps"]))
            return {"type": "warm", "case_id": message["case_id"], "info": self.cases[message["case_id"]][2]}
        if cmd == "pin":
            return self.pin(int(message["core"]))
        if cmd == "imported":
            from teperf.worker.provenance import imported_facts

            packages = list(message.get("packages") or [])
            facts = imported_facts(packages, message.get("known"), message.get("versions"))
            return {"type": "imported", "imported": facts}
        if cmd == "counters":
            from teperf.worker.counters import count_compile, count_step

            step = self.ready(message["case_id"])
            counters = count_step(step, self.cuda)
            info = self.cases[message["case_id"]][2]
            if "graphs" in info:  # a compile case: its first call recorded what dynamo compiled
                counters.update(count_compile(step, info, self.cuda))
            return {"type": "counters", "case_id": message["case_id"], "counters": counters}
        if cmd == "profile":
            from teperf.worker.profile import profile_step

            step = self.ready(message["case_id"])
            functions = profile_step(step, int(message.get("iters", 200)), self.cuda)
            return {"type": "profile", "case_id": message["case_id"], "functions": functions}
        raise ValueError(f"unknown command {cmd!r}")

    def pin(self, core: int) -> dict:
        """Move every thread of this process to ``core`` (a prestarted worker imported torch elsewhere).
        TEPERF_SPREAD_THREADS=1, for the couple-noise study (scripts/gpu/plan_check.sh trials): only the main
        thread; the others (autograd's device thread, CUDA's) go to every other core."""
        others = {core}
        if os.environ.get("TEPERF_SPREAD_THREADS") == "1":
            others = set(range(os.cpu_count() or 1)) - {core} or {core}
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError, OSError):  # a thread that just ended
                os.sched_setaffinity(int(tid), {core} if int(tid) == os.getpid() else others)
        return {"type": "pinned", "affinity": sorted(os.sched_getaffinity(0))}

    def setup(self, case: dict) -> dict:
        from teperf.worker.backends import get_backend

        case_id = case["id"]
        backend = get_backend(case["backend"])
        reason = backend.recipe_status(case["recipe"], self.device)
        if not reason and hasattr(backend, "case_status"):  # a part of the module this install lacks
            reason = backend.case_status(case, self.device)
        if reason:
            return {"type": "error", "case_id": case_id, "error": reason, "skipped": True}
        if self.rng_broken:
            raise RuntimeError(f"not set up: {self.rng_broken}")
        t0 = time.perf_counter()
        self.torch.manual_seed(1234)  # same data on both sides
        built = backend.build(case, self.device)
        info = dict(built.info)
        info["build_s"] = round(time.perf_counter() - t0, 3)
        try:
            step, mode_info = self._first_call(case, built, info)
        except Exception:
            if case["mode"] == "cuda-graph":
                from teperf.worker.runner import end_failed_capture

                broken = end_failed_capture(self.torch)
                if broken:  # the later cases of this process would fail for a reason not their own
                    self.rng_broken = (
                        f"a failed CUDA-graph capture (case {case_id}) broke this process's RNG ({broken})"
                    )
            raise
        self.warmed_at[case_id] = self.dynamo_epoch
        self.warmups[case_id] = int(case["warmup"])
        self._steps(step, int(case["warmup"]))
        info.update(mode_info)
        info["setup_s"] = round(time.perf_counter() - t0, 3)
        self.cases[case_id] = (step, built, info)
        if built.global_state is not None:
            self.saved_state[case_id] = dict(built.global_state)
        return {"type": "ready", "case_id": case_id, "info": info}

    def ready(self, case_id: int):
        """The case's step, its own global state back and its compiled code current (re-warmed, untimed)."""
        step, built, _info = self.cases[case_id]
        if case_id in self.saved_state:
            built.global_state.clear()
            built.global_state.update(self.saved_state[case_id])
        if self.warmed_at.get(case_id, self.dynamo_epoch) != self.dynamo_epoch:
            self._steps(step, max(2, self.warmups.get(case_id, 0)))  # recompiles here, untimed
            self.warmed_at[case_id] = self.dynamo_epoch
        return step

    def _steps(self, step, n: int) -> None:
        for _ in range(n):
            step()
        if self.cuda:
            self.torch.cuda.synchronize()

    def _first_call(self, case: dict, built, info: dict):
        """Make the step and time its first call (info["first_call"]), the one-time cost a user pays; in
        compile mode also one step under another recipe (info["recompile"]) and back (info["switch_back"])."""
        from teperf.worker.clocks import time_once
        from teperf.worker.compile_cache import cache_counts, count_files, counts_since
        from teperf.worker.runner import compile_counts_during, dynamo_counts, isolate_dynamo, make_step

        mode = case["mode"]
        warmup = self._process_warmup(mode)
        if built.global_state is not None:
            # as in a fresh process: the first call chooses (TE's attention backend) itself
            pristine = self.pristine_state.setdefault(id(built.global_state), dict(built.global_state))
            built.global_state.clear()
            built.global_state.update(pristine)
        cache = None
        if mode == "compile":
            # each first call compiles from nothing, apart from other cases: dynamo forgets their code
            # and guards (ready() re-warms them, untimed), the case gets its own on-disk cache
            isolate_dynamo()
            self.dynamo_epoch += 1
            cache = self.compile_cache.use(f"case{case['id']}")
        made = {}
        counted = cache_counts() if cache is not None else {}
        # an eager step may compile all the same: TE torch.compiles its fused helpers on first use
        graphs_before = dynamo_counts()[0] if "torch._dynamo" in sys.modules else 0

        def first():
            made["step"], made["info"] = make_step(built, mode)  # compiles nothing yet: the first step does
            if mode == "compile":
                made["info"].update(compile_counts_during(made["step"]))
            else:
                made["step"]()

        first_call = time_once(first, self.cuda)
        first_call["what"] = FIRST_CALL_WHAT[mode]
        if (
            mode != "compile"
            and "torch._dynamo" in sys.modules
            and (graphs := dynamo_counts()[0] - graphs_before)
        ):
            first_call["graphs"] = graphs
        if warmup:
            first_call["after_process_warmup"] = warmup
        if cache is not None:
            cache["files_after"] = count_files(cache["dir"])
            cache.update(counts_since(counted))  # hits: graphs it found in the cache
            first_call["cache"] = cache
        info["first_call"] = first_call
        if built.after_first_call is not None:
            built.after_first_call(built)
        info.update(built.info)  # what the backend noted while preparing the mode (e.g. graphed_with)
        step = made["step"]
        if mode == "compile" and built.alt_autocast is not None:
            counts = {}
            try:
                switched = lambda: step(autocast=built.alt_autocast)  # noqa: E731
                recompile = time_once(lambda: counts.update(compile_counts_during(switched)), self.cuda)
            except Exception as exc:  # the recompile figure is extra: the per-step measurement still stands
                info["recompile_error"] = f"{type(exc).__name__}: {exc}"[:300]
            else:
                recompile.update(what=f"first step under {built.alt_autocast_what}", graphs=counts["graphs"])
                info["recompile"] = recompile
                switch_back = time_once(step, self.cuda)
                switch_back["what"] = "first step back under the case's own recipe"
                info["switch_back"] = switch_back
        return step, made["info"]

    def _process_warmup(self, mode: str) -> dict | None:
        """Once per process: what any first call in a fresh process pays whatever the module (autograd,
        cuBLAS; importing dynamo, probing the compiler; a first capture), kept out of the cases' figures."""
        from teperf.worker.clocks import time_once

        torch = self.torch
        done = {}
        for kind in ("eager", mode):
            if kind in self.warmed:
                continue
            self.warmed.add(kind)
            lin = torch.nn.Linear(16, 16, device=self.device)
            x = torch.randn(4, 16, device=self.device, requires_grad=True)
            if kind == "eager":
                fn = lambda: lin(x).sum().backward()  # noqa: E731
            elif kind == "compile":
                self.compile_cache.use_process_warmup()
                fn = lambda: torch.compile(lambda a: torch.nn.functional.gelu(lin(a)))(x).sum().backward()  # noqa: E731
            else:
                fn = lambda: torch.cuda.make_graphed_callables(lin, (x,))(x).sum().backward()  # noqa: E731
            try:
                done[kind] = time_once(fn, self.cuda)
            except Exception as exc:  # the case's own first call still measures, carrying this cost too
                done[kind] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        return done or None

    def trial(self, case_id: int, iters: int) -> dict:
        from teperf.worker.clocks import time_loop

        step = self.ready(case_id)
        dynamo = "torch._dynamo" in sys.modules  # loaded by a compile case or TE's compiled fusions
        if dynamo:
            from teperf.worker.runner import dynamo_counts

            graphs = dynamo_counts()[0]
        clocks = time_loop(step, iters, self.cuda)
        if dynamo:  # a compile inside the timed loop would swamp the host time
            clocks["compiles"] = dynamo_counts()[0] - graphs
        return {"type": "trial", "case_id": case_id, **clocks}

    def close(self):
        self.cases.clear()
        self.compile_cache.close()


def _driver_version() -> str:
    # Read from the kernel module's file to avoid a dependency on pynvml.
    with open("/proc/driver/nvidia/version") as f:
        first = f.readline()
    return next((token for token in first.split() if token[0].isdigit() and "." in token), first.strip())
