"""The option groups the measuring commands share, as typed values the library takes whole.

``SideOptions``: how git sides are made (compare, bisect, nightly): what ``teperf.sides.git.plan_sides``
and bisect's ``GitSideFactory`` hold. ``MeasureOptions``: what is measured and where it goes (run,
compare, bisect, nightly): the resolved Config (with --counters and --sweep applied), the bundle
directory, the output format and the verdicts that fail the run. commands/_common.py makes both from
the click options; a Python caller makes them directly.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

from teperf.config import Config
from teperf.errors import TeperfError


@dataclasses.dataclass(frozen=True)
class SideOptions:
    repo: str = "."
    strategy: str = "auto"
    package: str | None = None  # None: found in the repo (gitrepo.detect_package)
    package_dir: str | None = None
    layout: Any = None  # a --layout TOML file or a PackageLayout; None: built in for the package
    build_command: tuple[str, ...] | None = None  # --strategy build's command, split like a shell would
    jobs: int | None = None
    cache_dir: str | None = None
    allow_dirty: bool | None = None
    python: str | None = None  # the interpreter that runs the workers; None: this one
    cuda_archs: str | None = None  # CUDA archs compiled sides are built for; None: the local GPUs'
    # not a flag: what the config's factories import (Config.factory_package), for a repo of several modules
    package_hint: str | None = None

    def git_flags_given(self) -> list[str]:
        """The flags given that only make sides from git refs (all but --python): for a refusal when the
        sides are directories or interpreters, which would ignore them."""
        return [
            "--" + f.name.replace("_", "-")
            for f in dataclasses.fields(self)
            if f.name not in ("python", "package_hint") and getattr(self, f.name) != f.default
        ]

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def __post_init__(self):  # checked once, when the options are taken (bisect used to check per commit)
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
