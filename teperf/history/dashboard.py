"""The nightly dashboard: a static site that works offline (plotly.js copied from the installed package).

Subjects, refs and errors are untrusted: Jinja2 autoescapes; the one ``|safe`` value, the figure JSON, has
``<>&`` escaped (_SCRIPT_ESCAPES) and its strings HTML-escaped (_esc); the CSP allows no inline script."""

from __future__ import annotations

import collections
import datetime as _dt
import hashlib
import html
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Sequence

from teperf import __version__, numbers
from teperf.errors import TeperfError
from teperf.history import changepoint
from teperf.history.analysis import Cell, Found, Point, analyze
from teperf.history.explain import as_dict, explanation_of
from teperf.history.nights import NEVER, Night
from teperf.history.nights import nights as find_nights
from teperf.history.store import HistoryStore
from teperf.sweep import series_from_cells
from teperf.verdicts import CSS_CLASS, HTML_COLOR

NO_VERDICT_COLOR = "#34495e"
RECENT = 7  # a step among the last RECENT commits is flagged in the overview
MARKER = ".teperf-dashboard"  # written into every site; only such a directory is ever replaced
# what could end a <script> block or a JavaScript string, as JSON escapes
_SCRIPT_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _esc(text) -> str:
    """For strings inside plotly figures: plotly renders a subset of HTML tags in hover labels,
    tick labels and annotations, and decodes &lt; &gt; &amp; (but not &quot;) back to text."""
    return html.escape("" if text is None else str(text), quote=False)


def _fmt_pct(v) -> str:
    return numbers.pct(v, none="n/a")


def _fmt_date(d) -> str:
    return d.strftime("%Y-%m-%d %H:%M UTC") if isinstance(d, _dt.datetime) else str(d or "")


def _json_for_script(obj) -> str:
    """JSON that is safe inside <script type="application/json">: no '<', '>' or '&' survive."""
    from plotly.utils import PlotlyJSONEncoder

    return json.dumps(obj, cls=PlotlyJSONEncoder, separators=(",", ":")).translate(_SCRIPT_ESCAPES)


def _custom(p: Point) -> list:
    """A point's hover fields (customdata)."""
    ci = f"[{_fmt_pct(p.ci_low_pct)}, {_fmt_pct(p.ci_high_pct)}]" if p.ci_low_pct is not None else ""
    return [
        _esc(p.sha or p.run_id),
        _esc((p.subject or "")[:120]),
        _esc(_fmt_date(p.date)),
        _esc(p.verdict or ("failed: " + (p.error or "")[:80] if not p.ok else "no comparison")),
        _esc(_fmt_pct(p.delta_pct)),
        _esc(ci),
        _esc(p.base_sha[:10] if p.base_sha else "-"),
        _esc(f"<br>night {p.night}: {p.night_note}" if p.night_note else ""),
    ]


def _host_traces(go, cell: Cell, x: list, cd: list, colors: list) -> list:
    """The top panel's traces: the paired interval's band, the levels between changes, host time, failures."""
    pts, traces = cell.points, []
    # 95 % band of the night's paired interval, put on the head's scale: base + [ci_low, ci_high]
    lo = [p.base_us + p.ci_low_us if None not in (p.base_us, p.ci_low_us) and p.ok else None for p in pts]
    hi = [p.base_us + p.ci_high_us if None not in (p.base_us, p.ci_high_us) and p.ok else None for p in pts]
    if any(v is not None for v in lo):
        band = dict(x=x, mode="lines", line=dict(width=0), hoverinfo="skip", connectgaps=False)
        traces.append(go.Scatter(y=lo, showlegend=False, name="ci-low", **band))
        fill = dict(fill="tonexty", fillcolor="rgba(46,134,193,0.18)")
        traces.append(go.Scatter(y=hi, name="95% interval (paired)", **fill, **band))
    lx, ly = [], []  # level between change points
    for first, last, y0, y1 in cell.levels:
        flat = first == last or y0 == y1  # else a drift: its Theil-Sen line
        lx += [first - 0.4, last + 0.4, None] if flat else [first, last, None]
        ly += [y0, y1, None]
    if lx:
        traces.append(
            go.Scatter(
                x=lx,
                y=ly,
                mode="lines",
                line=dict(color="#7f8c8d", dash="dash", width=1.5),
                hoverinfo="skip",
                name="level between changes",
            )
        )
    hover = (
        "<b>%{customdata[0]}</b><br>%{customdata[1]}<br>%{customdata[2]}<br>"
        "host %{y:.1f} us/step<br>vs %{customdata[6]}: %{customdata[4]} %{customdata[5]} (%{customdata[3]})"
        "%{customdata[7]}<extra></extra>"
    )
    traces.append(
        go.Scatter(
            x=x,
            y=[p.host_us if p.ok else None for p in pts],
            mode="lines+markers",
            name="host time",
            line=dict(color="#2e86c1", width=1.5),
            marker=dict(size=8, color=colors, line=dict(width=0.5, color="#fff")),
            customdata=cd,
            hovertemplate=hover,
        )
    )
    failed = [i for i, p in enumerate(pts) if not p.ok]
    if failed:
        traces.append(
            go.Scatter(
                x=failed,
                y=[min((p.host_us for p in pts if p.ok), default=0)] * len(failed),
                mode="markers",
                name="failed",
                marker=dict(symbol="x", size=10, color="#c0392b"),
                customdata=[cd[i] for i in failed],
                hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]}<br>%{customdata[3]}<extra></extra>",
            )
        )
    return traces


_ERROR_BARS = dict(thickness=1.2, width=3, color="#5d6d7e")


def _night_trace(go, pts: list, x: list, cd: list, colors: list):
    """The bottom panel: the paired night-over-night change, with its interval."""
    err_plus = [
        p.ci_high_pct - p.delta_pct if None not in (p.ci_high_pct, p.delta_pct) else None for p in pts
    ]
    err_minus = [p.delta_pct - p.ci_low_pct if None not in (p.ci_low_pct, p.delta_pct) else None for p in pts]
    return go.Scatter(
        x=x,
        y=[p.delta_pct if p.ok else None for p in pts],
        mode="markers",
        name="night vs previous (%)",
        marker=dict(size=7, color=colors, symbol="diamond"),
        error_y=dict(type="data", symmetric=False, array=err_plus, arrayminus=err_minus, **_ERROR_BARS),
        customdata=cd,
        hovertemplate="<b>%{customdata[0]}</b><br>%{customdata[1]}<br>vs %{customdata[6]}: "
        "%{customdata[4]} %{customdata[5]}<br>%{customdata[3]}<extra></extra>",
    )


def culprit_label(cell: Cell, ch: Found, explained: dict | None) -> str:
    """What a change point's marker on the chart says of its bisect: its culprits' short shas and
    shares ("d3dd5e5 76%, 56f20dc 36%"), "noise" or "unexplained"; "" when it was not bisected."""
    rec = explanation_of(cell, ch, explained or {})
    if rec is None or rec.status == "failed":
        return ""
    named = [
        f"{c['short_sha'][:7]} {c['share'] * 100:.0f}%" for c in rec.culprits if c.get("share") is not None
    ]
    return ", ".join(named) if named else rec.status


def _change_marks(cell: Cell, explained: dict | None = None) -> tuple[list, list]:
    """(shapes, annotations): a dotted line per step, a shaded span per drift, each with culprit_label."""
    shapes, annotations = [], []
    close, row, last = max(3, len(cell.points) // 8), 0, None  # labels of nearby marks go one above the other
    for ch in cell.changes:
        row = row + 1 if last is not None and ch.index - last < close else 0
        last = ch.index
        color = HTML_COLOR[ch.direction]
        if ch.kind == "step":
            at = x1 = ch.index - 0.5
            text = f"{_fmt_pct(ch.delta_pct)} at {ch.first_bad.short_sha[:7]}"
            look = dict(type="line", line=dict(color=color, width=2, dash="dot"))
        else:
            at, x1 = (ch.index + ch.end_index) / 2, ch.end_index + 0.5
            text = f"drift {_fmt_pct(ch.delta_pct)}"
            look = dict(type="rect", fillcolor=color, opacity=0.08, line=dict(width=0))
        who = culprit_label(cell, ch, explained)
        text += f": {who}" if who else ""
        shapes.append(dict(xref="x", yref="paper", x0=ch.index - 0.5, x1=x1, y0=0, y1=1, **look))
        label = dict(x=at, yshift=15 * row, text=_esc(text), font=dict(color=color, size=11))
        annotations.append(dict(y=1.0, xref="x", yref="paper", yanchor="bottom", showarrow=False, **label))
    return shapes, annotations


def cell_figure(cell: Cell, explained: dict | None = None) -> dict:
    """One cell's plotly figure (a dict): host time over commits above, the paired night deltas below."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pts = cell.points
    x = list(range(len(pts)))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.68, 0.32], vertical_spacing=0.07)
    cd = [_custom(p) for p in pts]
    colors = [HTML_COLOR.get(p.verdict, NO_VERDICT_COLOR) for p in pts]
    for trace in _host_traces(go, cell, x, cd, colors):
        fig.add_trace(trace, row=1, col=1)
    fig.add_trace(_night_trace(go, pts, x, cd, colors), row=2, col=1)
    shapes, annotations = _change_marks(cell, explained)
    fig.add_hline(y=0, line=dict(color="#aab7b8", width=1), row=2, col=1)
    fig.update_layout(
        template="plotly_white",
        height=460,
        margin=dict(l=60, r=20, t=30 + max([a["yshift"] for a in annotations], default=0), b=40),
        hovermode="closest",
        legend=dict(orientation="h", yanchor="bottom", y=-0.22, x=0),
        shapes=shapes,
        annotations=annotations,
    )
    step = max(1, len(pts) // 25)
    fig.update_xaxes(
        tickmode="array",
        tickvals=x[::step],
        ticktext=[_esc(p.short_sha[:7]) for p in pts][::step],
        tickangle=-45,
        range=[-0.7, len(pts) - 0.3],
    )
    fig.update_yaxes(title_text="host us / step", row=1, col=1)
    fig.update_yaxes(title_text="night %", zeroline=True, row=2, col=1)
    return fig.to_plotly_json()


def _names(c: Cell) -> dict:
    """How every row of a cell names it."""
    return {"slug": c.slug, "module": c.module, "recipe": c.recipe, "variant": c.variant}


def _change_row(c: Cell, ch: Found, explained: dict | None = None) -> dict:
    """One change's table row; ``explained`` (store.explanations()) adds its culprits."""
    p, paired = ch.paired, "-"
    if p is not None and p.delta_pct is not None:
        paired = f"{_fmt_pct(p.delta_pct)} [{_fmt_pct(p.ci_low_pct)}, {_fmt_pct(p.ci_high_pct)}] {p.verdict}"
    good = ch.last_good
    span = f" over {ch.end_index - ch.index + 1} commits" if ch.kind == "drift" else ""
    return {
        **_names(c),
        "kind": ch.kind + (f"{span}, through {c.points[ch.end_index].short_sha}" if span else ""),
        "direction": ch.direction,
        "what": f"{ch.kind}, {ch.direction}" + (f" ({span[1:]})" if span else ""),
        "size_us": f"{ch.delta_us:+,.1f}",
        "size_pct": _fmt_pct(ch.delta_pct),
        "size": f"{numbers.signed_us(ch.delta_us)} ({_fmt_pct(ch.delta_pct)})",
        "bad_sha": ch.first_bad.short_sha,
        "bad_subject": ch.first_bad.subject or "",
        "bad_date": _fmt_date(ch.first_bad.date),
        "good_sha": good.short_sha if good else "-",
        "good_subject": (good.subject or "") if good else "(start of history)",
        "good_date": _fmt_date(good.date) if good else "",
        "paired": paired,
        "sort": ch.first_bad.date or NEVER,
        "explanation": as_dict(explanation_of(c, ch, explained or {})),
    }


def _night_model(n: Night) -> dict:
    return {
        "id": n.night,
        "commit": n.short_sha or "-",
        "subject": n.subject or "",
        "started": _fmt_date(n.started),
        "status": n.describe(),
        "css": "ok" if n.complete else "incomplete",
    }


def _grid_cell(c: Cell, tonight: Night | None) -> dict:
    """One cell of a machine page's grid: the latest figure, the week's change, the recent change."""
    last = c.latest
    recent = c.recent_change(RECENT)
    verdict = last.verdict if last and last.ok else None
    recent_text = None
    if recent is not None:
        where = "at" if recent.kind == "step" else "since"
        recent_text = f"{recent.kind} {_fmt_pct(recent.delta_pct)} {where} {recent.first_bad.short_sha[:7]}"
    # a cell the newest night did not measure (its shard is missing or failed) says so
    stale = tonight is not None and tonight.shas and last is not None and last.sha not in tonight.shas
    return {
        "slug": c.slug,
        "latest_us": numbers.us(last.host_us, none="n/a") if last and last.ok else "failed",
        "week": _fmt_pct(c.change_vs_week()),
        "verdict": verdict or ("failed" if last and not last.ok else "no comparison"),
        "css": CSS_CLASS.get(verdict, "none"),
        "recent": recent_text,
        "recent_css": recent.direction if recent else "",
        "stale": f"not in night {tonight.night}" if stale else None,
    }


def _grid(cells: Sequence[Cell], tonight: Night | None, recipes: list[str]) -> list[dict]:
    """A machine's overview grid: a row per module and variant, a column per recipe."""
    by_row: dict[tuple, dict] = {}
    for c in cells:
        by_row.setdefault((c.module, c.variant), {})[c.recipe] = _grid_cell(c, tonight)
    variants = collections.Counter(module for module, _ in by_row)
    return [
        {"module": m, "variant": v, "show_variant": variants[m] > 1, "cells": [row.get(r) for r in recipes]}
        for (m, v), row in sorted(by_row.items())
    ]


def _machine_models(cells: Sequence[Cell], nights: Sequence[Night] = (), explained=None) -> list[dict]:
    by_machine: dict[str, list[Cell]] = {}
    for c in cells:
        by_machine.setdefault(c.machine, []).append(c)
    models = []
    for mid, mcells in sorted(by_machine.items(), key=lambda kv: kv[1][0].machine_label):
        mine = [n for n in nights if n.machine == mid][::-1]  # newest first
        tonight = mine[0] if mine else None
        recipes = sorted({c.recipe for c in mcells})
        newest = max((c.latest for c in mcells if c.latest), key=lambda p: p.date or NEVER, default=None)
        commits = {p.sha or p.run_id for c in mcells for p in c.points}
        label = mcells[0].machine_label
        changes = [_change_row(c, ch, explained) for c in mcells for ch in c.changes]
        changes.sort(key=lambda r: r["sort"], reverse=True)
        steps = [r for r in changes if r["kind"].startswith("step")]
        groups = [
            ("Regressions (slower steps)", [r for r in steps if r["direction"] == "slower"]),
            ("Improvements (faster steps)", [r for r in steps if r["direction"] == "faster"]),
            ("Drifts", [r for r in changes if r["kind"].startswith("drift")]),
        ]
        models.append(
            {
                "id": mid,
                "label": label,
                "short": label.split(" / ")[0][:28] + (" +GPU" if "no GPU" not in label else ""),
                "page": f"machine-{mid}.html",
                "recipes": recipes,
                "grid": _grid(mcells, tonight, recipes),
                "cells_obj": mcells,
                "latest_sha": newest.short_sha if newest else "",
                "latest_subject": (newest.subject or "") if newest else "",
                "latest_date": _fmt_date(newest.date) if newest else "",
                "n_commits": len(commits),
                "groups": [{"title": title, "rows": rows} for title, rows in groups],
                "n_regressions": sum(1 for r in changes if r["direction"] == "slower"),
                "night": _night_model(tonight) if tonight is not None else None,
                "nights": [_night_model(n) for n in mine],
                "incomplete": [_night_model(n) for n in mine if not n.complete],
            }
        )
    return models


def slope_figure(series: dict) -> dict:
    """Host time against the swept value (the newest night of each value), with the fitted line."""
    import plotly.graph_objects as go

    xs, ys = series["values"], series["us"]
    fig = go.Figure(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers+lines",
            name="host time",
            text=[_esc(s) for s in series["shas"]],
            hovertemplate=f"{_esc(series['key'])} %{{x}}: %{{y:.1f}} us (%{{text}})<extra></extra>",
        )
    )
    slope = series.get("slope")
    if slope is not None:
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        fig.add_trace(
            go.Scatter(
                x=[xs[0], xs[-1]],
                y=[my + slope * (xs[0] - mx), my + slope * (xs[-1] - mx)],
                mode="lines",
                line={"dash": "dash"},
                name=f"{slope:+.2f} us per {_esc(series['key'])}",
            )
        )
    fig.update_layout(
        template="plotly_white",
        height=300,
        margin={"l": 60, "r": 20, "t": 20, "b": 40},
        xaxis_title=_esc(series["key"]),
        yaxis_title="host us per step",
    )
    return fig.to_plotly_json()


def _slope_models(cells) -> list[dict]:
    models = []
    for series in series_from_cells(cells):
        names = {k: series[k] for k in ("module", "key", "recipe", "variant")}
        models.append(
            {
                **names,
                "slug": "s" + hashlib.sha256("\0".join(names.values()).encode()).hexdigest()[:12],
                "slope": "-" if series["slope"] is None else f"{series['slope']:+.2f} us per {series['key']}",
                "figure_json": _json_for_script(slope_figure(series)),
            }
        )
    return models


def _check_replaceable(out: Path) -> None:
    """Refuse to replace ``out`` unless it is absent, an empty directory or a site built here."""
    if not os.path.lexists(out):
        return
    if out.is_dir() and not out.is_symlink() and ((out / MARKER).is_file() or not any(out.iterdir())):
        return
    raise TeperfError(f"--out {out} exists and is not a teperf dashboard", "pass a new or empty directory")


def _cell_model(c: Cell, explained: dict | None) -> dict:
    """One cell's chart on its machine's page, with the table of its changes."""
    rows = [_change_row(c, ch, explained) for ch in c.changes]
    return {
        **_names(c),
        "figure_json": _json_for_script(cell_figure(c, explained)),
        "changes": rows,
        "changes_css": "slower" if any(r["direction"] == "slower" for r in rows) else "faster",
    }


def build_site(
    cells: Sequence[Cell],
    out: str | os.PathLike,
    *,
    store: str = "",
    n_runs: int = 0,
    settings: changepoint.DetectionSettings | None = None,
    now: _dt.datetime | None = None,
    nights: Sequence[Night] = (),
    explained: dict | None = None,
) -> Path:
    """Write the site for analysed ``cells`` into ``out`` (built next to it and swapped in, so a half-written
    site is never served); returns the path of index.html. ``nights`` (of the same rows) tells which nights
    are incomplete; ``explained`` (store.explanations()) puts each change point's culprits beside it."""
    import jinja2
    import plotly.offline

    settings = settings or changepoint.DetectionSettings()
    out = Path(out)
    _check_replaceable(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:  # name --out, not the hidden directory the site is built in
        raise TeperfError(f"cannot write --out {out}: {exc.strerror}", "pass --out a directory you can write")
    os.chmod(work, 0o755)  # mkdtemp makes it private; a site is for reading
    try:
        (work / MARKER).write_text(
            f"built by teperf {__version__}; this directory is replaced on rebuild\n", encoding="utf-8"
        )
        (work / "assets").mkdir()
        (work / "assets" / "plotly.min.js").write_text(plotly.offline.get_plotlyjs(), encoding="utf-8")
        static = resources.files("teperf.history") / "static"
        for name in ("dashboard.js", "style.css"):
            (work / "assets" / name).write_bytes((static / name).read_bytes())
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("teperf.history", "templates"),
            autoescape=True,  # every {{ }} is HTML-escaped (templates end in .j2, so say it outright)
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        machines = _machine_models(cells, nights, explained)
        common = {
            "machines": machines,
            "generated": _fmt_date(now or _dt.datetime.now(_dt.timezone.utc)),
            "version": __version__,
            "store": store,
            "n_runs": n_runs,
            "settings": settings,
            "recent": RECENT,
            "n_regressions": sum(m["n_regressions"] for m in machines),
        }

        def write(name: str, template: str, title: str, **context) -> None:
            text = env.get_template(template).render(title=title, **context, **common)
            (work / name).write_text(text, encoding="utf-8")

        write("index.html", "index.html.j2", "Overview", page="index", charts=False)
        write("regressions.html", "regressions.html.j2", "Changes", page="regressions", charts=False)
        for m in machines:
            cells_m = sorted(m["cells_obj"], key=lambda c: (c.module, c.recipe, c.variant))
            page_m = {**m, "cells": [_cell_model(c, explained) for c in cells_m]}
            page_m["slopes"] = _slope_models(m["cells_obj"])
            write(m["page"], "machine.html.j2", m["label"], page=m["page"], charts=True, m=page_m)
        _check_replaceable(out)
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        if os.path.lexists(out):
            os.replace(out, old)
        os.replace(work, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out / "index.html"


def build_from_store(
    store: HistoryStore, out: str | os.PathLike, df=None, settings=None, nights=None
) -> tuple[Path, list[Cell]]:
    """The site of ``df`` (default: the whole store) with the store's explanations."""
    df = store.read() if df is None else df
    cells = analyze(df, settings)
    index = build_site(
        cells,
        out,
        store=str(store.url),
        n_runs=int(df["run_id"].nunique()) if not df.empty else 0,
        settings=settings,
        nights=find_nights(df) if nights is None else nights,
        explained=store.explanations(),
    )
    return index, cells
