"""A small run of benchmarks/calibration.py with fixed thresholds: the CI's check that the verdicts' false and
detection rates have not moved. Live timing on a possibly loaded machine, so the thresholds are loose (a real
bias, a false rate of 30 % or a missed 4x plant, still fails); the figures at scale are `make calibrate`'s."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import calibration  # noqa: E402


@pytest.mark.statistical
def test_small_calibration_keeps_false_verdicts_rare_and_finds_a_4x_plant():
    # --max-contended 100: the interval rule is what is calibrated here; load's verdict is tests/test_load.py's
    tally = calibration.calibrate(2, ["step"], [0, 4], ["quiet"], ["--max-contended", "100"], log=print)
    for cost in ("per step", "first call"):
        aa = tally.aa[("quiet", "step", cost)]
        false = [v for v in aa if v in ("slower", "faster")]
        assert len(aa) >= 8 and len(false) <= 2, (cost, aa)  # P(3+ of 10 | 5 %) = 1 %
        planted = tally.planted[("quiet", "step", cost)][4]
        assert len(planted) == 2 and sum(v == "slower" for v, _ in planted) >= 1, (cost, planted)
    print(tally.table([0, 4]))
