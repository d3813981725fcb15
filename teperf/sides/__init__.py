"""A side is one thing that is measured: a label and how to start a worker for it.

Every way of making a side (plain paths and interpreters, git refs, overlays,
builds) ends in a :class:`Side`; the engine knows nothing else about sides.
"""

from __future__ import annotations

import dataclasses
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
