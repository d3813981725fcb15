"""Every output format carries the new verdicts, the inconclusive bound and the precision schedule."""

import csv
import dataclasses
import io
import json

import pytest

from teperf.records import BundleMeta, Row, StopRecord
from teperf.render import render, table_model
from teperf.schema import ROW_FIELDS
from teperf.summary import Summary
from teperf.summary.notes import stop_note


def _row(module, verdict, delta, low, high, pairs, bound=None):
    r = {k: None for k in ROW_FIELDS}
    r.update(
        module=module,
        recipe="bf16",
        shape="8x2x256",
        dtype="bfloat16",
        mode="eager",
        status="ok",
        base_us=500.0,
        head_us=500.0 * (1 + delta / 100),
        delta_us=5 * delta,
        delta_pct=delta,
        ci_low_pct=low,
        ci_high_pct=high,
        ci_low_us=5 * low,
        ci_high_us=5 * high,
        verdict=verdict,
        bound_pct=bound,
        n_pairs=pairs,
        n_trials=12 * pairs,
        ci_basis="pairs",
        mde_pct=2.0,
    )
    return Row(**r)


def summary(precision=1.0, budget=300.0):
    meta = {
        "sides": {"base": {"label": "base"}, "head": {"label": "head"}},
        "config": {
            "core": 7,
            "device": "cuda",
            "stats": {"alpha": 0.05, "min_effect_pct": 1.0},
            "schedule": {
                "processes": 8,
                "rounds": 2,
                "trials": 6,
                "iters": 50,
                "precision_pct": precision,
                "budget_s": budget,
                "min_pairs": 8,
            },
        },
        "host": {"gpu": "H200"},
    }
    rows = [
        _row("LayerNormLinear", "inconclusive", 3.0, -2.3, 8.5, 12, bound=8.5),
        _row("LayerNormMLP", "no change", 0.2, -0.7, 0.9, 31),
    ]
    return Summary(meta=BundleMeta.from_dict(meta), rows=rows, notes=[])


def test_markdown_shows_the_bound_pairs_and_the_target():
    text = render(summary(), "markdown")
    assert "| inconclusive (up to +8.5%) |" in text
    assert "| no change |" in text
    assert "| pairs |" in text and "| 12 |" in text and "| 31 |" in text
    assert (
        "until every cell is within +-1% (at least 8 pairs) or 5.0 min: 12-31 process pairs per cell" in text
    )
    assert "no change = the whole interval inside +-1%" in text


def test_fixed_schedule_header_and_no_pairs_column_when_all_equal():
    s = summary(precision=None, budget=None)
    s.rows = [dataclasses.replace(r, n_pairs=8) for r in s.rows]
    model = table_model(s)
    assert "pairs" not in model.columns
    assert model.header[-1].startswith("8 process pairs x 2 rounds")


def test_json_and_csv_carry_verdict_and_bound():
    rows = json.loads(render(summary(), "json"))["rows"]
    assert [(r["verdict"], r["bound_pct"]) for r in rows] == [("inconclusive", 8.5), ("no change", None)]
    table = list(csv.DictReader(io.StringIO(render(summary(), "csv"))))
    assert [(r["verdict"], r["bound_pct"]) for r in table] == [("inconclusive", "8.5"), ("no change", "")]


def test_stop_notes():
    meta = BundleMeta.from_dict({"config": {"schedule": {"processes": 8}}})
    assert (
        stop_note(
            StopRecord(**{"reason": "precision reached", "pairs": 14, "elapsed_s": 95, "precision_pct": 1.0}),
            meta,
        )
        == "precision: every cell reached +-1% (95% half-width) after 14 pairs, 95 s"
    )
    note = stop_note(
        StopRecord(
            **{
                "reason": "budget",
                "pairs": 34,
                "elapsed_s": 301,
                "precision_pct": 1.0,
                "budget_s": 300,
                "open": ["LayerNormMLP/fp8_delayed/8x2x256/eager"],
            }
        ),
        meta,
    )
    assert (
        note == "budget of 5.0 min spent after 34 pairs (5.0 min); 1 cell did not reach +-1%: "
        "LayerNormMLP/fp8_delayed/8x2x256/eager"
    )
    # with the open cells' half-widths (bundles since 2026-12-07): how long would reach the target
    wide = StopRecord(
        reason="budget", pairs=52, elapsed_s=293, precision_pct=0.5, budget_s=300,
        open=["a", "b"], open_half_pct={"a": 0.62, "b": 0.8},
    )  # fmt: skip
    assert stop_note(wide, meta).endswith(
        "2 cells did not reach +-0.5%: a, b (the widest at +-0.80%: about 12.5 min in all at this pace would "
        "reach it)"
    )  # 293 s / 52 pairs x the 133 pairs that settle +-0.8 % at +-0.5 % (stats.pairs_to_settle) = 749 s
    assert (
        stop_note(
            StopRecord(
                **{"reason": "budget", "pairs": 3, "elapsed_s": 61, "precision_pct": None, "budget_s": 60}
            ),
            meta,
        )
        == "budget of 60 s spent after 3 of 8 pairs (61 s)"
    )
    assert stop_note(StopRecord(**{"reason": "schedule done", "pairs": 8}), meta) == ""


def test_fixed_schedule_with_a_budget_says_how_many_pairs_ran():
    s = summary(precision=None, budget=90.0)
    s.rows = [dataclasses.replace(r, n_pairs=5) for r in s.rows]
    assert table_model(s).header[-1].startswith("8 process pairs (budget 90 s: 5 ran) x 2 rounds")


def test_one_pairs_column_for_lost_pairs_and_for_precision():
    # fixed schedule: a cell that lost a pair shows n/planned, once, before the verdict
    fixed = summary(precision=None, budget=None)
    fixed.rows = [dataclasses.replace(r, n_pairs=8, pairs_planned=8) for r in fixed.rows]
    fixed.rows[0] = dataclasses.replace(fixed.rows[0], n_pairs=7)
    model = table_model(fixed)
    assert (
        model.columns.count("pairs") == 1
        and model.columns.index("pairs") == model.columns.index("verdict") - 1
    )
    assert [line[model.columns.index("pairs")] for line in model.rows] == ["7/8", "8/8"]
    # every cell got what was planned: no column
    fixed.rows[0] = dataclasses.replace(fixed.rows[0], n_pairs=8)
    assert not fixed.show_pairs and "pairs" not in table_model(fixed).columns
    # --precision: nothing planned, the bare counts
    open_ = summary()
    model = table_model(open_)
    assert open_.show_pairs and [line[model.columns.index("pairs")] for line in model.rows] == ["12", "31"]


def test_comment_leads_with_the_verdict_line_and_folds_the_details():
    s = summary()
    s.rows[0] = dataclasses.replace(s.rows[0], verdict="slower", delta_pct=3.0, counters=None)
    s.rows[1] = dataclasses.replace(
        s.rows[1], counters={"base": {"python_calls": 10}, "head": {"python_calls": 12}}
    )
    s.meta.sides = {
        "base": {"label": "base", "sha": "a" * 40, "short_sha": "aaaaaaa", "subject": "base commit"},
        "head": {"label": "head", "sha": "b" * 40, "short_sha": "bbbbbbb", "subject": "head | commit"},
    }
    text = render(s, "comment")
    first, blank, *rest = text.splitlines()
    verdicts = "1 slower, 1 no change: LayerNormLinear/bf16 slower +3.0%"
    assert first == f"**teperf: {verdicts} (base aaaaaaa .. head bbbbbbb)**"
    assert blank == ""
    table, details = "\n".join(rest).split("<details>", 1)
    assert "| inconclusive" not in table and "| slower |" in table and "| no change |" in table
    assert "counters" not in table  # the counters are listed per cell, folded
    assert details.rstrip().endswith("</details>")
    assert "- LayerNormMLP/bf16: +2 py calls" in details
    assert "head: bbbbbbb" in details and "head \\| commit" in details  # what each side ran, escaped
    assert "no change = the whole interval inside +-1%" in details


def test_comment_puts_a_reason_the_figures_do_not_compare_above_the_table():
    s = summary()
    s.code_problems = ["base and head ran identical code"]
    lines = render(s, "comment").splitlines()
    assert lines[0].startswith("**teperf: 1 inconclusive, 1 no change")
    assert lines[2] == "> **WARNING:** base and head ran identical code"


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_the_terminal_table_never_splits_a_figure(width):
    # issue 59: at 80 columns (the default terminal) and at 60 the table split numbers mid-digit
    from rich.console import Console

    s = summary()
    s.rows = [
        dataclasses.replace(r, counters={"base": {"python_calls": 10}, "head": {"python_calls": 12}})
        for r in s.rows
    ]
    console = Console(width=width, record=True, file=io.StringIO())
    render(s, "table", console)
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= width
    words = {w for row in table_model(s).rows for cell in row for w in str(cell).split()}
    split = [w for w in words if not any(w in line for line in lines)]
    assert split == [], split


def test_the_verdict_line_says_which_cells_too_few_units_left_undecided():
    # a --fail-on gate fails them: the comment's first line must say why the job failed
    s = summary()
    s.rows[0] = dataclasses.replace(s.rows[0], verdict_cause="few units", n_pairs=1, ci_basis="pairs")
    line = render(s, "comment").splitlines()[0]
    assert "1 with too few units for a verdict (a --fail-on gate fails them)" in line
    assert "LayerNormLinear" not in line  # not named as a change
