"""Units of the built-in metrics, and the one way a value is written for a reader.

Inside the code every metric is in its own unit: seconds for times, a fraction 0..1 for shares,
per second for rates, plain counts for tokens. :data:`UNITS` is the table of the units a reader
may write (SLO thresholds, ``metrics/slo.py``) and reads (reports): unit -> (family, factor to the
metric's own unit), so ``value_in_unit = value / factor``.

:func:`format_value` writes a value with 4 significant digits, no exponent and thousands
separators, in a given unit (an SLO threshold's) or else in the metric's display unit
(:func:`display_unit`): ms for times under 10 s and s from 10 s, % for shares, tok/s, req/s;
a count or a plugin's metric bare. ``format_value("ttft", 0.1288)`` is ``128.8 ms``.
:func:`format_figure` writes a figure named by its key (``ttft.p50``, ``capacity.rate``,
``ttft.count``), whose statistic may have another unit than its metric (:data:`STAT_FAMILIES`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

TIME_METRICS = ("ttft", "ttfr", "ttfo", "itl", "tpot", "latency", "queue", "schedule_lag", "session_latency", "ttfat")
SHARE_METRICS = ("cache_hit_rate", "eligible_cache_hit_rate", "error_rate", "goodput")
TOKEN_RATE_METRICS = (
    "output_throughput",
    "input_throughput",
    "cached_input_throughput",
    "uncached_input_throughput",
    "decode_tps",
    "reasoning_decode_tps",
    "answer_decode_tps",
)
REQUEST_RATE_METRICS = ("request_throughput",)
# a capacity search's load by rate over multi-turn sessions: sessions started per second
SESSION_RATE_METRICS = ("session_throughput",)

# unit -> (family, factor to the metric's own unit)
UNITS = {
    "us": ("time", 1e-6),
    "ms": ("time", 1e-3),
    "s": ("time", 1.0),
    "%": ("share", 0.01),
    "tok/s": ("token_rate", 1.0),
    "req/s": ("request_rate", 1.0),
    "sessions/s": ("session_rate", 1.0),
}
# (metric, stat) whose unit family is not the metric's own
STAT_FAMILIES = {
    ("goodput", "rate"): "request_rate",
    ("capacity", "rate"): "request_rate",
    ("capacity", "session_rate"): "session_rate",
    ("capacity", "concurrency"): "count",
    ("server", "kv_cache_usage.max"): "share",
    ("server", "kv_cache_usage.mean"): "share",
    ("server", "prefix_cache_hit_rate"): "share",
}
SECONDS_FROM = 10.0  # times of at least this many seconds are shown in s, shorter ones in ms
DIGITS = 4


def unit_family(metric: str) -> str | None:
    """``time``, ``share``, ``token_rate``, ``request_rate`` or ``session_rate``; None for a
    metric without a unit (a count, a plugin's metric)."""
    for family, metrics in (
        ("time", TIME_METRICS),
        ("share", SHARE_METRICS),
        ("token_rate", TOKEN_RATE_METRICS),
        ("request_rate", REQUEST_RATE_METRICS),
        ("session_rate", SESSION_RATE_METRICS),
    ):
        if metric in metrics:
            return family
    return None


def display_unit(metric: str, value: float) -> str | None:
    """The unit ``value`` of ``metric`` reads best in (see the module docstring); None: bare.

    For a whole axis or column pass its largest magnitude, so that one unit serves them all."""
    return _family_unit(unit_family(metric), value)


def _family_unit(family: str | None, value: float) -> str | None:
    if family == "time":
        return "s" if abs(value) >= SECONDS_FROM else "ms"
    return {"share": "%", "token_rate": "tok/s", "request_rate": "req/s", "session_rate": "sessions/s"}.get(
        family or ""
    )


def in_unit(value: float, unit: str | None) -> float:
    """``value`` (the metric's own unit) expressed in ``unit`` (None: unchanged)."""
    return value / UNITS[unit][1] if unit else value


def significant(value: float, digits: int = DIGITS) -> str:
    """``value`` to ``digits`` significant digits, without exponent or trailing zeros, with
    thousands separators: 128.8, 21,790, 0.04004, 95."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def with_unit(number: str, unit: str | None) -> str:
    """``128.8 ms``, ``95%``: a written number and its unit (% without a space)."""
    if not unit:
        return number
    return number + unit if unit == "%" else f"{number} {unit}"


def format_value(metric: str, value: float | None, unit: str | None = None) -> str:
    """``value`` of ``metric`` (in the metric's own unit) for a reader: in ``unit`` when given,
    else in :func:`display_unit`; ``-`` for None or NaN."""
    return _written(value, lambda known: unit or display_unit(metric, known))


def figure_unit(key: str, value: float) -> str | None:
    """The unit ``value`` of the figure ``key`` (``metric.stat``) reads best in: its metric's
    (:func:`display_unit`), but its statistic's own where that differs: a ``count`` bare,
    ``goodput.rate`` and ``capacity.rate`` in req/s, ``capacity.session_rate`` in sessions/s,
    ``capacity.concurrency`` bare. For a whole
    axis pass its largest magnitude."""
    metric, _, stat = key.partition(".")
    family = "count" if stat == "count" else STAT_FAMILIES.get((metric, stat), unit_family(metric))
    return _family_unit(family, value)


def format_figure(key: str, value: float | None) -> str:
    """``value`` of the figure ``key`` (``metric.stat``, or a single-figure metric alone) as
    :func:`format_value` writes its metric's, in :func:`figure_unit`."""
    return _written(value, lambda known: figure_unit(key, known))


def _written(value: float | None, unit_of: Callable[[float], str | None]) -> str:
    """``value`` in the unit ``unit_of(value)`` gives (None: bare); ``-`` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    shown = unit_of(value)
    return with_unit(significant(in_unit(value, shown)), shown)
