"""render(): the terminal tables and lines of a Result built from hand-made records."""

from __future__ import annotations

import re

from records import make, rec

from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.replayer.records import RequestRecord
from pytest_llmreplay.report.terminal import render


def table(text: str, title: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """(headers, {row label: {header: cell}}) of the tabulate 'simple' table after ``title``."""
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(title))
    dashes = next(i for i in range(at, len(lines)) if re.fullmatch(r"-[- ]*", lines[i]))
    spans = [m.span() for m in re.finditer(r"-+", lines[dashes])]

    def cells(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in spans]

    headers = cells(lines[dashes - 1])
    rows = {}
    for line in lines[dashes + 1 :]:
        if not line.strip():
            break
        values = cells(line)
        rows[values[0]] = dict(zip(headers, values, strict=True))
    return headers, rows


def agents(**kwargs) -> Result:
    """Two complete agent sessions (the ones of test_metrics) with chosen schedule lags."""
    return make(
        [
            # a: prompts 100 250 400, cached 0 96 288, outputs 50 50 20
            rec(
                0,
                0,
                3,
                sid="a",
                scheduled=0.999,
                sent=1.0,
                chunks=((1.2, 1), (1.7, 49)),
                end=1.75,
                prompt=100,
                cached=0,
            ),
            rec(
                1, 0, 2, sid="b", scheduled=1.998, sent=2.0, chunks=((2.1, 1), (2.5, 9)), end=2.5, prompt=200, cached=0
            ),
            rec(
                0,
                1,
                3,
                sid="a",
                scheduled=2.997,
                sent=3.0,
                chunks=((3.3, 1), (3.8, 49)),
                end=3.8,
                prompt=250,
                cached=96,
                history="server",
            ),
            rec(
                0,
                2,
                3,
                sid="a",
                scheduled=4.996,
                sent=5.0,
                chunks=((5.4, 1), (5.6, 19)),
                end=5.7,
                prompt=400,
                cached=288,
                history="server",
            ),
            rec(
                1,
                1,
                2,
                sid="b",
                scheduled=5.99,
                sent=6.0,
                chunks=((6.3, 1), (6.9, 29)),
                end=7.0,
                prompt=300,
                cached=150,
                history="server",
            ),
        ],
        **kwargs,
    )


def test_trace_table_numbers():
    text = render(agents())
    assert "Per-trace metrics" in text
    headers, rows = table(text, "Per-trace metrics")
    assert headers == [
        "Metric",
        "Latency (s)",
        "TTFT (s)",
        "TTFAT (s)",
        "Decode TPOT (ms/tok)",
        "ITL (ms)",
        "Output tokens/turn",
        "Output tokens/trace",
        "Cache hit rate (%)",
        "Eligible cache hit rate (%)",
    ]
    assert list(rows) == ["mean", "min", "p50", "p90", "p95", "p99", "max"]  # no std row
    # TTFT 0.2 0.1 0.3 0.4 0.3 -> sorted 0.1 0.2 0.3 0.3 0.4: mean 1.3 / 5, p90 at 3.6 -> 0.36
    assert rows["mean"]["TTFT (s)"] == "0.260"
    assert rows["min"]["TTFT (s)"] == "0.100"
    assert rows["p90"]["TTFT (s)"] == "0.360"
    assert rows["max"]["TTFT (s)"] == "0.400"
    # latency 0.75 0.5 0.8 0.7 1.0: mean 3.75 / 5
    assert rows["mean"]["Latency (s)"] == "0.750"
    # TTFAT: a 5.4 - 1.0 = 4.4, b 6.3 - 2.0 = 4.3
    assert rows["mean"]["TTFAT (s)"] == "4.350"
    # ITL in ms: gaps per token 0.5/49 (x49, twice), 0.2/19 (x19), 0.4/9 (x9), 0.6/29 (x29)
    #   mean = 2.2 s / 155 tokens = 14.194 ms; min 0.5/49 = 10.204 ms; max 0.4/9 = 44.444 ms
    assert rows["mean"]["ITL (ms)"] == "14.194"
    assert rows["min"]["ITL (ms)"] == "10.204"
    assert rows["max"]["ITL (ms)"] == "44.444"
    # TPOT in ms: a0 0.55/49, a1 0.5/49, a2 0.3/19, b0 0.4/9 = 44.444, b1 0.7/29
    assert rows["max"]["Decode TPOT (ms/tok)"] == "44.444"
    assert rows["min"]["Decode TPOT (ms/tok)"] == "10.204"
    # outputs 50 10 50 20 30: mean 32; per trace 120 and 40
    assert rows["mean"]["Output tokens/turn"] == "32.000"
    assert rows["mean"]["Output tokens/trace"] == "80.000"
    # cache hit rates in %: (384/750 + 150/500) / 2 = 40.6; eligible (384/450 + 150/210) / 2 = 78.381
    assert rows["mean"]["Cache hit rate (%)"] == "40.600"
    assert rows["max"]["Eligible cache hit rate (%)"] == "85.333"
    assert rows["mean"]["Eligible cache hit rate (%)"] == "78.381"


def test_client_line_of_the_agents():
    # lags 1 2 3 4 10 ms: p50 3 ms, p99 at 3.96 -> 4 + 0.96 * 6 = 9.76 ms
    # effective concurrency (0.75 + 0.5 + 0.8 + 0.7 + 1.0) / (7.0 - 1.0) = 0.625
    line = next(line for line in render(agents()).split("\n") if line.startswith("Client:"))
    assert line.startswith("Client: schedule lag p50 3.00 ms, p99 9.76 ms; effective concurrency 0.")
    assert line.endswith("; failed 0, cancelled 0, warm-up 0")


def flat_timeline() -> list[RequestRecord]:
    # 12 one-token requests (prompt 100, no cached count), sent 2 s before their end, first token
    # 1 s after sending. Ends 12 15 20 25 | 40 60 | 85 90 95 100 105 110: span 10 -> 110 = 100 s,
    # steady state from 30 (8 ends), last 30 s from 80 (6 ends)
    ends = [12, 15, 20, 25, 40, 60, 85, 90, 95, 100, 105, 110]
    return [rec(i, sent=e - 2.0, chunks=((e - 1.0, 1),), end=float(e), prompt=100) for i, e in enumerate(ends)]


def test_workload_table_with_gpus():
    text = render(make(flat_timeline(), gpus=2))
    assert "Workload metrics\ncompleted=12/12 requests  traces=12/12  trace/s=0.12" in text
    headers, rows = table(text, "Workload metrics")
    assert headers == ["Metric", "Overall", "Last 30s Window", "Steady State", "Steady State / GPU"]
    # requests: 12 / 100, 6 / 30, 8 / 80, 0.1 / 2
    assert rows["requests/s"] == {
        "Metric": "requests/s",
        "Overall": "0.12",
        "Last 30s Window": "0.20",
        "Steady State": "0.10",
        "Steady State / GPU": "0.05",
    }
    # prompts, 100 each at the first token (one second before the end: same split)
    assert rows["total prompt tok/s"]["Overall"] == "12.00"
    assert rows["total prompt tok/s"]["Last 30s Window"] == "20.00"
    assert rows["total prompt tok/s"]["Steady State / GPU"] == "5.00"
    assert rows["completion tok/s"]["Steady State"] == "0.10"
    # no cached counts reported: no cached rows
    assert "cached prompt tok/s" not in rows and "uncached prompt tok/s" not in rows


def test_per_gpu_column_only_with_several_gpus():
    text = render(make(flat_timeline(), gpus=1))
    headers, rows = table(text, "Workload metrics")
    assert headers == ["Metric", "Overall", "Last 30s Window", "Steady State"]
    assert "Steady State / GPU" not in text
    assert rows["requests/s"]["Steady State"] == "0.10"


def test_cached_rows_when_cached_counts_are_reported():
    text = render(agents())
    _, rows = table(text, "Workload metrics")
    # span 1 -> 7 = 6 s; cached 0 + 0 + 96 + 288 + 150 = 534 -> 89.00/s; uncached 1250 - 534 = 716 -> 119.33/s
    assert rows["cached prompt tok/s"]["Overall"] == "89.00"
    assert rows["uncached prompt tok/s"]["Overall"] == "119.33"
    assert "traces=2/2" in text


def test_columns_without_samples_are_dropped():
    text = render(make(flat_timeline()))
    headers, rows = table(text, "Per-trace metrics")
    # one-token answers: no TPOT, no ITL; no cached counts: no cache rates; one-turn sessions
    # still have a TTFAT (the first token of their only turn), equal to their TTFT
    assert headers == ["Metric", "Latency (s)", "TTFT (s)", "TTFAT (s)", "Output tokens/turn", "Output tokens/trace"]
    assert rows["mean"]["TTFAT (s)"] == rows["mean"]["TTFT (s)"] == "1.000"
    assert rows["mean"]["Latency (s)"] == "2.000"
    for gone in ("Decode TPOT", "ITL (ms)", "Cache hit rate", "Eligible cache hit rate"):
        assert gone not in text


def test_one_turn_sessions_with_cached_counts_have_no_eligible_column():
    records = [
        rec(0, sent=1.0, chunks=((1.2, 1),), end=1.3, prompt=100, cached=40),
        rec(1, sent=2.0, chunks=((2.4, 1),), end=2.5, prompt=100, cached=60),
    ]
    headers, rows = table(render(make(records)), "Per-trace metrics")
    assert "Cache hit rate (%)" in headers
    assert "Eligible cache hit rate (%)" not in headers
    assert rows["mean"]["Cache hit rate (%)"] == "50.000"


def client_records() -> list[RequestRecord]:
    return [
        rec(0, scheduled=0.998, sent=1.0, chunks=((1.5, 1),), end=9.0),  # lag 2 ms, 8 s
        rec(1, scheduled=1.99, sent=2.0, chunks=((2.5, 1),), end=11.0),  # lag 10 ms, 9 s
        rec(2, status="failed", scheduled=2.996, sent=3.0, end=4.0, error="server: 503 overloaded"),  # lag 4 ms, 1 s
        rec(3, status="cancelled", scheduled=4.0, sent=9.0, chunks=((9.5, 1),)),  # not measured
        rec(4, scheduled=0.0, sent=0.5, chunks=((0.6, 1),), end=0.7, warmup=True),  # not measured
    ]


def test_client_line():
    text = render(make(client_records()))
    # lags 2 4 10 ms: p50 4, p99 at 1.98 -> 4 + 0.98 * 6 = 9.88; concurrency (8 + 9 + 1) / (11 - 1)
    assert (
        "Client: schedule lag p50 4.00 ms, p99 9.88 ms; effective concurrency 1.8; failed 1, cancelled 1, warm-up 1"
        in text.split("\n")
    )


def test_errors_block_groups_identical_messages():
    records = client_records()
    errors = [
        "server: 503 overloaded",
        "timeout: read timed out",
        "server: 503 overloaded",
        "stream: connection lost",
        "timeout: read timed out",
        "server: 503 overloaded",
    ]
    records += [rec(10 + i, status="failed", sent=5.0 + i, end=5.5 + i, error=e) for i, e in enumerate(errors[1:])]
    # a failed warm-up request is not reported
    records.append(rec(20, status="failed", sent=0.2, end=0.3, error="warm: up", warmup=True))
    text = render(make(records))
    assert (
        "Errors:\n  server: 503 overloaded: 3 requests\n  timeout: read timed out: 2 requests\n  stream: connection lost: 1 request"
        in text
    )
    assert "warm: up" not in text


def test_errors_block_groups_token_counts_into_a_range():
    errors = [
        "stream: connection lost mid-response after 423 tokens",
        "stream: connection lost mid-response after 21 tokens",
        "stream: connection lost mid-response after 97 tokens",
        "timeout: no data from the server for 2 s after 1 token",
        "timeout: no data from the server for 2 s before the first token",
        "timeout: no data from the server for 2 s before the first token",
        "stream: stream ended before [DONE] after 5 tokens",
    ]
    records = [rec(i, status="failed", sent=1.0 + i, end=1.5 + i, error=e) for i, e in enumerate(errors)]
    block = render(make(records)).split("Errors:\n")[1].split("\n\n")[0].split("\n")
    assert block == [
        "  stream: connection lost mid-response (after 21-423 tokens): 3 requests",
        "  timeout: no data from the server for 2 s before the first token: 2 requests",
        "  stream: stream ended before [DONE] (after 5 tokens): 1 request",
        "  timeout: no data from the server for 2 s (after 1 token): 1 request",
    ]


def test_errors_block_shows_the_five_most_frequent_and_counts_the_rest():
    records = [rec(i, status="failed", sent=1.0 + i, end=1.5 + i, error=f"server: cause {i}") for i in range(7)]
    records.append(rec(9, status="failed", sent=9.0, end=9.5, error="server: cause 5"))
    text = render(make(records))
    block = text[text.index("Errors:") :].split("\n\n")[0].split("\n")
    assert block[0] == "Errors:"
    assert block[1] == "  server: cause 5: 2 requests"
    assert block[2:6] == [f"  server: cause {i}: 1 request" for i in range(4)]
    assert block[6] == "  2 other causes: 2 requests (each request's error is in the per-request CSV)"


def test_no_errors_block_without_failures():
    assert "Errors:" not in render(agents())


def test_warning_lines():
    text = render(make(flat_timeline(), warnings=["tokenizer mismatch: the server counted 12", "usage differs"]))
    assert "\n\nwarning: tokenizer mismatch: the server counted 12" in text
    assert text.endswith("warning: usage differs")


def test_completed_counts_the_measured_requests_only():
    """Warm-up requests are planned but not measured: 2 warm-up + 3 measured, all ok, read
    completed=3/3 (it read 3/5 beside 'failed 0, cancelled 0, warm-up 2'), as traces= does."""
    records = [rec(i, sent=float(i), end=i + 0.5, chunks=((i + 0.1, 4),), output=4, warmup=i < 2) for i in range(5)]
    text = render(make(records, planned=5))
    assert "completed=3/3 requests  traces=3/3" in text
    assert "failed 0, cancelled 0, warm-up 2" in text


def test_nothing_completed_renders():
    records = [
        rec(0, status="failed", sent=1.0, end=1.2, error="server: 503 overloaded"),
        rec(1, status="failed", sent=2.0, end=2.1, error="server: 503 overloaded"),
        rec(2, status="cancelled", sent=3.0),
    ]
    text = render(make(records, planned=5))
    assert "Per-trace metrics: no request completed" in text
    # traces counts sessions with a measured request: the cancelled one is not among them
    assert "completed=0/5 requests  traces=0/2  trace/s=0.00" in text
    assert "Errors:\n  server: 503 overloaded: 2 requests" in text
    assert "failed 2, cancelled 1, warm-up 0" in text


def test_empty_run_renders():
    text = render(make([], planned=3))
    assert "Per-trace metrics: no request completed" in text
    assert "Workload metrics\ncompleted=0/3 requests  traces=0/0  trace/s=0.00" in text
    assert "Client: failed 0, cancelled 0, warm-up 0" in text
