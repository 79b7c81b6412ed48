"""Survivorship (pytest_llmreplay/gate/survivors.py): a run that failed requests its baseline
completed has latencies over the survivors only, which the gate must not call ok or improved."""

from __future__ import annotations

import numpy as np
from test_baseline import full_samples, rows, stored

from pytest_llmreplay.gate.baseline import compare
from pytest_llmreplay.gate.comparison_table import comparison_table
from pytest_llmreplay.gate.history import History, gate_with_history
from pytest_llmreplay.gate.survivors import lost_requests, request_counts


def with_requests(record, ok, failed):
    record["summary"]["requests"] = {"ok": ok, "failed": failed}
    return record


def test_request_counts_sum_each_runs_counts():
    one = with_requests(stored({"ttft": [0.1, 0.2]}), 60, 6)
    assert request_counts(one) == (6, 0, 66)
    pooled = {**one, "runs": [{"summary": {"requests": {"ok": 66, "failed": 0}}}, {"summary": one["summary"]}]}
    assert request_counts(pooled) == (6, 0, 132)
    assert request_counts(stored({"ttft": [0.1, 0.2]})) == (0, 0, 0)  # no counts: taken as complete


def test_requests_a_duration_limit_cancelled_are_lost_as_failed_ones_are():
    # a run 1.5 times slower under duration_s: 15 of 116 requests completed against the
    # baseline's 25, those cut at the deadline the slowest, and its latency p50 read 15% faster
    base, cur = stored({"ttft": [0.1, 0.2]}), stored({"ttft": [0.1, 0.2]})
    base["summary"]["requests"] = {"ok": 25, "failed": 0, "cancelled": 91}
    cur["summary"]["requests"] = {"ok": 15, "failed": 0, "cancelled": 101}
    assert request_counts(cur) == (0, 101, 116)
    assert lost_requests(base, cur) == (
        "101 of 116 requests failed or were cancelled at the duration limit in this run, 91 of 116 in the baseline"
    )
    assert lost_requests(cur, base) is None


def test_lost_requests_is_a_larger_failed_share_in_this_run():
    def record(ok, failed):
        return with_requests(stored({"ttft": [0.1, 0.2]}), ok, failed)

    assert lost_requests(record(66, 0), record(63, 3)) == "3 of 66 requests failed in this run, 0 of 66 in the baseline"
    assert lost_requests(record(63, 3), record(63, 3)) is None  # the same share: the same requests may have failed
    assert lost_requests(record(60, 6), record(63, 3)) is None  # fewer: this run's figures are over more requests
    assert lost_requests(record(126, 6), record(63, 4)) is not None  # 4/67 > 6/132, whatever the totals


def test_a_run_that_lost_its_slowest_requests_is_not_called_improved():
    """The new user's trial: the candidate's server timed out its slowest tenth, so its TTFT
    over the survivors is lower than the baseline's over all of them, and the gate passed it. Its latency rows are regressions with no change; the others are judged as ever."""
    samples = full_samples()
    ttft = np.sort(samples["ttft"])
    survivors = {**samples, "ttft": ttft[: len(ttft) * 9 // 10]}
    base = with_requests(stored(samples), 500, 0)
    cur = with_requests(stored(survivors), 450, 50)
    unseen = compare(base, with_requests(stored(survivors), 500, 0))  # the same figures, no failure counted
    assert unseen.regressions == [] and rows(unseen)["ttft.p50"].change < 0  # faster, and passed
    comparison = compare(base, cur)
    found = rows(comparison)
    note = (
        "not comparable: 50 of 500 requests failed in this run, 0 of 500 in the baseline; "
        "its figure is over the requests that survived"
    )
    for key in ("ttft.p50", "ttft.p90", "tpot.p50", "latency.p50", "ttfat.p50"):
        assert (found[key].verdict, found[key].note, found[key].change) == ("regression", note, None), key
    assert found["cache_hit_rate.mean"].verdict == "ok" and found["output_throughput.steady_state"].verdict == "ok"
    assert f"REGRESSION ({note})" in comparison_table(comparison)
    assert comparison_table(comparison).startswith("Compared with baseline: 5 regressions")


def test_the_history_does_not_turn_a_not_comparable_row_into_noise():
    """The history gate re-judges rows with a change; a not comparable row has none, so an
    earlier spread that would veto a regression leaves it standing."""
    base = with_requests(stored({"ttft": [0.1, 0.2, 0.3, 0.4]}), 4, 0)
    cur = with_requests(stored({"ttft": [0.1, 0.2, 0.3]}), 3, 1)
    comparison = compare(base, cur, {"ttft.p50": 0.05})
    earlier = [("c" * 40, with_requests(stored({"ttft": [0.1 * k, 0.2, 0.3, 0.4]}), 4, 0)) for k in range(1, 7)]
    gate_with_history(comparison, cur, History(earlier))
    (row,) = comparison.rows
    assert row.verdict == "regression" and row.note.startswith("not comparable: 1 of 4 requests failed in this run")
