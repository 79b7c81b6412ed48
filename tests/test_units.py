"""Values for readers (metrics/units.py), and what the reports say about a stored result (report/rows.py):
the headline, the SLO rows (those of a marker and those checked in code alike), the comparison in
its metrics' units."""

from __future__ import annotations

import pytest

from pytest_llmreplay.gate.baseline import Comparison, Row
from pytest_llmreplay.gate.comparison_table import comparison_table
from pytest_llmreplay.metrics.units import display_unit, format_value, significant
from pytest_llmreplay.report.files import markdown
from pytest_llmreplay.report.rows import endpoint_text, headline, overview_headers, overview_row, slo_rows
from pytest_llmreplay.report.terminal import summary_table


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.1288, "0.1288"),
        (128.8, "128.8"),
        (21790.4, "21,790"),
        (0.04004, "0.04004"),
        (95.0, "95"),
        (40.6, "40.6"),
        (9.99996, "10"),
        (-2.173, "-2.173"),
        (0.0, "0"),
        (1234567.0, "1,234,567"),
    ],
)
def test_significant_has_four_digits_no_exponent(value, text):
    assert significant(value) == text


@pytest.mark.parametrize(
    ("metric", "value", "text"),
    [
        ("ttft", 0.1288, "128.8 ms"),  # under 10 s: ms
        ("ttfat", 9.5, "9,500 ms"),
        ("latency", 21.79, "21.79 s"),  # 10 s and over: s
        ("cache_hit_rate", 0.6785, "67.85%"),
        ("error_rate", 0.0, "0%"),
        ("output_throughput", 21790.4, "21,790 tok/s"),
        ("request_throughput", 3.25, "3.25 req/s"),
        ("output_tokens", 48.0, "48"),  # a count: bare
        ("my_plugin_metric", 0.5, "0.5"),  # a plugin's metric: bare
        ("ttft", None, "-"),
        ("ttft", float("nan"), "-"),
    ],
)
def test_format_value_in_the_display_unit(metric, value, text):
    assert format_value(metric, value) == text


def test_format_value_in_a_given_unit():
    assert format_value("ttft", 0.1288, "s") == "0.1288 s"
    assert format_value("itl", 0.0004, "us") == "400 us"
    assert format_value("cache_hit_rate", 0.95, "%") == "95%"
    assert display_unit("ttft", 10.0) == "s" and display_unit("ttft", 9.99) == "ms"


def test_terminal_comparison_table_is_in_the_metrics_units():
    comparison = Comparison(
        "main",
        rows=[
            Row("ttft.p50", 0.03245, 0.04219, 0.30, 0.29, 0.31, 0.05, "regression"),
            Row("cache_hit_rate.mean", 0.6785, 0.6785, 0.0, 0.0, 0.0, 0.02, "ok"),
            Row("output_throughput.steady_state", 336.5, 290.6, -0.136, -0.14, -0.13, 0.05, "regression"),
        ],
    )
    lines = comparison_table(comparison).split("\n")
    assert lines[0] == "Compared with main: 2 regressions"
    assert lines[3].split() == [
        "ttft.p50",
        "32.45",
        "ms",
        "42.19",
        "ms",
        "+30.0%",
        "[+29.0%,",
        "+31.0%]",
        "5%",
        "REGRESSION",
    ]
    assert lines[4].split()[:3] == ["cache_hit_rate.mean", "67.85%", "67.85%"]
    assert lines[5].split()[:5] == ["output_throughput.steady_state", "336.5", "tok/s", "290.6", "tok/s"]


def record(slo: list[dict], comparison: dict | None = None) -> dict:
    """A stored result with the figures the rows read."""
    return {
        "test": "t.py::test_x",
        "commit": "abc",
        "fingerprint": {"kind": "offline", "model": "m", "hardware": {"gpu": "H100", "count": 1}},
        "summary": {
            "requests": {"ok": 8, "planned": 8},
            "ttft": {"p50": 0.04004, "p99": 0.1288},
            "tpot": {"p50": 0.0075},
            "ttfat": {"p90": 12.5},
            "cache_hit_rate": {"mean": 0.4},
            "output_throughput": {"steady_state": 21790.4},
            "error_rate": {"value": 0.0},
        },
        "slo": slo,
        "comparison": comparison,
        "samples": {},
    }


MARKER_SLOS = [
    {"key": "ttft.p99", "threshold": "< 500ms", "measured": 0.1288, "passed": True},
    {"key": "tpot.p50", "threshold": "< 10ms", "measured": 0.0075, "passed": True},
    {"key": "error_rate", "threshold": "== 0", "measured": 0.0, "passed": True},
]


def test_slo_rows_are_in_the_thresholds_units_with_the_margin():
    assert slo_rows(record(MARKER_SLOS)) == [
        ["ttft.p99", "< 500ms", "128.8 ms", "+371.2 ms (+74.2%)", "ok"],
        ["tpot.p50", "< 10ms", "7.5 ms", "+2.5 ms (+25.0%)", "ok"],
        ["error_rate", "== 0", "0%", "0 pts", "ok"],
    ]


def test_headline_of_a_passing_test_names_the_closest_slo():
    # ttft.p99 has 74.2% headroom, tpot.p50 25%: tpot is the closest; "== 0" has no headroom
    line = headline(record(MARKER_SLOS))
    assert line.status == "PASS"
    assert (
        line.text()
        == "PASS · 3/3 SLOs met · closest: tpot.p50 7.5 ms vs < 10ms, margin +2.5 ms (+25.0%) · vs baseline: -"
    )


def test_headline_never_calls_a_threshold_of_zero_met_with_headroom_the_closest():
    # cache_hit_rate.mean >= 0% holds whatever was measured; its margin (+35 pts) had been read
    # as a relative +35% and named closest before ttft.p99's +74.2%
    zero = {"key": "cache_hit_rate.mean", "threshold": ">= 0%", "measured": 0.35, "passed": True}
    slos = [zero, MARKER_SLOS[0], MARKER_SLOS[2]]
    assert headline(record(slos)).closest == "closest: ttft.p99 128.8 ms vs < 500ms, margin +371.2 ms (+74.2%)"
    no_headroom = {"key": "server.waiting.max", "threshold": "<= 0", "measured": 0.0, "passed": True}
    assert headline(record([*slos, no_headroom])).closest == "closest: server.waiting.max 0 vs <= 0, margin 0"


def test_headline_of_a_failing_test_names_the_worst_breach_and_the_regressions():
    slos = MARKER_SLOS + [
        {"key": "ttfat.p90", "threshold": "< 10s", "measured": 12.5, "passed": False},  # 25% over
        {"key": "cache_hit_rate.mean", "threshold": ">= 80%", "measured": 0.4, "passed": False},  # 50% under
    ]
    comparison = {
        "baseline": "main",
        "mismatch": None,
        "rows": [{"key": "ttft.p50", "verdict": "regression"}, {"key": "tpot.p50", "verdict": "ok"}],
    }
    line = headline(record(slos, comparison))
    assert line.status == "FAIL" and line.slos == "2 of 5 SLOs breached"
    assert line.closest == "worst: cache_hit_rate.mean 40% vs >= 80%, margin -40 pts (-50.0%)"
    assert line.verdict == "REGRESSION: ttft.p50"


def test_headline_of_a_test_the_gate_failed_says_fail_although_its_slos_were_met():
    # --llm-fail-on-regression failed the test (the gate's failed_by): FAIL, as pytest said, and why
    comparison = {"baseline": "main", "mismatch": None, "rows": [{"key": "ttft.p50", "verdict": "regression"}]}
    stored = {**record(MARKER_SLOS, comparison), "failed_by": ["regressions fail the test (--llm-fail-on-regression)"]}
    line = headline(stored)
    assert line.status == "FAIL" and line.slos == "3/3 SLOs met"
    assert line.text().startswith(
        "FAIL · regressions fail the test (--llm-fail-on-regression) · 3/3 SLOs met · closest: tpot.p50 "
    )
    assert line.text().endswith(" · vs baseline: REGRESSION: ttft.p50")
    assert overview_row(stored)[1] == "FAIL"
    assert (
        headline({**record([], comparison), "failed_by": ["not saved (--llm-save)"]}).status == "FAIL"
    )  # no SLOs, still failed


def test_headline_without_slos_and_with_only_equalities():
    assert headline(record([])).text() == "NO SLOS · no SLOs · vs baseline: -"
    only_equal = headline(record([MARKER_SLOS[2]]))
    assert (only_equal.status, only_equal.closest) == ("PASS", None)


def test_slos_checked_in_code_are_rendered_like_the_markers():
    # result.assert_slo(...) in a test body: its checks are stored in the same list
    code_checked = [{"key": "ttft.p50", "threshold": "< 20ms", "measured": 0.04004, "passed": False}]
    stored = record(code_checked)
    assert overview_row(stored)[-2] == "0/1"
    assert slo_rows(stored) == [["ttft.p50", "< 20ms", "40.04 ms", "-20.04 ms (-100.2%)", "BREACH"]]
    assert headline(stored).text().startswith("FAIL · 1 of 1 SLOs breached · worst: ttft.p50 40.04 ms vs < 20ms")
    text = markdown([stored])
    assert "| ttft.p50 | < 20ms      | 40.04 ms" in text and "**FAIL · 1 of 1 SLOs breached" in text


def test_markdown_summary_shows_html_from_a_result_as_text():
    """summary.md lands in GitHub step summaries, which render HTML: a test id, a message naming
    a workload path, a comparison's header or baseline holding markup read as text, as in
    index.html; an SLO's '<' before a space is not markup and stays as written."""
    comparison = {
        "baseline": "<b>main</b>",
        "header": "different workloads: <script>alert(1)</script>",
        "mismatch": "workload <img src=x onerror=alert(2)>",
        "rows": [],
    }
    stored = {
        **record(MARKER_SLOS, comparison),
        "test": "t.py::test_x[<script>alert(3)</script>]",
        "failed_by": ["not saved: cannot write wl/<iframe src=javascript:alert(4)>.json &amp; more"],
    }
    text = markdown([stored])
    for markup in ("<b>", "<script>", "</script>", "<img", "<iframe", "&amp; more"):
        assert markup not in text
    assert "### t.py::test_x\\[&lt;script>alert(3)&lt;/script>\\]" in text and "&amp;amp; more" in text
    assert "**Compared with &lt;b>main&lt;/b>**" in text and "workload &lt;img src=x onerror=alert(2)>" in text
    assert "| ttft.p99   | < 500ms " in text


def test_markdown_summary_shows_a_parameter_id_holding_markdown_as_text():
    """Parameter ids made links, images and bold text in summary.md and the step summary (found
    by a review helper, rendered with a CommonMark parser); snake_case stays as written."""
    import markdown as python_markdown

    ids = ["see](https://evil.example/phish)", "![i](https://evil.example/t.png)", "__init__", "`code`"]
    stored = [{**record(MARKER_SLOS), "test": f"t.py::test_snake_case[{i}]"} for i in ids]
    rendered = python_markdown.markdown(markdown(stored), extensions=["tables"])
    for markup in ("<a ", "<img", "<code>"):
        assert markup not in rendered, markup
    for i in ids:
        assert f"t.py::test_snake_case[{i}]" in rendered.replace("&quot;", '"'), i  # __init__ not bold


def test_an_slo_entry_that_cannot_be_read_back_is_shown_as_stored():
    odd = [{"key": "ttft.p99", "threshold": "under a second", "measured": 0.5, "passed": True}]
    assert slo_rows(record(odd)) == [["ttft.p99", "under a second", "0.5", "", "ok"]]


def test_overview_row_and_endpoint_are_readable():
    assert overview_row(record(MARKER_SLOS)) == [
        "t.py::test_x",
        "PASS",
        "8/8",
        "40.04 ms",
        "128.8 ms",
        "7.5 ms",
        "12.5 s",
        "40%",
        "21,790 tok/s",
        "3/3",
        "-",
    ]
    assert endpoint_text(record([])["fingerprint"]) == "kind offline, model m, hardware.gpu H100, hardware.count 1"
    assert endpoint_text(None) == "unknown"


def test_overview_requests_ok_leaves_the_warm_up_out():
    """8 measured + 2 warm-up, all ok: '8/8' (it read '8/10', as if two had not completed)."""
    plain = record(MARKER_SLOS)
    warmed = {**plain, "summary": {**plain["summary"], "requests": {"ok": 8, "planned": 10, "warmup": 2}}}
    assert overview_row(warmed)[2] == "8/8"


def test_a_run_with_reasoning_adds_the_ttfo_column_to_every_overview():
    """TTFT is the first reasoning token; what a user waits for is TTFO: the overview shows it
    after TTFT p99 when some result had reasoning (the terminal's table as the files')."""
    plain = record(MARKER_SLOS)
    thinking = {**plain, "test": "t.py::test_r", "summary": {**plain["summary"], "ttfo": {"p50": 2.5}}}
    assert "TTFO p50" not in overview_headers([plain])
    headers = overview_headers([plain, thinking])
    assert headers[headers.index("TTFT p99") + 1] == "TTFO p50"
    assert overview_row(thinking, reasoning=True)[headers.index("TTFO p50")] == "2,500 ms"
    assert overview_row(plain, reasoning=True)[headers.index("TTFO p50")] == "-"
    table = summary_table([("t.py::test_r", "passed", {"llmreplay.ttft.p50": 0.04, "llmreplay.ttfo.p50": 2.5})])
    assert "TTFO p50" in table.splitlines()[0] and "2,500 ms" in table
    assert "TTFO p50" not in summary_table([("t.py::test_x", "passed", {"llmreplay.ttft.p50": 0.04})])


def test_the_terminals_runs_are_in_run_id_order_as_the_report_files():
    """A test's named runs were listed in the order they ran (``::small`` then ``::big``) where
    summary.md, the step summary and index.html list them by id (a reports review)."""
    from pytest_llmreplay.report.terminal import summary_table

    figures = {"llmreplay.ttft.p50 small": 0.01, "llmreplay.ttft.p50 big": 0.02}
    rows = summary_table([("t.py::test_two", "passed", figures)]).splitlines()[2:]
    assert [row.split()[0] for row in rows] == ["t.py::test_two::big", "t.py::test_two::small"]


def test_a_capacity_search_adds_the_capacity_column_to_the_markdown_and_html_overviews():
    """The terminal's summary row had the capacity and the step summary (summary.md) had not (a
    new user's trial): every overview now has it, written the same way."""
    plain = record(MARKER_SLOS)
    searched = {
        **plain,
        "test": "t.py::test_capacity",
        "summary": {**plain["summary"], "capacity": {"session_rate": 0.4644, "low": 0.4644, "high": 0.4776}},
        "capacity": {"ceiling": False, "at_least": False},
    }
    assert "capacity" not in overview_headers([plain])
    headers = overview_headers([plain, searched])
    assert headers[headers.index("SLOs met") - 1] == "capacity"
    assert overview_row(searched, capacity=True)[headers.index("capacity")] == "0.4644 sessions/s"
    assert overview_row(plain, capacity=True)[headers.index("capacity")] == "-"
    ceiling = {**searched, "capacity": {"ceiling": True, "at_least": False}}
    assert overview_row(ceiling, capacity=True)[headers.index("capacity")] == "0.4644 sessions/s (ceiling)"
    row = next(line for line in markdown([plain, searched]).splitlines() if line.startswith("| t.py::test_capacity"))
    assert "| 0.4644 sessions/s |" in row


def test_markdown_summary_keeps_a_pipe_in_its_cell_and_a_masked_secret_as_written():
    """A ``|`` in a test id would end its table cell and shift the row; a masked env value
    ``***`` would render as emphasis: both are escaped, and read back as written."""
    stored = {
        **record(MARKER_SLOS),
        "test": "t.py::test_x[sh -c 'a | b']",
        "fingerprint": {"kind": "live", "server": {"cmd": "x --port {port}", "env": {"HF_TOKEN": "***"}}},
    }
    text = markdown([stored])
    row = next(line for line in text.splitlines() if line.startswith("| t.py::test_x"))
    assert "test_x\\[sh -c 'a \\| b'\\]" in row
    assert row.count("|") - row.count("\\|") == len(overview_headers([stored])) + 1  # one cell per header
    endpoint = next(line for line in text.splitlines() if line.startswith("Endpoint:"))
    assert endpoint.endswith("server.env.HF_TOKEN \\*\\*\\*")
