"""The result schema, in one place: what a bundle holds and what a summary row is.

A bundle is a directory:
  meta.json       run metadata (teperf version, command, config, sides, host,
                  cases, workers, start/end, status); rewritten atomically
  records.jsonl   one JSON object per line, appended and flushed as each
                  thing happens, so a crash or Ctrl-C keeps all of it:
                    {"kind": "worker", "pair", "side", "hello": {...}}
                    {"kind": "setup", "pair", "side", "case_id", "status": ready|error|skipped, "info"|"error"}
                    {"kind": "pair", "pair", "hash_seed", "start_s", "lane", "core"}
                      (when the pair starts measuring: on lane ``lane``, pinned to ``core``)
                    {"kind": "trial", "pair", "round", "trial", "side", "position", "case_id", "hash_seed", "t",
                     "lane", "core", **CLOCK_FIELDS}   (no lane/core: a bundle from before --lanes, lane 0)
                    {"kind": "counters", "pair", "side", "case_id", "counters": {...}}
                    {"kind": "failure", "pair", "side", "case_id", "error", "final", "log_tail"}
                      final False: the worker died or hung, the cell lost this pair only;
                      lost_pairs: the pairs the cell has lost so far
                    {"kind": "stop", "reason", "pairs", "elapsed_s", "precision_pct", "budget_s", "open": [cell keys]}
                      (last: how the run ended; reason: precision reached | budget | max pairs | schedule done)
  workers/*.log   each worker's stderr
"""

from __future__ import annotations

SCHEMA_VERSION = 1
META_FILE = "meta.json"
RECORDS_FILE = "records.jsonl"

# Keys of one summary row (teperf.stats.summarize), in output order for csv/json.
ROW_FIELDS = (
    "module",
    "recipe",
    "shape",
    "dtype",
    "mode",
    "status",  # ok | partial | failed | skipped
    "error",
    "base_us",  # per-step host time of the base side: geometric mean of per-pair medians (the only side for `run`)
    "head_us",  # base_us x the paired ratio exp(mean r_p), so head - base = delta (stats.py)
    "delta_us",
    "delta_pct",
    "ci_low_us",
    "ci_high_us",
    "ci_low_pct",
    "ci_high_pct",
    "verdict",  # faster | slower | no change | inconclusive | None (teperf/stats.py says what each rules out)
    "bound_pct",  # inconclusive: the change its interval could not rule out (the end farthest outside +-min_effect)
    "ci_basis",  # "pairs" (process pairs are the unit) or "trials" (one pair only)
    "n_pairs",  # process pairs the figures rest on
    "pairs_planned",  # process pairs the schedule asked for (more than n_pairs: lost or interrupted)
    "n_trials",  # base-side trials in the bundle (the only side for `run`)
    "base_spread_pct",  # IQR / median of per-step trial times
    "head_spread_pct",
    "pair_sd_pct",  # standard deviation of per-pair log ratios, in %
    "mde_pct",  # smallest change this run could detect (80 % power)
    "base_thread_us",
    "head_thread_us",
    "base_wall_us",
    "head_wall_us",
    "host_bound",  # False when the GPU was behind (CUDA only), None on CPU
    "sync_us",  # median final-synchronize wait per step
    "counters",  # {"base": {...}, "head": {...}} or None
    "info",
)


def lost_pairs_text(pairs: list) -> str:
    """How a failure record's ``lost_pairs`` reads in the table: 'in 2 pairs: 0, 1'."""
    return f"in {len(pairs)} pair{'s' if len(pairs) != 1 else ''}: {', '.join(map(str, pairs))}"
