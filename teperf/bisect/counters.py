"""Bisect's counter search: exact per-step counters at GOOD, BAD and every probe, each probe a worker
forked from a server that imported torch (teperf.engine.probe.ForkedProbes), about a second each."""

from __future__ import annotations

import dataclasses
import time
from typing import Optional

from teperf.bisect import search as bsearch
from teperf.bisect.plan import Probe
from teperf.bisect.sides import ProbeSkipped
from teperf.errors import TeperfError
from teperf.explain.render import counters_diff

# before a search in time, a segment whose ends differ by under this share of GOOD's count on every counter
# is not narrowed (x-transformers 1.16.8..2.16.1: 88 probes, not 184; 37 change points of 1-6 of 423 calls)
MIN_CHANGE = 0.01


def moved(good: dict, bad: dict) -> list[str]:
    """The counters measured at GOOD that BAD has different."""
    return [k for k in sorted(set(good) | set(bad)) if good.get(k) is not None and good.get(k) != bad.get(k)]


@dataclasses.dataclass(eq=False)
class CounterSearch:
    """The counter half of a bisect (teperf.bisect.runner), over its Probe."""

    probe: Probe
    probes: object = None  # ForkedProbes, or None: each counter probe a fresh interpreter
    counters: dict = dataclasses.field(default_factory=dict)  # index -> counters
    count_seconds: list = dataclasses.field(default_factory=list)  # each counter probe's, sides included

    def count(self, index: int, what: str = "counters") -> Optional[dict]:
        """Counters of commit ``index`` (cached: counters repeat exactly), or None (recorded as skipped)."""
        from teperf.engine.probe import ProbeFailed, count_case

        if index in self.counters and what == "counters":
            return self.counters[index]
        t0 = time.perf_counter()
        probe, commit = self.probe, self.probe.rng.at(index)
        try:
            side = probe.sides(0, index)[0 if index == 0 else 1]  # paired with GOOD: its tier covers both
            log_path = (
                probe.bundle.path / "workers" / f"{index:03d}-{commit.short_sha}-{what.replace(' ', '-')}.log"
            )
            if self.probes is not None:
                counters = self.probes.count(side, probe.case, log_path)
            else:
                counters = count_case(probe.config, side, probe.case, log_path)
        except (ProbeSkipped, ProbeFailed) as exc:
            tier = probe.factory.tier(probe.rng.good.sha, commit.sha)
            probe.record(index, what, "skip", time.perf_counter() - t0, detail=exc.reason, tier=tier)
            return None
        seconds = time.perf_counter() - t0
        self.counters[index] = counters
        self.count_seconds.append(seconds)
        probe.record(
            index, what, "measured", seconds, counters=counters, tier=side.description.get("strategy")
        )
        return counters

    def endpoint_counters(self) -> tuple[dict, dict]:
        n = len(self.probe.rng.commits)
        for index in (0, n):
            if self.count(index) is None:
                record = list(self.probe.bundle.records())[-1]
                which = "GOOD" if index == 0 else "BAD"
                raise TeperfError(
                    f"{which} {self.probe.rng.at(index).short_sha} cannot be measured: {record.detail}",
                    f"pick a {which} that builds and imports (worker logs: {self.probe.bundle.path}/workers)",
                )
        return self.counters[0], self.counters[n]

    def recount(self, good: dict, bad: dict) -> tuple[dict, dict]:
        """GOOD and BAD once more, each in a new worker: code torch.compile built makes a few more Python
        calls in the process that compiled it than later probes, loading it from inductor's cache, see."""
        n = len(self.probe.rng.commits)
        for index, first in ((0, good), (n, bad)):
            second = self.count(index, "counters again")
            if second is not None and second != first:
                which = "GOOD" if index == 0 else "BAD"
                self.probe.log(
                    f"{which}'s counters changed in a second worker "
                    f"({counters_diff(first, second)}; a cold compile cache in the first?): "
                    "the search uses the second"
                )
        return self.counters[0], self.counters[n]

    def counter_search(self, keys: list[str], min_change: float = 0.0) -> bsearch.Changes:
        """Every change point of ``keys`` between GOOD and BAD (counted already): exact equality; segments
        whose ends differ by under ``min_change`` of GOOD's count on every key are left (status small)."""

        def differ(a: dict, b: dict) -> bool:
            return any(a.get(k) != b.get(k) for k in keys)

        def small(lo: int, hi: int) -> bool:
            a, b, good = self.counters[lo], self.counters[hi], self.counters[0]
            return all(abs((b.get(k) or 0) - (a.get(k) or 0)) < min_change * abs(good[k]) for k in keys)

        def probe(index: int, lo: int, hi: int):
            self.probe.n_probes += 1
            counters = self.count(index)
            if counters is None:
                return "skip"
            return differ(self.counters[lo], counters), differ(counters, self.counters[hi])

        return bsearch.find_changes(len(self.probe.rng.commits), probe, small if min_change else None)

    def counters_beside(self, index: int) -> Optional[dict]:
        """What the counters did at index against its parent ({}: none moved; None: not countable)."""
        before, after = self.count(index - 1), self.count(index)
        if before is None or after is None:
            return None
        return {k: after[k] - before[k] for k in moved(before, after)}
