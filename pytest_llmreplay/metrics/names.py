"""The names of metrics and of their statistics (DESIGN.md's), which :mod:`~pytest_llmreplay.metrics.result`
computes and :mod:`~pytest_llmreplay.metrics.slo` checks: both read them here, so neither imports the other
for them (see metrics/result.py's docstring for each formula, metrics/reasoning.py's for the
reasoning metrics)."""

STATS = ("mean", "min", "p50", "p90", "p95", "p99", "max", "std")
RATES = ("overall", "steady_state", "last_30s", "per_gpu")
REQUEST_METRICS = (
    "ttft",
    "itl",
    "tpot",
    "latency",
    "queue",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "schedule_lag",
)
# per request, only in a run with reasoning (metrics/reasoning.py's docstring)
REASONING_METRICS = (
    "ttfr",
    "ttfo",
    "reasoning_tokens",
    "answer_tokens",
    "reasoning_decode_tps",
    "answer_decode_tps",
)
SESSION_METRICS = (
    "session_latency",
    "ttfat",
    "decode_tps",
    "cache_hit_rate",
    "eligible_cache_hit_rate",
    "output_tokens_per_session",
)
# what a capacity search found (search/outcome.py): the highest rate, ``session_rate`` when the rate
# starts multi-turn sessions (sessions/s, a multiple of the requests per second), or concurrency
CAPACITY_STATS = ("rate", "session_rate", "concurrency")


def capacity_stat(by: str, rate_unit: str) -> str:
    """The statistic a capacity search by ``by`` stores its capacity under: ``session_rate`` for a
    rate whose unit (``Capacity.rate_unit``) is ``sessions/s``, else ``by`` itself (``rate`` in
    req/s, ``concurrency``)."""
    return "session_rate" if by == "rate" and rate_unit == "sessions/s" else by


# per-request metrics a goodput threshold may name
GOODPUT_METRICS = ("ttft", "ttfo", "tpot", "latency", "itl")
