"""The serving perf suite: one test per category of SGLang's test/srt/test_bench_serving.py,
each a declared server, a workload and SLOs, on the engine perf_engine.py picks.

SLOs are the service's promises to its users, loose enough to hold on any hardware this suite
runs on (a CPU-only CI machine's tiny model included). What catches a slower commit is the baseline: run with ``--llm-baseline-dir=STORE
--llm-compare`` (and ``--llm-save`` on the default branch), and every gated figure (TTFT, TPOT,
throughput, hit rate, capacity) is compared with the same test's result on the parent commits of
the same server config, beyond its noise.
"""

import pytest
from perf_engine import rate, requests, server, workload

DEFAULT = server("default")
CHUNKED_PREFILL = server("chunked_prefill_512")


@pytest.mark.llmreplay(
    workload=workload("throughput"),
    server=DEFAULT,
    max_requests=requests(),
    concurrency=requests(),  # every request in flight at once: an unbounded rate
    slo={"error_rate": "== 0"},
)
def test_throughput_unbounded_rate(llm_result):
    """Offline throughput: tokens/s with the whole workload queued."""


@pytest.mark.llmreplay(
    workload=workload("chat"),
    server=DEFAULT,
    max_requests=requests(),
    concurrency=1,
    slo={"ttft.p90": "< 2s", "tpot.p90": "< 200ms", "error_rate": "== 0"},
)
def test_latency_at_concurrency_1(llm_result):
    """One request at a time: the engine's latency with no batching."""


@pytest.mark.llmreplay(
    workload=workload("chat"),
    server=DEFAULT,
    max_requests=requests(),
    rate=rate(),
    slo={"ttft.p99": "< 5s", "error_rate": "== 0"},
)
def test_ttft_at_fixed_rate(llm_result):
    """Open loop (Poisson arrivals) at the engine table's rate: TTFT under load."""


@pytest.mark.llmreplay(
    workload=workload("shared_prefix"),
    server=DEFAULT,
    max_requests=requests(),
    concurrency=2,
    slo={"cache_hit_rate.mean": ">= 30%", "error_rate": "== 0"},
)
def test_shared_prefix_cache_hits(llm_result):
    """Four shared system prompts: the prefix cache's hit rate, read from the server's usage."""


@pytest.mark.llmreplay(
    workload=workload("long_prompt"),
    server=CHUNKED_PREFILL,
    max_requests=requests(),
    concurrency=2,
    slo={"ttft.p90": "< 20s", "error_rate": "== 0"},
)
def test_long_prompt_chunked_prefill(llm_result):
    """4k-6k token prompts on the chunked-prefill config: a second server, with its own baseline."""


@pytest.mark.llmreplay(
    workload=workload("chat"),
    server=DEFAULT,
    max_requests=requests(),
    capacity={"by": "concurrency", "slo": {"ttft.p90": "< 2s", "tpot.p90": "< 200ms"}, "max": requests()},
    slo={"capacity.concurrency": ">= 1"},
)
def test_capacity_at_slo(llm_result):
    """The most requests in flight that keep TTFT and TPOT within the SLOs (gated per commit)."""
