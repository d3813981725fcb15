"""teperf nightly --backfill A..B: the nights a history would have had, measured now, one nightly per
selected commit paired with the previous one. Commits in the store already are skipped (so a second
run resumes); ``--budget`` is the whole backfill's."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional, Sequence

from teperf import api
from teperf.errors import TeperfError
from teperf.history.store import HistoryStore
from teperf.sides.gitrepo import repo_root, resolve, run_git


@dataclasses.dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    tags: tuple = ()

    @property
    def name(self) -> str:
        return f"{self.sha[:10]}" + (f" ({', '.join(self.tags)})" if self.tags else "")


def select(commits: Sequence[Commit], *, tags: bool = False, every: Optional[int] = None) -> list[Commit]:
    """The commits to measure, oldest first: all or the tagged ones, every N-th, and A and B always."""
    if every is not None and every < 1:
        raise TeperfError(f"--every {every}", "give a positive number of commits, e.g. --every 10")
    if not commits:
        return []
    pool = [c for c in commits if c.tags] if tags else list(commits)
    picked = pool[:: every or 1]
    wanted = {c.sha for c in picked} | {commits[0].sha, commits[-1].sha}
    return [c for c in commits if c.sha in wanted]


def list_commits(root: str, spec: str, *, tags: bool = False) -> list[Commit]:
    """A and the commits of A..B, oldest first: the first-parent line, or (--tags) every commit, since a
    release may be tagged off the first-parent line."""
    if ".." not in spec or spec.count("..") != 1 or "..." in spec:
        raise TeperfError(
            f"--backfill {spec!r} is not a range", "write it as A..B, e.g. --backfill v1.0..v2.0"
        )
    a, b = spec.split("..")
    if not a.strip() or not b.strip():
        fix = "name both ends, e.g. --backfill v1.0..v2.0 or --backfill v1.0..HEAD"
        raise TeperfError(f"--backfill {spec!r} leaves out {'A' if not a.strip() else 'B'}", fix)
    a_sha, b_sha = resolve(root, a, what="--backfill's A"), resolve(root, b, what="--backfill's B")
    walk = ["--topo-order"] if tags else ["--first-parent"]
    out = run_git(root, "log", "--reverse", *walk, "--format=%H%x00%s", f"{a_sha}..{b_sha}")
    if not out and a_sha != b_sha:  # B is A's ancestor (reversed), or on a branch of its own that A has
        fix = f"give A older than B, e.g. --backfill {b}..{a}"
        raise TeperfError(f"--backfill {spec}: {b} ({b_sha[:10]}) adds no commit to {a} ({a_sha[:10]})", fix)
    out = run_git(root, "log", "-1", "--format=%H%x00%s", a_sha) + ("\n" + out if out else "")
    tagged: dict[str, list[str]] = {}
    refs = run_git(
        root, "for-each-ref", "refs/tags", "--format=%(objectname) %(*objectname) %(refname:short)"
    )
    for line in refs.splitlines():
        obj, peeled, name = line.split(" ", 2)
        tagged.setdefault(peeled or obj, []).append(name)
    lines = (line.partition("\0") for line in out.splitlines())
    return [Commit(sha, subject, tuple(tagged.get(sha, ()))) for sha, _, subject in lines]


def eta(seconds: Sequence[float], left: int) -> str:
    """'about 12 min left' from the nights measured so far (their mean), '' before the first."""
    if not seconds or left <= 0:
        return ""
    s = sum(seconds) / len(seconds) * left
    return f"about {s / 60:.0f} min left" if s >= 90 else f"about {s:.0f} s left"


@dataclasses.dataclass
class BackfillResult:
    selected: list
    measured: list = dataclasses.field(default_factory=list)  # shas measured by this run
    skipped: list = dataclasses.field(default_factory=list)  # shas already in the store
    failed: list = dataclasses.field(default_factory=list)  # shas whose sides could not be made
    unchanged: list = dataclasses.field(default_factory=list)  # shas whose package is the previous one's
    stopped: Optional[str] = None  # why it ended before the last commit (budget)

    def describe(self) -> str:
        done = self.measured + self.skipped + self.failed + self.unchanged
        left = len(self.selected) - len(done)
        text = f"backfill: {len(self.measured)} measured, {len(self.skipped)} already in the store"
        text += f", {len(self.unchanged)} with the package unchanged (not measured)" if self.unchanged else ""
        text += f", {len(self.failed)} could not be measured (tried again next time)" if self.failed else ""
        return text + (f", {left} left ({self.stopped}): run it again to go on" if left else "")


def backfill(
    config,
    sides,
    measure,
    *,
    spec: str,
    ref: str,
    history: Optional[str],
    tags: bool = False,
    every: Optional[int] = None,
    log: Callable[[str], None] = print,
    command: Optional[list] = None,
    clock: Callable[[], float] = time.monotonic,
) -> BackfillResult:
    """Measure the selected commits of ``spec`` one night each, into ``history``; see the module."""
    root = str(repo_root(sides.repo))
    chosen = select(list_commits(root, spec, tags=tags), tags=tags, every=every)
    result = BackfillResult(selected=[c.sha for c in chosen])
    budget, start, took = config.schedule.budget_s, clock(), []
    within = f", budget {budget:.0f} s" if budget else ""
    log(f"backfill: {len(chosen)} commit(s) of {spec} on {ref}{within}")
    for i, commit in enumerate(chosen):
        head = f"backfill [{i + 1}/{len(chosen)}] {commit.name} {commit.subject[:50]!r}"
        left_s = None if budget is None else budget - (clock() - start)
        if left_s is not None and left_s <= 0:
            result.stopped = "the budget is spent"
            break
        have = set(HistoryStore(history).read()["sha"].dropna()) if i else set()
        measured_before = [c.sha for c in chosen[:i] if c.sha in have]
        plan = api.plan_nightly(
            config, sides, ref=ref, history=history, at=commit.sha, base_among=measured_before[-1:] or None
        )
        if plan.choice.skip:
            result.skipped.append(commit.sha)
            log(f"{head}: in the store already, skipped")
            continue
        night_config = config
        if left_s is not None:
            schedule = dataclasses.replace(config.schedule, budget_s=max(left_s, 1.0))
            night_config = dataclasses.replace(config, schedule=schedule)
        t0 = clock()
        try:
            night = api.nightly(
                plan, dataclasses.replace(measure, config=night_config), sides, command=command
            )
        except TeperfError as exc:  # a commit that cannot be made runnable: the others still can
            result.failed.append(commit.sha)
            log(f"{head}: not measured: {exc.one_line()}")
            continue
        if night.unchanged:  # its code is the previous commit's: no night of its own
            result.unchanged.append(commit.sha)
            log(f"{head}: not measured: {night.unchanged}")
            continue
        took.append(clock() - t0)
        result.measured.append(commit.sha)
        to_go, spec_ = len(chosen) - i - 1, plan.choice.spec
        base = spec_.split("..")[0][:10] if ".." in spec_ else "its first parent"  # "SHA": SHA^1..SHA
        log(
            f"{head}: measured in {took[-1]:.0f} s against {base}; "
            f"{to_go} to go" + (f", {eta(took, to_go)}" if to_go else "")
        )
    return result
