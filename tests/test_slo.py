"""SLO thresholds: parsing (units, operators, whitespace, refusals), margins at the boundary, the
breach table and ``Result.assert_slo``; expected figures worked out by hand in the comments."""

from __future__ import annotations

import pytest
from records import make, rec

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.metrics.slo import (
    SLO,
    SLOBreach,
    assert_slos,
    breach_table,
    canonical,
    check_slos,
    parse_slo,
    parse_slos,
)


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-12)


def check(key, threshold, summary, extra=()):
    return parse_slo(key, threshold, extra).check(summary)


# ---------------------------------------------------------------- parsing: units and numbers


@pytest.mark.parametrize(
    ("key", "threshold", "value", "unit"),
    [
        ("ttft.p99", "< 2s", 2.0, "s"),
        ("ttft.p99", "< 250ms", 0.25, "ms"),
        ("itl.p50", "< 1500us", 0.0015, "us"),
        ("latency.max", "<= 1.5s", 1.5, "s"),
        ("tpot.mean", "< .05s", 0.05, "s"),
        ("queue.p90", "< 5.ms", 0.005, "ms"),
        ("session_latency.p50", "< 1e2s", 100.0, "s"),
        ("schedule_lag.max", "< 2.5e-1s", 0.25, "s"),
        ("ttfat.p90", "< 3s", 3.0, "s"),
        ("cache_hit_rate.mean", ">= 80%", 0.8, "%"),
        ("eligible_cache_hit_rate.p50", "> 90%", 0.9, "%"),
        ("error_rate", "<= 0.5%", 0.005, "%"),
        ("goodput", ">= 99%", 0.99, "%"),
        ("output_throughput.steady_state", ">= 1000 tok/s", 1000.0, "tok/s"),
        ("input_throughput.overall", "> 5e3 tok/s", 5000.0, "tok/s"),
        ("cached_input_throughput.last_30s", "> 10 tok/s", 10.0, "tok/s"),
        ("uncached_input_throughput.per_gpu", "< 10 tok/s", 10.0, "tok/s"),
        ("decode_tps.p50", "> 30 tok/s", 30.0, "tok/s"),
        ("request_throughput.steady_state", ">= 2 req/s", 2.0, "req/s"),
    ],
)
def test_units_convert_to_the_metrics_own_unit(key, threshold, value, unit):
    slo = parse_slo(key, threshold)
    assert slo.value == approx(value)
    assert slo.unit == unit
    assert slo.key == key


@pytest.mark.parametrize(
    ("key", "threshold", "value"),
    [
        ("cache_hit_rate.mean", ">= 0.8", 0.8),  # a fraction
        ("error_rate", "== 0", 0.0),
        ("goodput", ">= 1", 1.0),  # a share of exactly 1 is allowed
        ("output_throughput.steady_state", "> 100", 100.0),  # tokens/s
        ("request_throughput.overall", "> 2", 2.0),  # requests/s
        ("prompt_tokens.mean", "< 4096", 4096.0),  # tokens
        ("output_tokens_per_session.max", "<= 1e4", 10000.0),
        ("effective_concurrency", "> 7.5", 7.5),
        ("ttft.count", "< +3", 3.0),
    ],
)
def test_a_bare_number_is_in_the_metrics_own_unit(key, threshold, value):
    slo = parse_slo(key, threshold)
    assert slo.value == approx(value)
    assert slo.unit is None
    assert slo.factor == 1.0


@pytest.mark.parametrize(
    ("key", "threshold", "written"),
    [
        ("ttft.p90", "< 500", "< 500"),
        ("ttft.p99", "<1000", "< 1000"),
        ("itl.p99", "< 0.05", "< 0.05"),
        ("ttfat.p90", "<=2", "<= 2"),
        ("tpot.mean", "== 0", "== 0"),
    ],
)
def test_a_time_without_a_unit_is_refused(key, threshold, written):
    """'< 500' on a time was 500 seconds, which passes everything (issue 31 B5)."""
    with pytest.raises(LLMReplayError) as info:
        parse_slo(key, threshold)
    metric = key.split(".")[0]
    assert (
        str(info.value)
        == f"SLO {key!r}: {written!r} has no unit, and {metric} is a time; write '{written}ms' or '{written}s' (or us)"
    )


@pytest.mark.parametrize(
    ("key", "threshold"),
    [
        ("ttft.p99", "< -1s"),
        ("tpot.p50", "<= -0.5ms"),
        ("output_throughput.steady_state", "> -1 tok/s"),
        ("request_throughput.overall", ">= -2 req/s"),
        ("error_rate", "< -1%"),
        ("capacity.rate", ">= -1 req/s"),
    ],
)
def test_a_negative_threshold_on_a_built_in_metric_is_refused(key, threshold):
    # no time, throughput, share or count is below 0: such an SLO always passes or never does
    message = refused(key, threshold)
    assert (
        message
        == f"SLO {key!r}: expected a threshold >= 0 ({key.partition('.')[0]} is never negative), got {threshold!r}"
    )


@pytest.mark.parametrize("threshold", ["< 1e400s", "< 1e999999999ms", "< 1e999999999999999999ms"])
def test_a_threshold_too_large_to_compare_is_refused_whatever_its_exponent(threshold):
    # past Decimal's exponent range a unit's product overflowed: a traceback, where 1e400 was refused
    number = threshold.split()[1].rstrip("ms")
    assert refused("ttft.p99", threshold) == (
        f"SLO 'ttft.p99': {number!r} is too large a number to compare with; expected one such as '< 2s'"
    )


def test_a_plugins_metric_may_have_a_negative_threshold():
    assert parse_slo("drift.mean", "> -1", extra_metrics=["drift"]).value == -1.0  # signed numbers read as numbers


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "=="])
def test_every_operator(op):
    slo = parse_slo("ttft.p99", f"{op} 2s")
    assert slo.op == op
    assert slo.value == 2.0
    assert slo.text == f"{op} 2s"


@pytest.mark.parametrize(
    ("threshold", "op", "text"),
    [
        ("<2s", "<", "<2s"),
        ("< 2 s", "<", "< 2 s"),
        ("  <=\t2s  ", "<=", "<= 2s"),  # the text keeps one space where there was any
        ("<=2 s\n", "<=", "<=2 s"),
        (">=   2    s", ">=", ">= 2 s"),
        ("==2s", "==", "==2s"),
    ],
)
def test_whitespace_anywhere_between_the_parts(threshold, op, text):
    slo = parse_slo("ttft.p99", threshold)
    assert (slo.op, slo.value, slo.unit) == (op, 2.0, "s")
    assert slo.text == text


def test_key_splits_into_metric_and_stat():
    slo = parse_slo("output_throughput.steady_state", "> 10 tok/s")
    assert (slo.metric, slo.stat) == ("output_throughput", "steady_state")
    single = parse_slo("error_rate", "== 0")
    assert (single.metric, single.stat) == ("error_rate", "value")


@pytest.mark.parametrize("stat", ["mean", "min", "p50", "p90", "p95", "p99", "max", "std", "count"])
def test_distribution_metrics_take_every_statistic(stat):
    assert parse_slo(f"ttft.{stat}", "< 2" if stat == "count" else "< 2s").stat == stat


@pytest.mark.parametrize("stat", ["overall", "steady_state", "last_30s", "per_gpu"])
def test_throughput_metrics_take_the_rates(stat):
    assert parse_slo(f"request_throughput.{stat}", "> 1 req/s").stat == stat


def test_the_count_of_a_share_metric_is_a_plain_number():
    # "at least 80 sessions reported a cache hit rate": the count of sessions, not a share
    slo = parse_slo("cache_hit_rate.count", ">= 80")
    assert slo.value == 80.0
    c = slo.check({"cache_hit_rate": {"mean": 0.5, "count": 120}})
    assert c.passed and c.margin == 40.0  # 120 - 80


def test_the_count_of_a_time_metric_takes_no_time_unit():
    # ttft.count counts requests: "> 2s" is as wrong on it as on prompt_tokens
    message = refused("ttft.count", "> 2s")
    assert "unit 's' does not fit" in message


@pytest.mark.parametrize(
    ("key", "threshold", "value"),
    [
        # 35%, 70%, 95% and 9 ms are values where n * 0.01 (or n * 1e-3) is not the double nearest
        # to n / 100: the threshold must be the same number the user would get writing 0.35
        ("cache_hit_rate.mean", ">= 35%", 0.35),
        ("cache_hit_rate.mean", ">= 70%", 0.70),
        ("goodput", ">= 95%", 0.95),
        ("ttft.p50", ">= 9ms", 0.009),
        ("itl.p50", ">= 5us", 0.000005),
    ],
)
def test_a_unit_threshold_is_exactly_the_written_figure(key, threshold, value):
    assert parse_slo(key, threshold).value == value


def test_a_measured_value_exactly_at_a_percent_threshold_meets_it():
    # 19 good requests of 20: goodput 19 / 20 = 0.95, which meets ">= 95%"
    c = check("goodput", ">= 95%", {"goodput": {"value": 19 / 20}})
    assert c.passed
    assert c.margin == 0
    assert c.row()[3:] == ["0 pts", "ok"]  # a share's margin in percentage points, a zero one too


def test_a_measured_value_exactly_at_a_millisecond_threshold_meets_it():
    c = check("ttft.p50", ">= 9ms", {"ttft": {"p50": 0.009}})
    assert c.passed
    assert c.margin == 0


# ---------------------------------------------------------------- parsing: refusals


def refused(key, threshold, extra=()) -> str:
    with pytest.raises(LLMReplayError) as info:
        parse_slo(key, threshold, extra)
    message = str(info.value)
    assert repr(key) in message, message  # every message names the key
    return message


def test_unknown_metric_is_refused_with_the_known_ones_listed():
    message = refused("ttfb.p99", "< 2s")
    assert "unknown metric 'ttfb'" in message
    assert "expected one of" in message
    for name in ("ttft", "error_rate", "output_throughput", "effective_concurrency"):
        assert name in message


def test_the_requests_block_is_not_a_metric_even_when_named_as_extra():
    message = refused("requests.ok", "> 10", extra=["requests"])
    assert "unknown metric 'requests'" in message


@pytest.mark.parametrize("key", ["ttft", "ttft.", "decode_tps"])
def test_a_distribution_metric_needs_a_statistic(key):
    message = refused(key, "< 2")
    assert "name a statistic" in message
    assert "p99" in message and "mean" in message  # the statistics it could have named


@pytest.mark.parametrize("key", ["output_throughput", "request_throughput"])
def test_a_throughput_metric_needs_a_rate(key):
    message = refused(key, "> 1")
    assert "name a statistic" in message
    assert "steady_state" in message


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("ttft.p100", "mean"),
        ("ttft.steady_state", "p99"),  # a rate on a distribution
        ("ttft.value", "p99"),
        ("output_throughput.p99", "steady_state"),  # a distribution statistic on a throughput
        ("request_throughput.mean", "last_30s"),
        ("request_throughput.count", "per_gpu"),
        ("ttft.p99.extra", "p99"),
    ],
)
def test_wrong_statistic_for_the_metric_family(key, expected):
    message = refused(key, "< 2")
    assert "has no statistic" in message
    assert "expected one of" in message and expected in message


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("error_rate.p50", "SLO 'error_rate.p50': error_rate takes no statistic such as 'p50'; write error_rate alone"),
        (
            "effective_concurrency.max",
            "SLO 'effective_concurrency.max': effective_concurrency takes no statistic such as 'max'; write effective_concurrency alone",
        ),
        (
            "goodput.mean",
            "SLO 'goodput.mean': goodput takes no statistic such as 'mean'; write goodput alone (its share) or goodput.rate",
        ),
    ],
)
def test_a_single_figure_is_named_by_its_metric_alone(key, message):
    # not "expected one of value": the key a user writes is error_rate, not error_rate.value
    assert refused(key, "< 0.5") == message


@pytest.mark.parametrize(
    ("key", "threshold", "unit", "family"),
    [
        ("ttft.p99", "< 80%", "%", "time"),
        ("ttft.p99", "< 2 tok/s", "tok/s", "time"),
        ("cache_hit_rate.mean", "> 2s", "s", "share"),
        ("error_rate", "< 1 req/s", "req/s", "share"),
        ("output_throughput.steady_state", "> 2 req/s", "req/s", "token rate"),
        ("decode_tps.p50", "> 2ms", "ms", "token rate"),
        ("request_throughput.overall", "> 2 tok/s", "tok/s", "request rate"),
        ("prompt_tokens.mean", "< 2s", "s", "count"),
        ("effective_concurrency", "< 2%", "%", "count"),
    ],
)
def test_a_unit_that_does_not_fit_the_metric(key, threshold, unit, family):
    message = refused(key, threshold)
    assert f"unit {unit!r} does not fit" in message
    assert f"a {family} metric" in message


def test_a_time_with_a_unit_that_does_not_fit_is_told_the_units_it_needs():
    # "or none" there contradicted the rule that a time needs its unit ('< 500' is refused)
    assert refused("ttft.p99", "< 50%").endswith("expected one of us, ms, s")
    assert refused("cache_hit_rate.mean", ">= 5ms").endswith("expected one of % or none")


@pytest.mark.parametrize("key", ["cache_hit_rate.mean", "error_rate", "goodput", "eligible_cache_hit_rate.p50"])
def test_a_share_over_one_without_percent_is_refused(key):
    message = refused(key, ">= 80")
    assert "share between 0 and 1" in message
    assert ">= 80%" in message  # what to write instead
    assert parse_slo(key, ">= 80%").value == approx(0.8)


@pytest.mark.parametrize("threshold", [2, 2.0, None, True, False, ["< 2s"], {"<": 2}, b"< 2s"])
def test_a_threshold_that_is_not_a_string_is_refused(threshold):
    message = refused("ttft.p99", threshold)
    assert "expected a threshold string" in message
    assert repr(threshold) in message


@pytest.mark.parametrize(
    "threshold",
    [
        "",
        "   ",
        "2s",
        "<",
        "< s",
        "less than 2s",
        "< 2 seconds",
        "< 2S",
        "< 2 MS",
        "=< 2s",
        "=> 2s",
        "= 2s",
        "!= 2s",
        "<< 2s",
        "< 2s s",
        "< 2 ms ms",
        "< 1,5s",
        "< 2s <",
        "< inf",
        "< nan",
        "< 1_000ms",
        "< 0x10",
        "< 2h",
        "< 2 tok",
    ],
)
def test_garbage_thresholds_are_refused(threshold):
    message = refused("ttft.p99", threshold)
    assert "cannot read threshold" in message
    assert "expected an operator" in message


@pytest.mark.parametrize(
    "threshold",
    [
        "__import__('os')",
        "__import__('os').system('true')",
        "< __import__('os').getpid()",
        "< 2 + 1",
        "< 2s or True",
        "< 2s; import os",
        "< (lambda: 3)()",
        "< len('abc')",
        "< 2s\n__import__('os')",
    ],
)
def test_code_is_never_evaluated(threshold, monkeypatch):
    import builtins

    def forbidden(*args, **kwargs):
        raise AssertionError("parse_slo evaluated code")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    message = refused("ttft.p99", threshold)
    assert "cannot read threshold" in message


@pytest.mark.parametrize("key", [None, "", 5, ("ttft", "p99")])
def test_a_key_that_is_not_a_nonempty_string_is_refused(key):
    with pytest.raises(LLMReplayError, match="expected a string such as 'ttft.p99'"):
        parse_slo(key, "< 2s")


def test_parse_slos_keeps_the_order_and_reads_none_as_no_slos():
    slos = parse_slos({"error_rate": "== 0", "ttft.p99": "< 2s", "cache_hit_rate.mean": ">= 50%"})
    assert [s.key for s in slos] == ["error_rate", "ttft.p99", "cache_hit_rate.mean"]
    assert parse_slos(None) == []
    assert parse_slos({}) == []


@pytest.mark.parametrize("slos", [["ttft.p99 < 2s"], "ttft.p99 < 2s", 3])
def test_parse_slos_wants_a_mapping(slos):
    with pytest.raises(LLMReplayError, match="slo: expected a mapping"):
        parse_slos(slos)


def test_parse_slos_names_the_bad_key_among_good_ones():
    with pytest.raises(LLMReplayError, match="'tpot.p99'"):
        parse_slos({"ttft.p99": "< 2s", "tpot.p99": "< 2%"})


# ---------------------------------------------------------------- plugin metrics


def test_a_plugin_metric_takes_any_statistic_and_unit():
    extra = ["gpu_util", "kv_blocks"]
    assert parse_slo("gpu_util.mean", "> 50%", extra).value == approx(0.5)
    assert parse_slo("gpu_util.whatever", "< 3 tok/s", extra).value == approx(3.0)
    assert parse_slo("kv_blocks.p99", "< 2ms", extra).value == approx(0.002)
    bare = parse_slo("kv_blocks", "< 900", extra)
    assert (bare.stat, bare.value) == ("value", 900.0)
    assert parse_slo("gpu_util.mean", "> 80", extra).value == 80.0  # no share rule for an unknown metric


def test_a_plugin_metric_is_unknown_without_the_plugin():
    refused("gpu_util.mean", "> 50%")


def test_a_plugin_metric_still_needs_a_readable_threshold():
    message = refused("gpu_util.mean", "__import__('os')", extra=["gpu_util"])
    assert "cannot read threshold" in message


def test_extra_metrics_do_not_loosen_the_rules_of_a_built_in_metric():
    # naming ttft as "extra" (e.g. the whole summary passed as extra_metrics) keeps ttft a time metric
    refused("ttft.p99", "< 80%", extra=["ttft", "gpu_util"])
    refused("ttft.bogus", "< 2s", extra=["ttft"])


# ---------------------------------------------------------------- checks, margins, boundaries


def test_less_than_margin_is_threshold_minus_measured():
    c = check("ttft.p99", "< 2s", {"ttft": {"p99": 1.5}})
    assert c.passed and c.measured == 1.5
    assert c.margin == approx(0.5)  # 2 - 1.5
    assert c.row() == ["ttft.p99", "< 2s", "1.5 s", "+0.5 s (+25.0%)", "ok"]  # 0.5 / 2


def test_greater_than_margin_is_measured_minus_threshold():
    c = check("output_throughput.steady_state", "> 100 tok/s", {"output_throughput": {"steady_state": 120.0}})
    assert c.passed
    assert c.margin == approx(20.0)  # 120 - 100
    assert c.row() == ["output_throughput.steady_state", "> 100 tok/s", "120 tok/s", "+20 tok/s (+20.0%)", "ok"]


def test_a_breach_has_a_negative_margin():
    c = check("output_throughput.steady_state", ">= 100 tok/s", {"output_throughput": {"steady_state": 80.0}})
    assert not c.passed
    assert c.margin == approx(-20.0)  # 80 - 100
    assert c.row() == ["output_throughput.steady_state", ">= 100 tok/s", "80 tok/s", "-20 tok/s (-20.0%)", "BREACH"]


def test_margin_is_shown_in_the_thresholds_unit():
    # 150 ms measured against 200 ms: 50 ms of headroom, 25% of the threshold
    c = check("ttft.p50", "< 200ms", {"ttft": {"p50": 0.15}})
    assert c.margin == approx(0.05)
    assert c.row() == ["ttft.p50", "< 200ms", "150 ms", "+50 ms (+25.0%)", "ok"]
    # 400 us against 500 us: 100 us, 20%
    c = check("itl.p50", "< 500us", {"itl": {"p50": 0.0004}})
    assert c.row() == ["itl.p50", "< 500us", "400 us", "+100 us (+20.0%)", "ok"]


def test_percent_margin_is_in_points():
    # 60% measured against >= 80%: 20 points short, -25% of the threshold (0.2 / 0.8)
    c = check("cache_hit_rate.mean", ">= 80%", {"cache_hit_rate": {"mean": 0.6}})
    assert not c.passed
    assert c.margin == approx(-0.2)
    assert c.row() == ["cache_hit_rate.mean", ">= 80%", "60%", "-20 pts (-25.0%)", "BREACH"]


def test_bare_threshold_margin_has_no_unit():
    c = check("prompt_tokens.mean", "< 4000", {"prompt_tokens": {"mean": 3000.0}})
    assert c.row() == ["prompt_tokens.mean", "< 4000", "3,000", "+1,000 (+25.0%)", "ok"]


@pytest.mark.parametrize(
    ("op", "measured", "passed"),
    [
        ("<", 2.0, False),
        ("<=", 2.0, True),
        (">", 2.0, False),
        (">=", 2.0, True),
        ("==", 2.0, True),
        ("<", 1.999, True),
        ("<=", 2.001, False),
        (">", 2.001, True),
        (">=", 1.999, False),
        ("==", 2.001, False),
    ],
)
def test_pass_or_fail_at_the_boundary(op, measured, passed):
    c = check("ttft.p99", f"{op} 2s", {"ttft": {"p99": measured}})
    assert c.passed is passed


@pytest.mark.parametrize(("op", "status"), [("<", "BREACH"), ("<=", "ok"), (">", "BREACH"), (">=", "ok"), ("==", "ok")])
def test_zero_margin_row(op, status):
    c = check("ttft.p99", f"{op} 2s", {"ttft": {"p99": 2.0}})
    assert c.margin == 0
    assert c.row() == ["ttft.p99", f"{op} 2s", "2 s", "0 s", status]


def test_equality_margin_is_minus_the_distance():
    below = check("ttft.p99", "== 2s", {"ttft": {"p99": 1.5}})
    above = check("ttft.p99", "== 2s", {"ttft": {"p99": 2.5}})
    assert below.margin == approx(-0.5) and above.margin == approx(-0.5)
    assert not below.passed and not above.passed


def test_error_rate_equal_to_zero():
    met = check("error_rate", "== 0", {"error_rate": {"value": 0.0}})
    assert met.passed and met.margin == 0
    assert met.row() == ["error_rate", "== 0", "0%", "0 pts", "ok"]
    # 1 failed of 10: 10 points away from 0; no relative figure against a threshold of 0
    breached = check("error_rate", "== 0", {"error_rate": {"value": 0.1}})
    assert not breached.passed
    assert breached.margin == approx(-0.1)
    assert breached.row() == ["error_rate", "== 0", "10%", "-10 pts", "BREACH"]


def test_count_statistic_is_checked_as_a_number():
    c = check("ttft.count", ">= 100", {"ttft": {"count": 120}})
    assert c.passed and c.measured == 120.0 and c.margin == 20.0


@pytest.mark.parametrize(
    "summary",
    [
        {},  # the metric is absent (no complete session: no ttfat)
        {"ttfat": {}},  # present without this statistic
        {"ttfat": {"p90": float("nan")}},
    ],
)
def test_an_unmeasured_metric_is_a_breach(summary):
    c = check("ttfat.p90", "< 10s", summary)
    assert not c.passed
    assert c.measured is None and c.margin is None
    assert c.row() == ["ttfat.p90", "< 10s", "not measured in this run", "", "BREACH"]


def test_check_slos_keeps_one_check_per_slo_in_order():
    summary = {"ttft": {"p99": 1.0}, "error_rate": {"value": 0.0}}
    checks = check_slos(summary, parse_slos({"error_rate": "== 0", "ttft.p99": "< 0.5s"}))
    assert [(c.slo.key, c.passed) for c in checks] == [("error_rate", True), ("ttft.p99", False)]


# ---------------------------------------------------------------- breach table and assert


SUMMARY = {
    "ttft": {"p50": 0.4, "p99": 2.5},
    "error_rate": {"value": 0.02},
    "cache_hit_rate": {"mean": 0.9},
    "output_throughput": {"steady_state": 150.0},
}
SLOS = {
    "ttft.p50": "< 500ms",  # ok: 400 ms
    "ttft.p99": "< 2s",  # BREACH: 2.5 s
    "error_rate": "== 0",  # BREACH: 2%
    "cache_hit_rate.mean": ">= 80%",  # ok: 90%
    "output_throughput.steady_state": "> 100 tok/s",  # ok: 150
    "ttfat.p90": "< 10s",  # BREACH: not measured
}


def test_breach_table_lists_every_slo_not_just_the_first_failure():
    text = breach_table(check_slos(SUMMARY, parse_slos(SLOS)))
    head, *lines = text.splitlines()
    assert head == "SLO breached: 3 of 6"
    assert lines[0].split() == ["metric", "threshold", "measured", "margin", "status"]
    body = lines[2:]  # after the header's dashes
    assert len(body) == 6
    for line, key in zip(body, SLOS, strict=True):
        assert line.startswith(key)
    assert [line.split()[-1] for line in body] == ["ok", "BREACH", "BREACH", "ok", "ok", "BREACH"]
    assert "not measured" in body[5]
    assert "400 ms" in body[0] and "2.5 s" in body[1] and "90%" in body[3]


def test_breach_table_when_all_are_met():
    text = breach_table(
        check_slos(
            {"ttft": {"p99": 1.0}, "error_rate": {"value": 0.0}}, parse_slos({"ttft.p99": "< 2s", "error_rate": "== 0"})
        )
    )
    assert text.splitlines()[0] == "SLOs met: 2 of 2"
    assert "BREACH" not in text


def test_assert_slos_raises_one_breach_with_all_checks():
    with pytest.raises(SLOBreach) as info:
        assert_slos(SUMMARY, SLOS)
    breach = info.value
    assert isinstance(breach, AssertionError)
    assert len(breach.checks) == 6
    assert [c.slo.key for c in breach.checks if not c.passed] == ["ttft.p99", "error_rate", "ttfat.p90"]
    message = str(breach)
    assert message.startswith("SLO breached: 3 of 6")
    for key in SLOS:
        assert key in message


def test_assert_slos_returns_the_checks_when_all_hold():
    checks = assert_slos(SUMMARY, {"ttft.p50": "< 500ms", "cache_hit_rate.mean": ">= 80%"})
    assert [c.passed for c in checks] == [True, True]
    assert [c.margin for c in checks] == [approx(0.1), approx(0.1)]  # 0.5 - 0.4, 0.9 - 0.8


def test_assert_slos_takes_parsed_slos_too():
    parsed = [parse_slo("ttft.p99", "< 2s")]
    assert isinstance(parsed[0], SLO)
    with pytest.raises(SLOBreach):
        assert_slos(SUMMARY, parsed)


def test_assert_slos_refuses_a_bad_threshold_before_checking():
    with pytest.raises(LLMReplayError, match="ttft.p99"):
        assert_slos(SUMMARY, {"ttft.p50": "< 500ms", "ttft.p99": "< 2 tok/s"})


# ---------------------------------------------------------------- Result.assert_slo


def result():
    # three one-token requests with times exact in binary: ttft 0.25, 0.5, 0.75 (mean 0.5,
    # p50 0.5, max 0.75), latency ttft + 0.25 (max 1.0), no failure
    return make(
        [
            rec(0, sent=1.0, chunks=((1.25, 1),), end=1.5),
            rec(1, sent=2.0, chunks=((2.5, 1),), end=2.75),
            rec(2, sent=3.0, chunks=((3.75, 1),), end=4.0),
        ]
    )


def test_result_assert_slo_passes_silently():
    # ttft.max is exactly at its threshold: <= holds
    assert result().assert_slo({"ttft.max": "<= 750ms", "ttft.p50": "< 0.6s", "error_rate": "== 0"}) is None


def test_result_assert_slo_keyword_form():
    r = result()
    r.assert_slo({}, error_rate="== 0")
    with pytest.raises(SLOBreach):
        r.assert_slo({}, error_rate="> 0%")


def test_result_assert_slo_raises_with_every_breach():
    with pytest.raises(SLOBreach) as info:
        result().assert_slo({"ttft.mean": "< 300ms", "ttft.max": "<= 0.75s", "latency.max": "< 900ms"})
    checks = info.value.checks
    assert [c.passed for c in checks] == [False, True, False]
    assert checks[0].measured == 0.5
    assert checks[0].margin == approx(-0.2)  # 0.3 - 0.5
    assert checks[1].margin == 0  # 0.75 - 0.75
    assert checks[2].measured == 1.0  # 4.0 - 3.0
    assert str(info.value).startswith("SLO breached: 2 of 3")


def test_result_assert_slo_keeps_every_check_met_or_not():
    r = result()
    r.assert_slo({"ttft.max": "<= 750ms"})
    with pytest.raises(SLOBreach):
        r.assert_slo({"ttft.mean": "< 300ms", "error_rate": "== 0"})
    with pytest.raises(LLMReplayError):
        r.assert_slo({"ttft.p50": "< 2 tok/s"})  # refused before checking: nothing kept
    assert [(c.slo.key, c.passed) for c in r.slo_checks] == [
        ("ttft.max", True),
        ("ttft.mean", False),
        ("error_rate", True),
    ]


def test_result_assert_slo_unmeasured_metric_breaches():
    # one-token answers: no tpot anywhere in the summary
    with pytest.raises(SLOBreach) as info:
        result().assert_slo({"tpot.p50": "< 50ms"})
    assert "not measured" in str(info.value)


def test_result_assert_slo_on_goodput_needs_a_per_request_limit():
    # without one no request is counted good or bad: one line saying where limits come from, not a BREACH "not measured"
    with pytest.raises(
        LLMReplayError,
        match=r"^assert_slo 'goodput': goodput counts the requests that meet every per-request limit, and none is set; "
        r"add an upper bound on ttft, ttfo, tpot, latency or itl to this call",
    ):
        result().assert_slo({"goodput": ">= 90%"})
    records = result().run.records
    make(records, goodput={"ttft": 0.6}).assert_slo({"goodput": ">= 66%"})  # ttft 0.25 and 0.5 are good, 0.75 is not
    with pytest.raises(SLOBreach):
        make(records, goodput={"ttft": 0.6}).assert_slo({"goodput": ">= 90%"})


def test_result_assert_slo_counts_goodput_under_the_limits_of_the_same_call():
    """The call's own upper bounds are goodput's limits (issue 31 B6: it refused), before the test's."""
    r = result()  # ttft 0.25, 0.5, 0.75 s
    r.assert_slo({"ttft.p99": "< 600s", "goodput": ">= 100%"})  # every request within 600 s
    with pytest.raises(SLOBreach) as info:
        r.assert_slo({"ttft.max": "< 600ms", "goodput": ">= 90%"})
    assert [round(c.measured, 4) for c in info.value.checks] == [0.75, 0.6667]  # 2 of 3 within 600 ms
    strict = make(result().run.records, goodput={"ttft": 0.3})  # the test's limit counts 1 of 3 good
    strict.assert_slo({"ttft.p50": "< 1s", "goodput": ">= 100%"})  # this call's limit, 1 s, counts all 3
    with pytest.raises(SLOBreach):
        strict.assert_slo({"goodput": ">= 50%"})  # none in the call: the test's


def test_result_assert_slo_accepts_a_plugin_metric_in_the_summary():
    r = result()
    r.summary["gpu_util"] = {"mean": 0.9}  # what a metrics plugin adds
    r.assert_slo({"gpu_util.mean": "> 50%"})
    with pytest.raises(SLOBreach):
        r.assert_slo({"gpu_util.mean": "> 95%"})
    with pytest.raises(LLMReplayError, match="unknown metric 'gpu_load'"):
        r.assert_slo({"gpu_load.mean": "> 50%"})


def test_result_goodput_exactly_at_a_percent_threshold_meets_it():
    # 20 one-token requests, ttft 0.25 s except the last (0.75 s > the 0.5 s goodput limit):
    # goodput = 19 / 20 = 0.95, exactly the ">= 95%" the test asks for
    records = [rec(i, sent=float(i), chunks=((i + 0.25, 1),), end=i + 0.5) for i in range(19)]
    records.append(rec(19, sent=19.0, chunks=((19.75, 1),), end=20.0))
    r = make(records, goodput={"ttft": 0.5})
    assert r.summary["goodput"]["value"] == 0.95
    r.assert_slo({"goodput": ">= 95%"})


# ---------------------------------------------------------------- goodput rate, capacity, per-request limits


@pytest.mark.parametrize(
    ("key", "threshold", "stat", "value"),
    [
        ("goodput", ">= 5 req/s", "rate", 5.0),  # req/s on goodput: the rate of good requests
        ("goodput.rate", ">= 5", "rate", 5.0),
        ("goodput", ">= 90%", "value", 0.9),  # a share, as before
        ("capacity.rate", ">= 8 req/s", "rate", 8.0),
        ("capacity.concurrency", ">= 64", "concurrency", 64.0),
    ],
)
def test_goodput_rate_and_capacity_keys(key, threshold, stat, value):
    slo = parse_slo(key, threshold)
    assert (slo.stat, slo.value) == (stat, approx(value))


@pytest.mark.parametrize(
    ("key", "threshold", "message"),
    [
        ("capacity", ">= 8 req/s", "name a statistic, e.g. 'capacity.rate'"),
        ("capacity.rate", ">= 8 tok/s", "unit 'tok/s' does not fit capacity.rate (a request rate metric)"),
        ("capacity.concurrency", ">= 8 req/s", "unit 'req/s' does not fit capacity.concurrency (a count metric)"),
        ("goodput.rate", ">= 50%", "unit '%' does not fit goodput.rate (a request rate metric)"),
    ],
)
def test_goodput_rate_and_capacity_keys_refused(key, threshold, message):
    assert message in refused(key, threshold)


def test_per_request_limits_are_the_tightest_upper_bound_of_each_per_request_metric():
    from pytest_llmreplay.metrics.slo import per_request_limits

    slos = parse_slos(
        {
            "ttft.p99": "< 1s",
            "ttft.p50": "<= 300ms",
            "tpot.p90": "< 50ms",
            "itl.max": "< 0.2s",
            "latency.p99": "> 1s",
            "ttfat.p90": "< 5s",
            "error_rate": "== 0",
        }
    )
    # latency has only a lower bound and ttfat is per session: neither limits a request
    assert per_request_limits(slos) == {"ttft": approx(0.3), "tpot": approx(0.05), "itl": approx(0.2)}


def test_result_goodput_rate_is_good_requests_over_the_measured_span():
    # 4 requests sent at 0, 1, 2, 3 s, each 0.5 s long; the last has ttft 0.45 s > the 0.4 s limit:
    # span = 0 .. 3.5 s, good = 3, rate = 3 / 3.5
    records = [rec(i, sent=float(i), chunks=((i + (0.45 if i == 3 else 0.1), 1),), end=i + 0.5) for i in range(4)]
    r = make(records, goodput={"ttft": 0.4})
    assert r.summary["goodput"] == {"value": 0.75, "rate": approx(3 / 3.5)}


@pytest.mark.parametrize(
    ("key", "spellings", "written"),
    [
        ("ttft.p99", ["<1s", "< 1s", "<  1.0 s", "< 1000ms", "< 1000000us"], ("ttft.p99", "< 1s")),
        ("ttft.p90", ["<150ms", "< 0.15s", "< 150.0 ms"], ("ttft.p90", "< 150ms")),
        ("tpot.p90", ["<= 0.05s", "<=50ms"], ("tpot.p90", "<= 50ms")),
        ("itl.max", ["< 0.5us", "<0.0005ms"], ("itl.max", "< 0.5us")),
        ("goodput", [">= 0.9", ">=90%", ">= 90.0 %"], ("goodput", ">= 90%")),
        ("goodput", [">= 5 req/s", ">=5req/s"], ("goodput.rate", ">= 5 req/s")),
        (
            "output_throughput.steady_state",
            ["> 1e3", "> 1000 tok/s"],
            ("output_throughput.steady_state", "> 1000 tok/s"),
        ),
        ("capacity.concurrency", [">= 64", ">=64.0"], ("capacity.concurrency", ">= 64")),
    ],
)
def test_canonical_writes_one_setting_one_way(key, spellings, written):
    for spelling in spellings:
        assert canonical(parse_slo(key, spelling)) == written, spelling
    assert canonical(parse_slo(*written)) == written  # reading it back gives itself


def test_canonical_keeps_different_settings_apart():
    texts = {canonical(parse_slo("ttft.p99", t)) for t in ("< 1s", "<= 1s", "< 1.001s", "< 999ms")}
    assert len(texts) == 4
    assert canonical(parse_slo("ttft.p99", "< 1001ms")) == ("ttft.p99", "< 1.001s")
    assert canonical(parse_slo("mine.p99", "< 5ms", extra_metrics=["mine"])) == (
        "mine.p99",
        "< 5ms",
    )  # a plugin metric keeps its unit


@pytest.mark.parametrize(
    ("key", "threshold", "message"),
    [
        ("error_rate", "<= 1", "'<= 1' can never fail (error_rate is a share, at most 100%); did you mean '<= 1%'?"),
        ("error_rate", "<= 100%", "'<= 100%' can never fail (error_rate is a share, at most 100%)"),
        ("goodput", "<= 1.0", "'<= 1.0' can never fail (goodput is a share, at most 100%); did you mean '<= 1.0%'?"),
        (
            "cache_hit_rate.mean",
            ">= 0%",
            "'>= 0%' can never fail (cache_hit_rate is never negative); write '> 0' for 'some'",
        ),
        (
            "output_throughput.overall",
            ">= 0 tok/s",
            "'>= 0 tok/s' can never fail (output_throughput is never negative)",
        ),
    ],
)
def test_a_threshold_every_run_passes_is_refused(key, threshold, message):
    """error_rate <= 1 (meant: 1%) passed a run in which every request failed."""
    assert refused(key, threshold).startswith(f"SLO {key!r}: {message}")


def test_off_sets_no_slo_on_its_key_and_the_key_is_still_checked():
    """``"off"``: a test's marker dropping its module's SLO (the markers' mappings merge)."""
    assert [slo.key for slo in parse_slos({"ttft.p99": "off", "error_rate": "== 0"})] == ["error_rate"]
    with pytest.raises(LLMReplayError, match="ttft.p999x"):
        parse_slos({"ttft.p999x": "off"})
