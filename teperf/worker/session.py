"""The worker's state: the cases built in this process and how to answer commands."""

from __future__ import annotations

import os
import platform
import sys
import time


class StartError(Exception):
    """This worker cannot measure here at all (e.g. no CUDA); ``fix`` says what to do."""

    def __init__(self, problem: str, fix: str):
        super().__init__(problem)
        self.fix = fix


class Session:
    def __init__(self, device: str, backends: list):
        import torch

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
        self.warmed_at: dict = {}  # case_id -> dynamo epoch it was last warmed in
        self.warmups: dict = {}  # case_id -> warm-up steps
        self.dynamo_epoch = 0  # bumped whenever a case's set-up resets dynamo

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
            )
            try:
                facts["driver"] = _driver_version()
            except Exception:
                facts["driver"] = None
        from teperf.worker.backends import get_backend

        for name in self.backend_names:
            backend = get_backend(name)
            describe = getattr(backend, "describe", None)
            if describe is not None:
                facts[f"backend_{name}"] = describe()
        return facts

    def handle(self, message: dict) -> dict:
        cmd = message["cmd"]
        if cmd == "setup":
            return self.setup(message["case"])
        if cmd == "trial":
            return self.trial(message["case_id"], int(message["iters"]))
        if cmd == "warm":
            step = self.ready(message["case_id"])
            for _ in range(int(message["steps"])):
                step()
            if self.cuda:
                self.torch.cuda.synchronize()
            return {"type": "warm", "case_id": message["case_id"], "info": self.cases[message["case_id"]][2]}
        if cmd == "pin":
            return self.pin(int(message["core"]))
        if cmd == "counters":
            from teperf.worker.counters import count_step

            step = self.ready(message["case_id"])
            return {"type": "counters", "case_id": message["case_id"], "counters": count_step(step, self.cuda)}
        if cmd == "profile":
            from teperf.worker.profile import profile_step

            step = self.ready(message["case_id"])
            functions = profile_step(step, int(message.get("iters", 200)), self.cuda)
            return {"type": "profile", "case_id": message["case_id"], "functions": functions}
        raise ValueError(f"unknown command {cmd!r}")

    def pin(self, core: int) -> dict:
        """Move every thread of this process to ``core`` (a prestarted worker imported
        torch on another core while the previous pair was measuring)."""
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), {core})
            except ProcessLookupError:  # a thread that just ended
                pass
        return {"type": "pinned", "affinity": sorted(os.sched_getaffinity(0))}

    def setup(self, case: dict) -> dict:
        from teperf.worker.backends import get_backend
        from teperf.worker.runner import make_step

        torch = self.torch
        case_id = case["id"]
        backend = get_backend(case["backend"])
        reason = backend.recipe_status(case["recipe"], self.device)
        if reason:
            return {"type": "error", "case_id": case_id, "error": reason, "skipped": True}
        t0 = time.perf_counter()
        torch.manual_seed(1234)  # same data on both sides
        built = backend.build(case, self.device)
        step, mode_info = make_step(built, case["mode"])
        if case["mode"] == "compile":  # make_step reset dynamo: the cases set up before lost their
            self.dynamo_epoch += 1  # compiled code (TE's torch.compile'd fusions in eager cases too)
        self.warmed_at[case_id] = self.dynamo_epoch
        self.warmups[case_id] = int(case["warmup"])
        for _ in range(int(case["warmup"])):
            step()
        if self.cuda:
            torch.cuda.synchronize()
        info = dict(built.info)
        info.update(mode_info)
        info["setup_s"] = round(time.perf_counter() - t0, 3)
        self.cases[case_id] = (step, built, info)
        if built.global_state is not None:
            self.saved_state[case_id] = dict(built.global_state)
        return {"type": "ready", "case_id": case_id, "info": info}

    def ready(self, case_id: int):
        """The case's step, with its own global state back and its compiled code current:
        whatever other cases did in this worker since must not reach the timed loop."""
        step, built, _info = self.cases[case_id]
        if case_id in self.saved_state:
            built.global_state.clear()
            built.global_state.update(self.saved_state[case_id])
        if self.warmed_at.get(case_id, self.dynamo_epoch) != self.dynamo_epoch:
            for _ in range(max(2, self.warmups.get(case_id, 0))):  # recompiles here, untimed
                step()
            if self.cuda:
                self.torch.cuda.synchronize()
            self.warmed_at[case_id] = self.dynamo_epoch
        return step

    def trial(self, case_id: int, iters: int) -> dict:
        from teperf.worker.clocks import time_loop

        step = self.ready(case_id)
        dynamo = "torch._dynamo" in sys.modules  # loaded by a compile case or TE's compiled fusions
        if dynamo:
            from teperf.worker.runner import dynamo_graphs

            graphs = dynamo_graphs()
        clocks = time_loop(step, iters, self.cuda)
        if dynamo:  # a compile inside the timed loop would swamp the host time
            clocks["compiles"] = dynamo_graphs() - graphs
        return {"type": "trial", "case_id": case_id, **clocks}

    def close(self):
        self.cases.clear()


def _driver_version() -> str:
    # Read from the kernel module's file to avoid a dependency on pynvml.
    with open("/proc/driver/nvidia/version") as f:
        first = f.readline()
    for token in first.split():
        if token[0].isdigit() and "." in token:
            return token
    return first.strip()
