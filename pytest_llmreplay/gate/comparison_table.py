"""A comparison (:class:`~pytest_llmreplay.gate.baseline.Comparison`) as the terminal and the
reports show it: a title with the verdict and the header's lines, then a row per metric with its
values in the figure's unit, the change and its interval, the allowed change and the verdict."""

from __future__ import annotations

from ..metrics.units import format_figure
from .baseline import Comparison, Row

COMPARISON_HEADERS = ["metric", "baseline", "current", "change [Holm CI]", "allowed", "verdict"]


def comparison_table(comparison: Comparison) -> str:
    """The comparison as a titled table: ``Compared with LABEL: N regressions`` (or why it was not
    compared, or UNSTABLE), the header's lines, then metric, baseline, current, change [Holm CI],
    allowed, verdict."""
    from tabulate import tabulate

    count = len(comparison.regressions)
    regressions = f"{count} regression{'s' if count != 1 else ''}"
    if comparison.unstable:  # its regressions are those no noise explains (a figure or requests lost)
        regressions = f"{regressions}, the other rows UNSTABLE, no verdict" if count else "UNSTABLE, no verdict"
    verdict = comparison.mismatch or regressions
    title = f"Compared with {comparison.baseline_label}: {verdict}"  # then what the header says of the comparison
    title += f"\n{comparison.header}" if comparison.header else ""
    if comparison.mismatch:
        return title
    rows = [comparison_cells(row) for row in comparison.rows]
    lines = [f"unstable: {comparison.unstable}"] if comparison.unstable else []
    return "\n".join([title, tabulate(rows, headers=COMPARISON_HEADERS, tablefmt="simple"), *lines])


def change_cell(change: float | None, low: float | None, high: float | None) -> str:
    """``+10.2% [+7.1%, +13.4%]``: a change and its interval (``[-3.0%, open]`` when it has no
    upper end); empty when not computed."""
    if change is None:
        return ""
    assert low is not None  # a change comes with its interval, which is open only above
    return f"{change * 100:+.1f}% [{low * 100:+.1f}%, " + ("open]" if high is None else f"{high * 100:+.1f}%]")


def comparison_cells(row: Row) -> list[str]:
    """One row of :func:`comparison_table`: the key, the baseline's and this run's values in the
    figure's unit (:func:`~pytest_llmreplay.metrics.units.format_figure`: a capacity by rate in req/s), the change, the allowed change
    and the verdict with its note (a regression's too: its history t, or why it was not measured)."""
    verdict = (row.verdict.upper() if row.verdict in ("regression", "unstable") else row.verdict) + (
        f" ({row.note})" if row.note else ""
    )
    tolerance = "-" if row.tolerance is None else f"{row.tolerance * 100:g}%"
    return [
        row.key,
        format_figure(row.key, row.baseline),
        format_figure(row.key, row.current),
        change_cell(row.change, row.low, row.high),
        tolerance,
        verdict,
    ]
