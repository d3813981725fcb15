"""A stored bisect run replayed through today's search, no worker started: each counter probe answers with
the counters that run measured at that commit, each compare with the row that run measured for that part
(the same part measured again: its next row), seconds as they took. Prints what the search would probe and
compare now, the seconds that would cost at that run's pace (and the wall time, with what the stored run
spent outside probes and compares), and its answer. Figures, not asserts.

    python benchmarks/bisect_replay.py BUNDLE_DIR|answer.json[.gz] --config TOML [--budget S]

A part or commit that run never measured ends the replay's time search as a spent --budget would, and is
said ("not stored"); so is a counter probe of a commit it never counted.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ROW = re.compile(r"\.\. ([+-][\d.]+) us \[([+-][\d.]+), ([+-][\d.]+)\]")


def stored(path: Path) -> tuple[dict, list[dict]]:
    """(meta, probe records as dicts) of a bundle directory or of `teperf bisect --format json`'s output."""
    if path.is_dir():
        from teperf.bisect.report import load

        meta, probes = load(path)
        return meta, [p.to_dict() for p in probes]
    out = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())
    return out["meta"], out["probes"]


def replay(meta: dict, probes: list[dict], path: Path, config_path: Path, budget_s: float) -> dict:
    from teperf.bisect.counters import CounterSearch
    from teperf.bisect.plan import Range, find_cell
    from teperf.bisect.runner import Bisector
    from teperf.bisect.timing import PartRow, TimeSearch
    from teperf.bundle import Bundle
    from teperf.config import load_config
    from teperf.sides.gitrepo import Commit

    counters = {p["index"]: p["counters"] for p in probes if p["what"] != "timing" and p.get("counters")}
    count_s = {p["index"]: p["seconds"] for p in probes if p["what"] != "timing"}
    rows: dict = collections.defaultdict(list)  # (base, head) -> [(row, seconds), ...] in the order measured
    whole = {(r["good_index"], r["bad_index"]): r for r in meta["result"].get("compared") or []}
    for p in probes:
        if p["what"] == "timing" and p["result"] != "skip" and ROW.search(p.get("detail") or ""):
            delta, low, high = map(float, ROW.search(p["detail"]).groups())
            verdict = p.get("verdict")
            key = (p["base_index"], p["index"])
            last = whole.get(key) or {}
            row = {
                "status": "ok",
                "verdict": verdict,
                "verdict_cause": "load" if "(load" in p["detail"] else None,
                "delta_us": delta,
                "ci_low_us": low,
                "ci_high_us": high,
                "delta_pct": p.get("delta_pct"),
                "ci_low_pct": p.get("ci_low_pct"),
                "ci_high_pct": p.get("ci_high_pct"),
                "base_us": last.get("base_us"),
                "head_us": last.get("head_us"),
                "n_pairs": p.get("processes"),
            }
            if path.is_dir() and (path / str(p.get("bundle"))).is_dir():  # the compare's own summary row
                from teperf.summary import summarize

                row = dict(summarize(path / p["bundle"]).rows[0].to_dict(), n_pairs=p.get("processes"))
            rows[key].append((row, p["seconds"], p.get("processes")))
    commits = [Commit(c["sha"], c["short_sha"], c["subject"], c["date"], "") for c in meta["commits"]]
    good = meta["good"]
    first = Commit(good["sha"], good["short_sha"], good["subject"], good["date"], "")
    rng = Range(Path("."), first, commits[-1], commits)
    config = load_config(config_path)  # the run's own (its meta keeps it resolved, not as a file)
    case = find_cell(config, meta["cell"])
    missing: list[str] = []

    class NotStored(Exception):
        pass

    clock = {"now": 0.0}
    log_rows: list = []  # (index, what, result, seconds, pairs) of each probe, as it would be recorded

    class Counts(CounterSearch):
        def count(self, index, what="counters"):
            if index in self.counters:
                return self.counters[index]
            if index not in counters:
                missing.append(f"counters of {index}")
                return None
            clock["now"] += count_s.get(index, 0.0)
            self.count_seconds.append(count_s.get(index, 0.0))
            self.counters[index] = counters[index]
            return counters[index]

    class Times(TimeSearch):
        def compare(self, base, head, config):
            left = rows.get((base, head))
            if not left:
                missing.append(f"compare {base}..{head}")
                raise NotStored
            row, seconds, _ = left.pop(0)
            clock["now"] += seconds
            return PartRow.from_dict(row), self.probe.bundle.path / "compares" / f"{base}-{head}"

        def _compare_once(self, base, head, processes):
            try:
                return super()._compare_once(base, head, processes)
            except NotStored:
                self.budget_s = 0.0  # ends the search as a spent --budget would
                return None, "not stored", 0.0

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        bundle = Bundle.create(Path(tmp) / "r", "bisect", {"kind": "bisect", "commits": [], "plan": {}})
        quiet = {"budget_s": budget_s, "confirm": True, "log": lambda s: None}
        bisector = Bisector(config, rng, case, None, bundle, counts=Counts, times=Times, **quiet)
        bisector.probe.clock = lambda: clock["now"]
        bisector.probe.record = lambda index, what, result, seconds, **fields: log_rows.append(
            (index, what, result, seconds, fields.get("processes"))
        )
        result = bisector.run()
        bundle.close()
    timed = [r for r in log_rows if r[1] == "timing"]
    return {
        "result": result,
        "counter_probes": len(bisector.counts.count_seconds),
        "counter_s": round(sum(bisector.counts.count_seconds)),
        "compares": len(timed),
        "pairs": sum(r[4] or 0 for r in timed),
        "compare_s": round(sum(r[3] for r in timed)),
        "missing": missing,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stored", type=Path, help="a bisect bundle directory, or its --format json output")
    ap.add_argument("--config", type=Path, required=True, help="the config the stored run was given")
    ap.add_argument("--budget", type=float, help="--budget in s (default: the stored run's)")
    args = ap.parse_args()
    meta, probes = stored(args.stored)
    old = [p for p in probes if p["what"] == "timing"]
    counted = [p for p in probes if p["what"] != "timing"]
    print(
        f"stored: {len(counted)} counter probes ({sum(p['seconds'] for p in counted):.0f} s), {len(old)} "
        f"compares, {sum(p.get('processes') or 0 for p in old)} pairs "
        f"({sum(p['seconds'] for p in old):.0f} s); {meta['result'].get('answer')}"
    )
    out = replay(meta, probes, args.stored, args.config, args.budget or meta.get("budget_s") or 1800.0)
    r = out["result"]
    print(
        f"replayed: {out['counter_probes']} counter probes ({out['counter_s']} s), {out['compares']} "
        f"compares, {out['pairs']} pairs ({out['compare_s']} s); {r.get('answer')}"
    )
    # the stored run's wall less its probes' and compares' seconds: plan, git, rendering, worker shutdown
    wall = meta["result"].get("wall_s")
    if wall:
        rest = wall - sum(p["seconds"] for p in probes)
        print(
            f"   wall at the stored run's pace: about {out['counter_s'] + out['compare_s'] + rest:.0f} s "
            f"(stored: {wall:.0f} s, {rest:.0f} s of it outside probes and compares); "
            f"exit {r.get('exit_code')}"
        )
    print(f"   culprits: {[(c['short_sha'], c['share']) for c in r.get('culprits') or []]}")
    print(
        f"   counter change points {len(r.get('counter_changes') or [])}, segments not narrowed "
        f"{len(r.get('counter_unresolved') or [])}, parts undecided {len(r.get('unresolved') or [])}"
    )
    if out["missing"]:
        print(f"   not stored (the replay stopped there): {', '.join(out['missing'][:5])}")


if __name__ == "__main__":
    main()
