"""Flat request traces (no sessions) replayed at their own timestamps: interactive chat SLOs.

One marker per case, through ``pytest.param(..., marks=...)``: each case is its own perf test
with its own baseline.
"""

import pytest

INTERACTIVE = {"ttft.p99": "< 500ms", "tpot.p99": "< 50ms", "error_rate": "== 0"}


@pytest.mark.parametrize(
    "trace",
    [
        pytest.param(
            "llmservingsim",
            marks=pytest.mark.llmreplay(workload="workloads/llmservingsim_example.jsonl", slo=INTERACTIVE),
        ),
        pytest.param(
            "azure-conv", marks=pytest.mark.llmreplay(workload="workloads/azure_conv_head200.csv", slo=INTERACTIVE)
        ),
    ],
)
def test_flat_trace_meets_interactive_slos(trace, llm_result):
    assert llm_result.summary["requests"]["ok"] == llm_result.run.planned_requests
