"""Words for messages: a count with its noun, a list of names cut short, a text cut short.

counted(1, "result") == "1 result";  counted(1200, "result") == "1,200 results"
listed(["a", "b", "c", "d", "e", "f", "g"]) == "a, b, c, d, e and 2 more"
clipped("x" * 500) == "x" * 120 + "..."
"""

from __future__ import annotations

from collections.abc import Sequence

LISTED = 5  # names a message shows before "and N more"
CLIPPED = 120  # characters of a text a message quotes (a server's reply, a line it could not read)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` (thousands separated) and ``noun``, plural (``plural``, else ``noun + "s"``)
    unless ``count`` is 1."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def listed(names: Sequence[str], limit: int = LISTED) -> str:
    """The first ``limit`` of ``names`` joined by commas, then ``and N more`` for the rest."""
    shown = ", ".join(names[:limit])
    return f"{shown} and {len(names) - limit:,} more" if len(names) > limit else shown


def clipped(text: str, limit: int = CLIPPED) -> str:
    """``text``, or its first ``limit`` characters and ``...`` when it is longer."""
    return text if len(text) <= limit else text[:limit] + "..."
