"""A JSON text a user gave (a profile, a model's config.json, a stored result, a vLLM bench result,
an AIPerf inputs.json, a run file, an option's value), parsed with every refusal as one error.

:func:`json.loads` refuses a text in three ways: :class:`json.JSONDecodeError` for its syntax
(with the line and column where it stopped), :class:`RecursionError` for lists or objects nested
past what its recursive parser reads, and a plain :class:`ValueError` past its syntax (an integer
of more than 4,300 digits, Python's ``sys.get_int_max_str_digits``). :func:`parse_json` turns
each, and an object naming a key twice (JSON keeps the last value, silently: :func:`unique_keys`),
into one :class:`JSONTextError`, which the caller names its file or option around. Standard
library only: every module may import it without cost.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .errors import LLMReplayError, WorkloadError


def too_deep() -> str:
    """Why a document nested past what a recursive parser reads (Python's ``json`` and PyYAML
    both raise ``RecursionError`` there) is refused."""
    return f"nested too deeply: lists or objects inside each other past what the parser reads (Python's recursion limit, {sys.getrecursionlimit()})"


def beyond_syntax(exc: ValueError) -> str:
    """The reason of a ``ValueError`` that ``json``, PyYAML or ``tomllib`` raise past their syntax
    (an integer of more than 4,300 digits, Python's limit for reading one), without Python's
    advice to raise that limit."""
    return str(exc).split("; use sys.set_int_max_str_digits")[0]


class DuplicateKey(ValueError):
    """A JSON object names ``key`` twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: the object, or :class:`DuplicateKey`."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


class JSONTextError(LLMReplayError):
    """Why a JSON text was refused: ``reason`` (``not valid JSON: ...``, ``duplicate key 'k'``,
    ``nested too deeply: ...``) and the ``line`` and ``column`` where the parser stopped (syntax
    errors; None otherwise: the parser gives no position for the others). Its text is the
    reason, after ``line L column C:`` where known."""

    def __init__(self, reason: str, line: int | None = None, column: int | None = None) -> None:
        self.reason, self.line, self.column = reason, line, column
        super().__init__(reason if line is None else f"line {line} column {column}: {reason}")

    def at(self, where: str) -> str:
        """The error as ``where:line:column: reason`` (``where: reason`` without a position): as
        :class:`~pytest_llmreplay.errors.WorkloadError` renders a file's errors."""
        return str(WorkloadError(self.reason, path=where, line=self.line, column=self.column))


class _NotANumber(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity``: Python's json reads and writes them, JSON has none."""


def _refuse_constant(name: str) -> Any:
    raise _NotANumber(name)


def parse_json(text: str, *, unique: bool = True, strict_numbers: bool = False) -> Any:
    """``text`` parsed; ``unique``: an object naming a key twice is refused (a file people write:
    the second value would silently win; off only for a server's error reply, read for its
    message alone; the check costs nothing measurable: 10 MB of samples parse in the same 0.16 s); ``strict_numbers``: ``NaN``, ``Infinity`` and ``-Infinity`` are refused (a
    text sent on to a server as JSON, which has none; files other tools write, such as a vLLM
    bench result, may hold them). Every refusal is a :class:`JSONTextError` (module doc)."""
    options: dict[str, Any] = {"object_pairs_hook": unique_keys} if unique else {}
    if strict_numbers:
        options["parse_constant"] = _refuse_constant
    try:
        return json.loads(text, **options)
    except DuplicateKey as exc:
        raise JSONTextError(f"duplicate key {exc.key!r}") from None
    except _NotANumber as exc:
        raise JSONTextError(f"not valid JSON: {exc} is not a JSON number") from None
    except json.JSONDecodeError as exc:
        raise JSONTextError(f"not valid JSON: {exc.msg}", exc.lineno, exc.colno) from None
    except RecursionError:
        raise JSONTextError(too_deep()) from None
    except ValueError as exc:  # past the syntax: an integer of more than 4,300 digits
        raise JSONTextError(f"not valid JSON: {beyond_syntax(exc)}") from None


__all__ = ["DuplicateKey", "JSONTextError", "beyond_syntax", "parse_json", "too_deep", "unique_keys"]
