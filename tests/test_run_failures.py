"""A run against a failing server (issue 24): ``llmreplay run``'s exit statuses, the simulator's
fault rates as docs/simulator.md states them, and the grouped, readable error lines of the CLI and of
the plugin's failure output. Bad servers: tests/mockserver.py's scripted faults and
``llmreplay sim``'s seeded ones."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from mockserver import MockConfig, MockServer, ServerThread
from test_sim_server import serving

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.cli.run import RUN_STATUS
from pytest_llmreplay.metrics.result import Result
from pytest_llmreplay.replayer.driver import replay
from pytest_llmreplay.replayer.endpoints import HTTPEndpoint
from pytest_llmreplay.replayer.plan import ReplaySettings
from pytest_llmreplay.sim.faults import FaultConfig
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import load_tokenizer
from pytest_llmreplay.workloads.workload import Session, Synthetic, Turn, Workload


@pytest.fixture(scope="module")
def prompts():
    return PromptFactory(load_tokenizer(None))


@pytest.fixture(scope="module")
def mock():
    with ServerThread(MockServer(MockConfig(ttft_s=0.002, itl_s=0.001))) as thread:
        yield thread


def payloads(path: Path, faults: list[dict | None], max_tokens: int = 8) -> Path:
    """An AIPerf payload JSONL: one single-turn request per entry, asking the mock server for
    that fault (None: none)."""
    lines = []
    for index, fault in enumerate(faults):
        body = {"messages": [{"role": "user", "content": f"question {index}"}], "max_tokens": max_tokens}
        if fault is not None:
            body["mock"] = fault
        lines.append(json.dumps(body))
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(capsys, workload: Path, url: str, *extra: str) -> tuple[int, str, str]:
    status = main(["run", str(workload), "--endpoint", url, "--concurrency", "4", "--no-idle-check", *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ------------------------------------------------------------------------ exit statuses

FAIL_ONE_IN_FOUR = [None, {"fault": "http500"}, None, None]


@pytest.mark.parametrize(
    ("faults", "extra", "status", "message"),
    [
        ([None] * 4, (), "ok", None),
        (
            FAIL_ONE_IN_FOUR,
            (),
            "requests_failed",
            "error: 1 of 4 requests failed (25.0%), more than --max-error-rate 0.0% allows",
        ),
        (
            FAIL_ONE_IN_FOUR,
            ("--max-error-rate", "0.2"),
            "requests_failed",
            "error: 1 of 4 requests failed (25.0%), more than --max-error-rate 20.0% allows",
        ),
        (FAIL_ONE_IN_FOUR, ("--max-error-rate", "25%"), "ok", None),
        (FAIL_ONE_IN_FOUR, ("--max-error-rate", "0.25"), "ok", None),
        (
            [{"fault": "http500"}, {"fault": "cut", "after": 2}],
            ("--max-error-rate", "1"),
            "nothing_succeeded",
            "error: no request succeeded (2 failed, 0 cancelled, 0 warm-up)",
        ),
    ],
)
def test_run_exit_status_says_whether_requests_failed(capsys, tmp_path, mock, faults, extra, status, message):
    code, out, err = run_cli(capsys, payloads(tmp_path / "w.jsonl", faults), mock.url, *extra)
    assert code == RUN_STATUS[status]
    assert "Per-trace metrics" in out  # the tables are printed whatever the status
    assert (err.strip().splitlines()[-1] if err.strip() else None) == message
    assert "Traceback" not in err


def test_run_exit_statuses_are_distinct_and_leave_the_signals_theirs():
    assert len(set(RUN_STATUS.values())) == len(RUN_STATUS)
    assert not {2, 130, 143} & set(RUN_STATUS.values())  # argparse's bad usage, the signals


def test_run_with_bad_input_exits_with_its_own_status(capsys, tmp_path, mock):
    code, _, err = run_cli(capsys, tmp_path / "missing.jsonl", mock.url)
    assert code == RUN_STATUS["bad_input"] and err.startswith("error: ") and "missing.jsonl" in err


@pytest.mark.parametrize("value", ["x", "2", "150%", "-0.1", "5 ms"])
def test_max_error_rate_takes_a_share(capsys, tmp_path, value):
    with pytest.raises(SystemExit) as exc:
        main(["run", str(tmp_path / "w.jsonl"), "--endpoint", "http://127.0.0.1:9", "--max-error-rate", value])
    assert exc.value.code == RUN_STATUS["bad_input"]  # argparse's bad usage: run's status for it
    expected = f"llmreplay run: error: argument --max-error-rate: expected a share from 0 to 1 such as 0.05 or 5%, got {value!r}"
    assert capsys.readouterr().err.splitlines()[-1] == expected


def test_a_connect_timeout_is_told_from_a_silent_server():
    """aiohttp's connect timeout, as httpx-aiohttp raises it (a ConnectTimeout, as it also calls
    a refused connection), reads as no connection, not as silence."""
    import aiohttp
    import httpx
    from httpx_aiohttp.transport import map_aiohttp_exceptions

    from pytest_llmreplay.replayer.endpoints import Response, _classify

    with pytest.raises(httpx.ConnectTimeout) as raised, map_aiohttp_exceptions():
        raise aiohttp.ConnectionTimeoutError("Connection timeout to host http://127.0.0.1:9")
    assert _classify(raised.value, Response(), 2.5) == ("timeout", "no connection to the server within 2.5 s")


# ------------------------------------------------------------------------ grouped error lines

MIXED_FAULTS = [
    {"fault": "cut", "after": 2},
    {"fault": "cut", "after": 7},
    {"fault": "cut", "after": 5},
    {"fault": "stall", "after": 0},
    {"fault": "stall", "after": 3},
    {"fault": "stall", "after": 1},
    {"fault": "http500"},
    None,
    None,
]
GROUPED_LINES = [
    "  stream: connection lost mid-response (after 2-7 tokens): 3 requests",
    "  timeout: no data from the server for 2 s (after 1-3 tokens): 2 requests",
    "  http: HTTP 500: mock 500: 1 request",
    "  timeout: no data from the server for 2 s before the first token: 1 request",
]


def errors_block(text: str) -> list[str]:
    """The indented lines under ``Errors:``."""
    lines = text.split("Errors:\n", 1)[1].splitlines()
    return lines[: next((i for i, line in enumerate(lines) if not line.startswith("  ")), len(lines))]


def test_cli_groups_error_causes_by_kind_with_the_token_range(capsys, tmp_path, mock):
    out_dir = tmp_path / "out"
    code, out, _ = run_cli(
        capsys,
        payloads(tmp_path / "w.jsonl", MIXED_FAULTS),
        mock.url,
        "--concurrency",
        "9",
        "--timeout",
        "2",
        "--out",
        str(out_dir),
    )
    assert code == RUN_STATUS["requests_failed"]
    assert errors_block(out) == GROUPED_LINES
    # each request's own cause stays exact in the CSV
    csv = (out_dir / "requests.csv").read_text()
    assert (
        "stream: connection lost mid-response after 7 tokens" in csv
        and "timeout: no data from the server for 2 s after 3 tokens" in csv
    )


def test_plugin_failure_output_groups_error_causes(pytester, mock):
    # no stalls: the plugin's requests wait up to 600 s for data
    payloads(pytester.path / "faults.jsonl", [f for f in MIXED_FAULTS if f is None or f["fault"] != "stall"])
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.llmreplay(workload="faults.jsonl", concurrency=6, slo={"error_rate": "== 0"})
        def test_faults(llm_result):
            pass
        """
    )
    result = pytester.runpytest("--llm-endpoint", mock.url, "--llm-model", "mock-model")
    result.assert_outcomes(failed=1)
    assert errors_block(result.stdout.str()) == [GROUPED_LINES[0], GROUPED_LINES[2]]


# ------------------------------------------------------------------------ the simulator's fault rates

REQUESTS = 400
RATES = {"error": 0.1, "stall": 0.1, "disconnect": 0.1}


def binomial_band(n: int, p: float, sigmas: float = 4.0) -> tuple[float, float]:
    """n p -/+ ``sigmas`` standard deviations of a Binomial(n, p) count: a seeded count outside it
    means the rate is not what it says (two-sided chance under 1e-4 per count)."""
    spread = sigmas * math.sqrt(n * p * (1 - p))
    return n * p - spread, n * p + spread


def test_each_fault_rate_is_the_share_of_requests_it_strikes(prompts):
    """docs/simulator.md: each rate is the share of requests (counted as the server receives them) that get
    that fault, at most one each: error -> HTTP 500 before any token; stall -> the stream stops for
    --fault-stall-s after a token in [1, n - 1]; disconnect -> the connection closes after such a
    token. With the client's timeout below the stall, each stall is one timeout after its first
    tokens; requests without a fault succeed (a stall holds no other stream back)."""
    faults = FaultConfig(
        error_rate=RATES["error"], stall_rate=RATES["stall"], stall_s=600.0, disconnect_rate=RATES["disconnect"], seed=5
    )
    drawn = [faults.draw(n, 8) for n in range(REQUESTS)]
    expected = {kind: sum(f is not None and f.kind == kind for f in drawn) for kind in RATES}
    for kind, rate in RATES.items():
        low, high = binomial_band(REQUESTS, rate)
        assert low <= expected[kind] <= high, f"{kind}: {expected[kind]} of {REQUESTS} drawn for a rate of {rate}"
    sessions = tuple(Session(f"s{i}", 0.0, (Turn(24, 8, Synthetic()),)) for i in range(REQUESTS))
    with serving(prompts, faults=faults) as thread:
        endpoint = HTTPEndpoint(
            thread.url, api="completions", model=thread.server.model, timeout_s=3.0
        )  # far above a fault-free gap, even on a loaded machine
        result = Result(
            replay(Workload(sessions, "flat"), endpoint, prompts, ReplaySettings(mode="concurrency", concurrency=64))
        )
    errors = [r.error for r in result.records if r.status == "failed"]
    seen = {
        "error": sum(e == "http: HTTP 500: injected fault (fault_error_rate)" for e in errors),
        "stall": sum(e.startswith("timeout: no data from the server for 3 s after ") for e in errors),
        "disconnect": sum(e.startswith("stream: connection lost mid-response after ") for e in errors),
    }
    assert seen == expected and len(errors) == sum(expected.values()), errors
    assert result.summary["requests"]["ok"] == REQUESTS - sum(expected.values())
