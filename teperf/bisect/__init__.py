"""``teperf bisect``: find the commit that moved a cell, counters first, timing to confirm.

runner.py is the library API; sides.py the one seam onto teperf/sides; report.py renders a bundle."""
