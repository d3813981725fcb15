"""Each case's rough memory bound, checked before any worker starts (not minutes later by OOM SIGKILL)."""

from __future__ import annotations

import contextlib
import math
import subprocess

from teperf.errors import TeperfError
from teperf.worker import te_dsv3
from teperf.worker.te_compat import ATTENTION, HEAD_DIM, STACK_KWARG

# Weights per module as a multiple of hidden^2 (LayerNormMLP: h->4h->h); unknown names: a transformer layer's.
PARAMS_PER_HIDDEN_SQ = {
    "Linear": 1,
    "LayerNormLinear": 3,
    "LayerNormMLP": 8,
    "LayerNorm": 0,
    "RMSNorm": 0,
    "GroupedLinear": 4,
    "MultiheadAttention": 4,
    "TransformerLayer": 12,
}
BYTES_PER_PARAM = 16  # weight + grad + fp32/quantized copies, generously
MAX_ELEMENTS = 2**40  # a shape of more elements fits no machine, whatever its inputs= makes of it
ACTIVATIONS_PER_TOKEN_HIDDEN = 32  # inputs, 4h intermediates and their grads, generously


def estimate_bytes(case) -> int | None:
    """Upper bound for a built-in module's case; None for a factory's (its module is unknown here)."""
    if case.factory or not case.shape:
        return None
    from teperf.worker.runner import module_class

    module = module_class(case.module)  # GroupedLinear[num_gemms=4] (a --sweep value) is a GroupedLinear
    hidden = case.shape[-1]
    tokens = math.prod(case.shape[:-1]) or 1
    elem = 4 if case.dtype == "float32" else 2
    if module in te_dsv3.MODELS:  # its own sizes (experts, latents); top-k copies of each token's rows
        if te_dsv3.check_kwargs(case.kwargs):
            return None  # the plan skips the case with that reason
        s = te_dsv3.sizes(hidden, case.kwargs)
        activations = ACTIVATIONS_PER_TOKEN_HIDDEN * tokens * hidden * elem * s["topk"] * s["layers"]
        return te_dsv3.param_count(module, hidden, case.kwargs) * BYTES_PER_PARAM + activations
    params = PARAMS_PER_HIDDEN_SQ.get(module, 12) * hidden * hidden + 4 * hidden
    total = params * BYTES_PER_PARAM + ACTIVATIONS_PER_TOKEN_HIDDEN * tokens * hidden * elem
    if module in ATTENTION and len(case.shape) >= 3:  # [seq, batch, hidden]: seq x seq scores per head
        seq, batch = case.shape[0], math.prod(case.shape[1:-1])
        total += 3 * seq * seq * batch * max(1, hidden // HEAD_DIM) * elem
    layers = (case.kwargs or {}).get(STACK_KWARG, 1)  # TransformerLayer stacked N deep
    stacked = isinstance(layers, int) and not isinstance(layers, bool) and layers > 1
    return total * layers if stacked else total


def available_bytes(device: str) -> int | None:
    """Free memory where the tensors live (MemAvailable, or the first GPU's); None: unknown."""
    if device.startswith("cuda"):
        try:  # no nvidia-smi: FileNotFoundError
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
            return int(out.split()[0]) * 2**20
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def input_bytes(case) -> int | None:
    """A lower bound for a factory's case (input, output, grads); None when its ``inputs`` reads the shape."""
    if not case.factory or case.inputs or not case.shape:
        return None
    return 4 * math.prod(case.shape) * (4 if case.dtype == "float32" else 2)


def check_memory(cases, device: str, available: int | None = None) -> None:
    """Refuse, with one line, the first case whose bound exceeds the free memory."""
    available = available_bytes(device) if available is None else available
    if available is None:
        return
    for case in cases:
        if case.skip:
            continue
        need, about = estimate_bytes(case), "about"
        if need is None:
            need, about = input_bytes(case), "at least"
        if need is None and case.shape and math.prod(case.shape) > MAX_ELEMENTS:  # an inputs= factory too
            need, about = math.prod(case.shape), "at least"
        if need is not None and need > available:
            raise TeperfError(
                f"{case.module} at shape {list(case.shape)} needs {about} {need / 2**30:.1f} GiB, but "
                f"{device} has {available / 2**30:.1f} GiB free",
                "use a smaller --shape",
            )
