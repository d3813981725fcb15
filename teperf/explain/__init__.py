"""Where did the delta come from: ``teperf explain`` and the counter lines of compare and bisect.

Three parts: ``diff`` (two profiles or two counter sets -> what changed, function by function; no
torch, no workers), ``capture`` (profile a bundle's cell again: one pinned worker per side) and
``render`` (the texts and JSON). Their names are importable from here, as before the split.
"""

from teperf.explain.capture import (  # noqa: F401
    _cell_fields,
    _usable_core,
    _writable_dir,
    case_packages,
    code_drift,
    explain_bundle,
    find_case,
    profile_case,
    sides_from_meta,
)
from teperf.explain.diff import (  # noqa: F401
    COUNTER_LABELS,
    FunctionDelta,
    _key,
    apply_intervals,
    by_calls,
    by_own_time,
    combine_profiles,
    counter_deltas,
    diff_profiles,
    own_time_intervals,
)
from teperf.explain.render import (  # noqa: F401
    _calls_pair,
    _fmt_count,
    _presence,
    counters_diff,
    render_report,
    render_text,
    summary,
    to_json,
)
