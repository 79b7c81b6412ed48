"""The trend over commits in the HTML report (``report_trend``, ``report_html.trend_section``):
a store seeded with a step change (test_history's helpers) is drawn with its change point marked
and this run highlighted; without history, Otava or enough stored results, one line; and the
gate hands the plot its series through the report's record (pytester)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

from test_history import TEST, commits, record, seed_store
from test_plugin_baselines import git, head, report_of
from test_report_load_curve import SVG, group, texts, vertices

from pytest_llmreplay.gate.baseline import DEFAULT_TOLERANCES
from pytest_llmreplay.gate.history import History, history_points, trend
from pytest_llmreplay.report.html import anchor, trend_section

STEP = [0.100, 0.101, 0.099, 0.100, 0.102, 0.098, 0.120, 0.121, 0.119, 0.120, 0.122, 0.118]  # +20% at the 7th commit
PLOT = f"{anchor(TEST)}-trend-ttft-p50"


def svgs(section: str) -> list[str]:
    return [f"<svg{part.split('</svg>')[0]}</svg>" for part in section.split("<svg")[1:]]


def marker_positions(svg: str, gid: str) -> list[tuple[float, float]]:
    """Where a line's markers (``<use>``) stand."""
    return [(float(use.get("x")), float(use.get("y"))) for use in group(svg, gid).iter(f"{SVG}use")]


def test_a_step_over_twelve_commits_is_drawn_with_its_change_point_and_this_run_highlighted(repo):
    store = seed_store(repo, STEP)
    newest_first = list(reversed(commits(repo)[: len(STEP)]))
    current = record(0.121, commits(repo)[len(STEP)])
    block = trend(
        history_points(store, TEST, newest_first, like=current),
        current,
        ["ttft.p50", "tpot.p50", "ttfat.p50"],
        "HEAD~1 (abc)",
    )
    assert list(block["series"]) == ["ttft.p50", "tpot.p50"]  # ttfat not measured: no plot
    section = trend_section({"test": TEST, "history": block})
    assert "12 earlier results like this one on the first-parent history of HEAD~1 (abc), then this run" in section
    ttft, tpot = svgs(section)
    ET.fromstring(ttft)  # well-formed
    shown = texts(ttft)
    assert {
        "ttft.p50 over commits",
        "ttft.p50 (ms)",
        "commit, first-parent history of HEAD~1 (abc)",
        "change point",
        "level",
        "stored results",
    } <= set(shown)
    assert f"this run ({commits(repo)[len(STEP)][:7]})" in shown
    assert "+20.1%" in shown  # 0.1 -> the mean of the seven results from the step on, this run included
    # the change point stands between the 6th and the 7th commit; the x axis names the commits
    stored = marker_positions(ttft, f"{PLOT}-stored")
    assert len(stored) == len(STEP)
    [(line_x, _), _] = vertices(ttft, f"{PLOT}-change-0")
    assert stored[5][0] < line_x < stored[6][0]
    assert all(c[:7] in shown for c in commits(repo)[: len(STEP) + 1])
    # this run: one point, after the stored ones, at the height of its value (0.121 s, as stored[7])
    [(this_x, this_y)] = marker_positions(ttft, f"{PLOT}-this-run")
    assert this_x > stored[-1][0] and abs(this_y - stored[7][1]) < 0.01
    # levels: two segments, the second higher (SVG y grows downwards)
    assert vertices(ttft, f"{PLOT}-level-1")[0][1] < vertices(ttft, f"{PLOT}-level-0")[0][1]
    # tpot did not change: no change point drawn
    assert "change point" not in texts(tpot) and f'id="{PLOT.replace("ttft-p50", "tpot-p50")}-this-run"' in tpot


def one_line(section: str) -> str:
    assert "<svg" not in section and section.count("<p") == 1, section
    return section


def test_without_history_the_section_is_one_line(repo, monkeypatch):
    assert "none, this run was not compared (--llm-compare REF" in one_line(trend_section({"test": TEST}))
    store = seed_store(repo, STEP[:1])
    current = record(0.1, commits(repo)[1])
    block = trend(history_points(store, TEST, [commits(repo)[0]], like=current), current, ["ttft.p50"], "HEAD~1 (abc)")
    assert (
        "none, 1 earlier result like this one on the first-parent history of HEAD~1 (abc); a trend needs 2"
        in one_line(trend_section({"test": TEST, "history": block}))
    )
    monkeypatch.setitem(sys.modules, "otava.analysis", None)  # import fails as if not installed
    block = trend(
        History([(c, record(v, c)) for c, v in zip(commits(repo)[: len(STEP)], STEP, strict=True)]),
        current,
        ["ttft.p50"],
        "HEAD~1 (abc)",
    )
    assert "none, change points need Apache Otava: pip install &#x27;pytest-llmreplay[history]&#x27;" in one_line(
        trend_section({"test": TEST, "history": block})
    )


def test_the_gate_hands_the_report_each_gated_figure_over_the_stored_commits(project):
    saved = []
    for i in range(2):
        project.runpytest("--llm-offline", "--llm-save").assert_outcomes(passed=1)
        saved.append(head(project.path))
        git(project.path, "commit", "-q", "--allow-empty", "-m", f"change {i}")
    project.runpytest("--llm-offline", "--llm-compare=HEAD~1", "--llm-report", "rep").assert_outcomes(passed=1)
    report = report_of(project.path)
    block = report["history"]
    assert block["reference"].startswith("HEAD~1 (") and block["earlier"] == 2
    assert list(block["series"]) == list(DEFAULT_TOLERANCES)  # the gated figures
    ttft = block["series"]["ttft.p50"]
    assert ttft["commits"] == [*saved, head(project.path)] and ttft["values"][-1] == report["summary"]["ttft"]["p50"]
    assert ttft["change_points"] == []  # the simulator is exact: one level
    page = (project.path / "rep" / "index.html").read_text()
    assert (
        f'<svg id="{anchor("test_perf.py::test_chat")}-trend-ttft-p50"' in page
        and "<h3>Trend over commits</h3>" in page
    )
    stored = list((project.path / ".llmreplay").glob("*/*.json"))
    assert len(stored) == 2 and all(
        '"history"' not in p.read_text() for p in stored
    )  # the trend is the report's, not the store's


def test_the_report_says_in_one_line_why_a_compared_test_has_no_trend(project):
    project.runpytest("--llm-offline", "--llm-save").assert_outcomes(passed=1)
    git(project.path, "commit", "-q", "--allow-empty", "-m", "change")
    project.runpytest("--llm-offline", "--llm-compare=HEAD~1", "--llm-report", "rep").assert_outcomes(passed=1)
    assert report_of(project.path)["history"]["note"].startswith(
        "1 earlier result like this one on the first-parent history of HEAD~1 ("
    )
    page = (project.path / "rep" / "index.html").read_text()
    assert "Trend over commits: none, 1 earlier result" in page and "-trend-" not in page
