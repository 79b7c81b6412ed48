"""The dashboard in a real browser: headless Chromium (as the HTML report's browser test) opens
the site built from the small synthetic store of tests/dashboard_site.py, offline, from
``file://``. The index lists every test and draws its sparklines; a test's page draws every
chart with no console error, and hovering a point (a real mouse event) shows its commit; the
page of a test with two endpoints labels each line in the legend.

With ``LLMREPLAY_SCREENSHOT_DIR`` set, the index and a test's page (hovered) are saved there as
dashboard-index.png and dashboard-test.png (docs/images/ keeps them for the README)."""

from __future__ import annotations

import os
from pathlib import Path

import dashboard_site
import pytest
from browser import chromium, visit
from dashboard_site import COMMITS, stored_test_ids

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.gate.store import result_folder

pytestmark = pytest.mark.browser

# a promise of the page once every chart is drawn (the script marks each data-drawn)
DRAWN = """new Promise((resolve, reject) => {
  const started = Date.now();
  const check = () => {
    const charts = [...document.querySelectorAll('.chart')];
    if (charts.length && charts.every(c => c.dataset.drawn)) resolve(charts.length);
    else if (Date.now() - started > 30000) reject(new Error('charts not drawn: ' + charts.filter(c => !c.dataset.drawn).length));
    else setTimeout(check, 50);
  };
  check();
})"""
INDEX = f"""{DRAWN}.then(charts => ({{
  charts,
  tests: [...document.querySelectorAll('td.test a')].map(a => a.textContent),
  links: [...document.querySelectorAll('td.test a')].map(a => a.getAttribute('href')),
  sparks: [...document.querySelectorAll('.spark')].map(s => s.querySelectorAll('.scatterlayer .trace').length),
}}))"""
# the newest point of the first chart's results, in the viewport
POINT = f"""{DRAWN}.then(() => {{
  const chart = document.querySelector('.chart.figure');
  chart.scrollIntoView();
  const trace = chart._fullData[0], last = trace.x.length - 1;
  const xaxis = chart._fullLayout.xaxis, yaxis = chart._fullLayout.yaxis, box = chart.getBoundingClientRect();
  return {{x: box.left + xaxis._offset + xaxis.l2p(trace.x[last]), y: box.top + yaxis._offset + yaxis.l2p(trace.y[last])}};
}})"""
HOVERED = """new Promise(resolve => setTimeout(resolve, 400)).then(() => ({
  hover: [...document.querySelectorAll('.chart.figure')][0].querySelector('.hoverlayer .hovertext')?.textContent || null,
  charts: [...document.querySelectorAll('.chart.figure')].map(c => ({
    key: c.dataset.key,
    width: c.getBoundingClientRect().width,
    points: c.querySelectorAll('.scatterlayer .trace .point').length,
    legend: [...c.querySelectorAll('.legendtext')].map(t => t.textContent),
  })),
}))"""


@pytest.fixture(scope="module")
def browser() -> str:
    return chromium()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built from the synthetic store; its folder. The repository's commits are in
    ``site.parent / "repo"``."""
    path = dashboard_site.make(tmp_path_factory.mktemp("dashboard"))
    cwd = Path.cwd()
    os.chdir(path / "repo")
    try:
        status = main(
            ["dashboard", "--baseline-dir", str(path / "store"), "--out", str(path / "site")]
            + ["--commit-url", "https://github.com/ORG/REPO/commit/{commit}"]
        )
    finally:
        os.chdir(cwd)
    assert status == 0
    return path / "site"


def keep(png: bytes, name: str) -> None:
    shots = os.environ.get("LLMREPLAY_SCREENSHOT_DIR")
    if shots:  # to refresh docs/images/
        (Path(shots) / name).write_bytes(png)


def test_the_index_lists_every_test_and_draws_their_lines(site, browser):
    page = visit(browser, (site / "index.html").as_uri(), INDEX, width=1500)
    assert page.errors == []
    facts = page.facts
    assert sorted(facts["tests"]) == stored_test_ids()
    assert facts["tests"][0] == stored_test_ids()[0]  # the regression first
    assert facts["links"] == [f"tests/{result_folder(test)}.html" for test in facts["tests"]]
    assert facts["charts"] == len(facts["sparks"]) and all(traces >= 1 for traces in facts["sparks"])
    keep(page.png, "dashboard-index.png")


def test_a_test_page_draws_its_charts_and_hover_shows_the_commit(site, browser):
    test = stored_test_ids()[0]
    page = visit(browser, (site / "tests" / f"{result_folder(test)}.html").as_uri(), HOVERED, width=1500, hover=POINT)
    assert page.errors == []
    charts = page.facts["charts"]
    assert [c["key"] for c in charts][:2] == ["ttft.p50", "ttft.p90"]
    for chart in charts:
        assert chart["width"] > 500, chart["key"]
        assert chart["points"] >= COMMITS, chart["key"]  # every result of each line drawn
    from test_plugin_baselines import git

    newest = git(site.parent / "repo", "rev-parse", "HEAD")
    hover = page.facts["hover"]
    assert hover is not None and f"{newest[:12]} 20" in hover, hover  # the commit and its date
    assert "change 29" in hover and "ttft.p50: " in hover and hover.endswith(" ms"), hover  # its subject, the value
    keep(page.png, "dashboard-test.png")


def test_a_side_by_side_page_labels_each_line(site, browser):
    test = stored_test_ids()[0]
    page = visit(browser, (site / "tests" / f"{result_folder(test)}.html").as_uri(), f"{DRAWN}.then(() => {HOVERED})")
    assert page.errors == []
    legend = page.facts["charts"][0]["legend"]
    assert [text for text in legend if text.startswith("sim_profile")] == [
        "sim_profile llama-3.1-8b-h100, hardware 1 x NVIDIA H100 SXM5 80GB",
        "sim_profile llama-3.1-8b-h200, hardware 1 x NVIDIA H200 SXM 141GB",
    ]
    assert "change point: regression" in legend and len(legend) == 3
