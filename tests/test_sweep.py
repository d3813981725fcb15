"""--sweep KEY=V1,...: one cell per value in one run, and the host-time slope per unit (teperf/sweep.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import run_in_process
from schedules import schedule

from teperf import sweep as sw
from teperf.config import load_config
from teperf.errors import TeperfError
from teperf.plan import expand


def test_parse_sweep():
    assert sw.parse_sweep("num_gemms=1,2,4,8") == sw.Sweep("num_gemms", (1, 2, 4, 8))
    assert sw.parse_sweep("dim0=64, 128").dim == 0
    for bad, words in (("num_gemms", "malformed"), ("x=1,a", "not a number"), ("x=2,2", "two different")):
        with pytest.raises(TeperfError, match=words):
            sw.parse_sweep(bad)


def test_apply_makes_one_cell_per_value():
    config = load_config("default", {"modules": ["Linear"]})
    swept = sw.apply(config, sw.parse_sweep("dim0=4,8,16"))
    assert [c.key for c in expand(swept)] == [
        "Linear/fp32/4x2x64/eager",
        "Linear/fp32/8x2x64/eager",
        "Linear/fp32/16x2x64/eager",
    ]
    with pytest.raises(TeperfError, match="takes no kwargs"):
        sw.apply(config, sw.parse_sweep("hidden=1,2"))
    with pytest.raises(TeperfError, match="no dimension 5"):
        sw.apply(config, sw.parse_sweep("dim5=1,2"))
    te = load_config("nightly", {"modules": ["GroupedLinear"], "recipes": ["bf16"], "modes": ["eager"]})
    cases = expand(sw.apply(te, sw.parse_sweep("num_gemms=1,2,4")))
    assert [(c.module, dict(c.kwargs)) for c in cases] == [
        ("GroupedLinear[num_gemms=1]", {"num_gemms": 1}),
        ("GroupedLinear[num_gemms=2]", {"num_gemms": 2}),
        ("GroupedLinear[num_gemms=4]", {"num_gemms": 4}),
    ]
    assert not any(c.skip for c in cases)  # the shape rules see GroupedLinear


def test_slope_verdicts():
    assert sw.slope_verdict({"lo": 0.5, "hi": 2.0}) == "steeper"
    assert sw.slope_verdict({"lo": -2.0, "hi": -0.1}) == "flatter"
    assert sw.slope_verdict({"lo": -0.5, "hi": 1.25}) == "inconclusive (up to 1.25 us/unit)"
    assert sw._ols_slope([1, 2, 4], [3, 5, 9]) == pytest.approx(2.0)


SWEEP_MODULE = textwrap.dedent(
    """
    import torch

    LOOP = {loop}


    def _inner(v):
        return v + 1


    def helper(v):
        s = 0
        for i in range(LOOP):
            s += i * v
        return _inner(s)


    class Block(torch.nn.Module):
        def __init__(self, extra=0):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)
            self.extra = extra

        def forward(self, x):
            for _ in range(self.extra):
                helper(1)
            return self.lin(x)


    def make(extra=0):
        return Block(extra)
    """
)

SWEEP_CONFIG = """
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[4, 16]]

[modules.Block]
factory = "sweeppkg.mod:make"
"""


def _side(root: Path, loop: int) -> Path:
    pkg = root / "sweeppkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(SWEEP_MODULE.format(loop=loop))
    return root


@pytest.mark.real_worker
@pytest.mark.statistical  # head's 4x longer loop is many times the noise of a slope
def test_compare_sweep_finds_a_steeper_slope(tmp_path, capsys):
    # head's helper loops 4x as long: every extra call costs ~4x the host time, the calls stay the same
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP_CONFIG)
    base, head = _side(tmp_path / "base", 300), _side(tmp_path / "head", 1200)
    args = ["compare", "--config", str(config), "--sweep", "extra=0,4,8"]
    args += schedule(2, 10, 5, processes=4)
    args += ["--base-path", str(base), "--head-path", str(head), "--results-dir", str(tmp_path / "r")]
    code, out, err = run_in_process(args, capsys)
    assert code == 0, (out, err)
    assert "Block[extra=8]" in out
    assert "sweep extra over Block/fp32/4x16/eager (4 pairs):" in out
    assert "python calls +2.00 per unit" in out  # helper + _inner per extra call, exactly
    line = next(line for line in out.splitlines() if line.startswith("  slope head - base:"))
    assert line.endswith(": steeper"), out
