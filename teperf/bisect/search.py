"""The binary search itself, apart from what a probe measures (unit-tested with fake judges).

Commits are indexed 0..n along the first-parent history: 0 is GOOD, n is BAD.
``judge(i)`` says whether commit i is "good" (like GOOD), "bad" (like BAD),
"skip" (cannot be measured: try a neighbour, as ``git bisect skip`` does) or
"undecided" (measured, but the measurement cannot tell: stop with the bracket
found so far).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

VERDICTS = ("good", "bad", "skip", "undecided")


@dataclasses.dataclass
class Bracket:
    good: int  # the last index known good
    bad: int  # the first index known bad
    status: str  # found (bad = good + 1) | skipped (every commit between is unmeasurable) | undecided
    probed: list[int]

    @property
    def found(self) -> bool:
        return self.status == "found"


def expected_probes(n_commits: int) -> int:
    """Probes to narrow n first-parent commits (GOOD excluded, BAD included) to one, none skipped."""
    return math.ceil(math.log2(n_commits)) if n_commits > 1 else 0


def next_index(good: int, bad: int, skipped: set[int]) -> int | None:
    """The middle of (good, bad), or the measurable index nearest to it (lower first); None if none is left."""
    middle = (good + bad) // 2
    left = [i for i in range(good + 1, bad) if i not in skipped]
    return min(left, key=lambda i: (abs(i - middle), i)) if left else None


def search(n: int, judge: Callable[[int], str]) -> Bracket:
    good, bad = 0, n
    skipped: set[int] = set()
    probed: list[int] = []
    while bad - good > 1:
        i = next_index(good, bad, skipped)
        if i is None:
            return Bracket(good, bad, "skipped", probed)
        probed.append(i)
        verdict = judge(i)
        if verdict not in VERDICTS:
            raise ValueError(f"judge returned {verdict!r}")
        if verdict == "good":
            good = i
        elif verdict == "bad":
            bad = i
        elif verdict == "skip":
            skipped.add(i)
        else:
            return Bracket(good, bad, "undecided", probed)
    return Bracket(good, bad, "found", probed)
