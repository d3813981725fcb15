"""The built site in headless Chromium: charts render, no console errors, no script runs from data.

Needs Debian's ``chromium`` (``.ci/run`` installs it) and the ``playwright`` Python package
(driver only: it launches /usr/bin/chromium, it downloads no browser). Skipped only when
there is no Chromium binary. Screenshots go to the test's tmp dir, and also to
``$TEPERF_SCREENSHOT_DIR`` when that is set.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import synthetic_history as synthetic

from teperf.history.analysis import analyze
from teperf.history.dashboard import build_from_store
from teperf.history.explain import change_points, record
from teperf.history.store import HistoryStore

pytestmark = pytest.mark.browser

CHROMIUM = next(
    (
        p
        for p in (
            os.environ.get("TEPERF_CHROMIUM"),
            shutil.which("chromium"),
            "/usr/bin/chromium",
            shutil.which("chromium-browser"),
        )
        if p and os.path.exists(p)
    ),
    None,
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
CULPRIT_SHA = "d3dd5e5" + "0" * 33
CULPRIT_RESULT = {
    "status": "found",
    "explained": True,
    "answer": "explained: 1 commit(s) carry 76% of GOOD..BAD's +6.0 us",
    "culprits": [
        dict(
            sha=CULPRIT_SHA,
            short_sha=CULPRIT_SHA[:7],
            subject="slow <b>it</b> down" + " in a subject as long as a merged pull request's title" * 6,
            delta_us=4.6,
            share=0.76,
            share_ci=[0.57, 0.97],
            verdict="slower",
            counters={"python_calls": 80},
        )
    ],
    "rest": {"delta_us": 1.4},
    "endpoint": {"delta_us": 6.0},
}
EVIL_SUBJECT = (
    'Regress LayerNorm <script>window.__pwned = 1; alert("pwned")</script> <img src=x '
    'onerror="window.__pwned=2">'
)
STEP_AT = 24


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium binary (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    st = HistoryStore(root / "history")
    synthetic.write(
        st,
        synthetic.Plan(
            commits=40,
            steps={("LayerNormLinear", "fp32", STEP_AT): 6.0, ("Linear", "fp32", 30): -5.0},
            drifts={("LayerNormMLP", "fp32"): 0.3},
            subjects={STEP_AT: EVIL_SUBJECT},
            machines=(("Synthetic CPU @ 2.0GHz", None, None), ("Synthetic Xeon", "NVIDIA H200", "570.124")),
        ),
    )
    # the planted step on the CPU machine explained by a bisect: one culprit with a GitHub link
    (point,) = [
        p
        for p in change_points(analyze(st.read()))
        if p.cell.module == "LayerNormLinear" and p.cell.machine_label.startswith("Synthetic CPU")
    ]
    st.add_explanation(record(point, CULPRIT_RESULT, None, "https://github.com/acme/widgets.git"))
    index, cells = build_from_store(st, root / "site")
    return root / "site", cells


def open_page(browser, url):
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    problems, dialogs, requests = [], [], []
    page.on(
        "console",
        lambda m: problems.append(f"console.{m.type}: {m.text}") if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    return page, problems, dialogs, requests


def save(page, name, tmp_path, full_page=False):
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 10_000
    extra = os.environ.get("TEPERF_SCREENSHOT_DIR")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / name)
    return path


def test_charts_render_without_console_errors(browser, site, tmp_path):
    out, cells = site
    machine = next(c.machine for c in cells if c.machine_label.startswith("Synthetic CPU"))
    page, problems, dialogs, requests = open_page(browser, (out / f"machine-{machine}.html").as_uri())
    page.wait_for_function(
        "window.teperfCharts && window.teperfCharts.rendered + window.teperfCharts.failed === "
        "window.teperfCharts.expected",
        timeout=30_000,
    )
    state = page.evaluate("window.teperfCharts")
    assert state["expected"] == 3 and state["rendered"] == 3 and state["failed"] == 0, state
    # plotly drew real SVG: one main plot per chart, with markers for the 40 commits
    assert page.locator("div.chart .main-svg").count() >= 3
    assert page.locator("div.chart .scatterlayer .point").count() >= 3 * 40
    # the step's marker line and label are drawn
    assert page.locator("text", has_text=f"at {synthetic.sha_of(STEP_AT)[:7]}").count() >= 1
    # hovering the step's night shows its subject as text, markup and all, and runs nothing
    slug = next(c.slug for c in cells if c.machine == machine and c.module == "LayerNormLinear")
    page.evaluate(f"""() => {{
        const gd = document.getElementById('chart-{slug}');
        const i = gd.data.findIndex(t => t.name === 'host time');
        Plotly.Fx.hover(gd, [{{curveNumber: i, pointNumber: {STEP_AT}}}]);
    }}""")
    hover = page.evaluate(f"document.querySelector('#chart-{slug} .hoverlayer').textContent")
    assert "<script>window.__pwned" in hover, hover
    assert page.evaluate("window.__pwned === undefined")
    # the step's culprit: named at its marker on the chart, and linked in the cell's changes table
    assert page.locator("text", has_text=f"at {synthetic.sha_of(STEP_AT)[:7]}: d3dd5e5 76%").count() == 1
    link = page.locator(f'#{slug} .culprit a[href="https://github.com/acme/widgets/commit/{CULPRIT_SHA}"]')
    assert link.count() == 1 and link.is_visible(), link.count()
    culprit = page.locator(f"#{slug} .culprit").inner_text()
    assert "slow <b>it</b> down" in culprit and "76% [57%, 97%]" in culprit, culprit  # markup as text
    assert "python_calls +80" in culprit, culprit
    # the culprits column wraps inside the page, not off its right edge
    width = page.evaluate("document.documentElement.clientWidth")
    right = page.evaluate(
        f"Math.max(...[...document.querySelectorAll('#{slug} td')].map(e => e.getBoundingClientRect().right))"
    )
    assert right <= width and page.evaluate("document.documentElement.scrollWidth") <= width, (right, width)
    page.locator(f"#{slug}").scroll_into_view_if_needed()
    save(page, "dashboard-machine.png", tmp_path)
    assert not problems, problems
    assert not dialogs, dialogs
    assert all(u.startswith("file://") for u in requests), requests  # nothing fetched from a network


def test_overview_and_regressions_pages(browser, site, tmp_path):
    out, _ = site
    page, problems, dialogs, requests = open_page(browser, (out / "index.html").as_uri())
    page.wait_for_load_state("load")
    assert page.locator("td.cell").count() == 6
    assert (
        page.locator(
            "td.cell.slower, td.cell.faster, td.cell.nochange, td.cell.inconclusive, td.cell.none"
        ).count()
        == 6
    )
    save(page, "dashboard-overview.png", tmp_path, full_page=True)
    page.goto((out / "regressions.html").as_uri())
    rows = page.locator("table.regressions tr.slower")
    assert rows.count() >= 2  # the planted step, on each machine
    text = rows.first.inner_text()
    assert synthetic.sha_of(STEP_AT)[:10] in text and synthetic.sha_of(STEP_AT - 1)[:10] in text
    assert "<script>window.__pwned" in text  # shown as text
    culprits = page.locator('table.regressions .culprit a[href^="https://github.com/acme/widgets/commit/"]')
    assert culprits.count() == 1 and culprits.first.inner_text() == CULPRIT_SHA[:7]
    assert page.locator("table.regressions .dim", has_text="not bisected").count() >= 1  # the others
    assert page.evaluate("window.__pwned === undefined")
    save(page, "dashboard-regressions.png", tmp_path, full_page=True)
    assert not problems, problems
    assert not dialogs, dialogs
    assert all(u.startswith("file://") for u in requests), requests
