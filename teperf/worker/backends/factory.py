"""Modules from the side's own code, ``factory = "pkg.mod:callable"`` (docs/usage.md, "Your own modules"):
imported in the worker after the side's directories lead sys.path, so base and head each import their
own ``pkg``; its input is a tensor of the cell's shape, or what ``inputs(shape, dtype, device)`` returns."""

from __future__ import annotations

from teperf.worker.backends.torch_ref import DTYPES, RECIPES
from teperf.worker.runner import Built, dtype_autocast, import_object

MODULES: tuple = ()


def recipe_status(recipe: str, device: str):
    if recipe not in RECIPES:
        return f"recipe {recipe} is not available for factory modules (use fp32 or bf16)"
    return None


def build(case: dict, device: str) -> Built:
    import torch

    factory = import_object(case["factory"])
    module = factory(**(case.get("kwargs") or {}))
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"factory {case['factory']} returned {type(module).__name__}, not an nn.Module")
    dtype = getattr(torch, DTYPES[case["recipe"]])
    module = module.to(device=device, dtype=dtype)
    if case.get("inputs"):
        made = import_object(case["inputs"])(tuple(case["shape"]), dtype, device)
        inputs = tuple(made) if isinstance(made, (tuple, list)) else (made,)
    else:
        inputs = (torch.randn(*case["shape"], device=device, dtype=dtype, requires_grad=True),)
    alt, alt_what = dtype_autocast(device)
    info = {"factory": case["factory"]}
    if case.get("inputs"):
        info["inputs"] = case["inputs"]
    return Built(module=module, inputs=inputs, info=info, alt_autocast=alt, alt_autocast_what=alt_what)
