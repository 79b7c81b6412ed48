"""``llmreplay compare A B``: two stored results, the same table as the plugin's gate, exit
status 0 (no regression), 1 (a regression), 2 (not comparable)."""

import fnmatch
import json

import numpy as np
import pytest

from pytest_llmreplay.cli.main import main


def record(ttft_scale=1.0, model="m", workload="abc", seed=0):
    rng = np.random.default_rng(seed)
    ttft = (rng.lognormal(np.log(0.1), 0.2, 400) * ttft_scale).round(6).tolist()
    return {
        "schema": 1,
        "test": "t",
        "commit": None,
        "dirty": None,
        "time": "2026-11-22T00:00:00+00:00",
        "fingerprint": {"kind": "live", "model": model, "hardware": None},
        "workload": {"digest": workload},
        "settings": {"concurrency": 8},
        "summary": {"ttft": {"p50": float(np.percentile(ttft, 50)), "p90": float(np.percentile(ttft, 90))}},
        "samples": {"ttft": ttft},
    }


@pytest.fixture
def write(tmp_path):
    def put(name, data):
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return str(path)

    return put


def test_same_distribution_is_no_regression(write, capsys):
    status = main(["compare", write("a.json", record(seed=1)), write("b.json", record(seed=2))])
    printed = capsys.readouterr().out
    assert status == 0
    assert "0 regressions" in printed and "ttft.p50" in printed and "REGRESSION" not in printed


def test_a_slower_ttft_is_a_regression_with_exit_1(write, capsys):
    status = main(["compare", write("a.json", record(seed=1)), write("b.json", record(1.3, seed=2))])
    printed = capsys.readouterr().out
    assert status == 1
    assert "ttft.p50" in printed and "REGRESSION" in printed


@pytest.mark.parametrize("side", ["A", "B"])
def test_an_interrupted_result_is_shown_but_not_judged(write, capsys, side):
    # a run or sweep stopped by a signal measured part of its workload (its result.json says
    # "interrupted"): as the plugin's gate, compare shows it, judges nothing, and exits 2
    a, b = record(seed=1), record(1.3, seed=2)
    (a if side == "A" else b)["interrupted"] = "SIGINT"
    status = main(["compare", write("a.json", a), write("b.json", b)])
    printed = capsys.readouterr().out
    assert status == 2
    assert f"{side}: t, no commit, 2026-11-22T00:00:00+00:00, interrupted by SIGINT, endpoint: " in printed
    assert "ttft.p50" in printed  # the table is shown
    assert printed.rstrip().endswith(
        f"not judged: {side} was interrupted and measured part of the workload; the comparison is shown, "
        "its verdicts hold for no whole run (exit status 2: not comparable)"
    )


def test_allowed_change_from_the_command_line(write, capsys):
    status = main(
        [
            "compare",
            write("a.json", record(seed=1)),
            write("b.json", record(1.3, seed=2)),
            "--regression",
            "ttft.p50=50%",
            "--regression",
            "ttft.p90=off",
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0 and "ttft.p90" not in printed and "50%" in printed


def test_the_tests_own_allowed_changes_stored_with_b_apply_and_the_options_go_on_top(write, capsys):
    """A stored result keeps its test's `regression`; compare judged by the defaults (found by a
    review helper)."""
    current = {**record(1.3, seed=2), "regression": {"ttft.p50": "50%", "ttft.p90": "off"}}
    status = main(["compare", write("a.json", record(seed=1)), write("b.json", current)])
    printed = capsys.readouterr().out
    assert status == 0 and "ttft.p90" not in printed and "50%" in printed
    status = main(["compare", write("a.json", record(seed=1)), write("b.json", current), "--regression", "ttft.p50=5%"])
    assert status == 1 and "REGRESSION" in capsys.readouterr().out


def test_two_endpoints_are_compared_and_the_header_says_so(write, capsys):
    status = main(["compare", write("a.json", record(model="vllm")), write("b.json", record(model="sglang", seed=3))])
    printed = capsys.readouterr().out
    assert status == 0
    assert "different endpoints: (model: 'vllm' vs 'sglang')" in printed
    # each side's endpoint in words, its unset fields left out (it was the fingerprint's Python dict)
    assert "endpoint: kind live, model vllm\n" in printed and "endpoint: kind live, model sglang\n" in printed
    assert "{'kind'" not in printed


def test_different_workloads_are_not_compared(write, capsys):
    status = main(["compare", write("a.json", record()), write("b.json", record(workload="other"))])
    assert status == 2
    assert "not compared: workload differs (digest: 'abc' vs 'other')" in capsys.readouterr().out


def test_bad_files_and_options_are_one_line_errors_with_status_3(write, tmp_path, capsys):
    """3, not 1: a script must tell bad input from a regression."""
    assert main(["compare", str(tmp_path / "missing.json"), write("b.json", record())]) == 3
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'missing.json'}: no such file"
    assert main(["compare", write("a.json", record()), write("b.json", record()), "--regression", "ttft.p50"]) == 3
    assert "--regression: expected KEY=ALLOWED such as ttft.p50=10%, got 'ttft.p50'" in capsys.readouterr().err
    assert main(["compare", write("a.json", record()), write("b.json", record()), "--regression", "queue.p50=5%"]) == 3
    assert "error: --regression 'queue.p50': only ttft, tpot, latency" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--regression", "queue.p50=5%"], "--regression 'queue.p50': only ttft, tpot, latency*"),
        (
            ["--regression", "ttft.p50=10"],
            "--regression 'ttft.p50': expected an allowed change such as '10%', 0.1 or 'off' (a fraction from 0 to 1), got '10'",
        ),
        (["--regression", "=10%"], "--regression: expected KEY=ALLOWED such as ttft.p50=10%, got '=10%'"),
        (
            ["--regression", "ttft.p50=10%", "--regression", "ttft.p50=off"],
            "--regression: ttft.p50 is given twice ('10%' and 'off'); expected each key once",
        ),
        (
            ["--test", "t"],
            "--test is read with --store only (A and B are then commits); without --store, A and B are result files",
        ),
    ],
)
def test_options_are_checked_before_anything_is_printed(write, capsys, options, message):
    """A bad option used to come after the A: and B: header lines, as if the comparison had begun."""
    status = main(["compare", write("a.json", record()), write("b.json", record()), *options])
    out, err = capsys.readouterr()
    assert status == 3 and out == ""
    assert err.count("\n") == 1 and fnmatch.fnmatchcase(err, f"error: {message}\n"), err


def searched(rate, low, high, at_least=False, seed=0):
    """A stored capacity search by rate (as ``llmreplay sweep --out`` writes it): the point at
    capacity's record, ``summary["capacity"]``, and the search under ``capacity``."""
    data = record(seed=seed)
    data["settings"] = {"concurrency": 8, "capacity": {"by": "rate", "slo": {"ttft.p99": "< 1s"}}}
    data["summary"]["capacity"] = {"rate": rate, "low": low, "high": high, "runs": 8}
    data["capacity"] = {
        "plan": {"by": "rate", "slo": {"ttft.p99": "< 1s"}},
        "rate": rate,
        "low": low,
        "high": high,
        "at_least": at_least,
    }
    return data


def test_two_capacity_searches_are_compared_on_their_capacity_as_the_gate_compares_them(write, capsys):
    # the gate's table: the capacity alone (5% allowed), its interval from the two brackets;
    # the point's latencies were measured at a different load on each side
    same = write("a.json", searched(8.0, 8.0, 8.5))
    assert main(["compare", same, same]) == 0
    printed = capsys.readouterr().out
    assert [line.split()[0] for line in printed.splitlines() if line.startswith(("capacity", "ttft"))] == [
        "capacity.rate"
    ], printed
    assert main(["compare", same, write("b.json", searched(6.0, 6.0, 6.5, seed=2))]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("capacity.rate"))
    assert (
        row.split()[1:5] == ["8", "req/s", "6", "req/s"]
        and "-25.0% [-29.4%, -18.8%]" in row
        and row.endswith("REGRESSION")
    )


def test_a_capacity_comparison_takes_regression_options(write, capsys):
    status = main(
        [
            "compare",
            write("a.json", searched(8.0, 8.0, 8.5)),
            write("b.json", searched(6.0, 6.0, 6.5, seed=2)),
            "--regression",
            "capacity.rate=30%",
            "--regression",
            "ttft.p50=10%",
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0, printed
    rows = {line.split()[0]: line for line in printed.splitlines() if line.startswith(("capacity", "ttft"))}
    assert list(rows) == ["capacity.rate", "ttft.p50"] and "30%" in rows["capacity.rate"]
