"""pytest-llmreplay: performance tests for LLM serving stacks, written like code.

The public API, re-exported from the modules that own it.
"""

from .errors import LLMReplayError, WorkloadError
from .formats import FORMATS, detect_format, load_workload, write_workload
from .formats.synthetic import SyntheticSpec, generate as generate_synthetic
from .workload import HashBlocks, Payload, Session, Synthetic, TokenIds, Turn, Workload

__all__ = [
    "FORMATS",
    "HashBlocks",
    "LLMReplayError",
    "Payload",
    "Session",
    "Synthetic",
    "SyntheticSpec",
    "TokenIds",
    "Turn",
    "Workload",
    "WorkloadError",
    "detect_format",
    "generate_synthetic",
    "load_workload",
    "write_workload",
]
