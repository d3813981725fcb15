"""Backends build a case's module and inputs inside the worker: each is a module with MODULES (built-in
module names), RECIPES, ``recipe_status(recipe, device)`` (None if usable here, else why it is skipped),
optionally ``case_status(case, device)`` (the same for a module's parts: te's DSv3 models) and
``build(case, device) -> runner.Built``. The coordinator checks names against their static copies."""

from __future__ import annotations

import importlib

BACKENDS = {"torch": "torch_ref", "te": "te", "factory": "factory"}  # backend name -> its module here


def get_backend(name: str):
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}")
    return importlib.import_module(f"teperf.worker.backends.{BACKENDS[name]}")
