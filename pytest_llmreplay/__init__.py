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
    "FORMATS": "formats",
    "detect_format": "formats",
    "load_workload": "formats",
    "write_workload": "formats",
    "SyntheticSpec": "formats.synthetic",
    "generate_synthetic": ("formats.synthetic", "generate"),
    "HashBlocks": "workload",
    "Payload": "workload",
    "Session": "workload",
    "Synthetic": "workload",
    "TokenIds": "workload",
    "Turn": "workload",
    "Workload": "workload",
    "Endpoint": "endpoints",
    "HTTPEndpoint": "endpoints",
    "ServerProcess": "server_process",
    "PromptFactory": "prompts",
    "ReplaySettings": "driver",
    "RequestRecord": "run_records",
    "replay": "driver",
    "Result": "metrics",
    "VirtualClock": "clock",
    "WallClock": "clock",
    "load_tokenizer": "tokenizer",
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
