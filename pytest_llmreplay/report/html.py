"""``index.html`` of ``--llm-report DIR``: one self-contained page (inline CSS and SVG, no script).

At the top, the summary table (:func:`~pytest_llmreplay.report.rows.overview_headers`), each test
linking to its section. Then one section per test, made of :data:`SECTIONS` in order: each is a
function from the stored result to HTML (empty when it has nothing to say):

- :func:`headline_section`: PASS/FAIL (as the test's outcome), the SLO closest to failing and the comparison's verdict,
  then the commit and the endpoint;
- :func:`slo_section`: the SLO table, values and margins in the threshold's unit;
- :func:`comparison_section`: the comparison with the baseline;
- :func:`load_curve_section`: a capacity test's load curve (latency and throughput vs offered
  load, SLO lines, the capacity marked; :mod:`~pytest_llmreplay.report.load_curve`);
- :func:`trend_section`: each gated figure over the stored commits, change points marked, this
  run highlighted (:mod:`~pytest_llmreplay.report.trend`), or one line saying why there is none;
- :func:`cdf_section`: CDF plots of TTFT, TPOT, request latency and TTFAT with percentiles and
  SLO thresholds marked, the baseline's curve dashed;
- :func:`server_section`: when the server's ``/metrics`` was scraped, its ``server.*`` figures
  (its prefix-cache hit rate beside the client's, a warning when they are more than 5 points
  apart) and its series over the run (:mod:`~pytest_llmreplay.report.server_plot`), ``server.*`` SLOs
  marked.

A new view of a stored result (a trend over commits, a load curve) is one more such function,
drawn with :func:`~pytest_llmreplay.report.plots.new_axes` in the same style, added to
:data:`SECTIONS`.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..gate.comparison_table import COMPARISON_HEADERS
from ..metrics.slo import Check
from ..metrics.units import format_value
from .rows import (
    ALL_JUDGED,
    SLO_HEADERS,
    NotJudged,
    capacity_in,
    comparison_rows,
    endpoint_text,
    headline,
    overview_headers,
    overview_row,
    reasoning_in,
    session_title,
    slo_rows,
    stored_checks,
)

# (metric, plot title, what one sample is)
CDF_METRICS = (
    ("ttft", "TTFT", "requests"),
    ("ttfo", "TTFO (first answer token)", "requests"),
    ("tpot", "TPOT", "requests"),
    ("latency", "Request latency", "requests"),
    ("ttfat", "TTFAT", "sessions"),
)
NUMBER_UNIT = re.compile(r"(\d) (us|ms|s|tok/s|req/s|pts)\b")  # kept on one line in a table cell
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-top:1px solid #ddd;padding-top:1em}h3{font-size:1em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}td:last-child,th:last-child{white-space:normal;text-align:left}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.headline{font-size:1.05em;padding:.5em .8em;border-left:5px solid #888;background:#f7f7f7}
.headline.pass{border-color:#2e7d32}.headline.fail{border-color:#c62828}
.status{font-weight:bold}.pass .status,.ok{color:#2e7d32}.fail .status,.breach,.regression{color:#c62828;font-weight:bold}
.overview{font-size:.92em;max-width:100%}.overview td,.overview th{white-space:normal}.overview td:first-child{overflow-wrap:anywhere;min-width:12em}
.facts{color:#555;font-size:.9em}.plots{display:flex;flex-wrap:wrap;gap:8px}.plots svg{border:1px solid #eee;max-width:100%;height:auto}
"""


def slug(text: str) -> str:
    """``text`` fit for an HTML id: every run of characters other than letters, digits and ``_``
    turned into ``-``, none at either end."""
    return re.sub(r"[^A-Za-z0-9_]+", "-", text).strip("-")


def anchor(test: str) -> str:
    """The id of a test's section: ``test-``, its :func:`slug` and 6 hex digits of its digest, so
    that ids that slug alike (``test_p[a b]``, ``test_p[a-b]``) stay apart."""
    return f"test-{slug(test)}-{hashlib.sha256(test.encode()).hexdigest()[:6]}"


def html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    cell_class: Callable[[str, str], str] = lambda header, cell: "",
    links: Sequence[str] | None = None,
    table_class: str = "",
) -> str:
    """A table of escaped text cells; ``cell_class(header, cell)`` gives a cell its class;
    ``links[i]``: where row i's first cell links to; ``table_class``: the table's class."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for index, row in enumerate(rows):
        cells = []
        for column, (header, cell) in enumerate(zip(headers, row, strict=True)):
            css = cell_class(header, cell)
            text = NUMBER_UNIT.sub("\\1&nbsp;\\2", html.escape(cell))
            if column == 0 and links is not None:
                text = f'<a href="{html.escape(links[index])}">{text}</a>'
            cells.append(f"<td{f' class={css!r}' if css else ''}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table{f' class={table_class!r}' if table_class else ''}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def verdict_class(header: str, cell: str) -> str:
    """Colour FAIL, BREACH and REGRESSION cells red, PASS, ok and no regression green."""
    if cell in ("BREACH", "FAIL") or cell.startswith(("REGRESSION", "UNSTABLE")):
        return "breach"
    return "ok" if cell in ("ok", "no regression", "PASS") else ""


def headline_section(record: Mapping[str, Any]) -> str:
    line = headline(record)
    rest = html.escape(" · ".join(line.details()))
    commit = record.get("commit")
    facts = [
        f"commit {html.escape(str(commit)[:12]) if commit else 'none (not a git checkout)'}{' (dirty)' if record.get('dirty') else ''}",
        f"endpoint: {html.escape(endpoint_text(record.get('fingerprint')))}",
    ]
    workload = record.get("workload") or {}
    if workload.get("path"):
        facts.append(f"workload {html.escape(str(workload['path']))}")
    if record.get("time"):
        facts.append(f"measured {html.escape(str(record['time']))}")
    return (
        f'<p class="headline {line.status.lower().replace(" ", "-")}"><span class="status">{html.escape(line.status)}</span> · {rest}</p>'
        f'<p class="facts">{" · ".join(facts)}</p>'
    )


def slo_section(record: Mapping[str, Any]) -> str:
    rows = slo_rows(record)
    return f"<h3>SLOs</h3>{html_table(SLO_HEADERS, rows, verdict_class)}" if rows else ""


def comparison_section(record: Mapping[str, Any]) -> str:
    comparison = record.get("comparison")
    if not comparison:
        return ""
    title = f"<h3>Compared with {html.escape(comparison['baseline'])}</h3>"
    if comparison.get("header"):
        title += f"<p>{html.escape(comparison['header'])}</p>"
    if comparison.get("mismatch"):
        return f"{title}<p>{html.escape(comparison['mismatch'])}</p>"
    unstable = (
        f"<p class='breach'>UNSTABLE: {html.escape(comparison['unstable'])}</p>" if comparison.get("unstable") else ""
    )
    return (
        title
        + html_table(
            COMPARISON_HEADERS,
            comparison_rows(comparison),
            lambda header, cell: "regression" if cell in ("REGRESSION", "UNSTABLE") else "",
        )
        + unstable
    )


def load_curve_section(record: Mapping[str, Any]) -> str:
    """A capacity test's search: the capacity, its bracket and why the search ended, then the load curve."""
    from .load_curve import load_curve_svg, load_label

    capacity = record.get("capacity")
    if not isinstance(capacity, Mapping):
        return ""
    svg = load_curve_svg(f"{anchor(record['test'])}-load-curve", capacity)
    if svg is None:
        return ""
    by = (capacity.get("plan") or {}).get("by", "rate")
    metric = load_label(by, capacity.get("rate_unit", "req/s"))[0]
    at_least = bool(capacity.get("at_least"))  # no load failed: a lower bound, as llmreplay sweep writes it
    # no failing load above (a lower bound, or a ceiling): the bracket has no top, as llmreplay sweep prints it
    topless = at_least or capacity.get("upper_bound_found") is False
    line = (
        # the capacity is the bracket's bottom, whatever its stored name (rate, session_rate, concurrency)
        f"capacity ({by}) {'at least ' if at_least else ''}{format_value(metric, capacity.get('low'))}, "
        f"bracket [{format_value(metric, capacity.get('low'))}, {'-' if topless else format_value(metric, capacity.get('high'))}]"
    )
    runs = len(capacity.get("points") or ()) + len(capacity.get("estimates") or ())  # as the headline counts them
    line += f", {runs} runs; {capacity.get('reason', '')}"
    return f'<h3>Load curve</h3><p class="facts">{html.escape(line)}</p><div class="plots">{svg}</div>'


def trend_section(record: Mapping[str, Any]) -> str:
    """The trend plots of the report's ``history`` block (:func:`~pytest_llmreplay.gate.history.trend`);
    one line when the run was not compared or the block says why there is no plot."""
    block = record.get("history")
    if not isinstance(block, Mapping):
        return '<p class="facts">Trend over commits: none, this run was not compared (--llm-compare REF plots the stored results per commit)</p>'
    if not block.get("series"):
        return (
            f'<p class="facts">Trend over commits: none, {html.escape(str(block.get("note", "no stored results")))}</p>'
        )
    from .trend import trend_svg

    plots = [
        trend_svg(f"{anchor(record['test'])}-trend-{slug(key)}", key, series, str(block.get("reference", "")))
        for key, series in block["series"].items()
    ]
    line = f"{block.get('earlier', 0)} earlier results like this one on the first-parent history of {block.get('reference', '')}, then this run"
    return (
        f'<h3>Trend over commits</h3><p class="facts">{html.escape(line)}</p><div class="plots">{"".join(plots)}</div>'
    )


def cdf_section(record: Mapping[str, Any]) -> str:
    from .plots import Threshold, cdf_svg

    baseline = (record.get("comparison") or {}).get("baseline_samples") or {}
    checks = [c for c in stored_checks(record) if isinstance(c, Check)]
    plots = []
    for metric, label, of in CDF_METRICS:
        samples = record["samples"].get(metric) or []
        if not samples:
            continue
        summary = record["summary"].get(metric, {})
        percentiles = {name: summary[name] for name in ("p50", "p90", "p99") if summary.get(name) is not None}
        thresholds = [
            Threshold(f"{c.slo.key} {c.slo.text}", c.slo.value, c.passed)
            for c in checks
            if c.slo.metric == metric and c.slo.stat != "count"
        ]
        plot_id = f"{anchor(record['test'])}-{metric}"
        plots.append(cdf_svg(plot_id, metric, label, of, samples, baseline.get(metric) or (), percentiles, thresholds))
    return f'<h3>Distributions</h3><div class="plots">{"".join(plots)}</div>' if plots else ""


def server_section(record: Mapping[str, Any]) -> str:
    from ..metrics.server import figures_text, hit_rate_gap
    from .plots import Threshold
    from .server_plot import server_svg

    series = record.get("server_metrics")
    if not isinstance(series, Mapping) or not series:
        return ""
    thresholds: dict[str, list[Threshold]] = {}
    for check in stored_checks(record):
        if isinstance(check, Check) and check.slo.metric == "server":
            mark = Threshold(f"{check.slo.key} {check.slo.text}", check.slo.value, check.passed)
            thresholds.setdefault(check.slo.stat.split(".")[0], []).append(mark)
    figures, client = record["summary"].get("server", {}), record.get("client_hit_rate")
    server_rate = figures.get("prefix_cache_hit_rate")
    gap = hit_rate_gap(server_rate, client) if server_rate is not None and client is not None else None
    warning = f'<p class="breach">{html.escape(gap)}</p>' if gap else ""
    svg = server_svg(f"{anchor(record['test'])}-server", series, thresholds) or ""
    line = html.escape(figures_text(figures, client))
    return f'<h3>Server (/metrics)</h3><p class="facts">{line}</p>{warning}<div class="plots">{svg}</div>'


SECTIONS: tuple[Callable[[Mapping[str, Any]], str], ...] = (
    headline_section,
    slo_section,
    comparison_section,
    load_curve_section,
    trend_section,
    cdf_section,
    server_section,
)


def overview_table(results: Sequence[Mapping[str, Any]]) -> str:
    """The summary table, each test's name a link to its section."""
    return html_table(
        overview_headers(results),
        [overview_row(r, reasoning_in(results), capacity_in(results)) for r in results],
        verdict_class,
        links=[f"#{anchor(r['test'])}" for r in results],
        table_class="overview",
    )


def html_page(results: Sequence[Mapping[str, Any]], not_judged: NotJudged = ALL_JUDGED) -> str:
    """The whole page (see the module docstring); its title and the line naming the tests
    ``not_judged`` as summary.md has them."""
    body = [f"<h1>{html.escape(session_title(len(results), not_judged))}</h1>"]
    body += [f"<p class='breach'>{html.escape(line)}</p>" for line in not_judged.line().splitlines()]
    body.append(overview_table(results))
    for record in results:
        body.append(f'<section id="{anchor(record["test"])}"><h2>{html.escape(record["test"])}</h2>')
        body += [section(record) for section in SECTIONS]
        body.append("</section>")
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>llmreplay report</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head><body>{"".join(body)}</body></html>\n'
    )
