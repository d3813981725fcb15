"""Backends build a case's module and inputs inside the worker.

A backend is a module with:
  MODULES: tuple[str, ...]                       built-in module names
  RECIPES: tuple[str, ...]                       recipe names it knows
  def recipe_status(recipe, device) -> str|None   None if usable here, else why it is skipped
  def build(case: dict, device: str) -> Built     see teperf.worker.runner.Built
The coordinator validates names against the static copy in teperf.plan,
so the worker is only asked for cases that exist.
"""

from __future__ import annotations

import importlib

BACKENDS = {"torch": "torch_ref", "te": "te", "factory": "factory"}  # backend name -> its module here


def get_backend(name: str):
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}")
    return importlib.import_module(f"teperf.worker.backends.{BACKENDS[name]}")
