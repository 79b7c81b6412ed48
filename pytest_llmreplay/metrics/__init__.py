"""Metrics: records -> figures, and the checks on them.

Every formula (TTFT, TTFAT, TPOT, ITL, throughputs, cache hit rates) is in :mod:`.result`, which
makes a :class:`~pytest_llmreplay.metrics.result.Result` from a replay's records; the metric and
statistic names are in :mod:`.names`, SLO expressions in :mod:`.slo`, units and the one way a
value is written in :mod:`.units`.
"""
