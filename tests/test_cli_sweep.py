"""llmreplay sweep: capacity at SLO from the command line, on the offline simulator (--sim)."""

import csv
import re

import pytest

from pytest_llmreplay.baseline import read_record
from pytest_llmreplay.cli import main

WORKLOAD = """\
synthetic:
  sessions: 40
  input_tokens: {dist: uniform, min: 256, max: 2048}
  output_tokens: {dist: uniform, min: 32, max: 256}
  rate: 10
  seed: 3
"""


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "wl.yaml"
    path.write_text(WORKLOAD)
    return str(path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sweep_prints_a_line_per_point_the_table_and_the_capacity_and_writes_out(capsys, workload, tmp_path):
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "sweep", workload, "--sim", "llama-3.1-8b-h100", "--by", "concurrency",
                         "--slo", "ttft.p90<150ms", "--slo", "tpot.p90 <= 30ms", "--out", str(out_dir))
    assert code == 0, err
    progress = [line for line in err.splitlines() if line.startswith("point ")]
    assert progress[0].startswith("point 1/12    low concurrency 1: pass  ttft.p90 ")
    assert progress[1].startswith("point 2/12   high concurrency 40: FAIL")
    assert "Capacity search by concurrency" in out
    assert re.search(r"concurrency +verdict +ttft.p90 +tpot.p90 +req/s +goodput req/s +good", out)
    stored = read_record(out_dir / "result.json")
    capacity = stored["capacity"]
    assert len(capacity["points"]) == len(progress) == capacity["runs"]
    assert f"capacity (concurrency): {capacity['concurrency']:.4g}, bracket [{capacity['low']:.4g}, {capacity['high']:.4g}], {len(progress)} runs" in out
    assert stored["summary"]["capacity"]["concurrency"] == capacity["concurrency"] > 1
    assert stored["settings"]["capacity"]["slo"] == {"ttft.p90": "< 150ms", "tpot.p90": "<= 30ms"}  # written canonically
    assert stored["fingerprint"]["sim_profile"] == "llama-3.1-8b-h100"
    # the stored result is the point at capacity; points.csv a row per point, in run order
    at_capacity = [p for p in capacity["points"] if p["load"] == capacity["concurrency"]][0]
    assert stored["summary"]["requests"]["ok"] == at_capacity["requests_ok"] and at_capacity["passed"]
    with open(out_dir / "points.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [float(r["load"]) for r in rows] == [p["load"] for p in capacity["points"]]
    assert {"slo:ttft.p90", "slo:tpot.p90", "goodput_rate", "request_throughput"} <= set(rows[0])
    assert (out_dir / "requests.csv").read_text().count("\n") == 41  # header + 40 requests


def test_sweep_by_rate_keeps_the_estimates_apart_and_says_when_no_rate_failed(capsys, workload, tmp_path):
    # tpot.p90 < 1s holds at every rate tried: 6 runs are the 2 estimates, the 2 ends and 2
    # doublings, all passing; the capacity is "at least" the last, a rate point
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "sweep", workload, "--sim", "llama-3.1-8b-h100", "--slo", "tpot.p90<1s", "--budget", "6", "--out", str(out_dir))
    assert code == 0, err
    stored = read_record(out_dir / "result.json")
    capacity = stored["capacity"]
    assert capacity["at_least"] is True and capacity["runs"] == 6
    assert f"capacity (rate): at least {capacity['rate']:.4g} req/s (no upper bound found), bracket [{capacity['rate']:.4g}, -], 6 runs" in out
    assert "Estimates (where to look; not rates run, never the capacity)" in out
    assert [p["role"] for p in capacity["estimates"]] == ["sync", "saturate"]
    assert [p["role"] for p in capacity["points"]] == ["low", "high", "grow", "grow"]
    assert capacity["points"][-1]["load"] == capacity["rate"] and capacity["points"][-1]["settings"]["rate"] == capacity["rate"]
    with open(out_dir / "points.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(r["role"], r["mode"]) for r in rows] == [("sync", "concurrency"), ("saturate", "concurrency")] + [(role, "rate") for role in ("low", "high", "grow", "grow")]


def test_sweep_where_no_load_meets_the_slos_exits_1(capsys, workload):
    code, out, err = run(capsys, "sweep", workload, "--sim", "llama-3.1-8b-h100", "--slo", "ttft.p99<1us")
    assert code == 1
    assert "capacity (rate): 0 req/s" in out and "no load meets the SLOs" in out
    assert "(stopped early: ttft.p99 <1us is lost" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--slo", "ttft.p99 1s"], "error: --slo: expected METRIC.STAT OP VALUE such as 'ttft.p99<1s', got 'ttft.p99 1s'"),
        (["--slo", "cache_hit_rate.mean>50%"], "error: --slo 'cache_hit_rate.mean': cannot be evaluated per request"),
        (["--slo", "ttft.p99<1s", "--min", "8", "--max", "4"], "error: --min: expected less than the max (4), got 8"),
        (["--slo", "ttft.p99<1s", "--resolution", "0"], "error: --resolution: expected a share between 0 and 1"),
        (["--slo", "ttft.p99<1s", "--resolution", "fine"], "error: --resolution: expected a share between 0 and 1"),
        (["--slo", "ttft.p99<1s", "--by", "concurrency", "--arrival", "trace"], "error: --arrival: applies to a search by rate"),
        (["--slo", "ttft.p99<1s", "--budget", "3"], "error: --budget: expected a whole number of runs >= 4 (the search starts with 4: 2 estimates and the two ends), got 3"),
        (["--slo", "ttft.p99<1s", "--out", ""], "error: --out: empty; expected a folder for result.json, requests.csv, points.csv and load_curve.svg"),
    ],
)
def test_sweep_bad_options_are_one_line(capsys, workload, args, message):
    code, out, err = run(capsys, "sweep", workload, "--sim", "llama-3.1-8b-h100", *args)
    assert code == 3 and err.strip() == err.strip().splitlines()[0]
    assert err.startswith(message), err


def test_sweep_names_an_unknown_profile(capsys, workload):
    code, _, err = run(capsys, "sweep", workload, "--sim", "nope", "--slo", "ttft.p99<1s")
    assert code == 3 and err.startswith("error: --sim: unknown profile 'nope'")


def test_sweep_with_a_missing_workload_is_bad_input_status_3_as_run_and_compare(capsys, tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    code, out, err = run(capsys, "sweep", missing, "--sim", "llama-3.1-8b-h100", "--slo", "ttft.p99<1s")
    assert code == 3 and out == ""
    assert err.startswith("error: ") and "nope.jsonl" in err and len(err.strip().splitlines()) == 1


def test_sweep_sim_names_the_http_options_it_ignores(capsys, workload):
    code, _, err = run(capsys, "sweep", workload, "--sim", "llama-3.1-8b-h100", "--slo", "tpot.p90<1s", "--budget", "4", "--model", "m", "--api", "completions")
    assert code == 0, err
    assert "warning: --model, --api: ignored with --sim (the simulator runs in process; these options are for an HTTP --endpoint)" in err.splitlines()
