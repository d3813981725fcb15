"""A side is one thing that is measured: a label and how to start a worker for it. Every way of making a
side ends in a :class:`Side`; the engine knows nothing else about sides."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class Side:
    label: str  # "base", "head" or "run"
    python: str  # interpreter that runs the worker
    sys_path: tuple[str, ...] = ()  # put first on the worker's sys.path, in this order
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # extra environment
    description: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # provenance for metadata

    def to_meta(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "python": self.python,
            "sys_path": list(self.sys_path),
            "env": dict(self.env),
            **dict(self.description),
        }


def with_inherited_pythonpath(side: Side) -> Side:
    """``side`` with this process's PYTHONPATH (made absolute) in its environment: a factory may come from
    there, and recorded in the bundle, ``explain`` and ``report`` use the same path later."""
    if "PYTHONPATH" in side.env:
        return side
    entries = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not entries:
        return side
    return dataclasses.replace(side, env={**side.env, "PYTHONPATH": os.pathsep.join(entries)})
