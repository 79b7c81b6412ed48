"""pytest-llmreplay: performance tests for LLM serving stacks, written like code.

The public API, re-exported lazily from the modules that own it (PEP 562), so that importing
the package (as pytest does for the plugin on every run) costs no numpy or loader imports.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "LLMReplayError": "errors",
    "WorkloadError": "errors",
    "FORMATS": "workloads.formats",
    "detect_format": "workloads.formats",
    "load_workload": "workloads.formats",
    "write_workload": "workloads.formats",
    "SyntheticSpec": "workloads.formats.synthetic",
    "generate_synthetic": ("workloads.formats.synthetic", "generate"),
    "HashBlocks": "workloads.workload",
    "Payload": "workloads.workload",
    "Session": "workloads.workload",
    "Synthetic": "workloads.workload",
    "TokenIds": "workloads.workload",
    "Turn": "workloads.workload",
    "Workload": "workloads.workload",
    "Endpoint": "replayer.endpoint_types",
    "HTTPEndpoint": "replayer.endpoints",
    "ServerProcess": "replayer.server_process",
    "PromptFactory": "workloads.prompts",
    "ReplaySettings": "replayer.plan",
    "RequestRecord": "replayer.records",
    "replay": "replayer.driver",
    "Result": "metrics.result",
    "VirtualClock": "replayer.clock",
    "WallClock": "replayer.clock",
    "load_tokenizer": "workloads.tokenizer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, attribute = target if isinstance(target, tuple) else (target, name)
    value = getattr(import_module(f".{module_name}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
