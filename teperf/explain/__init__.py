"""Where did the delta come from: ``teperf explain`` and the counter lines of compare and bisect.

Three parts: ``diff`` (two profiles or two counter sets -> what changed, function by function; no
torch, no workers), ``capture`` (profile a bundle's cell again: one pinned worker per side) and
``render`` (the texts and JSON).
"""
