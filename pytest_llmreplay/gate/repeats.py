"""Several runs of one test (``--llm-repeat N``) as one stored result, and the runs back out of it.

A test repeated N times is stored as **one** record (so a baseline, a history point and a report
are still one file per test and commit): the fields of a single run's record
(:func:`~pytest_llmreplay.gate.baseline.make_record`), except

- ``samples`` / ``sample_keys``: every run's, concatenated run after run;
- ``runs``: one entry per run, in order: ``sizes`` (metric -> how many of the concatenated samples
  are this run's), ``summary`` (the run's own), ``seed`` (the simulator's seed of the run, None
  for a live server) and ``cache_reset`` (the request that emptied the server's prefix cache
  before the run, e.g. ``POST /reset_prefix_cache``; ``off`` when the user turned resets off,
  ``--llm-cache-reset=off``; None when none was made);
- ``summary``: each figure the median over the runs
  (:func:`~pytest_llmreplay.metrics.runs.median_summary`), what SLOs are checked against;
- ``warnings``: every run's, each once; ``duration_s``: the runs' sum;
- ``server_metrics``: the last run's series (the run the terminal's tables show), and
  ``client_hit_rate`` the median over the runs, beside the ``summary``'s median server figures.
- ``interrupted``: the signal that cut a run short, whichever run it was (the last one kept).

A record without ``runs`` is one run. :func:`run_samples` gives a metric's samples per run, which
is what the comparison's two-level bootstrap resamples
(:func:`~pytest_llmreplay.gate.bootstrap.hierarchical_bootstrap_change`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..metrics.runs import median_summary
from .stored_record import NOT_RESET


def pool_records(records: Sequence[Mapping[str, Any]], facts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One stored record of ``records`` (one per run, equal workload and settings) with each
    run's ``facts`` (seed, cache_reset) kept in ``runs`` (see the module docstring)."""
    if len(records) == 1:
        return dict(records[0])
    first = records[0]
    names = list(dict.fromkeys(name for r in records for name in r["samples"]))  # a metric the first run lacked too
    runs = [
        {"sizes": {name: len(r["samples"].get(name, [])) for name in names}, "summary": r["summary"], **fact}
        for r, fact in zip(records, facts, strict=True)
    ]
    return {
        **{key: value for key, value in first.items() if key not in ("server_metrics", "client_hit_rate")},
        "duration_s": sum(r.get("duration_s") or 0.0 for r in records),
        "warnings": list(dict.fromkeys(w for r in records for w in r.get("warnings", []))),
        "summary": median_summary([r["summary"] for r in records]),
        "samples": {name: [v for r in records for v in r["samples"].get(name, [])] for name in names},
        "sample_keys": {name: [k for r in records for k in r.get("sample_keys", {}).get(name, [])] for name in names},
        "runs": runs,
        **pooled_server_part([r for r in records if r.get("server_metrics")]),
        **next(({"interrupted": r["interrupted"]} for r in records if r.get("interrupted")), {}),
    }


def pooled_server_part(scraped: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pooled record's ``server_metrics`` and ``client_hit_rate`` of the runs that were
    scraped (module docstring); nothing when none was."""
    if not scraped:
        return {}
    rates = [r["client_hit_rate"] for r in scraped if r.get("client_hit_rate") is not None]
    return {
        "server_metrics": scraped[-1]["server_metrics"],
        **({"client_hit_rate": statistics.median(rates)} if rates else {}),
    }


def run_count(record: Mapping[str, Any]) -> int:
    return len(record.get("runs") or ()) or 1


def _split(values: list[Any], record: Mapping[str, Any], metric: str) -> list[list[Any]]:
    runs = record.get("runs") or ()
    if not runs:
        return [values]
    parts, start = [], 0
    for run in runs:
        size = int(run["sizes"].get(metric, 0))
        parts.append(values[start : start + size])
        start += size
    return parts


def run_samples(record: Mapping[str, Any], metric: str) -> list[np.ndarray]:
    """``metric``'s samples per run (runs without any left out)."""
    parts = _split(list(record["samples"].get(metric, [])), record, metric)
    return [np.asarray(part, dtype=float) for part in parts if len(part)]


def run_keys(record: Mapping[str, Any], metric: str) -> list[list[int]] | None:
    """``metric``'s sample keys per run, None when the record has none for it."""
    keys = (record.get("sample_keys") or {}).get(metric)
    if keys is None:
        return None
    return [part for part in _split(list(keys), record, metric) if part]


def cache_reset_words(reset: str) -> str:
    """How the runs' prefix cache was emptied, for :func:`repeats_line`: ``reset`` is the
    ``cache_reset`` they share (see the module docstring)."""
    return "cache not reset between runs" if reset == NOT_RESET else f"cache reset by {reset} before each"


def repeats_line(record: Mapping[str, Any]) -> str:
    """``3 runs (seeds 0, 1, 2; cache reset by POST /reset_prefix_cache before each): ttft.p50
    312.1, 318.0, 309.9 ms; figures above are the last run's, SLOs and baselines use the median``."""
    runs = record.get("runs") or []
    seeds = [run.get("seed") for run in runs]
    resets = {run.get("cache_reset") for run in runs}
    how = [f"seeds {', '.join(map(str, seeds))}"] if all(seed is not None for seed in seeds) else []
    how += [cache_reset_words(next(iter(resets)))] if len(resets) == 1 and None not in resets else []
    ttft = [run["summary"].get("ttft", {}).get("p50") for run in runs]
    per_run = (
        f": ttft.p50 {', '.join('-' if v is None else f'{v * 1e3:.1f}' for v in ttft)} ms"
        if any(v is not None for v in ttft)
        else ""
    )
    line = f"{len(runs)} runs ({'; '.join(how) or 'live server'}){per_run}; the table above is the last run's, SLOs and baselines use each figure's median over the runs"
    return line + _measured_in_some(runs, record.get("summary") or {})


def _measured_in_some(runs: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> str:
    """``; server.running.max measured in 2 of 5 runs (the median of those)`` for the server's
    figures some runs lack (a run shorter than the scrape interval reads no gauge): the median is
    over the runs that measured it, and a next commit's runs may measure it in none."""
    partly = [
        f"server.{stat} measured in {count} of {len(runs)}"
        for stat in summary.get("server") or {}
        if (count := sum(stat in (run["summary"].get("server") or {}) for run in runs)) < len(runs)
    ]
    return f"; {', '.join(partly)} runs (the median of those)" if partly else ""
