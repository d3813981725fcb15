"""A bisect's answer from what it measured. A step in time is confirmed, and carries a share of GOOD..BAD's
delta, when its own compare's verdict moved the way GOOD..BAD did."""

from __future__ import annotations

from typing import Callable, Optional

from teperf.bisect.attribute import span
from teperf.bisect.search import Part
from teperf.bisect.timing import MIN_STEP_SHARE, MOST, PartRow, row_text
from teperf.bisect.timing import pairs_to_settle as part_pairs_to_settle
from teperf.stats import pairs_to_settle


def _sign(x) -> int:
    return 1 if (x or 0) > 0 else (-1 if (x or 0) < 0 else 0)


def _json(row: Optional[PartRow]) -> dict:
    """A part's row as the answer holds it ({}: not measured)."""
    return row.to_dict() if row else {}


def step_entry(part: Part, total_us: float, commit: Callable[[int], dict], counters: Optional[dict]) -> dict:
    row = part.row or PartRow()
    delta = row.delta_us or 0.0
    entry = {
        **commit(part.hi),
        "index": part.hi,
        "parent": commit(part.lo),
        "delta_us": round(delta, 2),
        "delta_pct": row.delta_pct,
        "verdict": row.verdict,
        "row": _json(part.row),
        "counters": counters,  # what the counters did at it ({}: none moved; None: not counted)
        "share": round(delta / total_us, 4) if total_us else 0.0,
    }
    share_ci = _share_ci(row, total_us)
    if share_ci:
        entry["share_ci"] = share_ci
    return entry


def time_shares(
    parts: list[Part], endpoint: PartRow, commit, counters_beside, pair_s=0.0, alpha=0.05
) -> dict:
    """The parts sorted into the answer's sections (report.SECTIONS); only a step whose own verdict moved
    as GOOD..BAD did (or the other way) gets a share; unresolved parts carry the pairs that would settle
    them at ``alpha``, settle_parts their sum and its seconds at ``pair_s`` a pair."""
    total = endpoint.delta_us or 0.0
    direction = _sign(total)
    wanted = {1: "slower", -1: "faster"}
    culprits, opposite, unconfirmed, small, unresolved, same = [], [], [], [], [], []
    for part in parts:
        row, where = part.row or PartRow(), span(part.lo, part.hi, commit)
        if part.status == "step":
            entry, verdict = step_entry(part, total, commit, counters_beside(part.hi)), row.verdict
            if verdict == wanted.get(direction):
                culprits.append(entry)
            elif verdict == wanted.get(-direction):
                opposite.append(entry)
            else:
                unconfirmed.append(entry)
        elif part.status == "identical":  # settled: the package did not change, left out of the answer
            same.append(dict(where, row=_json(part.row)))
        elif part.status == "small":
            share_ci = _share_ci(row, total)
            small.append(dict(where, delta_us=round(row.delta_us, 2), row=_json(part.row), share_ci=share_ci))
        elif part.status in ("undecided", "skipped", "budget"):
            unresolved.append(
                dict(
                    where,
                    status=part.status,
                    delta_us=row.delta_us,
                    row=_json(part.row),
                    direction=_sign(row.delta_us) * direction if part.row else 1,
                    pairs_needed=part_pairs_to_settle(row, MIN_STEP_SHARE * abs(total), alpha),
                )
            )
    culprits.sort(key=lambda e: -e["share"])
    opposite.sort(key=lambda e: e["share"])
    carried_us = sum(e["delta_us"] for e in culprits + opposite)
    low, high = endpoint.ci_low_us, endpoint.ci_high_us
    needed = sum(u["pairs_needed"] or 0 for u in unresolved)
    return {
        "settle_parts": {"pairs": needed, "seconds": round(needed * pair_s)} if needed else None,
        "culprits": culprits,
        "opposite_movers": opposite,
        "unconfirmed": unconfirmed,
        "small_movers": small,
        "unresolved": unresolved,
        "same_code": same,
        "rest": {
            "delta_us": round(total - carried_us, 2),
            "share": round(1 - sum(e["share"] for e in culprits + opposite), 4) if total else 0.0,
        },
        # the confirmed steps' deltas against GOOD..BAD's measured interval: do the parts add up?
        "steps_us": round(carried_us, 2),
        "steps_within_interval": None if low is None else bool(low <= carried_us <= high),
    }


def _share_ci(row: PartRow, total_us: float) -> Optional[list]:
    low, high = row.ci_low_us, row.ci_high_us
    if low is None or high is None or not total_us:
        return None
    return sorted((round(low / total_us, 4), round(high / total_us, 4)))


def time_share(index: int, measured: dict, endpoint: Optional[PartRow], moved: bool) -> dict:
    """What time can tell of commit ``index``, from the smallest measured part that holds it: a share
    interval of GOOD..BAD's delta (``moved``: GOOD..BAD moved) where that part's excludes zero, and
    ``under``, the most it can be (of GOOD..BAD's delta, else of the cell's time: "too small to tell")."""
    holding = [(hi - lo, lo, hi) for lo, hi in measured if lo < index <= hi]
    if not holding:
        return {"part": None}
    _, lo, hi = min(holding)
    row = measured[(lo, hi)]
    low, high = row.ci_low_us, row.ci_high_us
    out = {"part": [lo, hi], "own": hi - lo == 1, "whole": lo == 0 and hi == max(h for _, h in measured)}
    out.update(delta_us=row.delta_us, ci_us=[low, high], pairs=row.n_pairs)
    if low is None or high is None:
        return out
    if moved:
        share = _share_ci(row, endpoint.delta_us)
        out.update(of="GOOD..BAD", under=max(map(abs, share)))
    else:  # no share of an undecided GOOD..BAD: in % of the cell's time
        share = None
        out.update(of="cell", under=round(max(abs(row.ci_low_pct), abs(row.ci_high_pct)) / 100, 4))
    return dict(out, share_ci=share if low > 0 or high < 0 else None)


def counter_movers(result: dict, measured: dict, endpoint: Optional[PartRow]) -> dict:
    """Each counter change point with its time_share; those not a step in time of their own, by way."""
    moved = result.get("status") not in ("inconclusive", "no change")  # else GOOD..BAD gives no share
    steps = {
        e["index"] for key in ("culprits", "opposite_movers", "unconfirmed") for e in result.get(key) or []
    }
    movers, against = [], []
    for entry in result["counter_changes"]:
        entry["time"] = time_share(entry["index"], measured, endpoint, moved)
        if entry["index"] not in steps:
            (against if entry["share"] < 0 else movers).append(entry)
    return {"counter_movers": movers, "counter_opposite": against}


def settle(endpoint: PartRow, min_effect_pct: float, pair_s: list[float], alpha: float = 0.05) -> dict:
    """How many pairs would settle an undecided GOOD..BAD, from its measured spread (stats.pairs_to_settle):
    to slower/faster it must exclude zero (|delta| >= min effect), to no change it must fit inside +-min
    effect."""
    delta, low, high, pairs = endpoint.delta_pct, endpoint.ci_low_pct, endpoint.ci_high_pct, endpoint.n_pairs
    out: dict = {"pairs": pairs, "pairs_needed": None, "budget_s": None}
    if None in (delta, low, high) or not pairs:
        return out
    half = (high - low) / 2
    target = abs(delta) if abs(delta) >= min_effect_pct else min_effect_pct - abs(delta)
    # the delta at the min effect: no number of pairs is enough (one pair: no spread to project from)
    if half <= 0 or target <= 0.05 * half or pairs < 2:
        return out
    needed = pairs_to_settle(half, pairs, target, alpha)
    per_pair = max(pair_s, default=0.0)
    return dict(out, pairs_needed=needed, budget_s=round(needed * per_pair) if per_pair else None)


# a bisect's outcome -> its exit status (teperf bisect --help); 2 (bad input), 130/143/129: as every command
EXIT = {"explained": 0, "unexplained": 1, "counters": 3, "no change": 4}
EXIT_HELP = """\b
Exit status: 0 explained (the commits named carry most of GOOD..BAD's change
in time and no part is left undecided; --no-confirm: the counters' change);
1 unexplained (no answer to act on: time moved or may have, no counter
moved, or what was found does not carry it); 2 bad input, or GOOD or BAD
cannot be measured; 3 counters moved but time undecided (the counter change
points are named, each with what time could tell of it); 4 nothing moved
(GOOD..BAD is no change in time: counter change points, if any, are listed
at no measurable cost; --no-confirm: no counter differs); 130 Ctrl-C; 143
SIGTERM; 129 SIGHUP."""


def conclude(result: dict) -> dict:
    """``outcome`` (a key of EXIT), ``exit_code``, ``explained`` (None: nothing to explain), ``answer``."""
    outcome, answer = _answer(result)
    result["outcome"], result["exit_code"], result["answer"] = outcome, EXIT[outcome], answer
    result["explained"] = None if outcome == "no change" else outcome == "explained"
    return result


def _named(entries, n: int = 3) -> str:
    def one(e: dict) -> str:
        deltas = e.get("deltas") or {}
        key = next(iter(deltas), None)
        return f"{e['short_sha']} ({key} {deltas[key]:+g})" if key else e["short_sha"]

    more = f" and {len(entries) - n} more" if len(entries) > n else ""
    return ", ".join(one(e) for e in entries[:n]) + more


def endpoint_text(end: Optional[dict]) -> str:
    """GOOD..BAD's row (the answer's ``endpoint``) in one phrase, with the pairs it rests on."""
    row = PartRow.from_dict(end)
    return row_text(row) + (f" at {row.n_pairs} pairs" if row.n_pairs else "") if end else "not measured"


def _answer(result: dict) -> tuple[str, str]:
    status, end = result.get("status"), PartRow.from_dict(result.get("endpoint"))
    changes = result.get("counter_changes") or []
    within = " within --budget" if result.get("budget_spent") else ""
    if result.get("mode") == "counters":
        return _counters_answer(result)
    if status == "no change":
        return "no change", "no change: GOOD..BAD is no change in time" + (
            f"; counters moved at {len(changes)} commit(s), listed, at no measurable cost: {_named(changes)}"
            if changes
            else " and no counter differs"
        )
    if status == "inconclusive":
        told = endpoint_text(result.get("endpoint"))
        told = f"whether GOOD..BAD changed in time could not be told{within}: {told}"
        if changes:
            moved = f"{len(changes)} commit(s) moved the counters: {_named(changes)}; {told}"
            return "counters", f"counters moved, time undecided: {moved}"
        return "unexplained", f"unexplained: {told}; no counter differs"
    culprits = result.get("culprits") or []
    what = f"GOOD..BAD's {end.delta_us or 0:+.1f} us ({end.delta_pct or 0:+.1f}%)"
    if end.verdict_cause:
        what += f", read {end.verdict} ({end.verdict_cause})"
    rest = result.get("rest") or {}
    left = result.get("unresolved") or []
    tail = f"; {rest.get('share', 0):.0%} unexplained ({rest.get('delta_us', 0):+.1f} us)"
    if result.get("opposite_movers"):
        tail += f"; {len(result['opposite_movers'])} moved the other way"
    if left:
        tail += f"; {len(left)} part(s) undecided{within}"
        kept = sum(1 for u in left if (u.get("row") or {}).get("left") == "answer")
        if kept:  # left by could_change (teperf.bisect.timing)
            some = "" if kept == len(left) else f"{kept} "
            # not "this answer": the exit says time is undecided; only the commits named would not change
            tail += f" ({some}left: measuring again could not change the commits named)"
        hint = result.get("settle_parts") or {}
        if hint.get("pairs"):
            tail += f"; about {hint['pairs']} pairs ({hint['seconds']} s at this pace) would settle them"
    if result.get("counter_movers"):
        tail += f"; counters also moved at {_named(result['counter_movers'])}"
    share = sum(e["share"] for e in culprits)
    named = ", ".join(f"{e['short_sha']} {e['share']:.0%}" for e in culprits[:3])
    if culprits and share >= MOST and not left:
        return "explained", f"explained: {len(culprits)} commit(s) carry {share:.0%} of {what}: {named}{tail}"
    if culprits:  # "only" where they fall short; 116 % is not short, the undecided parts are what is left
        only = "only " if share < MOST else ""
        found = f"{len(culprits)} commit(s) carry {only}{share:.0%} of {what}: {named}{tail}"
    else:
        why = "no step confirmed by its own compare"
        if result.get("unconfirmed"):
            why += f" ({len(result['unconfirmed'])} found, their verdicts not decisive)"
        found = f"{why} for {what}{tail}"
    if changes:
        return "counters", f"counters moved, time undecided: {found}"
    return "unexplained", f"unexplained: {found}"


def _counters_answer(result: dict) -> tuple[str, str]:
    """--no-confirm: the commits that moved the counters, shares of GOOD..BAD's counter change."""
    culprits, opposite = result.get("culprits") or [], result.get("opposite_movers") or []
    totals = result.get("totals") or {}
    if result.get("status") == "no change":
        return "no change", "no change: no counter differs between GOOD and BAD (no time measured)"
    key = next(iter(totals), None)
    what = f"GOOD..BAD's {totals[key]:+g} {key}" if key else "GOOD..BAD's counter change"
    skipped = [u for u in result.get("unresolved") or [] if u["status"] == "skipped" and u["direction"] > 0]
    against = (
        f"; {len(opposite)} moved the other way ({sum(e['share'] for e in opposite):.0%})" if opposite else ""
    )
    if culprits or skipped:
        share = sum(e["share"] for e in culprits)
        return "explained", (
            f"explained by counters (no time measured): {len(culprits)} commit(s) carry {share:.0%} of {what}"
            + (f", biggest {culprits[0]['short_sha']} ({culprits[0]['share']:.0%})" if culprits else "")
            + (f"; {len(skipped)} change(s) among commits that cannot be measured" if skipped else "")
            + against
        )
    why = f"every commit found moved the other way ({len(opposite)})" if opposite else "no change point"
    left = result.get("unresolved") or []
    if left:
        why += f"; {len(left)} segment(s) not narrowed ({left[0]['status']})"
    return "unexplained", f"unexplained: {why} for {what}"
