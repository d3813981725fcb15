"""``teperf bisect GOOD..BAD --cell MODULE/RECIPE``: the library side.

1. Counters at GOOD and BAD (one worker run each). If a counter differs, a
   binary search on exact equality with GOOD's values, one worker run per
   probe (teperf.engine.probe).
2. The culprit against its parent through the normal engine (api.compare,
   the configured schedule, counters on): its interval and verdict confirm
   that it carries the change.
3. No counter differs: GOOD..BAD is compared in time first (direction and
   size of the change); then each probe is compared against GOOD and sits on
   the bad side when its interval lies beyond half of GOOD..BAD's delta, on
   the good side when it lies short of it. An interval across that line is
   measured again with twice the pairs while ``budget_s`` lasts, else the
   search stops with the bracket found so far.

A probe whose commit cannot be made runnable, or whose worker fails, is
skipped (``git bisect skip``). Everything goes into a bundle of kind
"bisect": meta.json (range, cell, plan, result) and one "probe" record per
probe in records.jsonl; each timing compare is a nested bundle under
``compares/``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from teperf import __version__
from teperf.api import Interrupted
from teperf.bisect import search as bsearch
from teperf.bisect import sides as git
from teperf.bisect.sides import TIER_SECONDS, ProbeSkipped, SideFactory
from teperf.bundle import Bundle, now_iso
from teperf.config import Config
from teperf.errors import TeperfError
from teperf.explain import counters_diff
from teperf.log import Log, stderr_logger
from teperf.plan import Case, expand
from teperf.records import ProbeRecord

WORKER_SECONDS = {"cpu": 4.0, "cuda": 40.0}  # start, import, set up, count: for the plan's estimate
STEP_US = {"cpu": 500.0, "cuda": 600.0}  # a guess at one fwd+bwd step, for the plan's estimate


@dataclasses.dataclass(frozen=True)
class Range:
    repo: Path
    good: git.Commit
    bad: git.Commit
    commits: list  # first-parent commits after GOOD up to BAD, oldest first (Commit)

    def at(self, index: int) -> git.Commit:
        """0 is GOOD, len(commits) is BAD."""
        return self.good if index == 0 else self.commits[index - 1]


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
        raise TeperfError(
            f"{parsed.base} ({good[:10]}) is not an ancestor of {parsed.head} ({bad[:10]})",
            "give GOOD..BAD with GOOD older than BAD on its history (swap them?)",
        ) from None
    shas = git.run_git(root, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}").split()
    if not shas:
        raise TeperfError(f"{spec}: no commits between GOOD and BAD", "give a BAD that comes after GOOD")
    if git.run_git(root, "rev-parse", f"{shas[0]}^1") != good:
        raise TeperfError(
            f"{parsed.base} ({good[:10]}) is not on the first-parent history of {parsed.head}",
            "give a GOOD on BAD's main line (e.g. the merge-base: git merge-base GOOD BAD)",
        )
    commits = [git.commit_info(root, sha, sha[:10]) for sha in shas]
    bad_commit = dataclasses.replace(commits[-1], ref=parsed.head)
    return Range(root, git.commit_info(root, good, parsed.base), bad_commit, commits)


def find_cell(config: Config, cell: str) -> Case:
    from teperf.explain import find_case

    cases = expand(config)
    wanted = find_case({"cases": [c.to_meta() for c in cases]}, cell, where="the config")
    case = next(c for c in cases if c.id == wanted["id"])
    if case.skip:
        raise TeperfError(f"cell {cell} cannot run: {case.skip}", "pick another --cell or --shape")
    return dataclasses.replace(case, id=0)


def commit_meta(commit: git.Commit) -> dict:
    return {"sha": commit.sha, "short_sha": commit.short_sha, "subject": commit.subject, "date": commit.date}


def compare_seconds(config: Config) -> float:
    s = config.schedule
    steps = s.processes * s.rounds * s.trials * s.iters * 2 + s.processes * 2 * s.warmup * 2
    return steps * STEP_US.get(config.device, 500.0) / 1e6 + s.processes * 1.0 + WORKER_SECONDS[config.device]


COMPILED_TIERS = ("extension", "build")


def distinct_builds(rng: Range, factory: SideFactory) -> int:
    """How many different builds the range holds: commits whose compiled inputs equal their parent's share
    one (the extension and build caches are keyed by those inputs), so only a compiled change starts a new one."""
    builds = 1  # GOOD's
    previous = rng.good.sha
    for commit in rng.commits:
        builds += factory.tier(previous, commit.sha) in COMPILED_TIERS
        previous = commit.sha
    return builds


def tier_seconds(factory: SideFactory, tier: str) -> tuple[float, str]:
    """(seconds to make one side of ``tier``, what the figure rests on). A compiled tier goes by this
    package's slowest cached build when there is one: TE's figures say nothing of another package."""
    guess = TIER_SECONDS.get(tier, 600.0)
    if tier not in COMPILED_TIERS:
        return guess, ""
    from teperf.sides import cachedir

    package = getattr(factory, "package", None)
    kind = "ext" if tier == "extension" else "builds"
    what = "extension build" if tier == "extension" else "build"
    times = [
        float(e.meta["seconds"])
        for e in cachedir.entries(getattr(factory, "cache_dir", None), kinds=(kind,), sizes=False)
        if e.complete and e.meta.get("package") == package and isinstance(e.meta.get("seconds"), (int, float))
    ]
    if times:
        return max(times), f"each {what} about {max(times):.0f} s, the slowest cached {package} one"
    if package in (None, "transformer_engine"):
        return guess, f"each {what} about {guess:.0f} s, TE's on the H200"
    return guess, f"each {what} guessed at {guess:.0f} s: no {package} build cached to go by"


def make_plan(rng: Range, factory: SideFactory, config: Config) -> dict:
    tiers: dict[str, int] = {}
    for commit in rng.commits:
        tier = factory.tier(rng.good.sha, commit.sha)
        tiers[tier] = tiers.get(tier, 0) + 1
    n = len(rng.commits)
    probes = bsearch.expected_probes(n)
    worst = max(tiers, key=lambda t: TIER_SECONDS.get(t, 600.0))
    side_s, cost_basis = tier_seconds(factory, worst)
    # GOOD, BAD and each probe need a side; a compiled one is built once per distinct set of inputs
    sides = 2 + probes
    builds = min(sides, distinct_builds(rng, factory)) if worst in COMPILED_TIERS else sides
    making_s = builds * side_s
    confirm_s = compare_seconds(config)
    return {
        "commits": n,
        "expected_probes": probes,
        "tiers": tiers,
        "builds": builds,
        "counters_s": round(making_s + sides * WORKER_SECONDS[config.device] + confirm_s),
        "timing_s": round(making_s + (1 + probes) * confirm_s + confirm_s),
        "cost_basis": cost_basis,
    }


def plan_lines(rng: Range, case: Case, plan: dict) -> list[str]:
    tiers = ", ".join(f"{k} {v}" for k, v in sorted(plan["tiers"].items()))
    return [
        f"{rng.good.short_sha}..{rng.bad.short_sha}: {plan['commits']} first-parent commits; cell {case.key}",
        f"expected probes: {plan['expected_probes']} (ceil(log2 {plan['commits']})), plus GOOD and BAD; "
        f"tier per commit: {tiers}"
        + (
            f"; {plan['builds']} builds at most (commits with the same compiled inputs share one)"
            if any(t in COMPILED_TIERS for t in plan["tiers"])
            else ""
        ),
        f"expected time: about {plan['counters_s']} s if a counter moved (one worker run per probe, then one "
        f"confirming compare), about {plan['timing_s']} s if only time moved (one compare per probe)"
        + (f"; {plan['cost_basis']}" if plan.get("cost_basis") else ""),
    ]


class Bisector:
    """One bisect run: its range, cell, side factory and bundle."""

    def __init__(
        self,
        config: Config,
        rng: Range,
        case: Case,
        factory: SideFactory,
        bundle: Bundle,
        *,
        budget_s: float,
        confirm: bool,
        log: Log,
    ):
        self.config = config
        self.rng = rng
        self.case = case
        self.factory = factory
        self.bundle = bundle
        self.budget_s = budget_s
        self.confirm_wanted = confirm
        self.log = log
        self.timing_s = 0.0  # seconds spent in timing compares (what --budget bounds)
        self.clock = time.perf_counter
        self.n_probes = 0
        self.counters: dict[int, dict] = {}  # index -> counters

    # -- probes ---------------------------------------------------------------

    def _record(self, index: int, what: str, result: str, seconds: float, **fields) -> None:
        commit = self.rng.at(index)
        role = "GOOD" if index == 0 else ("BAD" if index == len(self.rng.commits) else "probe")
        self.bundle.append(
            ProbeRecord.from_dict(
                {
                    "kind": "probe",
                    "index": index,
                    "role": role,
                    **commit_meta(commit),
                    "what": what,
                    "result": result,
                    "seconds": round(seconds, 2),
                    **fields,
                }
            )
        )
        detail = fields.get("detail", "")
        self.log(
            f"{role} {commit.short_sha} {what}: {result}{' - ' + detail if detail else ''} ({seconds:.1f} s)"
        )

    def side(self, index: int):
        """The side of commit ``index`` (paired with GOOD, so its tier covers both)."""
        good = self.rng.good.sha
        sha = self.rng.at(index).sha
        return self.factory.sides(good, sha)[0 if index == 0 else 1]

    def count(self, index: int, what: str = "counters") -> Optional[dict]:
        """Counters of commit ``index``, or None (the probe is recorded as skipped)."""
        from teperf.engine.probe import ProbeFailed, count_case

        t0 = time.perf_counter()
        commit = self.rng.at(index)
        try:
            side = self.side(index)
            log_path = self.bundle.path / "workers" / f"{index:03d}-{commit.short_sha}-{what[-5:]}.log"
            counters = count_case(self.config, side, self.case, log_path)
        except (ProbeSkipped, ProbeFailed) as exc:
            self._record(
                index,
                what,
                "skip",
                time.perf_counter() - t0,
                detail=exc.reason,
                tier=self.factory.tier(self.rng.good.sha, commit.sha),
            )
            return None
        self.counters[index] = counters
        self._record(
            index,
            what,
            "measured",
            time.perf_counter() - t0,
            counters=counters,
            tier=side.description.get("strategy"),
        )
        return counters

    def compare(self, base: int, head: int, config: Config, bounded: bool = True):
        """A paired compare of two commits of the range through the normal engine -> (row, bundle path).
        ``bounded``: part of the timing search, which --budget bounds as a whole."""
        from teperf import api

        base_side, head_side = self.factory.sides(self.rng.at(base).sha, self.rng.at(head).sha)
        # --budget bounds the whole search; an adaptive (--precision) compare gets what is left of it
        if bounded:
            left = None
            if config.schedule.precision_pct is not None:
                left = max(self.budget_s - self.timing_s, 1.0)
            config = dataclasses.replace(config, schedule=dataclasses.replace(config.schedule, budget_s=left))
        path = api.compare(
            config,
            base_side,
            head_side,
            results_dir=str(self.bundle.path / "compares"),
            cases=[self.case],
            command=["teperf", "bisect", "(probe)"],
        )
        row = dict(api.summarize(path).rows[0], tier=head_side.description.get("strategy"))
        return row, path

    # -- counters -------------------------------------------------------------

    def endpoint_counters(self) -> tuple[dict, dict]:
        n = len(self.rng.commits)
        got = []
        for index in (0, n):
            counters = self.count(index)
            if counters is None:
                record = list(self.bundle.records())[-1]
                which = "GOOD" if index == 0 else "BAD"
                raise TeperfError(
                    f"{which} {self.rng.at(index).short_sha} cannot be measured: {record.detail}",
                    f"pick a {which} that builds and imports (worker logs: {self.bundle.path}/workers)",
                )
            got.append(counters)
        return got[0], got[1]

    def recount(self, good: dict, bad: dict) -> tuple[dict, dict]:
        """GOOD and BAD once more, each in a fresh worker, before searching on a difference. Code that
        torch.compile builds makes a few more Python calls in the process that compiled it than when it
        came from inductor's cache (teperf/worker/counters.py): the first run of an endpoint may have been
        that one. The second count is the one every later probe of the same code will see."""
        n = len(self.rng.commits)
        again = []
        for index, first in ((0, good), (n, bad)):
            second = self.count(index, "counters again")
            if second is None:
                second = first
            elif second != first:
                which = "GOOD" if index == 0 else "BAD"
                self.log(
                    f"{which}'s counters changed in a second fresh worker "
                    f"({counters_diff(first, second)}; a cold compile cache in the first?): "
                    "the search uses the second"
                )
            again.append(second)
        return again[0], again[1]

    def counter_search(self, good: dict, bad: dict, keys: list[str]) -> bsearch.Bracket:
        def judge(index: int) -> str:
            self.n_probes += 1
            counters = self.count(index)
            if counters is None:
                return "skip"
            return "bad" if any(counters.get(k) != good.get(k) for k in keys) else "good"

        return bsearch.search(len(self.rng.commits), judge)

    # -- timing ---------------------------------------------------------------

    def timed(self, base: int, head: int, decide: Callable[[dict], str]) -> tuple[Optional[dict], str]:
        """Compare base..head and ``decide`` from its row; measure again with twice the pairs while that
        is "undecided" and the budget allows. Returns (the last row, the decision), or (None, why not)."""
        config = self.config
        while True:
            t0 = self.clock()
            try:
                row, path = self.compare(base, head, config)
            except ProbeSkipped as exc:
                return None, exc.reason
            except TeperfError as exc:
                return None, exc.one_line()
            seconds = self.clock() - t0
            self.timing_s += seconds
            if row.get("status") not in ("ok", "partial"):
                return None, f"{row.get('status')}: {row.get('error')}"
            decided = decide(row)
            self._record(
                head,
                "timing",
                decided,
                seconds,
                detail=_row_text(row),
                tier=row.get("tier"),
                bundle=str(Path(path).relative_to(self.bundle.path)),
                delta_pct=row.get("delta_pct"),
                ci_low_pct=row.get("ci_low_pct"),
                ci_high_pct=row.get("ci_high_pct"),
                verdict=row.get("verdict"),
                processes=config.schedule.processes,
            )
            if decided != "undecided":
                return row, decided
            if self.timing_s + 2 * seconds > self.budget_s:
                self.log(
                    f"{self.rng.at(head).short_sha}: undecided, and measuring twice the pairs "
                    f"(~{2 * seconds:.0f} s) would exceed --budget {self.budget_s:g} s"
                )
                return row, "undecided"
            sched = config.schedule
            more = dataclasses.replace(sched, processes=sched.processes * 2)
            config = dataclasses.replace(config, schedule=more)

    def timing_search(self) -> tuple[Optional[bsearch.Bracket], dict]:
        n = len(self.rng.commits)
        endpoint: dict = {}

        def whole(row: dict) -> str:  # "bad": there is a change to find; "good": there is none
            return {"slower": "bad", "faster": "bad", "no change": "good"}.get(
                row.get("verdict"), "undecided"
            )

        row, decided = self.timed(0, n, whole)
        if row is None:
            raise TeperfError(
                f"GOOD..BAD could not be compared: {decided}",
                f"see the worker logs under {self.bundle.path}/compares",
            )
        endpoint = {
            "verdict": row.get("verdict"),
            "delta_pct": row.get("delta_pct"),
            "ci_low_pct": row.get("ci_low_pct"),
            "ci_high_pct": row.get("ci_high_pct"),
        }
        endpoint["decided"] = decided
        if decided != "bad":
            return None, endpoint
        threshold = row["delta_pct"] / 2
        sign = 1 if row["delta_pct"] > 0 else -1
        endpoint["threshold_pct"] = threshold

        def side_of(row: dict) -> str:
            low, high = row.get("ci_low_pct"), row.get("ci_high_pct")
            if low is None or high is None:
                return "undecided"
            low, high = sorted((sign * low, sign * high))
            if low > sign * threshold:
                return "bad"
            if high < sign * threshold:
                return "good"
            return "undecided"

        def judge(index: int) -> str:
            self.n_probes += 1
            row, decided = self.timed(0, index, side_of)
            if row is None:
                self._record(index, "timing", "skip", 0.0, detail=decided)
                return "skip"
            return decided

        return bsearch.search(n, judge), endpoint

    # -- the whole run ----------------------------------------------------------

    def run(self) -> dict:
        good, bad = self.endpoint_counters()
        keys = moved(good, bad)
        if keys:
            good, bad = self.recount(good, bad)
            keys = moved(good, bad)
        result: dict = {"counters_good": good, "counters_bad": bad, "moved_counters": keys}
        if keys:
            result["mode"] = "counters"
            self.log(
                f"counters differ between GOOD and BAD ({', '.join(keys)}): binary search on exact equality"
            )
            bracket = self.counter_search(good, bad, keys)
        else:
            result["mode"] = "timing"
            self.log("no counter differs between GOOD and BAD: binary search on paired timings")
            bracket, result["endpoint"] = self.timing_search()
            if bracket is None:  # GOOD..BAD is no change, or could not be told from it within the budget
                good_end = result["endpoint"]["decided"] == "good"
                result.update(status="no change" if good_end else "inconclusive", probes=self.n_probes)
                return result
        result.update(
            status=bracket.status, probes=self.n_probes, good_index=bracket.good, bad_index=bracket.bad
        )
        result["last_good"] = commit_meta(self.rng.at(bracket.good))
        if not bracket.found:
            between = range(bracket.good + 1, bracket.bad + 1)
            result["candidates"] = [commit_meta(self.rng.at(i)) for i in between]
            return result
        culprit = self.rng.at(bracket.bad)
        result["culprit"] = commit_meta(culprit)
        result["parent"] = commit_meta(self.rng.at(bracket.bad - 1))
        if bracket.bad in self.counters:
            result["counters_after"] = self.counters[bracket.bad]
        if bracket.bad - 1 in self.counters:
            result["counters_before"] = self.counters[bracket.bad - 1]
        if self.confirm_wanted:
            result["confirm"] = self.confirm(bracket.bad)
            counters = (result["confirm"].get("row") or {}).get("counters") or {}
            if counters.get("base") and counters.get("head"):
                result["counters_before"], result["counters_after"] = counters["base"], counters["head"]
        return result

    def confirm(self, index: int) -> dict:
        t0 = time.perf_counter()
        config = dataclasses.replace(self.config, counters=True)
        try:
            row, path = self.compare(index - 1, index, config, bounded=False)
        except TeperfError as exc:  # ProbeSkipped is not one: the culprit's sides were made before
            self._record(index, "confirm", "failed", time.perf_counter() - t0, detail=exc.one_line())
            return {"error": exc.one_line()}
        except ProbeSkipped as exc:
            self._record(index, "confirm", "failed", time.perf_counter() - t0, detail=exc.reason)
            return {"error": exc.reason}
        rel = str(Path(path).relative_to(self.bundle.path))
        self._record(
            index,
            "confirm",
            row.get("verdict") or str(row.get("status")),
            time.perf_counter() - t0,
            detail=_row_text(row),
            bundle=rel,
            tier=row.get("tier"),
        )
        keep = (
            "status",
            "verdict",
            "base_us",
            "head_us",
            "delta_us",
            "delta_pct",
            "ci_low_pct",
            "ci_high_pct",
            "ci_low_us",
            "ci_high_us",
            "counters",
            "error",
        )
        return {"bundle": rel, "row": {k: row.get(k) for k in keep}}


def moved(good: dict, bad: dict) -> list[str]:
    """The counters measured at GOOD that BAD has different."""
    return [k for k in sorted(set(good) | set(bad)) if good.get(k) is not None and good.get(k) != bad.get(k)]


def _row_text(row: dict) -> str:
    if row.get("delta_pct") is None:
        return str(row.get("error") or row.get("status"))
    ci = ""
    if row.get("ci_low_pct") is not None:
        ci = f" CI [{row['ci_low_pct']:+.1f}, {row['ci_high_pct']:+.1f}%]"
    return f"{row['delta_pct']:+.1f}%{ci} {row.get('verdict')}"


def bisect(
    config: Config,
    spec: str,
    cell: str,
    *,
    factory: SideFactory | None = None,
    repo: str = ".",
    results_dir: str | None = None,
    budget_s: float = 1800.0,
    confirm: bool = True,
    command: list[str] | None = None,
    log: Log | None = None,
    plan_only: bool = False,
) -> Path | None:
    """Find the commit of GOOD..BAD that moved ``cell``; return the bundle (kind "bisect").

    ``factory`` makes the sides (default: git sides of ``repo`` with ``--strategy auto``).
    ``plan_only``: say the plan and stop (None: no bundle).
    """
    log = log or stderr_logger("teperf bisect")
    case = find_cell(config, cell)  # bad input first, before git or workers
    rng = resolve_range(spec, repo)
    factory = factory or git.GitSideFactory(repo=str(rng.repo))
    plan = make_plan(rng, factory, config)
    for line in plan_lines(rng, case, plan):
        log(line)
    if plan_only:
        return None
    meta = {
        "teperf_version": __version__,
        "kind": "bisect",
        "command": command if command is not None else sys.argv,
        "started_at": now_iso(),
        "finished_at": None,
        "spec": spec,
        "repo": str(rng.repo),
        "cell": case.key,
        "case": case.to_meta(),
        "config": config.to_dict(),
        "good": commit_meta(rng.good),
        "bad": commit_meta(rng.bad),
        "commits": [commit_meta(c) for c in rng.commits],
        "plan": plan,
        "budget_s": budget_s,
    }
    bundle = Bundle.create(results_dir, "bisect", meta)
    started = time.perf_counter()
    status, error, result = "complete", None, {}
    try:
        result = Bisector(
            config, rng, case, factory, bundle, budget_s=budget_s, confirm=confirm, log=log
        ).run()
    except (KeyboardInterrupt, Interrupted):
        status = "interrupted"
        raise Interrupted(bundle.path) from None
    except TeperfError as exc:
        status, error = "failed", exc.one_line()
        raise
    except Exception as exc:
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        bundle.close()
        result["wall_s"] = round(time.perf_counter() - started, 1)
        bundle.update_meta(status=status, error=error, finished_at=now_iso(), result=result)
    return bundle.path
