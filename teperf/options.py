"""The measuring commands' shared options as typed values: ``SideOptions`` and ``MeasureOptions``."""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

from teperf.config import Config, Option
from teperf.errors import TeperfError


def _side(help: str, default: Any = None, **option):
    """A git-side option: a field with its flag (commands/_common.side_options fills in its help)."""
    return dataclasses.field(default=default, metadata={"option": Option(help, **option)})


@dataclasses.dataclass(frozen=True)
class SideOptions:
    repo: str = _side("Git repository the refs are in.", ".", metavar="DIR", show_default=True)
    strategy: str = _side(
        "How a git side is made runnable. {strategies}", "auto", parse="strategy", show_default=True
    )
    package: str | None = _side(  # None: found in the repo (gitrepo.detect_package)
        "Package or module under test (its import name; default: found in the repo: "
        "transformer_engine, pyproject's name, the one top-level package or module).",
        metavar="NAME",
    )
    package_dir: str | None = _side(
        "The package's directory inside the repo, or the one that holds a single module NAME.py "
        "(default: found by name).",
        metavar="PATH",
    )
    layout: Any = _side(  # a --layout TOML file or a PackageLayout; None: built in for the package
        "TOML file: which paths of the package are core, extension, version files (default: "
        "built in for transformer_engine; see teperf/sides/layout.py).",
        metavar="FILE",
    )
    build_command: tuple[str, ...] | None = _side(  # --strategy build's command, split like a shell would
        "Build command of --strategy build (default: pip install into a per-build prefix); "
        "placeholders: {placeholders}.",
        metavar="CMD",
    )
    jobs: int | None = _side(
        "Parallel compile jobs of extension and build strategies (default: the free cores).",
        type=int,
        metavar="N",
    )
    cache_dir: str | None = _side(
        "Where git trees, overlays and builds are cached (default: $TEPERF_CACHE or ~/.cache/teperf).",
        metavar="DIR",
    )
    allow_dirty: bool | None = _side(
        "Measure a checked-out side even with uncommitted changes in the package.", parse="flag"
    )
    python: str | None = _side(  # the interpreter that runs the workers; None: this one
        "Interpreter that runs the workers (default: this one).", metavar="EXE", parse="python"
    )
    cuda_archs: str | None = _side(  # None: the local GPUs'
        "CUDA archs compiled sides are built for, e.g. 90 or '80;90' (default: "
        "NVTE_CUDA_ARCHS, else the local GPUs' from nvidia-smi).",
        metavar="ARCHS",
    )
    # not a flag: what the config's factories import (Config.factory_package), for a repo of several modules
    package_hint: str | None = None

    def git_flags_given(self) -> list[str]:
        """The flags given that only git sides use (all but --python), to refuse them for other sides."""
        return [
            "--" + f.name.replace("_", "-")
            for f in dataclasses.fields(self)
            if f.name not in ("python", "package_hint") and getattr(self, f.name) != f.default
        ]

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def __post_init__(self):
        if self.cuda_archs is not None and not re.fullmatch(r"\d+[a-z]?(;\d+[a-z]?)*", self.cuda_archs):
            raise TeperfError(
                f"--cuda-archs {self.cuda_archs!r} is not a list of CUDA archs",
                "pass compute capabilities without the dot, ';'-separated: 90, '80;90' or 90a",
            )
        if self.jobs is not None and self.jobs < 1:
            raise TeperfError(
                f"--jobs {self.jobs}: must be at least 1", "pass --jobs N with N >= 1, or leave it out"
            )


@dataclasses.dataclass(frozen=True)
class MeasureOptions:
    config: Config
    results_dir: str | None = None  # None: ./results
    fmt: str = "table"
    sweep: object | None = None  # teperf.sweep.Sweep, already applied to ``config``
    fail_on: frozenset[str] = frozenset()  # verdicts that fail the run (--fail-on)
