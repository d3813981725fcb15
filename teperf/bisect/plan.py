"""Bisect's plan: the range (GOOD..BAD's first-parent commits), the cell, and what the search will cost;
the Probe both searches measure them through."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Callable

from teperf.bisect import search as bsearch
from teperf.bisect.progress import Progress
from teperf.bisect.sides import TE_PACKAGE, SideFactory, made_with, strategy_class, tier_seconds
from teperf.bundle import Bundle
from teperf.config import Config
from teperf.errors import TeperfError
from teperf.log import Log
from teperf.plan import Case, expand
from teperf.records import ProbeRecord
from teperf.sides import gitrepo as git

WORKER_SECONDS = {"cpu": 4.0, "cuda": 40.0}  # start, import, set up, count: for the plan's estimate
STEP_US = {"cpu": 500.0, "cuda": 600.0}  # a guess at one fwd+bwd step, for the plan's estimate
FORKED_PROBE_S = {"cpu": 1.5, "cuda": 3.0}  # a counter probe forked from a server that imported torch


@dataclasses.dataclass(frozen=True)
class Range:
    repo: Path
    good: git.Commit
    bad: git.Commit
    commits: list  # first-parent commits after GOOD up to BAD, oldest first (Commit)

    def at(self, index: int) -> git.Commit:
        """0 is GOOD, len(commits) is BAD."""
        return self.good if index == 0 else self.commits[index - 1]


def _is_ancestor(root, a: str, b: str) -> bool:
    try:
        git.run_git(root, "merge-base", "--is-ancestor", a, b)
    except git.GitFailed:
        return False
    return True


def resolve_range(spec: str, repo: str) -> Range:
    root = git.repo_root(repo)
    parsed = git.parse_spec(spec)
    if parsed.mode != "range" or not parsed.base or not parsed.head:
        raise TeperfError(
            f"bisect needs GOOD..BAD, got {spec!r}", "give two refs, e.g. teperf bisect v2.15..v2.16"
        )
    good = git.resolve(root, parsed.base, what="GOOD ref")
    bad = git.resolve(root, parsed.head, what="BAD ref")
    if good == bad:
        raise TeperfError(
            f"{spec}: GOOD and BAD are the same commit ({good[:10]}), the range is empty",
            "give a BAD that comes after GOOD",
        )
    try:
        git.run_git(root, "merge-base", "--is-ancestor", good, bad)
    except git.GitFailed:
        # "swap them" helps only where BAD is GOOD's ancestor; diverged refs need their merge base
        fix = (
            f"swap them: teperf bisect {parsed.head}..{parsed.base}"
            if _is_ancestor(root, bad, good)
            else f"they diverged: bisect from their merge base, teperf bisect $(git merge-base {parsed.base} "
            f"{parsed.head})..{parsed.head}"
        )
        raise TeperfError(
            f"{parsed.base} ({good[:10]}) is not an ancestor of {parsed.head} ({bad[:10]})", fix
        ) from None
    shas = git.run_git(root, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
    if git.run_git(root, "rev-parse", f"{shas[0]}^1") != good:
        raise TeperfError(
            f"{parsed.base} ({good[:10]}) is not on the first-parent history of {parsed.head}",
            "give a GOOD on BAD's main line (e.g. the merge-base: git merge-base GOOD BAD)",
        )
    commits = [git.commit_info(root, sha, sha[:10]) for sha in shas]
    bad_commit = dataclasses.replace(commits[-1], ref=parsed.head)
    return Range(root, git.commit_info(root, good, parsed.base), bad_commit, commits)


def find_cell(config: Config, cell: str) -> Case:
    from teperf.explain.capture import find_case

    cases = expand(config)
    wanted = find_case([c.to_meta() for c in cases], cell, where="the config")
    case = next(c for c in cases if c.id == wanted["id"])
    if case.skip:
        raise TeperfError(f"cell {cell} cannot run: {case.skip}", "pick another --cell or --shape")
    return dataclasses.replace(case, id=0)


def commit_meta(commit: git.Commit) -> dict:
    return {"sha": commit.sha, "short_sha": commit.short_sha, "subject": commit.subject, "date": commit.date}


@dataclasses.dataclass(eq=False)
class Probe:
    """What both searches (counters.py, timing.py) measure through: commits by index, 0 GOOD .. n BAD."""

    config: Config
    rng: Range
    case: Case
    factory: SideFactory
    bundle: Bundle
    progress: Progress
    log: Log
    clock: Callable[[], float] = time.perf_counter
    n_probes: int = 0  # counter probes and compares

    def sides(self, base: int, head: int) -> tuple:
        """The sides of commits ``base`` and ``head`` (ProbeSkipped where one cannot be made)."""
        return self.factory.sides(self.rng.at(base).sha, self.rng.at(head).sha)

    def commit(self, index: int) -> dict:
        return commit_meta(self.rng.at(index))

    def record(self, index: int, what: str, result: str, seconds: float, **fields) -> None:
        commit = self.rng.at(index)
        role = "GOOD" if index == 0 else ("BAD" if index == len(self.rng.commits) else "probe")
        raw = {"kind": "probe", "index": index, "role": role, **commit_meta(commit), "what": what}
        raw.update(result=result, seconds=round(seconds, 2))
        self.bundle.append(ProbeRecord.from_dict({**raw, **fields}))
        self.progress.probe(role, commit.short_sha, what, result, fields.get("detail", ""), seconds)


def distinct_builds(rng: Range, factory: SideFactory) -> int:
    """How many different builds the range holds (the caches are keyed by compiled inputs)."""
    shas = [rng.good.sha] + [commit.sha for commit in rng.commits]
    return 1 + sum(strategy_class(factory.tier(a, b)).compiled for a, b in pairwise(shas))  # 1: GOOD's


BASIS_TEXT = {
    "measured": "the slowest build of this package in the cache",
    "TE": "TE's builds on the H200",
    "default": "no build of this package measured yet; replaced by measured times after GOOD and BAD",
}


def make_plan(rng: Range, factory: SideFactory, config: Config) -> dict:
    tiers = Counter(factory.tier(rng.good.sha, commit.sha) for commit in rng.commits)
    shown = {made_with(factory, t): n for t, n in tiers.items()}  # said as made
    n = len(rng.commits)
    probes = bsearch.expected_probes(n)
    # (seconds, basis) of making one commit runnable in a tier; TE's for a factory without a figure
    seconds = getattr(factory, "seconds", None) or (
        lambda t: tier_seconds(TE_PACKAGE, t, cache_dir="/nonexistent")
    )
    per_tier = {tier: seconds(tier) for tier in tiers}
    worst = max(tiers, key=lambda t: per_tier[t][0])
    side_s, basis = per_tier[worst]
    is_compiled = strategy_class(worst).compiled
    # GOOD, BAD and each probe need a side; a compiled one is built once per distinct set of inputs
    sides = 2 + probes
    distinct = distinct_builds(rng, factory) if is_compiled else sides
    builds = min(sides, distinct)
    s = config.schedule
    steps = s.processes * s.rounds * s.trials * s.iters * 2 + s.processes * 2 * s.warmup * 2
    compare_s = steps * STEP_US.get(config.device, 500.0) / 1e6 + s.processes + WORKER_SECONDS[config.device]
    probe_s = FORKED_PROBE_S[config.device]
    # each further change point: its probes (and their builds, while new compiled inputs are left)
    further_builds = min(probes, max(distinct - builds, 0)) if is_compiled else probes
    return {
        "commits": n,
        "expected_probes": probes,
        "tiers": shown,
        "builds": builds,
        "side_s": round(side_s, 1),
        "seconds_basis": basis,
        # a fork server's start, then counters at GOOD and BAD (twice) and the probes of one change point
        "counters_s": round(builds * side_s + WORKER_SECONDS[config.device] + (sides + 2) * probe_s),
        "per_change_s": round(further_builds * side_s + probes * probe_s),
        # GOOD..BAD, then both halves of each part that moved, down to one commit
        "compare_s": round(compare_s),
        "timing_s": round((1 + 2 * probes) * compare_s),
    }


def plan_lines(rng: Range, case: Case, plan: dict) -> list[str]:
    tiers = ", ".join(f"{k} {v}" for k, v in sorted(plan["tiers"].items()))
    p = plan["expected_probes"]
    return [
        f"{rng.good.short_sha}..{rng.bad.short_sha}: {plan['commits']} first-parent commits; cell {case.key}",
        f"counters: {p} probes per change point (ceil(log2 {plan['commits']})), plus GOOD and BAD, about "
        f"{plan['counters_s']} s for one change point, +{plan['per_change_s']} s per further one; tier per "
        f"commit: {tiers}"
        + (
            f"; {plan['builds']} builds at most (commits with the same compiled inputs share one)"
            if any(strategy_class(t).compiled for t in plan["tiers"])
            else ""
        ),
        f"time: GOOD..BAD, then both halves of each part that moved, down to single commits: about "
        f"{plan['timing_s']} s per step in time ({2 * p} compares of ~{plan.get('compare_s', '?')} s); "
        f"{plan.get('side_s')} s to make a side ({BASIS_TEXT.get(plan.get('seconds_basis'), '?')})",
    ]
