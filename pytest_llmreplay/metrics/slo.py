"""SLO thresholds: parse ``"ttft.p99": "< 2s"`` safely (no ``eval``) and check them against a summary.

A key is ``<metric>.<stat>`` (``ttft.p99``, ``output_throughput.steady_state``) or a single-figure
metric alone (``error_rate``, ``goodput``, ``effective_concurrency``). ``goodput`` with a
``req/s`` threshold (or ``goodput.rate``) is the rate of good requests, alone (or ``.value``) the
share; ``capacity.rate`` (req/s), ``capacity.session_rate`` (sessions/s: a search by rate over
multi-turn sessions) and ``capacity.concurrency`` are what a capacity search found
(:mod:`~pytest_llmreplay.search.capacity`); ``server.<figure>`` are the server's own, from its
``/metrics`` (:mod:`~pytest_llmreplay.metrics.server`: ``server.preemptions == 0``,
``server.kv_cache_usage.max < 90%``). A threshold is an operator
(``<``, ``<=``, ``>``, ``>=``, ``==``), a number and an optional unit:

- time: ``us``, ``ms``, ``s`` (metrics in seconds: ``ttft``, ``ttfr``, ``ttfo``, ``itl``,
  ``tpot``, ``latency``, ``queue``, ``schedule_lag``, ``session_latency``, ``ttfat``);
- share: ``%`` (``cache_hit_rate``, ``eligible_cache_hit_rate``, ``error_rate``, ``goodput``,
  ``server.kv_cache_usage.*``, ``server.prefix_cache_hit_rate``);
- rate: ``tok/s`` (token throughputs, ``decode_tps``, ``reasoning_decode_tps``,
  ``answer_decode_tps``), ``req/s`` (``request_throughput``, ``goodput.rate``, ``capacity.rate``),
  ``sessions/s`` (``capacity.session_rate``);
- no unit: the metric's own unit (a fraction 0..1, tokens, tokens/s, requests/s); a share over 1
  without ``%`` is refused (``>= 80`` means ``>= 80%``?), and so is a time without a unit
  (``"< 500"`` on ``ttft``: 500 ms or 500 s? the classic slip, which would pass as 500 s);
- refused too, on a built-in metric, a threshold no run could pass or fail: below 0, ``< 0``, a
  share over 100% or ``> 100%``, a number past the floats (``1e400``).

The margin of a check is its headroom in the threshold's unit: threshold - measured for ``<``
and ``<=``, measured - threshold for ``>`` and ``>=``, -|measured - threshold| for ``==``;
negative when breached. A metric the run did not measure (no complete session for ``ttfat``,
no reasoning for ``ttfo.p90 < 20s`` or ``reasoning_tokens.mean < 4000``) is a breach, its
measured cell :data:`NOT_MEASURED`: an SLO that cannot be checked does not pass.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..errors import LLMReplayError
from .names import CAPACITY_STATS, GOODPUT_METRICS, RATES, REASONING_METRICS, REQUEST_METRICS, SESSION_METRICS, STATS
from .server import SERVER_STATS
from .units import DIGITS, STAT_FAMILIES, UNITS, display_unit, format_value, in_unit, significant, with_unit
from .units import unit_family as _unit_family

THROUGHPUT_METRICS = (
    "request_throughput",
    "output_throughput",
    "input_throughput",
    "cached_input_throughput",
    "uncached_input_throughput",
)
SINGLE_METRICS = ("error_rate", "goodput", "effective_concurrency")
DISTRIBUTION_METRICS = REQUEST_METRICS + REASONING_METRICS + SESSION_METRICS
KNOWN_METRICS = DISTRIBUTION_METRICS + THROUGHPUT_METRICS + SINGLE_METRICS + ("capacity", "server")

NOT_MEASURED = "not measured in this run"  # why a check (or a gated figure) with no measurement fails
OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "<": operator.lt,
    ">": operator.gt,
}
# every unit of UNITS, the longest first (``sessions/s`` before ``s``)
THRESHOLD = re.compile(
    r"^\s*(<=|>=|==|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*("
    + "|".join(map(re.escape, sorted(UNITS, key=len, reverse=True)))
    + r")?\s*$"
)


def unit_family(metric: str) -> str | None:
    """The unit family of a built-in metric (``count`` when it has no unit; None: a plugin's
    metric, any unit goes)."""
    return _unit_family(metric) or ("count" if metric in KNOWN_METRICS else None)


def stats_of(metric: str) -> tuple[str, ...]:
    """The statistics a built-in metric has in a summary."""
    if metric == "goodput":
        return ("value", "rate")
    if metric == "capacity":
        return CAPACITY_STATS
    if metric == "server":
        return SERVER_STATS
    if metric in SINGLE_METRICS:
        return ("value",)
    if metric in THROUGHPUT_METRICS:
        return RATES
    return STATS + ("count",)


@dataclass(frozen=True)
class SLO:
    """One threshold: ``metric.stat op value``; ``value`` in the metric's own unit, ``unit`` as
    written (for display)."""

    key: str
    metric: str
    stat: str
    op: str
    value: float
    unit: str | None
    text: str

    @property
    def factor(self) -> float:
        return UNITS[self.unit][1] if self.unit else 1.0

    def show(self, value: float) -> str:
        """``value`` (metric's own unit) in the threshold's unit (:func:`~pytest_llmreplay.metrics.units.format_value`)."""
        return format_value(self.metric, value, self.unit)

    def show_margin(self, margin: float) -> str:
        """A signed margin in the threshold's unit; a share's in percentage points."""
        sign = "+" if margin > 0 else "-" if margin < 0 else ""
        if (self.unit or display_unit(self.metric, margin)) == "%":
            return f"{sign}{significant(abs(margin) * 100)} pts"
        return sign + self.show(abs(margin))

    def check(self, summary: Mapping[str, Mapping[str, float]]) -> Check:
        measured = summary.get(self.metric, {}).get(self.stat)
        if measured is None or (isinstance(measured, float) and math.isnan(measured)):
            return Check(self, None, None, False)
        if self.op in ("<", "<="):
            margin = self.value - measured
        elif self.op in (">", ">="):
            margin = measured - self.value
        else:
            margin = -abs(measured - self.value)
        return Check(self, float(measured), margin, OPERATORS[self.op](measured, self.value))


@dataclass(frozen=True)
class Check:
    """The outcome of one SLO on one run; ``measured``/``margin`` None when not measured."""

    slo: SLO
    measured: float | None
    margin: float | None
    passed: bool

    def row(self) -> list[str]:
        slo = self.slo
        if self.measured is None:
            return [slo.key, slo.text, NOT_MEASURED, "", "BREACH"]
        assert self.margin is not None  # measured and margin are None together (SLO.check)
        margin = slo.show_margin(self.margin)  # in the threshold's unit, a zero one too: "0 pts", "0 s"
        if self.margin and slo.value:
            relative = self.margin / abs(slo.value) * 100
            sign = "+" if relative > 0 else "-"
            margin += (
                f" ({sign}{significant(abs(relative), 3)}%)"
                if abs(relative) >= 1000
                else f" ({sign}{significant(abs(relative), 1)}%)"  # a hair's breadth: (-0.002%), not (-0.0%)
                if abs(relative) < 0.05
                else f" ({relative:+.1f}%)"
            )
        return [slo.key, slo.text, self.shown_measured(), margin, "ok" if self.passed else "BREACH"]

    def shown_measured(self) -> str:
        """The measured value in the threshold's unit (:meth:`SLO.show`), with the digits it takes
        for the number shown to meet the threshold exactly when the measurement does:
        ``<= 1%`` measured 1.00001% is written ``1.00001%``, not ``1%`` beside ``BREACH``."""
        slo, measured = self.slo, self.measured
        assert measured is not None  # shown only when measured
        unit = slo.unit or display_unit(slo.metric, measured)
        limit = in_unit(slo.value, unit)
        for digits in range(DIGITS, 17):
            number = significant(in_unit(measured, unit), digits)
            if OPERATORS[slo.op](float(number.replace(",", "")), limit) == self.passed:
                return with_unit(number, unit)
        return slo.show(measured)


def stat_family(metric: str, stat: str) -> str | None:
    """The unit family of ``metric.stat``: a count's is ``count``, goodput's and capacity's rate
    ``request_rate``, else the metric's (:func:`unit_family`)."""
    if stat == "count" and metric in KNOWN_METRICS:
        return "count"
    return STAT_FAMILIES.get((metric, stat), unit_family(metric))


def canonical(slo: SLO) -> tuple[str, str]:
    """(key, threshold) written one way for one setting, so that two spellings compare equal:
    the key ``metric.stat`` (the metric alone for ``value``); the threshold ``op number unit``,
    one space after the operator, the number exact without exponent or trailing zeros, in the
    largest unit of its family in which it is at least 1 (else the smallest): ``<1s``,
    ``< 1000ms`` and ``< 1.0 s`` are all ``< 1s``, ``<= 0.05`` on ``tpot`` is ``<= 50ms``; a
    share in % (``>= 0.9``: ``>= 90%``), a rate with its unit after a space (``>= 8 req/s``), a
    count bare; a plugin metric's number in the unit it was written in."""
    from decimal import Decimal

    def factor(unit: str) -> Decimal:
        return Decimal(str(UNITS[unit][1]))

    key = slo.metric if slo.stat == "value" else f"{slo.metric}.{slo.stat}"
    value = Decimal(repr(slo.value))  # the metric's own unit
    if slo.metric not in KNOWN_METRICS:
        unit = slo.unit
    else:
        units = sorted(
            (u for u, (family, _) in UNITS.items() if family == stat_family(slo.metric, slo.stat)),
            key=lambda u: -UNITS[u][1],
        )
        unit = next((u for u in units if abs(value) >= factor(u)), units[-1] if units else None)
    number = format((value / factor(unit) if unit else value).normalize(), "f")
    return key, f"{slo.op} {number}{(' ' if '/' in unit else '') + unit if unit else ''}"


# what other benchmarks call a metric or statistic of ours (vLLM's bench serve: e2el; AIPerf: request_latency)
OTHER_NAMES = {
    "e2e": "latency",
    "e2el": "latency",
    "e2e_latency": "latency",
    "request_latency": "latency",
    "median": "p50",
    "avg": "mean",
    "average": "mean",
}


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'ttft'?)`` for a misspelt ``name``: another benchmark's name for it
    (:data:`OTHER_NAMES`), another case, else the closest of ``known`` (difflib, ratio >= 0.7);
    empty when none is close, or ``name`` is part of several (``throughput``: which one?)."""
    import difflib

    known, lower = list(known), name.lower()
    other = OTHER_NAMES.get(lower)
    if other in known:
        return f" (did you mean {other!r}?)"
    if sum(lower in k for k in known) > 1:
        return ""
    found = next((k for k in known if k.lower() == lower), None) or next(
        iter(difflib.get_close_matches(lower, known, n=1, cutoff=0.7)), None
    )
    return f" (did you mean {found!r}?)" if found else ""


def parse_key(key: str, named: str, extra_metrics: Iterable[str] = ()) -> tuple[str, str]:
    """(metric, stat) of a figure's key: ``ttft.p99``, or a single-figure metric alone
    (``error_rate``: stat ``value``); :class:`LLMReplayError` starting with ``named`` (``SLO
    'ttft.p99'``, ``--metric 'ttft.p99'``) for an unknown metric or statistic, with the closest
    known name (:func:`did_you_mean`).
    ``extra_metrics``: metric names added by plugins (any statistic)."""
    metric, _, stat = key.partition(".")
    extra = set(extra_metrics) - set(KNOWN_METRICS) - {"requests"}
    if metric not in KNOWN_METRICS and metric not in extra:
        known = sorted(set(KNOWN_METRICS) | extra)
        raise LLMReplayError(
            f"{named}: unknown metric {metric!r}{did_you_mean(metric, known)}; expected one of {', '.join(known)}"
        )
    if metric in extra:
        return metric, stat or "value"
    allowed = stats_of(metric)
    if not stat:
        if allowed[0] != "value":
            raise LLMReplayError(
                f"{named}: name a statistic, e.g. '{metric}.{allowed[5] if len(allowed) > 5 else allowed[0]}' (one of {', '.join(allowed)})"
            )
        return metric, "value"
    if stat not in allowed and allowed[0] == "value":  # a single figure: its key is the metric alone
        others = "".join(f" or {metric}.{other}" for other in allowed[1:])
        raise LLMReplayError(
            f"{named}: {metric} takes no statistic such as {stat!r}; write {metric} alone{' (its share)' + others if others else ''}"
        )
    if stat not in allowed:
        raise LLMReplayError(
            f"{named}: {metric} has no statistic {stat!r}{did_you_mean(stat, allowed)}; expected one of {', '.join(allowed)}"
        )
    return metric, stat


# how other tools write an operator or a unit of ours
OTHER_SPELLINGS = {
    "=<": "<=",
    "=>": ">=",
    "=": "==",
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "msec": "ms",
    "millis": "ms",
    "µs": "us",
    "usec": "us",
    "tokens/s": "tok/s",
    "tok/sec": "tok/s",
    "tps": "tok/s",
    "rps": "req/s",
    "qps": "req/s",
    "requests/s": "req/s",
    "req/sec": "req/s",
}
LOOSE_THRESHOLD = re.compile(
    r"^\s*([<>=!]+)?\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\d\s.,_+-][^\d]*?)?\s*$"
)


def misread_part(threshold: str) -> str:
    """``: unknown unit 'sec' (did you mean 's'?)`` or ``: unknown operator '=<' (...)`` for a
    threshold whose number reads but whose operator or unit does not; empty otherwise."""
    found = LOOSE_THRESHOLD.match(threshold)
    if found is None:
        return ""
    op, _, unit = found.groups()
    if op not in OPERATORS:
        hint = f" (did you mean {OTHER_SPELLINGS[op]!r}?)" if op in OTHER_SPELLINGS else ""
        return f": unknown operator {op!r}{hint}" if op else ": no operator"
    if unit is not None and unit not in UNITS:
        better = OTHER_SPELLINGS.get(unit.lower()) or next((u for u in UNITS if u.lower() == unit.lower()), None)
        return f": unknown unit {unit!r}{f' (did you mean {better!r}?)' if better else ''}"
    return ""


def parse_slo(key: str, threshold: Any, extra_metrics: Iterable[str] = ()) -> SLO:
    """One SLO from its key and threshold text; :class:`LLMReplayError` naming the key when bad.

    ``extra_metrics``: metric names added by plugins (any statistic and unit accepted)."""
    __tracebackhide__ = True
    if not isinstance(key, str) or not key:
        raise LLMReplayError(f"SLO key {key!r}: expected a string such as 'ttft.p99'")
    match = THRESHOLD.match(threshold) if isinstance(threshold, str) else None
    goodput_rate = key == "goodput" and match is not None and match.group(3) == "req/s"
    metric, stat = parse_key("goodput.rate" if goodput_rate else key, f"SLO {key!r}", extra_metrics)
    if isinstance(threshold, bool) or not isinstance(threshold, str):
        raise LLMReplayError(f"SLO {key!r}: expected a threshold string such as '< 2s' or '>= 80%', got {threshold!r}")
    if not match:
        raise LLMReplayError(
            f"SLO {key!r}: cannot read threshold {threshold!r}{misread_part(threshold)}; expected an operator (<, <=, >, >=, ==), a number and an optional unit ({', '.join(UNITS)}), e.g. '< 2s'"
        )
    op, number, unit = match.groups()
    family = stat_family(metric, stat)
    if unit and family is not None and UNITS[unit][0] != family:
        fitting = [u for u, (f, _) in UNITS.items() if f == family]
        # a time needs its unit (below); other metrics may go without one, in their own unit
        none = "" if family == "time" else " or none"
        expected = f"one of {', '.join(fitting)}{none}" if fitting else "no unit"
        raise LLMReplayError(
            f"SLO {key!r}: unit {unit!r} does not fit {key} (a {family.replace('_', ' ')} metric); expected {expected}"
        )
    try:  # exact: 95% is 0.95; an exponent past Decimal's range overflows, as 1e400 does float's
        value = float(Decimal(number) * Decimal(str(UNITS[unit][1]))) if unit else float(number)
    except ArithmeticError:  # decimal.Overflow (1e999999999ms was a traceback)
        value = math.inf
    if not math.isfinite(value):  # 1e400: every measurement is below it
        raise LLMReplayError(
            f"SLO {key!r}: {number!r} is too large a number to compare with; expected one such as '< 2s'"
        )
    if value < 0 and metric in KNOWN_METRICS:
        raise LLMReplayError(
            f"SLO {key!r}: expected a threshold >= 0 ({metric} is never negative), got {threshold.strip()!r}"
        )
    if value == 0 and op == "<" and metric in KNOWN_METRICS:  # fails every run, however good
        raise LLMReplayError(
            f"SLO {key!r}: {threshold.strip()!r} can never hold ({metric} is never negative); write '== 0' or '<= 0'"
        )
    if family == "share" and unit and value > 1:  # at most 100%: passes every run, or fails every one
        raise LLMReplayError(
            f"SLO {key!r}: expected a threshold from 0 to 100% ({key} is a share), got {threshold.strip()!r}"
        )
    if family == "share" and value == 1 and op == ">":
        raise LLMReplayError(
            f"SLO {key!r}: {threshold.strip()!r} can never hold ({key} is a share, at most 100%); write '>= 100%' or '== 100%'"
        )
    if value == 0 and op == ">=" and metric in KNOWN_METRICS:  # passes every run, however bad
        raise LLMReplayError(
            f"SLO {key!r}: {threshold.strip()!r} can never fail ({metric} is never negative); write '> 0' for 'some'"
        )
    if (
        family == "share" and value == 1 and op == "<="
    ):  # error_rate <= 1: the 1-for-1% slip passes a run that failed whole
        meant = f"; did you mean '<= {number}%'?" if not unit else ""
        raise LLMReplayError(
            f"SLO {key!r}: {threshold.strip()!r} can never fail ({key} is a share, at most 100%){meant}"
        )
    if family == "time" and not unit:  # the ms/s slip: "< 500" read as 500 seconds passes everything
        written = f"{op} {number}"
        raise LLMReplayError(
            f"SLO {key!r}: {written!r} has no unit, and {metric} is a time; write '{written}ms' or '{written}s' (or us)"
        )
    if family == "share" and not unit and value > 1:
        raise LLMReplayError(f"SLO {key!r}: {key} is a share between 0 and 1; write {threshold.strip()}% or a fraction")
    return SLO(key, metric, stat, op, value, unit, " ".join(threshold.split()))


def refuse_a_table(part: str, key: Any, value: Any) -> None:
    """An :class:`LLMReplayError` when the value of ``part``'s (``SLO``, ``regression``) ``key`` is
    a mapping: TOML reads an unquoted dotted key ``ttft.p99 = "< 1s"`` as the table ``ttft`` holding
    ``p99``, and the error then said to name a statistic the user had named."""
    if isinstance(value, Mapping):
        inner = next(iter(value), "p99")
        raise LLMReplayError(
            f"{part} {key!r}: its value is a table ({dict(value)!r}), as TOML reads an unquoted dotted key "
            f'({key}.{inner} = ... is the table {key}); quote the key: "{key}.{inner}" = ...'
        )


def parse_slos(slos: Mapping[str, Any] | None, extra_metrics: Iterable[str] = ()) -> list[SLO]:
    """Every SLO of a mapping (key -> threshold), in order; a threshold ``"off"`` sets none on its
    key (a test's marker turning off its module's SLO: the markers' ``slo`` mappings merge,
    :func:`~pytest_llmreplay.plugin.spec.marker_arguments`), the key still checked."""
    __tracebackhide__ = True  # a bad threshold in a test's assert_slo shows the test's line
    if slos is None:
        return []
    if not isinstance(slos, Mapping):
        raise LLMReplayError(f"slo: expected a mapping of metric keys to thresholds, got {type(slos).__name__}")
    extra = tuple(extra_metrics)
    parsed = []
    for key, value in slos.items():  # a loop, not a comprehension: its frame would show (Python < 3.12)
        refuse_a_table("SLO", key, value)
        if value == "off":
            parse_key(key, f"SLO {key!r}", extra)
        else:
            parsed.append(parse_slo(key, value, extra))
    return parsed


def per_request_limits(slos: Iterable[SLO]) -> dict[str, float]:
    """Goodput's per-request limits from a test's SLOs (DistServe): every upper bound (``<``,
    ``<=``) on a per-request metric (``ttft``, ``ttfo``, ``tpot``, ``latency``, ``itl``), whatever its
    statistic, is a limit each good request's own value must meet (``ttft.p99 < 1s``: a good
    request's TTFT is at most 1 s; ``itl``: its worst gap); the tightest bound per metric wins."""
    limits: dict[str, float] = {}
    for slo in slos:
        if slo.metric in GOODPUT_METRICS and slo.op in ("<", "<="):
            limits[slo.metric] = min(slo.value, limits.get(slo.metric, slo.value))
    return limits


def goodput_key(slos: Iterable[SLO]) -> str | None:
    """The key of the first of ``slos`` that checks ``goodput`` (``goodput``, ``goodput.rate``);
    None when none does."""
    return next((slo.key for slo in slos if slo.metric == "goodput"), None)


def check_goodput_limits(slos: Iterable[SLO], limits_from: Iterable[SLO], named: str, source: str) -> None:
    """:class:`LLMReplayError` (``named 'goodput': ...``) when ``slos`` check ``goodput`` but
    ``limits_from`` (``source``: the SLOs its per-request limits come from) set no limit
    (:func:`per_request_limits`): no request would be counted good or not, and goodput would
    fail every run as not measured."""
    if per_request_limits(limits_from):
        return
    key = goodput_key(slos)
    if key is not None:
        raise LLMReplayError(
            f"{named} {key!r}: goodput counts the requests that meet every per-request limit, and none is set by {source}; "
            f"add an upper bound (< or <=) on {', '.join(GOODPUT_METRICS[:-1])} or {GOODPUT_METRICS[-1]}, e.g. ttft.p99 < 1s"
        )


def check_slos(summary: Mapping[str, Mapping[str, float]], slos: Iterable[SLO]) -> list[Check]:
    return [slo.check(summary) for slo in slos]


def breach_table(checks: list[Check]) -> str:
    """Every check in one table (metric, threshold, measured, margin, status), headed by how many
    were breached."""
    from tabulate import tabulate

    failed = sum(not c.passed for c in checks)
    head = f"SLO breached: {failed} of {len(checks)}" if failed else f"SLOs met: {len(checks)} of {len(checks)}"
    return (
        head
        + "\n"
        + tabulate(
            [c.row() for c in checks],
            headers=["metric", "threshold", "measured", "margin", "status"],
            tablefmt="simple",
        )
    )


class SLOBreach(AssertionError):
    """Raised by :meth:`~pytest_llmreplay.metrics.result.Result.assert_slo`; the message is the table."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks
        super().__init__(breach_table(checks))


def assert_slos(
    summary: Mapping[str, Mapping[str, float]],
    slos: Mapping[str, Any] | Iterable[SLO],
    extra_metrics: Iterable[str] = (),
) -> list[Check]:
    """Check every SLO; raise :class:`SLOBreach` listing all of them when any is breached."""
    __tracebackhide__ = True
    parsed = parse_slos(slos, extra_metrics) if isinstance(slos, Mapping) else list(slos)
    checks = check_slos(summary, parsed)
    if not all(c.passed for c in checks):
        raise SLOBreach(checks)
    return checks
