"""One line of figures per step of results/evidence/h200-issue34/gpu_prthread.sh, read from what the step left (issue 34).

    python3 results/evidence/h200-issue34/gpu_figures.py spawn BUNDLE WALL_S BUDGET_S   pairs/min, false verdicts, budget overrun,
    prestart
    python3 results/evidence/h200-issue34/gpu_figures.py ext NAME CACHE FIRST_S         time to first trial, each build's span,
    overlap
    python3 results/evidence/h200-issue34/gpu_figures.py bisect JSON WANT_SHA           the culprit bisect named, and whether it is
    WANT

Never fails: a missing or partial input prints what is known (the step's own log says why).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def records(bundle: Path) -> list[dict]:
    path = bundle / "records.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a stop
    return out


def spawn(bundle: str, wall: str, budget: str) -> str:
    from teperf.api import summarize

    path, wall_s, budget_s = Path(bundle), float(wall), float(budget)
    recs = records(path)
    stop = next((r for r in recs if r.get("kind") == "stop"), {})
    pairs = stop.get("pairs") or sum(1 for r in recs if r.get("kind") == "pair")
    elapsed = stop.get("elapsed_s") or wall_s
    rows = [r.to_dict() for r in summarize(str(path)).rows] if stop else []
    false = [f"{r['module']}/{r['recipe']}" for r in rows if r.get("verdict") in ("slower", "faster")]
    hw = [
        round(50 * (r["ci_high_us"] - r["ci_low_us"]) / r["base_us"], 2)
        for r in rows
        if r.get("ci_low_us") is not None and r.get("base_us")
    ]
    verdicts = "; ".join(
        f"{r['module']}/{r['recipe']} {r.get('delta_pct') or 0:+.2f}% {r['verdict']}" for r in rows
    )
    p = stop.get("prestart") or {}
    return (
        f"spawn A/A: {pairs} pairs, {60 * pairs / max(elapsed, 1e-9):.1f}/min measuring ({elapsed:.0f} s), "
        f"{60 * pairs / max(wall_s, 1e-9):.1f}/min from the command ({wall_s:.0f} s, start included); "
        f"budget {budget_s:.0f} s: over by {100 * (wall_s / budget_s - 1):+.1f}% start included, "
        f"{100 * (elapsed / budget_s - 1):+.1f}% measuring; stop: {stop.get('reason', 'none (cut short)')}; "
        f"false verdicts {len(false)} {false}; half-widths % {sorted(hw)}; prestart depth {p.get('depth')} "
        f"(max {p.get('max_depth')}, {p.get('spare_cores')} spare cores, start {p.get('start_s')} s vs "
        "measure "
        f"{p.get('measure_s')} s, started {p.get('started')}, lanes waited {p.get('lane_wait_s')} s); "
        f"{verdicts}"
    )


def ext(name: str, cache: str, first: str) -> str:
    metas = []
    for path in sorted(Path(cache).glob("ext/*/build.json")):
        try:
            metas.append(json.loads(path.read_text()))
        except ValueError:
            continue
    built = sorted((m for m in metas if m.get("started_at")), key=lambda m: m["started_at"])
    spans = [
        f"{m.get('sha', '?')[:10]} {m.get('seconds')} s with {m.get('env', {}).get('MAX_JOBS')} jobs, ccache "
        f"{m.get('ccache')}"
        for m in built
    ]
    overlap = ""
    if len(built) >= 2:
        a, b = built[0], built[1]
        both = min(a["ended_at"], b["ended_at"]) - b["started_at"]
        overlap = (
            f"; the two builds overlap {max(both, 0):.1f} s (start "
            f"{b['started_at'] - a['started_at']:+.1f} s apart)"
        )
    return (
        f"{name}: first measured trial after {first} s; builds in the cache: "
        f"{'; '.join(spans) or 'none'}{overlap}"
    )


def bisect(path: str, want: str) -> str:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return f"bisect: no result ({exc.__class__.__name__})"
    culprits = data.get("culprits") or []
    named = [
        f"{c.get('commit', c).get('short_sha', '?')} {c.get('commit', c).get('subject', '')!r}"
        for c in culprits
    ]
    shas = [c.get("commit", c).get("sha", "") for c in culprits]
    hit = bool(shas) and shas[0].startswith(want)
    return f"bisect: answer {data.get('answer')!r}; culprits {named}; names b2: {'YES' if hit else 'NO'}"


def main(argv: list[str]) -> int:
    what, args = argv[1], argv[2:]
    try:
        print({"spawn": spawn, "ext": ext, "bisect": bisect}[what](*args))
    except Exception as exc:  # noqa: BLE001 - figures are best effort; the step's log has the rest
        print(f"{what}: no figures ({exc.__class__.__name__}: {exc})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
