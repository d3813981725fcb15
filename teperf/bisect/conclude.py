"""A bisect's answer from what it measured. A step in time is confirmed, and carries a share of GOOD..BAD's
delta, when its own compare's verdict moved the way GOOD..BAD did."""

from __future__ import annotations

from typing import Callable, Optional

from teperf.bisect.search import Part


def _sign(x) -> int:
    return 1 if (x or 0) > 0 else (-1 if (x or 0) < 0 else 0)


def step_entry(part: Part, total_us: float, commit: Callable[[int], dict], counters: Optional[dict]) -> dict:
    row = part.row or {}
    delta, low, high = row.get("delta_us") or 0.0, row.get("ci_low_us"), row.get("ci_high_us")
    entry = {
        **commit(part.hi),
        "index": part.hi,
        "parent": commit(part.lo),
        "delta_us": round(delta, 2),
        "delta_pct": row.get("delta_pct"),
        "verdict": row.get("verdict"),
        "row": row,
        "counters": counters,  # what the counters did at it ({}: none moved; None: not counted)
        "share": round(delta / total_us, 4) if total_us else 0.0,
    }
    if low is not None and high is not None and total_us:
        entry["share_ci"] = sorted((round(low / total_us, 4), round(high / total_us, 4)))
    return entry


def time_shares(parts: list[Part], endpoint: dict, commit, counters_beside) -> dict:
    """culprits (confirmed, the way GOOD..BAD moved, biggest first), opposite (confirmed the other way),
    unconfirmed (steps whose verdict is not decisive: no share), unresolved (parts that may hold a step
    not narrowed), rest (GOOD..BAD's delta the confirmed steps leave), sum check."""
    total = endpoint.get("delta_us") or 0.0
    direction = _sign(total)
    wanted = {1: "slower", -1: "faster"}
    culprits, opposite, unconfirmed, unresolved = [], [], [], []
    for part in parts:
        if part.status == "step":
            entry = step_entry(part, total, commit, counters_beside(part.hi))
            if entry["verdict"] == wanted.get(direction):
                culprits.append(entry)
            elif entry["verdict"] == wanted.get(-direction):
                opposite.append(entry)
            else:
                unconfirmed.append(entry)
        elif part.status in ("undecided", "skipped", "budget"):
            row = part.row or {}
            unresolved.append(
                {
                    "status": part.status,
                    "good_index": part.lo,
                    "bad_index": part.hi,
                    "parent": commit(part.lo),
                    "candidates": [commit(i) for i in range(part.lo + 1, part.hi + 1)],
                    "delta_us": row.get("delta_us"),
                    "row": row,
                    "direction": _sign(row.get("delta_us")) * direction if row else 1,
                }
            )
    culprits.sort(key=lambda e: -e["share"])
    opposite.sort(key=lambda e: e["share"])
    carried_us = sum(e["delta_us"] for e in culprits + opposite)
    low, high = endpoint.get("ci_low_us"), endpoint.get("ci_high_us")
    return {
        "culprits": culprits,
        "opposite_movers": opposite,
        "unconfirmed": unconfirmed,
        "unresolved": unresolved,
        "rest": {
            "delta_us": round(total - carried_us, 2),
            "share": round(1 - sum(e["share"] for e in culprits + opposite), 4) if total else 0.0,
        },
        # the confirmed steps' deltas against GOOD..BAD's measured interval: do the parts add up?
        "steps_us": round(carried_us, 2),
        "steps_within_interval": None if low is None else bool(low <= carried_us <= high),
    }


def conclude(result: dict) -> dict:
    """``explained`` (True, False, or None when there is nothing to explain) and ``answer``, one line."""
    result["explained"], result["answer"] = _answer(result)
    return result


def _answer(result: dict) -> tuple[Optional[bool], str]:
    status, end = result.get("status"), result.get("endpoint") or {}
    if status == "no change":
        moved = result.get("moved_counters")
        return None, "no change: GOOD..BAD is no change in time" + (
            f" (counters moved at {len(result.get('counter_changes') or [])} commit(s), listed, at no "
            "measurable cost)"
            if moved
            else " and no counter differs"
        )
    if status == "inconclusive":
        return False, "unexplained: whether GOOD..BAD changed in time could not be told within --budget"
    if result.get("mode") == "counters":
        return _counters_answer(result)
    culprits = result.get("culprits") or []
    what = f"GOOD..BAD's {end.get('delta_us', 0):+.1f} us ({end.get('delta_pct', 0):+.1f}%)"
    rest = result.get("rest") or {}
    left = result.get("unresolved") or []
    tail = f"; {rest.get('share', 0):.0%} unexplained ({rest.get('delta_us', 0):+.1f} us)"
    if result.get("opposite_movers"):
        tail += f"; {len(result['opposite_movers'])} moved the other way"
    if left:
        tail += f"; {len(left)} part(s) not narrowed to one commit ({left[0]['status']})"
    if culprits:
        named = ", ".join(f"{e['short_sha']} {e['share']:.0%}" for e in culprits[:3])
        share = sum(e["share"] for e in culprits)
        return True, f"explained: {len(culprits)} commit(s) carry {share:.0%} of {what}: {named}{tail}"
    why = "no step confirmed by its own compare"
    if result.get("unconfirmed"):
        why += f" ({len(result['unconfirmed'])} found, their verdicts not decisive)"
    return False, f"unexplained: {why} for {what}{tail}"


def _counters_answer(result: dict) -> tuple[bool, str]:
    """--no-confirm: the commits that moved the counters, shares of GOOD..BAD's counter change."""
    culprits, opposite = result.get("culprits") or [], result.get("opposite_movers") or []
    totals = result.get("totals") or {}
    key = next(iter(totals), None)
    what = f"GOOD..BAD's {totals[key]:+g} {key}" if key else "GOOD..BAD's counter change"
    skipped = [u for u in result.get("unresolved") or [] if u["status"] == "skipped" and u["direction"] > 0]
    against = (
        f"; {len(opposite)} moved the other way ({sum(e['share'] for e in opposite):.0%})" if opposite else ""
    )
    if culprits or skipped:
        share = sum(e["share"] for e in culprits)
        return True, (
            f"explained by counters (no time measured): {len(culprits)} commit(s) carry {share:.0%} of {what}"
            + (f", biggest {culprits[0]['short_sha']} ({culprits[0]['share']:.0%})" if culprits else "")
            + (f"; {len(skipped)} change(s) among commits that cannot be measured" if skipped else "")
            + against
        )
    why = f"every commit found moved the other way ({len(opposite)})" if opposite else "no change point"
    left = result.get("unresolved") or []
    if left:
        why += f"; {len(left)} segment(s) not narrowed ({left[0]['status']})"
    return False, f"unexplained: {why} for {what}"
