"""GOOD..BAD's counter change attributed to its change points: a share is the delta over GOOD..BAD's on the
first of ``keys`` (the others break ties). Commits that moved the other way are listed apart."""

from __future__ import annotations

from typing import Callable, Optional

from teperf.bisect.search import Segment
from teperf.explain.diff import COUNTER_LABELS


def ordered(keys) -> list[str]:
    """Counter keys, Python calls first, then as explain lists them (unknown ones last, by name)."""
    rank = {key: i for i, (key, *_) in enumerate(COUNTER_LABELS)}
    return sorted(keys, key=lambda k: (rank.get(k, len(rank)), k))


def _deltas(before: dict, after: dict) -> dict:
    out = {}
    for key in ordered(set(before) | set(after)):
        b, a = before.get(key), after.get(key)
        if b is not None and a is not None and a != b:
            out[key] = round(a - b, 4) if isinstance(a - b, float) else a - b
    return out


def span(lo: int, hi: int, commit: Callable[[int], dict]) -> dict:
    """A part or segment lo..hi left unnarrowed: its ends, its parent (lo) and the commits it holds."""
    candidates = [commit(i) for i in range(lo + 1, hi + 1)]
    return {"good_index": lo, "bad_index": hi, "parent": commit(lo), "candidates": candidates}


def _direction(deltas: dict, totals: dict, keys: list[str]) -> int:
    """+1: moved as GOOD..BAD did (on the first key it moved), -1: the other way, 0: on none of ``keys``."""
    for key in keys:
        delta, total = deltas.get(key) or 0, totals.get(key) or 0
        if delta and total:
            return 1 if (delta > 0) == (total > 0) else -1
    return 0


def attribute(
    segments: list[Segment],
    values: Callable[[int], Optional[dict]],
    keys: list[str],
    commit: Callable[[int], dict],
    last: int,
) -> dict:
    """{"culprits", "opposite", "unresolved", "totals"}: one entry per segment, with its deltas and shares.
    ``values(i)``: what was measured at index i (counters, or {"time_pct": ...}); ``keys``: those that moved
    between GOOD and BAD, by precedence; ``commit(i)``: the commit's meta; ``last``: BAD's index."""
    good, bad = values(0) or {}, values(last) or {}
    totals = {k: bad[k] - good[k] for k in keys if good.get(k) is not None and bad.get(k) is not None}
    culprits, opposite, unresolved = [], [], []
    for seg in segments:
        before, after = values(seg.good) or {}, values(seg.bad) or {}
        deltas = _deltas(before, after)
        shares = {k: round(deltas.get(k, 0) / totals[k], 4) for k in keys if totals.get(k)}
        entry: dict = {
            "deltas": deltas,
            "share": shares.get(keys[0], 0.0) if keys else 0.0,
            "shares": shares,
            "parent": commit(seg.good),
            "index": seg.bad,
        }
        if not seg.found:
            entry.update(
                status=seg.status,
                **span(seg.good, seg.bad, commit),
                direction=_direction(deltas, totals, keys),
            )
            unresolved.append(entry)
            continue
        entry = {**commit(seg.bad), **entry, "before": before, "after": after}
        (opposite if _direction(deltas, totals, keys) < 0 else culprits).append(entry)

    def rank(entry: dict) -> tuple:
        return tuple(entry["shares"].get(k, 0.0) for k in keys)

    culprits.sort(key=rank, reverse=True)
    opposite.sort(key=rank)  # the most negative share first
    return {"culprits": culprits, "opposite": opposite, "unresolved": unresolved, "totals": totals}
