"""One table model -> rich / markdown / json / csv.

``table_model`` decides what is shown and how numbers are written; the
renderers only lay it out, so every format says the same thing.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math

from teperf.numbers import duration, ms, pct, signed_ms, signed_us, us
from teperf.provenance import side_line
from teperf.safe_text import for_markdown, for_terminal
from teperf.schema import ROW_FIELDS
from teperf.summary import Summary

FORMATS = ("table", "markdown", "json", "csv")
VERDICT_STYLE = {"slower": "bold red", "faster": "bold green", "no change": "dim", "inconclusive": "yellow"}
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


def verdict_text(row: dict) -> str:
    """The verdict as the table shows it: an inconclusive one with the change it could not rule out."""
    v = row.get("verdict") or "-"
    if v == "inconclusive" and row.get("verdict_cause") == "load":
        v += f" (load: {row.get('contended_pct') or 0:.0f}% contended)"
    elif v == "inconclusive" and row.get("bound_pct") is not None:
        v += f" (up to {row['bound_pct']:+.1f}%)"
    return v


def schedule_text(sched: dict, rows: list[dict]) -> str:
    """How many pairs: fixed, or until the precision target / budget (with the pairs each cell got)."""
    pairs = sorted({r["n_pairs"] for r in rows if r.get("n_pairs")})
    got = f"{pairs[0]}" if len(pairs) == 1 else f"{pairs[0]}-{pairs[-1]}" if pairs else "0"
    budget = sched.get("budget_s")
    if sched.get("precision_pct") is not None:
        limit = f" or {duration(budget)}" if budget else ""
        return (
            f"until every cell is within +-{sched['precision_pct']:g}% (at least {sched.get('min_pairs')} "
            f"pairs){limit}: "
            f"{got} process pairs per cell"
        )
    limit = f" (budget {duration(budget)}: {got} ran)" if budget else ""
    return f"{sched.get('processes')} process pairs{limit}"


def pairs_text(row: dict) -> str:
    """The pairs cell: '3/8' of a fixed schedule, '12' where --precision left the number open."""
    got = row.get("n_pairs") or 0
    return f"{got}/{row['pairs_planned']}" if row.get("pairs_planned") else str(got)


def side_text(desc: dict) -> str:
    label = desc.get("label", "?")
    bits = []
    if desc.get("sha"):
        bits.append(desc["sha"][:10] + (" (dirty)" if desc.get("dirty") else ""))
        if desc.get("subject"):
            bits.append(repr(desc["subject"][:60]))
    if desc.get("strategy"):
        extension = ""
        if desc.get("ext_key"):
            extension = (
                f" (extension {'from the cache' if desc.get('ext_reused') else 'built'} "
                f"{desc['ext_key'][:8]})"
            )
        bits.append(f"strategy {desc['strategy']}{extension}")
    if desc.get("sys_path"):
        bits.append("path " + ":".join(desc["sys_path"]))
    if desc.get("python"):
        bits.append(f"python {desc['python']}")
    pythonpath = (desc.get("env") or {}).get("PYTHONPATH")
    if pythonpath:  # inherited from the shell: a factory outside the side's tree may come from there
        bits.append(f"PYTHONPATH {pythonpath}")
    return f"{label}: " + ", ".join(bits)


def counters_text(counters, compare: bool = False) -> str:
    """Changes head - base; one side's counts where there is only one (a run, or a compare cut short
    before head counted: labelled, as the other rows of that table are deltas)."""
    if not counters or not counters.get("base"):
        return ""
    if counters.get("head") is None:
        c = counters["base"]
        text = ", ".join(f"{k} {v}" for k, v in c.items() if v is not None and not isinstance(v, list))
        return f"base only (counts, not changes): {text}" if compare and text else text
    from teperf.explain.render import counters_diff

    return counters_diff(counters["base"], counters["head"])


def _header(summary: Summary, cfg: dict, metric: str) -> list[str]:
    """Code problems, the sides and what they imported, and the schedule, above the table."""
    meta = summary.meta
    sched = cfg.get("schedule", {})
    sides = meta.get("sides") if isinstance(meta.get("sides"), dict) else {}
    header = [f"WARNING: {p}" for p in summary.code_problems]
    header += [side_text(d) for d in sides.values() if isinstance(d, dict)]
    header += [side_line(label, facts) for label, facts in summary.imported.items()]
    head_side = sides.get("head") if isinstance(sides.get("head"), dict) else {}
    header += [f"note: {n}" for n in head_side.get("notes") or []]
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    known_size = isinstance(sched.get("processes"), int) or sched.get("precision_pct") is not None
    if known_size and all(isinstance(sched.get(k), int) for k in ("rounds", "trials", "iters")):
        plan = (
            f"{schedule_text(sched, summary.rows)} x {sched['rounds']} rounds x {sched['trials']} trials x "
            f"{sched['iters']} iters"
        )
    else:
        plan = "schedule unknown (meta.json does not say)"
    header.append(
        f"{plan}; core {cfg.get('core', '?')}; {cfg.get('device', '?')} "
        f"({host.get('gpu') or host.get('cpu_model', '?')}); "
        f"median {metric} time per fwd+bwd step"
    )
    return header


def _compare_footer(rows: list[dict], stats) -> list[str]:
    """How a compare table's intervals and verdicts are made (after the summary's notes)."""
    footer = []
    mdes = [r["mde_pct"] for r in rows if r.get("mde_pct") is not None]
    if mdes:
        footer.append(
            f"smallest detectable change (80% power): {min(mdes):.1f}% .. {max(mdes):.1f}% per cell"
        )
    effect = stats.min_effect_pct
    unit = "pairs (pair = unit)"
    if any(r.get("ci_basis") == "generations" for r in rows):  # "one generation": over its pairs
        unit = "fork-server generations (generation = unit, each the mean of its pairs)"
    footer.append(f"intervals: Student t over {unit} of the median log ratio of adjacent A/B trial couples")
    footer.append(
        f"verdicts: slower/faster = the interval excludes 0 and the change is at least {effect:g}%; no "
        "change = the "
        f"whole interval inside +-{effect:g}%; inconclusive = neither, with the change it could not rule out"
    )
    if any(r.get("verdict_cause") == "load" for r in rows):
        limit = stats.max_contended_pct
        footer.append(
            f"inconclusive (load) = more than {limit:g}% of the cell's trial couples shared the measuring "
            "core "
            "in every attempt: its figures include them and no verdict stands"
        )
    return footer


def table_model(summary: Summary) -> TableModel:
    meta = summary.meta
    cfg = meta.get("config", {})
    stats = summary.settings
    metric, alpha = stats.metric.replace("_", " "), stats.alpha
    header = _header(summary, cfg, metric)
    show_mode = len({r["mode"] for r in summary.rows}) > 1
    show_shape = len({r["shape"] for r in summary.rows}) > 1
    show_counters = any(r.get("counters") for r in summary.rows)
    show_host = any(r.get("host_bound") is not None for r in summary.rows)
    show_pairs = summary.show_pairs
    cols = ["module", "recipe"] + (["shape"] if show_shape else []) + (["mode"] if show_mode else [])
    if summary.compare:
        labels = list(meta["sides"])
        cols += [labels[0], labels[1], "delta", "delta %", f"{int(round((1 - alpha) * 100))}% CI"]
        cols += (["pairs"] if show_pairs else []) + ["verdict"]
    else:
        cols += ["median", "spread (IQR)", "main thread", "wall", "between pairs"] + (
            ["pairs"] if show_pairs else []
        )
    # a run has no verdict column to say why a cell was not measured: its own column, where one needs it
    show_why = not summary.compare and any(
        r.get("status") in ("skipped", "failed", "missing") for r in summary.rows
    )
    cols += ["why"] if show_why else []
    if show_host:
        cols.append("host-bound")
    if show_counters:
        cols.append("counters")
    rows, styles = [], []
    for r in summary.rows:
        line = (
            [r["module"], r["recipe"]]
            + ([r["shape"]] if show_shape else [])
            + ([r["mode"]] if show_mode else [])
        )
        status = r.get("status")
        pairs = [pairs_text(r) if status != "skipped" else ""] if show_pairs else []
        if status in ("skipped", "failed", "missing"):
            reason = (r.get("error") or "")[:90]
            if summary.compare:  # base, head, delta, delta %, CI, [pairs], verdict
                line += [STATUS_TEXT[status]] + [""] * 4 + pairs + [reason] + [reason]
            else:  # median, spread, main thread, wall, between pairs, [pairs], why
                line += [STATUS_TEXT[status]] + [""] * 4 + pairs + [reason]
            style = "dim" if status == "skipped" else "red"
        elif summary.compare:
            ci = "-"
            if r.get("ci_low_us") is not None:
                ci = f"[{r['ci_low_us']:+,.1f}, {r['ci_high_us']:+,.1f}] us"
            v = verdict_text(r)
            if status == "partial":
                v += " (partial)"
            line += [us(r["base_us"]), us(r["head_us"]), signed_us(r["delta_us"]), pct(r["delta_pct"]), ci]
            line += pairs + [v]
            style = VERDICT_STYLE.get(r.get("verdict"))
        else:
            between = "-" if r.get("pair_sd_pct") is None else f"{r['pair_sd_pct']:.1f}%"
            spread = "-" if r.get("base_spread_pct") is None else f"{r['base_spread_pct']:.1f}%"
            line += [
                us(r["base_us"]),
                spread,
                us(r.get("base_thread_us")),
                us(r.get("base_wall_us")),
                between,
            ] + pairs
            line += [(r.get("error") or "")[:90]] if show_why else []
            style = None if status == "ok" else "yellow"
        if show_host:
            line.append({True: "yes", False: "GPU-bound", None: "-"}[r.get("host_bound")])
        if show_counters:
            line.append(counters_text(r.get("counters"), summary.compare))
        rows.append(line)
        styles.append(style)
    footer = list(summary.notes) + (_compare_footer(summary.rows, stats) if summary.compare else [])
    if summary.path:
        footer.append(f"bundle: {summary.path}")
    title = "teperf compare" if summary.compare else "teperf run"
    return TableModel(title=title, header=header, columns=cols, rows=rows, styles=styles, footer=footer)


ONETIME_LABEL = {"first_call": "first call", "recompile": "recompile"}


def onetime_model(summary: Summary) -> TableModel | None:
    """The second table: one-time costs per cell (first call, recompile), None when the bundle has none."""
    from teperf.schema import ONETIME_COSTS

    lines = [
        (r, cost) for r in summary.rows for cost in ONETIME_COSTS if r.get(f"{cost}_base_ms") is not None
    ]
    if not lines:
        return None
    show_shape = len({r["shape"] for r in summary.rows}) > 1
    cols = ["module", "recipe"] + (["shape"] if show_shape else []) + ["mode", "cost"]
    alpha = summary.settings.alpha
    if summary.compare:
        labels = list(summary.meta["sides"])
        cols += [
            labels[0],
            labels[1],
            "delta",
            "delta %",
            f"{int(round((1 - alpha) * 100))}% CI",
            "pairs",
            "verdict",
        ]
    else:
        cols += ["median", "between pairs", "pairs", "extra vs eager", "saves per step", "break-even (steps)"]
    rows, styles = [], []
    for r, cost in lines:
        g = lambda k: r.get(f"{cost}_{k}")  # noqa: E731
        line = (
            [r["module"], r["recipe"]]
            + ([r["shape"]] if show_shape else [])
            + [r["mode"], ONETIME_LABEL[cost]]
        )
        if summary.compare:
            ci = "-" if g("ci_low_ms") is None else f"[{g('ci_low_ms'):+,.2f}, {g('ci_high_ms'):+,.2f}] ms"
            line += [
                ms(g("base_ms")),
                ms(g("head_ms")),
                signed_ms(g("delta_ms")),
                pct(g("delta_pct")),
                ci,
                str(g("n_pairs") or 0),
                verdict_text({"verdict": g("verdict"), "bound_pct": g("bound_pct")}),
            ]
            styles.append(VERDICT_STYLE.get(g("verdict")))
        else:
            between = "-" if g("pair_sd_pct") is None else f"{g('pair_sd_pct'):.1f}%"
            first = cost == "first_call"
            steps = r.get("break_even_steps") if first else None
            steps_text = (
                ""
                if not first
                else "-"
                if steps is None
                else f"{steps:,}"
                if isinstance(steps, int)
                else str(steps)
            )
            line += [
                ms(g("base_ms")),
                between,
                str(g("n_pairs") or 0),
                signed_ms(r.get("onetime_extra_ms")) if first else "",
                signed_us(r.get("saving_per_step_us")) if first else "",
                steps_text,
            ]
            styles.append(None)
        rows.append(line)
    header = [
        "what a cell costs once, before its first fast step: the first call (eager: the first step; compile: "
        "tracing and compiling; cuda-graph: the capture) and, for compile, the recompile when the recipe "
        "changes"
    ]
    return TableModel(
        title="one-time costs",
        header=header,
        columns=cols,
        rows=rows,
        styles=styles,
        footer=list(summary.onetime_notes),
    )


def render_rich(model: TableModel, console) -> None:
    from rich.markup import escape  # cells hold paths, commit subjects, error text: not markup
    from rich.table import Table

    def safe(text):
        return escape(for_terminal(text))

    table = Table(
        title=model.title, caption=safe("\n".join(model.header)), caption_justify="left", title_justify="left"
    )
    for col in model.columns:
        if model.numeric is not None:
            right = col in model.numeric
        else:
            right = col not in ("module", "recipe", "shape", "mode", "verdict", "counters", "why")
        # fold, not ellipsis: a long module name or path must keep its end on a narrow terminal
        table.add_column(safe(col), justify="right" if right else "left", overflow="fold")
    for row, style in zip(model.rows, model.styles):
        table.add_row(*(safe(cell) for cell in row), style=style)
    console.print(table)
    for line in model.footer:
        console.print(f"[dim]{safe(line)}[/dim]", highlight=False)


def render_markdown(model: TableModel) -> str:
    out = [f"**{model.title}**", ""]
    esc = for_markdown  # names, subjects and errors come from configs, code and git
    out += [f"- {esc(h)}" for h in model.header]
    out.append("")
    out.append("| " + " | ".join(esc(c) for c in model.columns) + " |")
    out.append("|" + "|".join("---" for _ in model.columns) + "|")
    for row in model.rows:
        out.append("| " + " | ".join(esc(c) for c in row) + " |")
    out.append("")
    # GitHub renders consecutive <sub> lines as one block; <br> keeps them apart.
    out.append("<br>\n".join(f"<sub>{esc(f)}</sub>" for f in model.footer))
    return "\n".join(out) + "\n"


def _clean(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def render_json(summary: Summary) -> str:
    rows = [{k: _clean(r.get(k)) for k in ROW_FIELDS} for r in summary.rows]
    data = {
        "meta": summary.meta,
        "rows": rows,
        "notes": summary.notes,
        "onetime_notes": summary.onetime_notes,
        "imported": summary.imported,
        "code_problems": summary.code_problems,
    }
    return json.dumps(data, indent=2, default=str) + "\n"


def render_csv(summary: Summary) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(ROW_FIELDS), extrasaction="ignore")
    writer.writeheader()
    for r in summary.rows:
        flat = {k: _clean(r.get(k)) for k in ROW_FIELDS}
        for k in ("counters", "info"):
            flat[k] = json.dumps(flat[k], sort_keys=True) if flat[k] is not None else ""
        writer.writerow(flat)
    return buf.getvalue()


def render(summary: Summary, fmt: str, console=None) -> str | None:
    if fmt == "json":
        return render_json(summary)
    if fmt == "csv":
        return render_csv(summary)
    models = [m for m in (table_model(summary), onetime_model(summary)) if m is not None]
    if fmt == "markdown":
        return "\n".join(render_markdown(m) for m in models)
    for model in models:
        render_rich(model, console)
    return None
