"""--fail-on: parsing, which cells fail, and the exit codes of the real CLI on a finished bundle."""

import dataclasses

import pytest
from conftest import PLANTED, run_cli, run_in_process

from teperf.commands._common import gate
from teperf.errors import TeperfError
from teperf.records import BundleMeta, Row
from teperf.summary import Summary
from teperf.verdicts import failing_cells, parse_fail_on


def row(module, verdict, delta=1.0, bound=None, shape="8x2x64"):
    return Row(
        module=module,
        recipe="fp32",
        shape=shape,
        mode="eager",
        verdict=verdict,
        delta_pct=delta,
        bound_pct=bound,
    )


ROWS = [
    row("Linear", "slower", 3.2),
    row("LayerNormLinear", "faster", -2.0),
    row("LayerNormMLP", "no change", 0.1),
    row("MLP", "inconclusive", 3.0, 8.5),
    row("Skipped", None, None),
]


@pytest.mark.parametrize(
    "values, want",
    [
        (["slower"], {"slower"}),
        (["faster"], {"faster"}),
        (["change"], {"slower", "faster"}),
        (["inconclusive"], {"inconclusive"}),
        (["slower,inconclusive"], {"slower", "inconclusive"}),
        (["slower", "Inconclusive"], {"slower", "inconclusive"}),
        ([], set()),
        (None, set()),
    ],
)
def test_parse_fail_on(values, want):
    assert parse_fail_on(values) == want


@pytest.mark.parametrize("bad", [["noisy"], ["slower,nope"], ["no change"]])
def test_parse_fail_on_rejects_unknown_with_one_line(bad):
    with pytest.raises(TeperfError) as err:
        parse_fail_on(bad)
    assert "--fail-on" in err.value.one_line() and "inconclusive" in err.value.one_line()


def test_failing_cells_name_the_cells():
    assert failing_cells(ROWS, {"slower"}) == ["Linear/fp32 slower +3.2%"]
    assert failing_cells(ROWS, {"slower", "faster"}) == [
        "Linear/fp32 slower +3.2%",
        "LayerNormLinear/fp32 faster -2.0%",
    ]
    assert failing_cells(ROWS, {"inconclusive"}) == ["MLP/fp32 inconclusive +3.0% (up to +8.5%)"]
    assert failing_cells(ROWS, set()) == []
    two_shapes = [row("Linear", "slower", 3.0, shape="8x2x64"), row("Linear", "no change", shape="4x64")]
    assert failing_cells(two_shapes, {"slower"}) == ["Linear/fp32/8x2x64 slower +3.0%"]


def test_fail_on_covers_one_time_verdicts():
    """Issue 22: a compile cell whose first call got 40 % slower failed no gate."""
    compiled = dataclasses.replace(
        row("Linear", "no change", 0.2),
        mode="compile",
        first_call_verdict="slower",
        first_call_delta_pct=40.0,
        recompile_verdict="too few pairs",
        recompile_delta_pct=90.0,
    )
    assert failing_cells([compiled], {"slower"}) == ["Linear/fp32 first call slower +40.0%"]
    assert failing_cells([compiled], {"slower", "faster", "inconclusive"}) == [
        "Linear/fp32 first call slower +40.0%"
    ]  # "too few pairs" is no verdict: no --fail-on name matches it
    assert failing_cells([compiled], {"faster"}) == []


def test_gate_exits_1_with_one_line_only_on_a_matching_verdict(capsys):
    summary = Summary(meta=BundleMeta(), rows=ROWS, notes=[])
    gate(summary, {"faster"} - {"faster"})  # nothing asked: never fails
    gate(Summary(meta=BundleMeta(), rows=[r for r in ROWS if r.verdict != "slower"], notes=[]), {"slower"})
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as stop:
        gate(summary, parse_fail_on(["change"]))
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "teperf: fail-on: 2 cells: Linear/fp32 slower +3.2%; LayerNormLinear"
    )


def test_bad_fail_on_is_a_usage_error_before_anything_runs(results_dir):
    same = PLANTED / "base"
    res = run_cli(
        "compare",
        "--base-path",
        same,
        "--head-path",
        same,
        "--fail-on",
        "noisy",
        "--results-dir",
        results_dir,
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "--fail-on 'noisy' is not a verdict" in res.stderr
    assert not results_dir.exists()  # rejected before measuring


def test_fail_on_empty_is_refused(capsys):
    from conftest import run_in_process

    code, _, err = run_in_process(
        ["compare", "--base-path", ".", "--head-path", ".", "--fail-on", ""], capsys
    )
    assert code == 2 and "--fail-on '' names no verdict" in err and "Traceback" not in err
    code, _, err = run_in_process(
        ["compare", "--base-path", ".", "--head-path", ".", "--fail-on", " , "], capsys
    )
    assert code == 2 and "names no verdict" in err


def test_run_help_promises_no_fail_on(capsys):
    code, out, _ = run_in_process(["run", "--help"], capsys)
    assert code == 0 and "--fail-on" not in out
