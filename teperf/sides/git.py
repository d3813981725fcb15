"""Sides from git refs (``teperf compare base..head``): resolve the two commits, classify what differs,
pick a strategy and say up front which, why and at what cost, then have it make each commit runnable."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import time
from pathlib import PurePosixPath
from typing import Sequence

from teperf.errors import TeperfError
from teperf.log import Log, stderr_log
from teperf.options import SideOptions
from teperf.sides import Side, auto, changes, gitrepo, strategies
from teperf.sides.gitrepo import Commit, Resolved
from teperf.sides.layout import PackageLayout, layout_for
from teperf.sides.strategy import Strategy
from teperf.sides.target import Pair, Plan, Target


def check_dirty(resolved: Resolved, package_dir: str, allow_dirty: bool) -> dict[str, bool]:
    """Which sides are a checked-out HEAD with uncommitted package edits (teperf measures commits)."""
    # a bare repository has nothing checked out
    current = gitrepo.commit_sha(resolved.repo, "HEAD") if gitrepo.has_work_tree(resolved.repo) else None
    hits = [name for name, c in (("base", resolved.base), ("head", resolved.head)) if c.sha == current]
    dirty = gitrepo.dirty_files(resolved.repo) if hits else []
    changed = [p for p in dirty if changes.inside(p, package_dir) or changes.is_build_input(p, package_dir)]
    if changed and not allow_dirty:
        raise TeperfError(
            f"{' and '.join(hits)} is the checked-out HEAD ({current[:10]}) but the work tree has uncommitted"
            f" changes ({changes.shorten(changed)}) that teperf would not measure (it measures commits)",
            "commit them (or git stash) and run again, or pass --allow-dirty to measure the committed HEAD",
        )
    return {name: bool(changed) and name in hits for name in ("base", "head")}


@dataclasses.dataclass(frozen=True)
class SidesPlan:
    """Everything decided before any side is made: said up front, then carried out by ``make``."""

    spec: str
    target: Target
    pair: Pair
    strategy: Strategy
    plan: Plan
    refused: dict
    dirty: dict

    def lines(self) -> list[str]:
        b, h = self.pair.base, self.pair.head
        counts = self.pair.changes.counts()
        n = sum(counts.values())
        what = ", ".join(f"{counts[kind]} {kind}" for kind in changes.KINDS if kind in counts) or "nothing"
        subject = h.subject[:50] + ("..." if len(h.subject) > 50 else "")
        return [
            f'base {b.short_sha} ({b.ref}) .. head {h.short_sha} ({h.ref}) "{subject}": '
            f"{n} file{' differs' if n == 1 else 's differ'} ({what})",
            *self.plan.lines(),
        ]

    def to_dict(self) -> dict:
        """What was decided, as data (``compare --plan --format json``): the commits, the differing paths and
        their kinds, the strategy, why, and each side's expected cost."""

        def commit(c: Commit) -> dict:
            return {
                "sha": c.sha,
                "short_sha": c.short_sha,
                "ref": c.ref,
                "subject": c.subject,
                "date": c.date,
            }

        return {
            "spec": self.spec,
            "repo": str(self.target.repo),
            "package": self.target.package,
            "package_dir": self.target.package_dir,
            "base": commit(self.pair.base),
            "head": commit(self.pair.head),
            "changes": self.pair.changes.counts(),
            "paths": [{"path": c.path, "kind": c.kind} for c in self.pair.changes.items],
            "strategy": self.plan.strategy,
            "reason": self.plan.reason,
            "costs": dict(self.plan.costs),
            "notes": list(self.plan.notes),
            "refused": dict(self.refused),
            "lines": self.lines(),
        }

    def unchanged(self, imported: Sequence[str] = ()) -> str | None:
        """A line when base and head are two commits whose package did not change (a docs-only pull
        request): every differing path is neither its code nor a build input, nor in a top-level package
        or module named in ``imported`` (what the config's factories import); else None. The same commit
        twice is a deliberate A/A: None."""
        b, h = self.pair.base, self.pair.head
        items = self.pair.changes.items
        if b.sha == h.sha or any(c.kind != changes.OTHER for c in items):
            return None
        tops = {PurePosixPath(c.path).parts[0].removesuffix(".py") for c in items}
        if tops & set(imported):
            return None
        return (
            f"the package {self.target.package} did not change between base {b.short_sha} and head "
            f"{h.short_sha}: {changes.plural(len(items), 'file')} differ, none of them its code or a build "
            f"input ({changes.shorten(c.path for c in items)}); nothing to measure"
        )

    def description(self, label: str, commit: Commit) -> dict:
        t = self.target
        out = {
            "source": "git",
            "repo": str(t.repo),
            "spec": self.spec,
            "package": t.package,
            "package_dir": t.package_dir,
            "layout": t.layout.name,
            "sha": commit.sha,
            "short_sha": commit.short_sha,
            "subject": commit.subject,
            "commit_date": commit.date,
            "ref": commit.ref,
            "dirty": self.dirty[label],
            "strategy": self.strategy.name,
            "tier_reason": self.plan.reason,
            "changes": self.pair.changes.counts(),
            "cost": dict(self.plan.costs).get(label),
        }
        if self.plan.notes:
            out["notes"] = list(self.plan.notes)
        if self.refused:  # auto tried these first: {strategy: why not}
            out["refused"] = dict(self.refused)
        return out

    def make(self) -> tuple[Side, Side]:
        started = time.perf_counter()
        jobs = [(label, commit, self.description(label, commit)) for label, commit in self.pair.sides()]
        if self.strategy.parallel:
            with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="teperf-side") as pool:
                made = list(pool.map(lambda job: self.strategy.prepare(*job), jobs))
        else:
            made = [self.strategy.prepare(*job) for job in jobs]
        self.target.log(f"sides ready in {time.perf_counter() - started:.1f}s ({self.strategy.name})")
        return made[0], made[1]


def find_package(root, shas: Sequence[str], where: str, opts: SideOptions, log: Log) -> tuple[str, str]:
    """(package, package_dir) under test: --package, else found in ``shas[0]`` (said through ``log``);
    --package-dir as given, else the package's directory in the first of ``shas`` (``where`` names them)."""
    package, pkg_dir = opts.package, opts.package_dir
    if not package:
        package, how = gitrepo.detect_package(root, shas[0], opts.package_hint)
        log(f"package under test: {package} ({how}; --package NAME names another)")
    if pkg_dir is None:
        pkg_dir = next(filter(None, (gitrepo.find_package_dir(root, sha, package) for sha in shas)), None)
        if pkg_dir is None:
            raise TeperfError(
                f"no {package}/__init__.py or {package}.py in {where} of {root}",
                "pass --package NAME (the import name under test) and --package-dir PATH if it lives "
                "elsewhere",
            )
    return package, pkg_dir


def plan_sides(spec: str, opts: SideOptions | None = None, *, log: Log | None = None, **given) -> SidesPlan:
    """Resolve ``spec`` (``A..B``, ``A...B``: base = merge-base, or one ref: base = its first parent),
    classify the diff, choose the strategy and say so through ``log`` (default stderr); build nothing.
    ``opts`` (``given`` fields replace its own) says how; ``allow_dirty`` None reads $TEPERF_ALLOW_DIRTY."""
    opts = dataclasses.replace(opts or SideOptions(), **given)
    strategy, layout, allow_dirty = opts.strategy, opts.layout, opts.allow_dirty
    log = log or stderr_log
    if strategy != "auto":
        cls = strategies.get(strategy)  # unknown names fail here, before git is asked anything
        if strategy == "env":
            cls(None, None).plan()
    if allow_dirty is None:
        allow_dirty = os.environ.get("TEPERF_ALLOW_DIRTY", "") not in ("", "0")
    resolved = gitrepo.resolve_spec(spec, opts.repo)
    root = resolved.repo
    shas = (resolved.head.sha, resolved.base.sha)
    where = f"{resolved.head.short_sha} or {resolved.base.short_sha}"
    package, pkg_dir = find_package(root, shas, where, opts, log)
    if opts.package_dir is not None:  # --package-dir DIR that holds the code as one module file, DIR/NAME.py
        asked = pkg_dir.strip("/")
        if asked not in ("", ".") and all(gitrepo.show_file(root, sha, asked) is None for sha in shas):
            raise TeperfError(
                f"--package-dir {pkg_dir} is in neither {resolved.head.short_sha} nor "
                f"{resolved.base.short_sha} of {root}",
                "pass the package's directory relative to the repo root (git ls-tree -d HEAD), or leave "
                "--package-dir out to find it",
            )
        pkg_dir = gitrepo.module_in_dir(root, shas, package, pkg_dir) or pkg_dir
    pkg_dir = pkg_dir.strip("/") or "."
    if not isinstance(layout, PackageLayout):
        layout = layout_for(package, layout)
    dirty = check_dirty(resolved, pkg_dir, allow_dirty)
    target = Target(
        repo=root,
        package=package,
        package_dir=pkg_dir,
        layout=layout,
        opts=opts,
        log=log,
    )
    pair = Pair(
        base=resolved.base,
        head=resolved.head,
        changes=changes.diff(root, resolved.base.sha, resolved.head.sha, layout, pkg_dir),
    )
    if strategy == "auto":
        chosen, plan, refused = auto.choose(target, pair)
    else:
        chosen = strategies.get(strategy)(target, pair)
        plan, refused = chosen.plan(), {}
    planned = SidesPlan(
        spec=spec, target=target, pair=pair, strategy=chosen, plan=plan, refused=refused, dirty=dirty
    )
    for line in planned.lines():
        log(line)
    return planned
