"""The option groups the measuring commands share, as typed values the library takes whole.

``SideOptions``: how git sides are made (compare, bisect, nightly): what ``teperf.sides.git.plan_sides``
and bisect's ``GitSideFactory`` are given. ``MeasureOptions``: what is measured and where it goes (run,
compare, bisect, nightly): the resolved Config (with --counters and --sweep applied), the bundle
directory, the output format and the verdicts that fail the run. commands/_common.py makes both from
the click options; a Python caller makes them directly.
"""

from __future__ import annotations

import dataclasses
import sys

from teperf.config import Config


@dataclasses.dataclass(frozen=True)
class SideOptions:
    repo: str = "."
    strategy: str = "auto"
    package: str | None = None  # None: found in the repo (gitrepo.detect_package)
    package_dir: str | None = None
    layout: str | None = None  # a --layout TOML file; None: built in for the package
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

    def plan(self, spec: str, log=None):
        """teperf.sides.git.plan_sides of ``spec`` with these options: say the plan, build nothing."""
        from teperf.sides.git import plan_sides

        return plan_sides(
            spec,
            repo=self.repo,
            strategy=self.strategy,
            package=self.package,
            package_dir=self.package_dir,
            layout=self.layout,
            python=self.interpreter,
            cache_dir=self.cache_dir,
            build_command=list(self.build_command) if self.build_command else None,
            jobs=self.jobs,
            allow_dirty=self.allow_dirty,
            log=log,
            cuda_archs=self.cuda_archs,
            package_hint=self.package_hint,
        )

    def factory(self):
        """bisect's maker of a side per commit, with these options."""
        from teperf.bisect.sides import GitSideFactory

        return GitSideFactory(
            repo=self.repo,
            package=self.package,
            package_dir=self.package_dir,
            strategy=self.strategy,
            python=self.interpreter,
            cache_dir=self.cache_dir,
            jobs=self.jobs,
            layout=self.layout,
            build_command=list(self.build_command) if self.build_command else None,
            cuda_archs=self.cuda_archs,
            package_hint=self.package_hint,
        )


@dataclasses.dataclass(frozen=True)
class MeasureOptions:
    config: Config
    results_dir: str | None = None  # None: ./results
    fmt: str = "table"
    sweep: object | None = None  # teperf.sweep.Sweep, already applied to ``config``
    fail_on: frozenset[str] = frozenset()  # verdicts that fail the run (--fail-on)
