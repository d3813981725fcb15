"""One table model -> rich / markdown / json / csv (``RENDERERS``, the one list of formats): ``table_model``
decides what is shown and how numbers read, the renderers only lay it out, so every format says the same."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math

from teperf.config import RecordedConfig
from teperf.explain.render import counters_diff
from teperf.numbers import duration, ms, pct, signed_ms, signed_us, us
from teperf.provenance import side_line
from teperf.records import Row
from teperf.safe_text import for_markdown, for_terminal
from teperf.schema import ONETIME_COSTS, ROW_FIELDS
from teperf.stats import TableLevels, level_text
from teperf.summary import Summary
from teperf.verdicts import (
    FASTER,
    FEW_UNITS,
    INCONCLUSIVE,
    NO_CHANGE,
    SLOWER,
    STYLE,
    failing_cells,
    onetime,
    verdict_text,
)

STATUS_TEXT = {"skipped": "skipped", "failed": "FAILED", "partial": "partial", "missing": "not measured"}


@dataclasses.dataclass
class TableModel:
    title: str
    header: list[str]  # lines above the table
    columns: list[str]
    rows: list[list[str]]
    styles: list[str | None]  # per row
    footer: list[str]
    numeric: tuple[str, ...] | None = None  # right-justified columns (None: all but the text ones of compare)


def schedule_text(cfg: RecordedConfig, rows: list[Row]) -> str:
    """How many pairs: fixed, or until the precision target / budget (with the pairs each cell got)."""
    pairs = sorted({r.n_pairs for r in rows if r.n_pairs})
    got = f"{pairs[0]}" if len(pairs) == 1 else f"{pairs[0]}-{pairs[-1]}" if pairs else "0"
    budget, target = cfg.known("schedule.budget_s"), cfg.known("schedule.precision_pct")
    if target is not None:
        limit = f" or {duration(budget)}" if budget else ""
        return (
            f"until every cell is within +-{target:g}% (at least {cfg.known('schedule.min_pairs')} "
            f"pairs){limit}: {got} process pairs per cell"
        )
    if cfg.known("schedule.kind") == "auto":
        return f"until the budget of {duration(budget)}: {got} process pairs per cell"
    limit = f" (budget {duration(budget)}: {got} ran)" if budget else ""
    return f"{cfg.known('schedule.processes')} process pairs{limit}"


def side_text(desc: dict) -> str:
    bits = []
    if desc.get("sha"):
        bits.append(desc["sha"][:10] + (" (dirty)" if desc.get("dirty") else ""))
        if desc.get("subject"):
            bits.append(repr(desc["subject"][:60]))
    if desc.get("strategy"):
        how = "from the cache" if desc.get("ext_reused") else "built"
        extension = f" (extension {how} {desc['ext_key'][:8]})" if desc.get("ext_key") else ""
        bits.append(f"strategy {desc['strategy']}{extension}")
    if desc.get("sys_path"):
        bits.append("path " + ":".join(desc["sys_path"]))
    if desc.get("python"):
        bits.append(f"python {desc['python']}")
    pythonpath = (desc.get("env") or {}).get("PYTHONPATH")
    if pythonpath:  # inherited from the shell: a factory outside the side's tree may come from there
        bits.append(f"PYTHONPATH {pythonpath}")
    return f"{desc.get('label', '?')}: " + ", ".join(bits)


def counters_text(counters, compare: bool = False) -> str:
    """Changes head - base; one side's counts where there is only one (labelled in a compare)."""
    if not counters or not counters.get("base"):
        return ""
    if counters.get("head") is None:
        c = counters["base"]
        text = ", ".join(f"{k} {v}" for k, v in c.items() if v is not None and not isinstance(v, list))
        return f"base only (counts, not changes): {text}" if compare and text else text
    return counters_diff(counters["base"], counters["head"])


def _header(summary: Summary, cfg: RecordedConfig, metric: str) -> list[str]:
    """Code problems, the sides and what they imported, and the schedule, above the table."""
    meta = summary.meta
    sides = meta.sides
    header = [f"WARNING: {p}" for p in summary.code_problems]
    header += [side_text(d) for d in sides.values() if isinstance(d, dict)]
    header += [side_line(label, facts) for label, facts in summary.imported.items()]
    head_side = sides.get("head") if isinstance(sides.get("head"), dict) else {}
    header += [f"note: {n}" for n in head_side.get("notes") or []]
    host = meta.host
    sched = cfg.schedule
    known_size = cfg.planned_pairs or cfg.open_ended
    if known_size and {"schedule.rounds", "schedule.trials", "schedule.iters"} <= cfg.recorded:
        # auto: the pilot's trials, then the footer's choice
        trials = "auto" if cfg.known("schedule.kind") == "auto" else sched.trials
        plan = f"{schedule_text(cfg, summary.rows)} x {sched.rounds} rounds x {trials} trials x "
        plan += f"{sched.iters} iters"
    else:
        plan = "schedule unknown (meta.json does not say)"
    header.append(
        f"{plan}; core {cfg.known('core', '?')}; {cfg.known('device', '?')} "
        f"({host.get('gpu') or host.get('cpu_model', '?')}); "
        f"median {metric} time per fwd+bwd step"
    )
    return header


def _compare_footer(rows: list[Row], stats, levels: TableLevels | None) -> list[str]:
    """How a compare table's intervals and verdicts are made (after the summary's notes)."""
    footer = []
    if levels and levels.family > 1:
        footer.append(
            f"table rule: Benjamini-Hochberg over the {levels.family} cells that could be called finds "
            f"{levels.changed} changed, so every interval is a {level_text(levels.alpha)} one: with no real "
            f"change, any slower/faster in this table has a chance <= {stats.alpha:g}"
        )
    mdes = [r.mde_pct for r in rows if r.mde_pct is not None]
    if mdes:
        footer.append(
            f"smallest detectable change (80% power): {min(mdes):.1f}% .. {max(mdes):.1f}% per cell"
        )
    effect = stats.min_effect_pct
    unit = "pairs (pair = unit)"
    if any(r.ci_basis == "generations" for r in rows):  # "one generation": over its pairs
        unit = "fork-server generations (generation = unit, each the mean of its pairs)"
    footer.append(f"intervals: Student t over {unit} of the median log ratio of adjacent A/B trial couples")
    footer.append(
        f"verdicts: slower/faster = the interval excludes 0 and the change is at least {effect:g}%; "
        f"no change = the whole interval inside +-{effect:g}%; inconclusive = neither, with the change it "
        "could not rule out"
    )
    bounds = [r for r in rows if r.load_bound_pct is not None]
    if bounds:
        limit, most = stats.max_contended_pct, max(bounds, key=lambda r: r.load_bound_pct)
        footer.append(
            f"load: {len(bounds)} cell(s) had more than {limit:g}% of their trial couples share the measuring"
            f" core in every attempt (up to {max(r.contended_pct for r in bounds):.0f}%); their figures "
            f"count them and their intervals are widened by the bias load could add (up to "
            f"+-{most.load_bound_pct:.1f}%, from {most.load_bound_source or 'the couples'}); "
            "inconclusive (load) = the change is within that"
        )
    return footer


def key_columns(rows: list[Row], mode: bool | None = None) -> list[str]:
    """The columns that name a cell: module, recipe, and shape and mode where the rows differ in them."""
    show_shape = len({r.shape for r in rows}) > 1
    show_mode = len({r.mode for r in rows}) > 1 if mode is None else mode
    return ["module", "recipe"] + ["shape"] * show_shape + ["mode"] * show_mode


def _compare_columns(summary: Summary) -> list[str]:
    base, head = list(summary.meta.sides)[:2]
    return [base, head, "delta", "delta %", f"{level_text(summary.interval_alpha)} CI"]


def _step_cells(summary: Summary, r: Row, show_pairs: bool, show_why: bool) -> tuple[list[str], str | None]:
    """A row's cells after its key columns, and its style."""
    status = r.status
    got = f"{r.n_pairs or 0}" + (f"/{r.pairs_planned}" if r.pairs_planned else "")  # no plan: --precision
    pairs = [got if status != "skipped" else ""] if show_pairs else []
    if status in ("skipped", "failed", "missing"):
        reason = (r.error or "")[:90]
        # compare: base, head, delta, delta %, CI, [pairs], verdict (and the reason once more);
        # run: median, spread, main thread, wall, between pairs, [pairs], why
        line = [STATUS_TEXT[status]] + [""] * 4 + pairs + [reason] * (2 if summary.compare else 1)
        return line, "dim" if status == "skipped" else "red"
    if summary.compare:
        ci = "-" if r.ci_low_us is None else f"[{r.ci_low_us:+,.1f}, {r.ci_high_us:+,.1f}] us"
        v = verdict_text(r) + (" (partial)" if status == "partial" else "")
        line = [us(r.base_us), us(r.head_us), signed_us(r.delta_us), pct(r.delta_pct), ci]
        return line + pairs + [v], STYLE.get(r.verdict)
    line = [us(r.base_us), pct(r.base_spread_pct, signed=False), us(r.base_thread_us)]
    line += [us(r.base_wall_us), pct(r.pair_sd_pct, signed=False)] + pairs
    line += [(r.error or "")[:90]] if show_why else []
    return line, None if status == "ok" else "yellow"


def table_model(summary: Summary) -> TableModel:
    stats = summary.settings
    header = _header(summary, summary.config, stats.metric.replace("_", " "))
    show_counters = any(r.counters for r in summary.rows)
    show_host = any(r.host_bound is not None for r in summary.rows)
    show_pairs = summary.show_pairs
    keys = key_columns(summary.rows)
    cols = list(keys)
    if summary.compare:
        cols += _compare_columns(summary) + ["pairs"] * show_pairs + ["verdict"]
    else:
        cols += ["median", "spread (IQR)", "main thread", "wall", "between pairs"] + ["pairs"] * show_pairs
    # a run has no verdict column to say why a cell was not measured: its own column, where one needs it
    show_why = not summary.compare and any(r.status in ("skipped", "failed", "missing") for r in summary.rows)
    cols += ["why"] * show_why + ["host-bound"] * show_host + ["counters"] * show_counters
    rows, styles = [], []
    for r in summary.rows:
        cells, style = _step_cells(summary, r, show_pairs, show_why)
        line = [getattr(r, k) for k in keys] + cells
        if show_host:
            line.append({True: "yes", False: "GPU-bound", None: "-"}[r.host_bound])
        if show_counters:
            line.append(counters_text(r.counters, summary.compare))
        rows.append(line)
        styles.append(style)
    footer = list(summary.notes) + (
        _compare_footer(summary.rows, stats, summary.levels) if summary.compare else []
    )
    if summary.path:
        footer.append(f"bundle: {summary.path}")
    title = "teperf compare" if summary.compare else "teperf run"
    return TableModel(title=title, header=header, columns=cols, rows=rows, styles=styles, footer=footer)


ONETIME_HEADER = (
    "what a cell costs once, before its first fast step: the first call (eager: the first step; compile: "
    "tracing and compiling; cuda-graph: the capture) and, for compile, the recompile when the recipe changes"
)


def _onetime_cells(summary: Summary, r: Row, cost: str) -> tuple[list[str], str | None]:
    g = lambda k: getattr(r, f"{cost}_{k}")  # noqa: E731
    if summary.compare:
        ci = "-" if g("ci_low_ms") is None else f"[{g('ci_low_ms'):+,.2f}, {g('ci_high_ms'):+,.2f}] ms"
        verdict = verdict_text(onetime(r, cost))
        line = [ms(g("base_ms")), ms(g("head_ms")), signed_ms(g("delta_ms")), pct(g("delta_pct")), ci]
        return line + [str(g("n_pairs") or 0), verdict], STYLE.get(g("verdict"))
    line = [ms(g("base_ms")), pct(g("pair_sd_pct"), signed=False), str(g("n_pairs") or 0)]
    if cost != "first_call":
        return line + ["", "", ""], None
    extra, saves = signed_ms(r.onetime_extra_ms), signed_us(r.saving_per_step_us)
    steps = r.break_even_steps  # "never", or None where a figure is missing
    return line + [extra, saves, f"{steps:,}" if isinstance(steps, int) else str(steps or "-")], None


def onetime_model(summary: Summary) -> TableModel | None:
    """The second table: one-time costs per cell (first call, recompile), None when the bundle has none."""
    lines = [
        (r, cost) for r in summary.rows for cost in ONETIME_COSTS if getattr(r, f"{cost}_base_ms") is not None
    ]
    if not lines:
        return None
    keys = key_columns(summary.rows, mode=True)
    cols = keys + ["cost"]
    if summary.compare:
        cols += _compare_columns(summary) + ["pairs", "verdict"]
    else:
        cols += ["median", "between pairs", "pairs", "extra vs eager", "saves per step", "break-even (steps)"]
    rows, styles = [], []
    for r, cost in lines:
        cells, style = _onetime_cells(summary, r, cost)
        rows.append([getattr(r, k) for k in keys] + [cost.replace("_", " ")] + cells)
        styles.append(style)
    return TableModel("one-time costs", [ONETIME_HEADER], cols, rows, styles, list(summary.onetime_notes))


KEY_COLUMNS = ("module", "recipe", "shape", "mode", "cost", "lane")


def render_rich(model: TableModel, console) -> None:
    from rich.markup import escape  # cells hold paths, commit subjects, error text: not markup
    from rich.table import Table

    def safe(text):
        return escape(for_terminal(text))

    widths = column_widths(model, console.width - 3 * len(model.columns) - 1)  # the box: 3 a column
    if widths == []:  # no table fits without splitting a word (a figure mid-digit): one paragraph a row
        _render_rows(model, console, safe)
    else:
        table = Table(
            title=model.title,
            caption=safe("\n".join(model.header)),
            caption_justify="left",
            title_justify="left",
        )
        text = ("module", "recipe", "shape", "mode", "verdict", "counters", "why")  # when numeric is None
        for col, width in zip(model.columns, widths or [None] * len(model.columns)):
            right = col in model.numeric if model.numeric is not None else col not in text
            # fold, not ellipsis: a path longer than its column keeps its end
            table.add_column(safe(col), justify="right" if right else "left", overflow="fold", width=width)
        for row, style in zip(model.rows, model.styles):
            table.add_row(*(safe(cell) for cell in row), style=style)
        console.print(table)
    for line in model.footer:
        console.print(f"[dim]{safe(line)}[/dim]", highlight=False)


def column_widths(model: TableModel, room: int) -> list[int] | None:
    """Each column's width in ``room`` characters: None where every cell fits on one line (rich lays it
    out); else at least the column's longest word (a path caps at 40: it may fold) and the rest of the room
    shared by what each column lacks; [] where even the longest words do not fit."""
    cells = [
        [for_terminal(col), *(for_terminal(row[i]) for row in model.rows)]
        for i, col in enumerate(model.columns)
    ]
    widest = [max(len(line) for text in column for line in text.splitlines() or [""]) for column in cells]
    if sum(widest) <= room:
        return None
    least = [min(40, max(len(w) for text in column for w in [*text.split(), ""])) for column in cells]
    if sum(least) > room:
        return []
    widths, spare = list(least), room - sum(least)
    # the columns that lack least get all they lack first (a figure and its unit stay on one line); the
    # rest share what is left
    order = sorted(range(len(widths)), key=lambda i: widest[i] - least[i])
    for n, i in enumerate(order):
        left = order[n:]
        lacking = sum(widest[j] - least[j] for j in left)
        if widest[i] - least[i] <= spare:
            spare -= widest[i] - least[i]
            widths[i] = widest[i]
        else:
            for j in left:
                widths[j] += spare * (widest[j] - least[j]) // lacking
            break
    return widths


def _render_rows(model: TableModel, console, safe) -> None:
    """The table as one paragraph per row ("Linear fp32: base 82.1 us, head 82.4 us, ..."), for a terminal too
    narrow for its columns: wrapped between words, so no figure is split."""
    console.print(f"[italic]{safe(model.title)}[/italic]", highlight=False)
    keys = [i for i, col in enumerate(model.columns) if col in KEY_COLUMNS]
    for row, style in zip(model.rows, model.styles):
        name = " ".join(str(row[i]) for i in keys)
        rest = ", ".join(f"{col} {row[i]}" for i, col in enumerate(model.columns) if i not in keys and row[i])
        console.print(safe(f"{name}: {rest}"), style=style or "", highlight=False)
    for line in model.header:
        console.print(safe(line), highlight=False)


def render_markdown(model: TableModel) -> str:
    out = [f"**{model.title}**", ""]
    esc = for_markdown  # names, subjects and errors come from configs, code and git
    out += [f"- {esc(h)}" for h in model.header] + [""] + _pipe_table(model) + [""]
    # GitHub renders consecutive <sub> lines as one block; <br> keeps them apart.
    out.append("<br>\n".join(f"<sub>{esc(f)}</sub>" for f in model.footer))
    return "\n".join(out) + "\n"


def _pipe_table(model: TableModel) -> list[str]:
    line = lambda cells: "| " + " | ".join(for_markdown(c) for c in cells) + " |"  # noqa: E731
    return [line(model.columns), "|" + "|".join("---" for _ in model.columns) + "|", *map(line, model.rows)]


def _side_name(desc: dict) -> str:
    """A side in a few characters: its commit, else its path or interpreter."""
    short = desc.get("short_sha") or (desc.get("sha") or "")[:10]
    return short or ":".join(desc.get("sys_path") or ()) or desc.get("python") or desc.get("label", "?")


def verdict_line(summary: Summary) -> str:
    """The one line a pull request's reader sees first: how the cells came out, the changed ones named, and
    which sides; the table and the rest follow it."""
    sides = [d for d in summary.meta.sides.values() if isinstance(d, dict)]
    if not summary.compare:
        measured = sum(r.status in ("ok", "partial") for r in summary.rows)
        return f"teperf run: {measured} of {len(summary.rows)} cells measured"
    counted = [r for r in summary.rows if r.status in ("ok", "partial")]
    counts = [(v, sum(r.verdict == v for r in counted)) for v in (SLOWER, FASTER, INCONCLUSIVE, NO_CHANGE)]
    parts = [f"{n} {v}" for v, n in counts if n]
    unmeasured = [(s, sum(r.status == s for r in summary.rows)) for s in ("failed", "missing")]
    parts += [f"{n} {STATUS_TEXT[s]}" for s, n in unmeasured if n]
    # failing_cells also lists the cells too few units left undecided (a gate fails them): said apart
    changed = [
        c for c in failing_cells(summary.rows, {SLOWER, FASTER}) if f" {SLOWER}" in c or f" {FASTER}" in c
    ]
    if few := sum(r.verdict_cause == FEW_UNITS for r in counted):
        parts.append(f"{few} with too few units for a verdict (a --fail-on gate fails them)")
    named = f": {'; '.join(changed[:4])}{'; ...' if len(changed) > 4 else ''}" if changed else ""
    between = " .. ".join(f"{d.get('label', '?')} {_side_name(d)}" for d in sides[:2])
    return f"teperf: {', '.join(parts) or 'no cells'}{named} ({between})"


def render_comment(summary: Summary, console=None) -> str:
    """A pull-request comment (GitHub markdown): the verdict line, any reason the figures do not compare
    what was named, the table; then, folded in <details>, what each side ran, the counters that changed,
    the schedule, the notes and the one-time costs."""
    esc = for_markdown
    model = table_model(summary)
    counters = []
    if "counters" in model.columns:  # per cell in the details: a wide column would crowd the table
        at, keys = model.columns.index("counters"), len(key_columns(summary.rows))
        counters = [("/".join(row[:keys]), row[at]) for row in model.rows if row[at]]
        model.columns = model.columns[:at] + model.columns[at + 1 :]
        model.rows = [row[:at] + row[at + 1 :] for row in model.rows]
    out = [f"**{esc(verdict_line(summary))}**", ""]
    out += [f"> **WARNING:** {esc(p)}" for p in summary.code_problems] + [""] * bool(summary.code_problems)
    out += _pipe_table(model) + [""]
    out += ["<details><summary>What each side ran, counters, schedule and notes</summary>", ""]
    out += [f"- {esc(h)}" for h in model.header if not h.startswith("WARNING: ")] + [""]
    if counters:
        what = "Counters per step (head - base):" if summary.compare else "Counters per step:"
        out += [what, ""] + [f"- {esc(c)}: {esc(t)}" for c, t in counters] + [""]
    out += [f"- {esc(f)}" for f in model.footer] + [""]
    if (onetime_table := onetime_model(summary)) is not None:
        out.append(render_markdown(onetime_table))
    out += ["</details>", ""]
    return "\n".join(out)


def json_value(v):
    """NaN and infinities as null: JSON has no words for them."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


def csv_text(fields, rows) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _flat_rows(summary: Summary) -> list[dict]:
    return [{k: json_value(getattr(r, k)) for k in ROW_FIELDS} for r in summary.rows]


def render_json(summary: Summary, console=None) -> str:
    names = ("rows", "notes", "onetime_notes", "imported", "code_problems")
    data = {"meta": summary.meta.to_dict()} | {name: getattr(summary, name) for name in names}
    data["rows"] = _flat_rows(summary)
    data["table_levels"] = dataclasses.asdict(summary.levels) if summary.levels else None
    return json.dumps(data, indent=2, default=str) + "\n"


def render_csv(summary: Summary, console=None) -> str:
    flat = _flat_rows(summary)
    for row in flat:
        for k in ("counters", "info"):
            row[k] = json.dumps(row[k], sort_keys=True) if row[k] is not None else ""
    return csv_text(ROW_FIELDS, flat)


def _render_markdown(summary: Summary, console=None) -> str:
    return "\n".join(render_markdown(m) for m in _models(summary))


def _render_table(summary: Summary, console=None) -> None:
    for model in _models(summary):
        render_rich(model, console)


def _models(summary: Summary) -> list[TableModel]:
    return [m for m in (table_model(summary), onetime_model(summary)) if m is not None]


# fmt -> fn(summary, console): the text to print, or None where it printed on ``console`` itself
RENDERERS = {
    "table": _render_table,
    "markdown": _render_markdown,
    "comment": render_comment,
    "json": render_json,
    "csv": render_csv,
}
FORMATS = tuple(RENDERERS)


def render(summary: Summary, fmt: str, console=None) -> str | None:
    return RENDERERS[fmt](summary, console)
