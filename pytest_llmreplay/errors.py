"""The one exception type a user can cause, and its workload-file flavour.

Every message says where (file, line, field) and what was expected, so that the CLI and the pytest
plugin can print it as one line instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path


class LLMReplayError(Exception):
    """Bad input from a user: a workload, an option, a spec file, a server's reply."""


class WorkloadError(LLMReplayError):
    """A workload file breaks a rule of its format.

    Rendered as ``file:line: field: message`` (each part only when known; ``file:line:column``
    where a column is given), e.g.
    ``workload.jsonl:17: sub_requests[2].tool_duration_ns: must be >= 0, got -5``.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
        column: int | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.column = column
        self.field = field
        self.reason = message
        where = ":".join(
            str(part) for part in (self.path, line, column if line is not None else None) if part is not None
        )
        parts = [p for p in (where, field, message) if p]
        super().__init__(": ".join(parts))
