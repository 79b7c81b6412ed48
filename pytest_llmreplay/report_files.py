"""The session's report files (``--llm-report DIR``), written by the controller at the end.

Each perf test's process writes ``DIR/tests/<test>.json`` (the stored result, plus the
comparison and the baseline's samples when compared) and ``DIR/tests/<test>.csv`` (one row per
request). From the JSON files this module writes:

- ``DIR/summary.md``: one row per test (requests, TTFT p50/p99, TPOT p50, TTFAT p90, cache hit
  rate, output throughput, SLOs met, regressions), then each test's SLO and comparison tables;
  also appended to ``$GITHUB_STEP_SUMMARY`` when that variable is set (GitHub Actions);
- ``DIR/index.html``: the same, self-contained, with latency CDF plots (inline SVG: this run's
  samples, and the baseline's dashed when compared).
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Mapping

from .errors import LLMReplayError

# (column header, metric, stat, factor, format)
OVERVIEW = (
    ("TTFT p50 (ms)", "ttft", "p50", 1e3, "{:.1f}"),
    ("TTFT p99 (ms)", "ttft", "p99", 1e3, "{:.1f}"),
    ("TPOT p50 (ms)", "tpot", "p50", 1e3, "{:.2f}"),
    ("TTFAT p90 (s)", "ttfat", "p90", 1.0, "{:.2f}"),
    ("cache hit", "cache_hit_rate", "mean", 100.0, "{:.1f}%"),
    ("output tok/s", "output_throughput", "steady_state", 1.0, "{:.0f}"),
)
CDF_METRICS = (("ttft", "TTFT", 1e3, "ms"), ("tpot", "TPOT", 1e3, "ms"), ("latency", "Request latency", 1.0, "s"), ("ttfat", "TTFAT", 1.0, "s"))


def read_results(report_dir: Path) -> list[dict[str, Any]]:
    """Every test's stored result in ``report_dir/tests``, by test id."""
    found = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((report_dir / "tests").glob("*.json"))]
    return sorted(found, key=lambda r: r["test"])


def overview_rows(results: list[Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for record in results:
        summary = record["summary"]
        counts = summary.get("requests", {})
        row = [record["test"], f"{counts.get('ok', 0)}/{counts.get('planned', 0)}"]
        for _, metric, stat, factor, form in OVERVIEW:
            value = summary.get(metric, {}).get(stat)
            row.append("-" if value is None else form.format(value * factor))
        checks = record.get("slo") or []
        row.append(f"{sum(c['passed'] for c in checks)}/{len(checks)}" if checks else "-")
        row.append(comparison_cell(record.get("comparison")))
        rows.append(row)
    return rows


def comparison_cell(comparison: Mapping[str, Any] | None) -> str:
    if not comparison:
        return "-"
    if comparison.get("mismatch"):
        return "not compared"
    regressions = [row["key"] for row in comparison["rows"] if row["verdict"] == "regression"]
    return ("REGRESSION: " + ", ".join(regressions)) if regressions else "no regression"


def detail_tables(record: Mapping[str, Any], tablefmt: str) -> list[tuple[str, str]]:
    """(title, table) for the test's SLOs and its comparison."""
    from tabulate import tabulate

    found = []
    checks = record.get("slo") or []
    if checks:
        rows = [[c["key"], c["threshold"], "not measured" if c["measured"] is None else f"{c['measured']:.4g}", "ok" if c["passed"] else "BREACH"] for c in checks]
        found.append(("SLOs", tabulate(rows, headers=["metric", "threshold", "measured", "status"], tablefmt=tablefmt)))
    comparison = record.get("comparison")
    if comparison:
        title = f"Compared with {comparison['baseline']}"
        if comparison.get("mismatch"):
            found.append((title, comparison["mismatch"]))
        else:
            from .baseline import change_cell

            rows = [[r["key"], _num(r["baseline"]), _num(r["current"]), change_cell(r["change"], r["low"], r["high"]), f"{r['tolerance'] * 100:g}%", r["verdict"]] for r in comparison["rows"]]
            found.append((title, tabulate(rows, headers=["metric", "baseline", "current", "change [95% CI]", "allowed", "verdict"], tablefmt=tablefmt)))
    return found


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


HEADERS = ["test", "requests ok", *(h for h, *_ in OVERVIEW), "SLOs met", "vs baseline"]


def markdown(results: list[Mapping[str, Any]]) -> str:
    from tabulate import tabulate

    lines = [f"## llmreplay: {len(results)} perf test{'s' if len(results) != 1 else ''}", "", tabulate(overview_rows(results), headers=HEADERS, tablefmt="github")]
    for record in results:
        tables = detail_tables(record, "github")
        if tables:
            lines += ["", f"### {record['test']}"]
            for title, table in tables:
                lines += ["", f"**{title}**", "", table]
    return "\n".join(lines) + "\n"


def cdf_svg(series: Mapping[str, list[float]], title: str, unit: str, width: int = 420, height: int = 240) -> str:
    """An inline SVG of the empirical CDFs of ``series`` (label -> values); the second series,
    if any, is dashed."""
    pad = 40
    values = [v for vs in series.values() for v in vs]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img"><title>{html.escape(title)}</title>',
             f'<text x="{pad}" y="14" font-size="12">{html.escape(title)} ({unit}); CDF</text>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - 10}" y2="{height - pad}" stroke="#888"/><line x1="{pad}" y1="20" x2="{pad}" y2="{height - pad}" stroke="#888"/>',
             f'<text x="{pad}" y="{height - pad + 14}" font-size="10">{low:.4g}</text><text x="{width - 10}" y="{height - pad + 14}" font-size="10" text-anchor="end">{high:.4g}</text>']
    for index, (label, data) in enumerate(series.items()):
        ordered = sorted(data)
        step = max(1, len(ordered) // 400)
        points = " ".join(
            f"{pad + (v - low) / span * (width - pad - 10):.1f},{height - pad - (i + 1) / len(ordered) * (height - pad - 20):.1f}"
            for i, v in list(enumerate(ordered))[::step] + [(len(ordered) - 1, ordered[-1])]
        )
        colour = ("#1f77b4", "#d62728")[index % 2]
        dash = ' stroke-dasharray="5,3"' if index else ""
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{points}"/>')
        parts.append(f'<text x="{width - 12}" y="{height - pad - 8 - 14 * index}" font-size="11" text-anchor="end" fill="{colour}">{html.escape(label)}</text>')
    return "".join(parts) + "</svg>"


def html_page(results: list[Mapping[str, Any]]) -> str:
    from tabulate import tabulate

    body = [f"<h1>llmreplay: {len(results)} perf tests</h1>", tabulate(overview_rows(results), headers=HEADERS, tablefmt="html")]
    for record in results:
        body.append(f"<h2>{html.escape(record['test'])}</h2>")
        body.append(f"<p>commit {html.escape(str(record.get('commit')))}{' (dirty)' if record.get('dirty') else ''}, endpoint {html.escape(json.dumps(record.get('fingerprint')))}</p>")
        for title, table in detail_tables(record, "html"):
            body.append(f"<h3>{html.escape(title)}</h3>{table if '<table' in table else '<p>' + html.escape(table) + '</p>'}")
        baseline = (record.get("comparison") or {}).get("baseline_samples") or {}
        plots = []
        for metric, label, factor, unit in CDF_METRICS:
            series = {"this run": [v * factor for v in record["samples"].get(metric, [])]}
            if baseline.get(metric):
                series["baseline"] = [v * factor for v in baseline[metric]]
            if series["this run"]:
                plots.append(cdf_svg(series, label, unit))
        body.append("<div>" + "".join(plots) + "</div>")
    style = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}svg{margin:4px;border:1px solid #eee}"
    return f"<!doctype html><html><head><meta charset=\"utf-8\"><title>llmreplay report</title><style>{style}</style></head><body>{''.join(body)}</body></html>\n"


OWNER_MARK = ".llmreplay-report"  # in a report folder: this plugin made it, and may clear it


def claim_report_dir(report_dir: Path) -> None:
    """Make ``report_dir`` this session's, emptied of what an earlier session wrote, so it only
    ever describes one session; raise :class:`LLMReplayError` for a folder that cannot be.

    Only a folder this plugin made (it holds :data:`OWNER_MARK`), an empty one or a new one is
    taken; only the files this module and the gate write are removed (``tests/*.json``,
    ``tests/*.csv``, ``summary.md``, ``index.html``). A folder holding anything else is
    refused: its ``summary.md`` or ``index.html`` may be someone else's.
    """
    from .store import make_folder

    make_folder(report_dir, "the reports")
    if any(report_dir.iterdir()) and not (report_dir / OWNER_MARK).is_file():
        raise LLMReplayError(
            f"{report_dir} already holds files that pytest-llmreplay did not write; name a new or empty folder "
            f"(the plugin empties its report folder at each session, and only one it made, marked by {OWNER_MARK})"
        )
    try:
        (report_dir / "tests").mkdir(exist_ok=True)
        (report_dir / OWNER_MARK).write_text("This folder holds pytest-llmreplay's reports; each session replaces them.\n", encoding="utf-8")
        for stale in [*(report_dir / "tests").glob("*.json"), *(report_dir / "tests").glob("*.csv"), report_dir / "summary.md", report_dir / "index.html"]:
            stale.unlink(missing_ok=True)
    except OSError as exc:
        raise LLMReplayError(f"cannot write reports to {report_dir}: {exc.strerror or exc}") from None


def write_session_reports(report_dir: Path) -> list[Path]:
    """summary.md and index.html from the tests' JSON files (none when no perf test ran);
    the Markdown is appended to ``$GITHUB_STEP_SUMMARY`` when set."""
    results = read_results(report_dir)
    if not results:
        return []
    text = markdown(results)
    summary = report_dir / "summary.md"
    summary.write_text(text, encoding="utf-8")
    page = report_dir / "index.html"
    page.write_text(html_page(results), encoding="utf-8")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as stream:
            stream.write(text)
    return [summary, page]
