"""``teperf bisect``: find the commit that moved a cell, counters first, timing to confirm.

search.py   the binary search, apart from what a probe measures
sides.py    the one seam onto teperf/sides: commit -> runnable Side, and its tier
runner.py   the run: range, plan, probes, confirming compare, bundle (the library API)
report.py   a bisect bundle -> table / markdown / json
"""
