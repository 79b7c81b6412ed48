"""Failed requests grouped by what went wrong: each distinct error once, with how many requests
it failed, for the reports' "errors" lines."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..replayer.endpoint_types import TOKENS_SO_FAR
from ..replayer.records import RequestRecord


@dataclass(frozen=True)
class ErrorCause:
    """``count`` failed requests whose error reads ``text`` (token counts as a range)."""

    text: str
    count: int

    def __str__(self) -> str:
        return f"{self.text}: {self.count} request{'' if self.count == 1 else 's'}"


def error_causes(records: Iterable[RequestRecord]) -> list[ErrorCause]:
    """The causes of the failed ``records``, most frequent first (then by text). Errors equal
    but for the token count of ``after N tokens`` are one cause, written ``(after LOW-HIGH
    tokens)`` (``(after N tokens)`` when all are equal)."""
    counts: dict[str, list[int]] = {}
    for record in records:
        if record.status != "failed" or not record.error:
            continue
        key, found = record.error, TOKENS_SO_FAR.search(record.error)
        if found is not None:  # the token count's place, filled with the range below
            key = key[: found.start()].rstrip() + "\0" + key[found.end() :]
        counts.setdefault(key, []).append(int(found.group(1)) if found is not None else 0)
    causes = []
    for key, tokens in counts.items():
        if "\0" in key:
            low, high = min(tokens), max(tokens)
            span = f"{low}" if low == high else f"{low}-{high}"
            key = key.replace("\0", f" (after {span} token{'' if span == '1' else 's'})")
        causes.append(ErrorCause(key, len(tokens)))
    return sorted(causes, key=lambda cause: (-cause.count, cause.text))
