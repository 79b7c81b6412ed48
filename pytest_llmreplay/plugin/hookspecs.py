"""Hooks other pytest plugins implement to extend pytest-llmreplay (pluggy hookspecs).

Implement them in a ``conftest.py`` or a plugin module::

    def pytest_llmreplay_formats():
        return [my_format_module]           # has NAME, detect(first_line) and load(path) -> Workload

    def pytest_llmreplay_fingerprint(config, fingerprint):
        fingerprint["gpu"] = "H100 SXM"      # results with another value are not gated against

    def pytest_llmreplay_metrics():
        return {"p99_over_p50": lambda result: {"value": result.summary["ttft"]["p99"] / result.summary["ttft"]["p50"]}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest


@pytest.hookspec
def pytest_llmreplay_formats() -> list[Any] | None:
    """Workload format modules to add, each with ``NAME``, ``detect(first_line) -> bool`` and
    ``load(path, **options) -> Workload`` (and optionally ``write``). They are tried after the
    built-in formats when detecting; a name already taken is an error. (None adds nothing:
    pluggy leaves an implementation's None out of the hook's results.)"""


@pytest.hookspec
def pytest_llmreplay_fingerprint(config: pytest.Config, fingerprint: dict[str, Any]) -> None:
    """Add or change fields of the endpoint fingerprint (in place) before results are stored or
    compared: GPU model, driver, engine flags. Results whose fingerprints differ are never gated
    against each other."""


@pytest.hookspec
def pytest_llmreplay_metrics() -> Mapping[str, Callable[[Any], Mapping[str, float]]] | None:
    """Extra metrics: name -> function of a :class:`~pytest_llmreplay.metrics.result.Result` returning
    ``{stat: value}`` (``{"value": x}`` for a single figure). They join the summary, so SLO keys,
    reports and stored results can name them. (None adds nothing, as for the formats.)"""
