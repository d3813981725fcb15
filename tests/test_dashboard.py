"""The static site: a planted step named on the regressions page, escaping, offline assets, machines apart."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import synthetic_history as synthetic

from teperf.history.analysis import analyze
from teperf.history.dashboard import build_from_store, build_site
from teperf.history.store import HistoryStore, machine_fingerprint

EVIL = '<script>alert("pwned")</script> & <img src=x onerror=alert(1)>'
STEP_AT = 24
FASTER_AT = 30


def plan(**kw):
    base = dict(
        commits=40,
        steps={("LayerNormLinear", "fp32", STEP_AT): 6.0, ("Linear", "fp32", FASTER_AT): -5.0},
        subjects={STEP_AT: f"Regress LayerNorm {EVIL}", 5: "</script><script>alert(2)</script>"},
        machines=(("CPU one", None, None), ("CPU two", "NVIDIA H200", "570.1")),
    )
    base.update(kw)
    return synthetic.Plan(**base)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("dash")
    st = HistoryStore(root / "history")
    synthetic.write(st, plan())
    index, cells = build_from_store(st, root / "site")
    return root / "site", cells


class Tables(HTMLParser):
    """Collects the text of each table row, per table, per <h3> heading."""

    def __init__(self):
        super().__init__()
        self.sections: dict[str, list[str]] = {}
        self.heading = None
        self._in_h = False
        self._row = None
        self._htext = []

    def handle_starttag(self, tag, attrs):
        if tag in ("h2", "h3"):
            self._in_h, self._htext = True, []
        elif tag == "tr":
            self._row = []

    def handle_endtag(self, tag):
        if tag in ("h2", "h3"):
            self._in_h = False
            text = " ".join("".join(self._htext).split())
            self.heading = text if tag == "h3" else None
            self.machine = text if tag == "h2" else getattr(self, "machine", None)
        elif tag == "tr" and self._row is not None:
            key = f"{getattr(self, 'machine', '')} | {self.heading}"
            self.sections.setdefault(key, []).append(" ".join(" ".join(self._row).split()))
            self._row = None

    def handle_data(self, data):
        if self._in_h:
            self._htext.append(data)
        if self._row is not None:
            self._row.append(data)


def parse(path: Path) -> Tables:
    p = Tables()
    p.feed(path.read_text())
    return p


def test_regressions_page_names_the_planted_commit(site):
    out, _ = site
    tables = parse(out / "regressions.html")
    bad, good = synthetic.sha_of(STEP_AT)[:10], synthetic.sha_of(STEP_AT - 1)[:10]
    for machine in ("CPU one", "CPU two"):
        key = next(k for k in tables.sections if k.startswith(machine) and "Regressions" in k)
        rows = tables.sections[key][1:]  # minus the header
        assert len(rows) == 1, rows
        row = rows[0]
        assert "LayerNormLinear" in row and "step" in row
        # first bad then last good, in the page's column order
        assert row.index(bad) < row.index(good), row
        assert "Regress LayerNorm" in row and '<script>alert("pwned")</script>' in row  # shown as text
        size_pct = float(re.search(r"([+-]\d+\.\d)%", row).group(1))
        assert 4.0 < size_pct < 8.0
        improvements = tables.sections[
            next(k for k in tables.sections if k.startswith(machine) and "Improvements" in k)
        ][1:]
        assert (
            len(improvements) == 1
            and "Linear" in improvements[0]
            and synthetic.sha_of(FASTER_AT)[:10] in improvements[0]
        )


def test_no_false_changes_in_the_flat_cell(site):
    _, cells = site
    flat = [c for c in cells if c.module == "LayerNormMLP"]
    assert len(flat) == 2 and all(c.changes == [] for c in flat)


def test_every_untrusted_string_is_escaped(site):
    out, _ = site
    pages = list(out.glob("*.html"))
    assert len(pages) == 4  # index, regressions, one page per machine
    for page in pages:
        text = page.read_text()
        assert "<script>alert" not in text, page
        assert "<img src=x" not in text, page
        assert "</script><script>" not in text, page
        # the only script elements are the two local files and the JSON data blocks
        for tag in re.findall(r"<script[^>]*>", text):
            assert tag in (
                '<script src="assets/plotly.min.js">',
                '<script src="assets/dashboard.js">',
            ) or re.fullmatch(r'<script type="application/json" id="fig-c[0-9a-f]{12}">', tag), tag
    regressions = (out / "regressions.html").read_text()
    assert "&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt; &amp; &lt;img" in regressions


def test_figure_json_cannot_break_out_and_round_trips(site):
    out, _ = site
    page = next(out.glob("machine-*.html")).read_text()
    blocks = re.findall(
        r'<script type="application/json" id="fig-(c[0-9a-f]{12})">(.*?)</script>', page, re.S
    )
    assert len(blocks) == 3
    for _, body in blocks:
        assert "<" not in body and ">" not in body
        fig = json.loads(body)
        assert fig["data"] and fig["layout"]
    hover_texts = [
        cd[1]
        for _, body in blocks
        for trace in json.loads(body)["data"]
        for cd in (trace.get("customdata") or [])
    ]
    assert any("&lt;script&gt;" in t for t in hover_texts)  # plotly shows entities as text
    assert not any("<script" in t for t in hover_texts)


def test_charts_mark_the_change_points(site):
    out, cells = site
    cell = next(c for c in cells if c.module == "LayerNormLinear" and c.machine_label.startswith("CPU one"))
    page = (out / f"machine-{cell.machine}.html").read_text()
    body = re.search(rf'id="fig-{cell.slug}">(.*?)</script>', page, re.S).group(1)
    fig = json.loads(body)
    lines = [s for s in fig["layout"]["shapes"] if s["type"] == "line" and s.get("yref") == "paper"]
    assert [s["x0"] for s in lines] == [STEP_AT - 0.5]
    names = {t.get("name") for t in fig["data"]}
    assert {"host time", "95% interval (paired)", "level between changes", "night vs previous (%)"} <= names


def test_site_is_offline(site):
    out, _ = site
    js = out / "assets" / "plotly.min.js"
    assert js.stat().st_size > 1_000_000
    for page in out.glob("*.html"):
        text = page.read_text()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), page
        assert "cdn" not in text.lower()


def test_machines_are_kept_apart(site):
    out, cells = site
    one = machine_fingerprint("CPU one", None, None)[0]
    two = machine_fingerprint("CPU two", "NVIDIA H200", "570.1")[0]
    assert {c.machine for c in cells} == {one, two}
    assert (out / f"machine-{one}.html").exists() and (out / f"machine-{two}.html").exists()
    for c in cells:
        assert len(c.points) == 40  # one point per commit: no mixing of the two machines' rows
    index = (out / "index.html").read_text()
    assert index.count('<section class="machine"') == 2
    assert "NVIDIA H200" in index and "no GPU" in index


def test_overview_grid_has_latest_week_and_verdict(site):
    out, cells = site
    text = (out / "index.html").read_text()
    assert text.count('class="cell ') == 6  # 3 modules x 1 recipe x 2 machines
    assert "vs week:" in text
    cell = next(c for c in cells if c.module == "Linear")
    week = cell.week_ago()
    assert week is not None and (cell.latest.date - week.date).days >= 7


def test_empty_history_builds_a_page(tmp_path):
    index = build_site([], tmp_path / "site")
    assert "history is empty" in index.read_text()


def test_rebuild_replaces_the_site(tmp_path):
    st = HistoryStore(tmp_path / "h")
    synthetic.write(st, plan(commits=10, steps={}, subjects={}, machines=(("CPU one", None, None),)))
    out = tmp_path / "site"
    build_from_store(st, out)
    (out / "stale.html").write_text("old")
    build_from_store(st, out)
    assert not (out / "stale.html").exists() and (out / "index.html").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site")]


def test_out_that_is_not_a_dashboard_is_refused_and_kept(tmp_path):
    from teperf.errors import TeperfError

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    with pytest.raises(TeperfError, match="not a teperf dashboard"):
        build_site([], out)
    assert (out / "notes.txt").read_text() == "precious"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".mine")]
    afile = tmp_path / "file.txt"
    afile.write_text("precious")
    with pytest.raises(TeperfError, match="not a teperf dashboard"):
        build_site([], afile)
    assert afile.read_text() == "precious"


def test_empty_dir_and_previous_site_are_replaced(tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    build_site([], out)  # empty directory: fine
    assert (out / ".teperf-dashboard").is_file() and (out / "index.html").exists()
    (out / "stale.html").write_text("old")
    build_site([], out)  # a site built before: replaced
    assert not (out / "stale.html").exists() and (out / "index.html").exists()


def test_the_paired_compare_places_a_step_the_levels_put_one_night_late(tmp_path):
    """The night whose paired compare saw the step is the change point, whatever its level says."""
    st = HistoryStore(tmp_path / "h")
    runs = synthetic.rows(
        plan(
            commits=30, steps={("Linear", "fp32", 15): 8.0}, subjects={}, machines=(("CPU one", None, None),)
        )
    )
    for run in runs:
        for row in run:
            if row.module == "Linear" and row.sha == synthetic.sha_of(15):
                row.host_us = row.base_us = (
                    row.host_us / 1.08
                ) * 1.002  # the night's series value looks unchanged...
                row.verdict = "slower"  # ...but its paired run saw the regression
        st.append(run)
    cells = analyze(st.read())
    linear = next(c for c in cells if c.module == "Linear")
    steps = [ch for ch in linear.changes if ch.kind == "step"]
    assert [ch.first_bad.sha for ch in steps] == [synthetic.sha_of(15)]
    assert steps[0].last_good.sha == synthetic.sha_of(14)


def test_a_swept_kwarg_gets_a_slope_chart(tmp_path):
    # a nightly with --sweep num_gemms=1,2,4,8 stores one cell per value: GroupedLinear[num_gemms=N]
    cells = tuple((f"GroupedLinear[num_gemms={n}]", "bf16", 100.0 + 20.0 * n) for n in (1, 2, 4, 8))
    st = HistoryStore(tmp_path / "history")
    synthetic.write(st, plan(commits=6, steps={}, subjects={}, cells=cells + (("Linear", "bf16", 90.0),)))
    index, _cells = build_from_store(st, tmp_path / "site")
    page = next(p for p in (tmp_path / "site").glob("machine-*.html") if "Overhead slopes" in p.read_text())
    text = page.read_text()
    heading = re.search(
        r"<h3>GroupedLinear &middot; bf16 .*?num_gemms: ([+-][0-9.]+) us per num_gemms</h3>", text
    )
    assert heading and 18.0 < float(heading.group(1)) < 22.0, heading  # 20 us per GEMM, with 0.8% noise
    figure = re.search(r'<script type="application/json" id="fig-s[0-9a-f]+">(.*?)</script>', text, re.S)
    data = json.loads(figure.group(1))["data"]
    assert data[0]["x"] == [1.0, 2.0, 4.0, 8.0] and len(data) == 2  # the points and the fitted line
    section = text.split("Overhead slopes")[1].split('<ul class="toc">')[0]
    assert section.count("<h3>") == 1 and "<h3>Linear" not in section  # the unswept cell has no slope


def test_labels_of_change_points_a_night_apart_do_not_overlap(tmp_path):
    from teperf.history.dashboard import cell_figure

    st = HistoryStore(tmp_path / "h")
    steps = {("Linear", "fp32", 20): 50.0, ("Linear", "fp32", 21): 11.0, ("Linear", "fp32", 34): -8.0}
    synthetic.write(st, plan(steps=steps, subjects={}, machines=(("CPU one", None, None),)))
    linear = next(c for c in analyze(st.read()) if c.module == "Linear")
    layout = cell_figure(linear)["layout"]
    assert [a["yshift"] for a in layout["annotations"]] == [0, 15, 0]  # the second above the first
    assert layout["margin"]["t"] == 45  # room for it
