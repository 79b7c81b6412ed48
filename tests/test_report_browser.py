"""The HTML report in a real browser: headless Chromium (the distribution's package, installed by
``scripts/setup_chromium.py`` when missing) loads ``index.html`` written from stored results,
logs no error, shows the expected elements, and gives a screenshot.

The stored results are those of a pytester project that is a git repository: its perf tests are
saved on a fast simulator profile at two commits, then replayed on one 30% slower with
``--llm-compare`` and ``--llm-report``, so the page has a passing test, a breached SLO, a
comparison with regressions, the baselines' curves and a trend over the commits."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from browser import chromium, visit
from test_plugin_baselines import GIT_ENV, git, write_profiles

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHAT = "synthetic:\n  sessions: 60\n  input_tokens: {dist: uniform, min: 64, max: 2048}\n  output_tokens: {dist: uniform, min: 8, max: 256}\n  rate: 4\n  seed: 7\n"
AGENT = (
    "synthetic:\n  sessions: 12\n  first_input_tokens: 700\n  input_tokens: {dist: uniform, min: 100, max: 300}\n"
    "  output_tokens: 64\n  turns: 4\n  delay: 0.5\n  seed: 5\n"
)
PERF_TESTS = """
import pytest

@pytest.mark.llmreplay(workload="chat.yaml", slo={"ttft.p99": "< 500ms", "tpot.p50": "< 20ms", "error_rate": "== 0"})
def test_chat(llm_result):
    pass

@pytest.mark.llmreplay(workload="agent.yaml", concurrency=4, slo={"ttfat.p90": "< 1s", "cache_hit_rate.mean": ">= 60%"})
def test_agent(llm_result):
    pass
"""
# what the page shows, read in the browser
FACTS = """(() => {
  const sections = [...document.querySelectorAll('section')];
  return {
    links: [...document.querySelectorAll('table a')].map(a => [a.getAttribute('href'), !!document.querySelector(a.getAttribute('href'))]),
    sections: sections.map(s => ({
      id: s.id,
      headline: s.querySelector('.headline').textContent,
      sloCells: [...s.querySelectorAll('h3 + table')].length ? [...s.querySelector('h3 + table').querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent.replace(/\\u00a0/g, " "))) : [],
      plots: [...s.querySelectorAll('svg')].map(svg => ({
        id: svg.id,
        title: svg.querySelector('title').textContent,
        texts: [...svg.querySelectorAll('text')].map(t => t.textContent.trim()),
        width: svg.getBoundingClientRect().width,
        baseline: !!svg.querySelector('[id$="-baseline"]'),
      })),
    })),
  };
})()"""


@pytest.fixture(scope="module")
def browser() -> str:
    return chromium()


def slower(path: Path) -> None:
    """slow.json: 30% slower than fast.json, not three times (a page whose curves overlap a bit)."""
    fast = json.loads((path / "fast.json").read_text())
    for key in ("prefill_coefficients", "decode_coefficients"):
        fast["timing"][key] = [1.3 * c for c in fast["timing"][key]]
    (path / "slow.json").write_text(json.dumps(fast))


def test_html_report_in_headless_chromium(pytester, monkeypatch, browser):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("chat.yaml").write_text(CHAT)
    pytester.path.joinpath("agent.yaml").write_text(AGENT)
    pytester.makepyfile(test_perf=PERF_TESTS)
    write_profiles(pytester.path)
    slower(pytester.path)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "perf tests")
    for change in range(2):  # two commits with results: a trend to plot
        if change:
            git(pytester.path, "commit", "-q", "--allow-empty", "-m", "change")
        pytester.runpytest("--llm-offline", "--llm-sim-profile", "fast.json", "--llm-save").assert_outcomes(
            passed=1, failed=1
        )
    pytester.runpytest(
        "--llm-offline", "--llm-sim-profile", "slow.json", "--llm-compare", "--llm-report", "rep"
    ).assert_outcomes(passed=1, failed=1)

    page = visit(browser, (pytester.path / "rep" / "index.html").as_uri(), FACTS)
    assert page.errors == []
    facts = page.facts
    from pytest_llmreplay.report.html import anchor

    tests = ("test_perf.py::test_agent", "test_perf.py::test_chat")
    assert facts["links"] == [[f"#{anchor(test)}", True] for test in tests]
    agent, chat = facts["sections"]
    assert (
        agent["headline"].startswith("FAIL · 1 of 2 SLOs breached · worst: ttfat.p90 ")
        and " s vs < 1s, margin -" in agent["headline"]
    )
    assert "vs baseline: REGRESSION: ttft.p50" in agent["headline"]
    assert chat["headline"].startswith("PASS · 3/3 SLOs met · closest: ")
    assert chat["sloCells"][0][:3] == ["ttft.p99", "< 500ms", chat["sloCells"][0][2]] and chat["sloCells"][0][
        2
    ].endswith(" ms")
    trends = {section["id"]: [p for p in section["plots"] if "-trend-" in p["id"]] for section in (agent, chat)}
    for section in (agent, chat):
        section["plots"] = [p for p in section["plots"] if "-trend-" not in p["id"]]
    assert [p["id"].rsplit("-", 1)[1] for p in chat["plots"]] == ["ttft", "tpot", "latency", "ttfat"]
    for plot in trends[agent["id"]] + trends[chat["id"]]:  # each gated figure over the two commits, then this run
        assert plot["width"] > 300, plot["id"]
        assert any(t.startswith("this run (") for t in plot["texts"]) and "stored results" in plot["texts"], plot[
            "texts"
        ]
    assert [p["title"].split(" ")[0] for p in trends[chat["id"]]] == [
        "ttft.p50",
        "ttft.p90",
        "tpot.p50",
        "latency.p50",
        "ttfat.p50",
        "cache_hit_rate.mean",
        "output_throughput.steady_state",
    ]
    assert "ttft.p50 (ms)" in trends[chat["id"]][0]["texts"]
    for plot in agent["plots"] + chat["plots"]:
        assert plot["baseline"], plot["id"]
        assert plot["width"] > 300, plot["id"]  # laid out, not collapsed
        assert "share of requests" in plot["texts"] or "share of sessions" in plot["texts"]
        assert any(t.endswith("(ms)") or t.endswith("(ms, log scale)") or t.endswith("(s)") for t in plot["texts"]), (
            plot["texts"]
        )
        assert {"p50", "p90", "p99"} <= {t.split(" ")[0] for t in plot["texts"]}, plot["texts"]
        assert not any("e+" in t for t in plot["texts"]), plot["texts"]
    ttft = chat["plots"][0]
    assert ttft["title"] == "TTFT: CDF of requests" and "TTFT (ms)" in ttft["texts"]
    assert "SLO ttft.p99 < 500ms" in ttft["texts"] and "baseline" in ttft["texts"] and "this run" in ttft["texts"]
    assert "SLO ttfat.p90 < 1s (breached)" in agent["plots"][3]["texts"]
    assert page.png.startswith(b"\x89PNG\r\n\x1a\n") and len(page.png) > 50_000
    shots = os.environ.get("LLMREPLAY_SCREENSHOT_DIR")
    if shots:  # to refresh docs/report.png
        shutil.copy(pytester.path / "rep" / "index.html", Path(shots) / "index.html")
        (Path(shots) / "report.png").write_bytes(page.png)


def test_the_browser_check_sees_console_errors(tmp_path, browser):
    """The check above can fail: a page that throws and logs an error is caught."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!doctype html><title>t</title><p>x</p><script>console.error('drawn wrong'); missing_function();</script>"
    )
    seen = visit(browser, page.as_uri(), "document.querySelector('p').textContent")
    assert seen.facts == "x"
    assert any("drawn wrong" in e for e in seen.errors), seen.errors
    assert any("missing_function is not defined" in e for e in seen.errors), seen.errors


def test_load_curve_of_a_capacity_search_in_headless_chromium(tmp_path, browser):
    """A stored capacity result (llmreplay sweep --out) rendered as the report's page: the load curve is laid out, no error."""
    from pytest_llmreplay.cli.main import main
    from pytest_llmreplay.report.html import html_page

    (tmp_path / "chat.yaml").write_text(CHAT)
    main(
        [
            "sweep",
            str(tmp_path / "chat.yaml"),
            "--sim",
            "llama-3.1-8b-h100",
            "--workers",
            "1",
            "--slo",
            "ttft.p99<200ms",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    (tmp_path / "index.html").write_text(
        html_page([json.loads((tmp_path / "out" / "result.json").read_text())]), encoding="utf-8"
    )
    page = visit(browser, (tmp_path / "index.html").as_uri(), FACTS)
    assert page.errors == []
    (section,) = page.facts["sections"]
    curve = next(p for p in section["plots"] if p["id"].endswith("-load-curve"))
    assert curve["width"] > 600  # two plots side by side, laid out
    assert {"Latency vs load", "Throughput vs load", "SLO ttft.p99 < 200ms", "throughput (req/s)"} <= set(
        curve["texts"]
    )
    assert any(
        text.startswith("offered load (req/s") for text in curve["texts"]
    )  # ", log scale)" when the loads span a decade
    assert any(re.fullmatch(r"capacity [\d.,]+ req/s( \(carried at [\d.,]+ req/s\))?", t) for t in curve["texts"]), (
        curve["texts"]
    )
