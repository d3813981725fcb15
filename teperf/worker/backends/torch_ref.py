"""Plain-PyTorch reference modules shaped like TE's: the CPU default, no GPU or TE needed."""

from __future__ import annotations

from teperf.worker.runner import Built, dtype_autocast

MODULES = ("Linear", "LayerNormLinear", "LayerNormMLP")
TAKES_KWARGS = False  # built from the shape alone; config kwargs would be ignored, so they are refused
RECIPES = ("fp32", "bf16")
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def recipe_status(recipe: str, device: str):
    if recipe not in RECIPES:
        return f"recipe {recipe} is not known to the torch backend (use fp32 or bf16)"
    return None


def make_module(name: str, hidden: int):
    import torch.nn as nn

    if name == "Linear":
        return nn.Linear(hidden, hidden)
    if name == "LayerNormLinear":
        return nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 3 * hidden))
    if name == "LayerNormMLP":
        return nn.Sequential(
            nn.LayerNorm(hidden), nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden)
        )
    raise ValueError(f"unknown torch module {name!r}")


def build(case: dict, device: str) -> Built:
    import torch

    dtype = getattr(torch, DTYPES[case["recipe"]])
    module = make_module(case["module"], case["shape"][-1]).to(device=device, dtype=dtype)
    x = torch.randn(*case["shape"], device=device, dtype=dtype, requires_grad=True)
    info = {"params": sum(p.numel() for p in module.parameters())}
    alt, alt_what = dtype_autocast(device)
    return Built(module=module, inputs=(x,), info=info, alt_autocast=alt, alt_autocast_what=alt_what)
