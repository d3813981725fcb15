"""A summary row's fields in output order, and the one-time costs a setup record's ``info`` carries."""

from __future__ import annotations

# One-time costs of a cell, one figure per side and process pair, in ms of the headline clock:
#   first_call  the first step (compile: with torch.compile; cuda-graph: the capture + first replay)
#   recompile   compile only: the first step under another recipe/autocast after the first call.
ONETIME_COSTS = ("first_call", "recompile")
ONETIME_STATS = tuple(
    """base_ms head_ms delta_ms delta_pct ci_low_ms ci_high_ms ci_low_pct ci_high_pct verdict bound_pct
    n_pairs pair_sd_pct min_effect_pct p_value""".split()  # min_effect_pct: the one its verdict used
)
# In the per-step row as <cost>_<stat>, plus, for `run`, the break-even against the eager cell:
ONETIME_FIELDS = tuple(f"{cost}_{stat}" for cost in ONETIME_COSTS for stat in ONETIME_STATS) + (
    "onetime_extra_ms",  # first call of this mode minus the eager cell's
    "saving_per_step_us",  # the eager cell's per-step time minus this mode's
    "break_even_steps",  # steps after the first until the extra is paid back; "never" if not faster per step
)
# The clocks of a one-time record (teperf.worker.clocks.time_once), ns; per --metric:
ONETIME_CLOCKS = {
    "process_cpu": ("process_cpu_ns", "children_cpu_ns"),
    "thread_cpu": ("thread_cpu_ns",),
    "wall": ("wall_ns",),
}
# A ready setup record's "info" holds first_call, recompile and switch_back, each a time_once record plus
# "what" (teperf/worker/session.py writes them); an older bundle's have none: no one-time figures. An
# eager or cuda-graph first call that compiled inside the library (TE's lazy torch.compile) adds "graphs".

# Keys of one summary row (teperf.stats.summarize), in output order for csv/json.
ROW_FIELDS = (
    *("module", "recipe", "shape", "dtype", "mode"),
    "status",  # ok | partial | failed | skipped
    "error",
    # per-step host time of the base side: geometric mean of per-pair medians (the only side for `run`)
    "base_us",
    "head_us",  # base_us x the paired ratio exp(mean r_p), so head - base = delta (stats.py)
    *("delta_us", "delta_pct", "ci_low_us", "ci_high_us", "ci_low_pct", "ci_high_pct"),
    "verdict",  # faster | slower | no change | inconclusive | None (teperf/verdicts.py)
    "bound_pct",  # inconclusive: the change its interval could not rule out
    "p_value",  # the cell's own two-sided p of "no change"; the table's rule (stats.table_levels) reads it
    "verdict_cause",  # "load": inconclusive, the change within what load could make (load_bound_pct)
    "ci_basis",  # the interval's unit: pairs | trials (one pair) | generations | one generation
    "n_pairs",  # process pairs the figures rest on
    "pairs_planned",  # process pairs the schedule asked for (more than n_pairs: lost or interrupted)
    "n_trials",  # base-side trials in the bundle (the only side for `run`)
    "base_spread_pct",  # IQR / median of per-step trial times
    "head_spread_pct",
    "pair_sd_pct",  # standard deviation of per-pair log ratios (with forkserver: of generation means), in %
    "mde_pct",  # smallest change this run could detect (80 % power)
    "contended_pct",  # % of trial couples left out: they shared their core in every attempt (CPU only)
    "load_bound_pct",  # over --max-contended: the bias load could add, which widens the interval both ways
    "remeasured",  # trial couples measured again after an attempt that shared its core
    *("base_thread_us", "head_thread_us", "base_wall_us", "head_wall_us"),
    "host_bound",  # False when the GPU was behind (CUDA only), None on CPU
    "sync_us",  # median final-synchronize wait per step
    *ONETIME_FIELDS,
    "counters",  # {"base": {...}, "head": {...}} or None
    "info",
)
