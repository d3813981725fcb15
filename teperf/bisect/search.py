"""The search itself, apart from what a probe measures. Commits are indexed 0 (GOOD) .. n (BAD); every
change point is found, but two changes that cancel inside one segment leave its ends equal."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional, Union

Verdict = Union[tuple, str]  # (left differs, right differs) | "skip" | "undecided"


@dataclasses.dataclass
class Segment:
    good: int  # the last index like the segment's lower end
    bad: int  # the first index unlike it
    status: str  # found (bad = good + 1) | skipped (none between is measurable) | undecided | small

    @property
    def found(self) -> bool:
        return self.status == "found"


@dataclasses.dataclass
class Changes:
    segments: list[Segment]  # in index order: the change points found, and the segments left unnarrowed
    probed: list[int]


def expected_probes(n_commits: int) -> int:
    """Probes to narrow one change among n commits (GOOD excluded, BAD included), none skipped."""
    return math.ceil(math.log2(n_commits)) if n_commits > 1 else 0


def next_index(good: int, bad: int, skipped: set[int]) -> int | None:
    """The middle of (good, bad), or the measurable index nearest it (lower first); None if none is left."""
    middle = (good + bad) // 2
    left = [i for i in range(good + 1, bad) if i not in skipped]
    return min(left, key=lambda i: (abs(i - middle), i)) if left else None


def find_changes(
    n: int, probe: Callable[[int, int, int], Verdict], small: Optional[Callable[[int, int], bool]] = None
) -> Changes:
    """Every change point of 0..n, whose ends are taken to differ; lower segments first. ``probe(i, lo,
    hi)`` -> (i differs from lo, i differs from hi) | "skip" (i cannot be measured: a neighbour is tried,
    as ``git bisect skip`` does) | "undecided" (the segment stops there, its commits left as candidates).
    ``small(lo, hi)``: a segment other than 0..n whose ends differ too little to narrow (status small)."""
    pending = [(0, n)]  # segments whose ends differ, the next to search last
    skipped: set[int] = set()
    probed: list[int] = []
    segments: list[Segment] = []
    while pending:
        lo, hi = pending.pop()
        if hi - lo == 1:
            segments.append(Segment(lo, hi, "found"))
            continue
        if small is not None and (lo, hi) != (0, n) and small(lo, hi):
            segments.append(Segment(lo, hi, "small"))
            continue
        i = next_index(lo, hi, skipped)
        if i is None:
            segments.append(Segment(lo, hi, "skipped"))
            continue
        probed.append(i)
        verdict = probe(i, lo, hi)
        if verdict == "skip":
            skipped.add(i)
            pending.append((lo, hi))
            continue
        if verdict != "undecided" and not (isinstance(verdict, tuple) and len(verdict) == 2):
            raise ValueError(f"probe returned {verdict!r}")
        # or like both ends, which differ from each other: cannot tell where
        if verdict == "undecided" or not any(verdict):
            segments.append(Segment(lo, hi, "undecided"))
            continue
        left, right = verdict
        if right:
            pending.append((i, hi))
        if left:
            pending.append((lo, i))
    segments.sort(key=lambda s: s.good)
    return Changes(segments, probed)


@dataclasses.dataclass
class Part:
    """A part lo..hi of the range and its paired compare in time (``row``, lo as base, hi as head)."""

    lo: int
    hi: int
    row: Optional[Any]  # timing.PartRow
    # step (one commit moved) | quiet | identical (both ends import the same code: no change in the package)
    # | undecided | skipped | budget | moved (to split) | again
    status: str


def find_steps(
    n: int, whole: dict, compare: Callable[[int, int], tuple], worth: Optional[Callable] = None
) -> list[Part]:
    """The steps in time of 0..n (``whole`` moved) and every part not split, in order. The part that moved
    most is split first, so that a --budget that runs out leaves the smallest parts. A half "again" waits
    until no part that moved is left (one commit first, then the widest) and while ``worth(deferred,
    settled)`` keeps it; the rest are left undecided, their rows marked ``left: "answer"``."""
    pending = [Part(0, n, whole, "moved")]
    deferred: list[Part] = []
    skipped: set[int] = set()
    parts: list[Part] = []

    def place(part: Part) -> None:  # moved: split next; again: waits (deferred); else: settled
        {"moved": pending, "again": deferred}.get(part.status, parts).append(part)

    while pending or deferred:
        if not pending:
            open_ = worth(deferred, parts) if worth else deferred
            if not open_:
                parts += [
                    Part(p.lo, p.hi, p.row and dataclasses.replace(p.row, left="answer"), "undecided")
                    for p in deferred
                ]
                break
            part = max(open_, key=lambda p: (p.hi - p.lo == 1, _reach(p), -p.lo))
            deferred.remove(part)
            row, state = compare(part.lo, part.hi)
            state = "undecided" if state in ("skip", "budget") else state
            place(Part(part.lo, part.hi, row or part.row, state))
            continue
        part = max(pending, key=lambda p: (_reach(p), -p.lo))
        pending.remove(part)
        if part.hi - part.lo == 1:
            parts.append(dataclasses.replace(part, status="step"))
            continue
        m = next_index(part.lo, part.hi, skipped)
        if m is None:
            parts.append(dataclasses.replace(part, status="skipped"))
            continue
        halves = []
        for lo, hi in ((part.lo, m), (m, part.hi)):
            row, state = compare(lo, hi)
            if state == "skip":
                break
            halves.append(Part(lo, hi, row, state))
        if len(halves) < 2:
            skipped.add(m)
            pending.append(part)
            continue
        if all(h.status == "budget" for h in halves):
            parts.append(dataclasses.replace(part, status="budget"))
            continue
        for half in halves:
            place(half)
    parts.sort(key=lambda p: p.lo)
    return parts


def _reach(part: Part) -> float:
    """How far from zero a part's delta (moved) or interval (again) reaches."""
    row = part.row
    if row is None:
        return 0.0
    if part.status == "moved":
        return abs(row.delta_us or 0.0)
    return max(abs(row.ci_low_us or 0.0), abs(row.ci_high_us or 0.0))
