"""Strict, typed reading of JSON records, with errors that name the file, line and field.

Shared by every JSON-based loader: integer fields reject strings, floats and booleans instead of
coercing them; unknown keys are rejected (a misspelt optional key must not be silently ignored).
"""

from __future__ import annotations

import builtins
import json
import math
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, Literal, overload

from ...errors import WorkloadError
from ...json_text import DuplicateKey, JSONTextError, beyond_syntax, parse_json, too_deep, unique_keys
from ._text import WORKLOAD_TEXT, read_text, text_lines


def read_json_document(path: Path, expected: str = WORKLOAD_TEXT) -> Any:
    """The JSON document that is the whole of ``path`` (:func:`~._text.read_text`: decompressed,
    a byte-order mark skipped; ``expected`` names it when a byte is not UTF-8), a key given
    twice refused; every refusal one :class:`WorkloadError` naming the file, and the line and
    column where the parser gives them (:func:`~pytest_llmreplay.json_text.parse_json`)."""
    try:
        return parse_json(read_text(path, expected))
    except JSONTextError as exc:
        raise WorkloadError(exc.reason, path=path, line=exc.line, column=exc.column) from None


def iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for every non-blank line of a JSONL file, streaming.
    A key twice in one object is an error (JSON keeps the last silently), as is a line holding
    only ``{`` (pretty-printed JSON, where JSONL needs one object a line).

    The duplicate check costs a count of the line's colons: every key has one, so a line with
    as many colons as its parsed object has keys (a flat record such as Mooncake's) cannot
    repeat a key; only other lines are parsed again with :func:`unique_keys`, whose per-object
    hook made the 12k-line Mooncake trace load ~25% slower (bench/README.md). A line nested past
    what the recursive parser reads is an error at that line (:func:`too_deep`), not a
    ``RecursionError``."""
    for number, text in text_lines(path):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
            if isinstance(value, dict) and text.count(":") != len(value):
                json.loads(text, object_pairs_hook=unique_keys)
        except DuplicateKey as exc:
            raise WorkloadError(f"duplicate key {exc.key!r}", path=path, line=number) from None
        except RecursionError:
            raise WorkloadError(too_deep(), path=path, line=number) from None
        except json.JSONDecodeError as exc:
            if text.strip() == "{":
                raise WorkloadError(
                    "a lone '{': JSONL needs each object on one line (is this pretty-printed JSON?)",
                    path=path,
                    line=number,
                ) from None
            end = len(text.rstrip("\r\n"))  # json reads past the line's end into its newline: a line cut short
            where = f"column {exc.colno}" if exc.pos < end else f"column {end + 1}, the end of the line"
            raise WorkloadError(f"invalid JSON: {exc.msg} ({where})", path=path, line=number) from None
        except ValueError as exc:  # past the syntax: an integer of more than 4,300 digits
            raise WorkloadError(f"invalid JSON: {beyond_syntax(exc)}", path=path, line=number) from None
        if not isinstance(value, dict):
            raise WorkloadError(f"expected a JSON object, got {type_name(value)}", path=path, line=number)
        yield number, value


_TYPE_NAMES = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "a list"),
    (dict, "an object"),
)


def type_name(value: Any) -> str:
    """The JSON name of a value's type, for error messages (bool before int: it is one)."""
    if value is None:
        return "null"
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), type(value).__name__)


def is_finite_number(value: Any, minimum: float = -math.inf) -> bool:
    """Whether ``value`` is an integer or a float (a boolean is neither), finite and >= ``minimum``."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= minimum


class Fields:
    """Checked access to one JSON object that stands at ``path:line`` (``prefix`` names nesting)."""

    __slots__ = ("obj", "path", "line", "prefix")

    def __init__(self, obj: dict[str, Any], path: Path | str | None, line: int | None, prefix: str = "") -> None:
        self.obj = obj
        self.path = path
        self.line = line
        self.prefix = prefix

    def error(self, key: str | None, message: str) -> WorkloadError:
        """A :class:`WorkloadError` located at this record's ``key``."""
        name = f"{self.prefix}{key}" if key is not None else (self.prefix.rstrip(".") or None)
        return WorkloadError(message, path=self.path, line=self.line, field=name)

    def child(self, obj: Any, key: str) -> Fields:
        """The nested object ``obj`` found under ``key`` (e.g. ``sub_requests[2]``)."""
        name = f"{self.prefix}{key}"
        if not isinstance(obj, dict):
            raise WorkloadError(f"expected an object, got {type_name(obj)}", path=self.path, line=self.line, field=name)
        return Fields(obj, self.path, self.line, f"{name}.")

    def reject_unknown(self, known: Collection[str]) -> None:
        """Fail on any key outside ``known``."""
        for key in self.obj:
            if key not in known:
                raise self.error(key, f"unknown field; expected one of {', '.join(sorted(known))}")

    def has(self, key: str) -> bool:
        return key in self.obj

    # With required=True (the default) a getter never returns None (a missing field raises), and
    # its overloads say so. ``int`` and ``list`` are methods here, so annotations in this class
    # name the built-in types ``builtins.int`` and ``builtins.list``.
    @overload
    def one_of(self, *keys: str, required: Literal[True] = True) -> str: ...
    @overload
    def one_of(self, *keys: str, required: bool) -> str | None: ...
    def one_of(self, *keys: str, required: bool = True) -> str | None:
        """The single key of ``keys`` that is present (alternative spellings of one field)."""
        present = [k for k in keys if k in self.obj]
        if len(present) > 1:
            raise self.error(present[1], f"give only one of {' or '.join(keys)}")
        if not present:
            if required:
                raise self.error(
                    keys[0], f"required field missing{' (or ' + ', '.join(keys[1:]) + ')' if len(keys) > 1 else ''}"
                )
            return None
        return present[0]

    @overload
    def int(
        self,
        key: str,
        *,
        minimum: builtins.int = 0,
        required: Literal[True] = True,
        default: builtins.int | None = None,
    ) -> builtins.int: ...
    @overload
    def int(
        self, key: str, *, minimum: builtins.int = 0, required: bool, default: builtins.int | None = None
    ) -> builtins.int | None: ...
    def int(
        self, key: str, *, minimum: builtins.int = 0, required: bool = True, default: builtins.int | None = None
    ) -> builtins.int | None:
        """An integer >= ``minimum``; strings, floats and booleans are errors."""
        if key not in self.obj:
            if required:
                raise self.error(key, "required field missing")
            return default
        return check_int(self.obj[key], minimum, lambda m: self.error(key, m))

    def flag(self, key: str) -> None:
        """Fail unless ``key`` is true, false, null or absent (a string ``"false"`` is none)."""
        value = self.obj.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.error(key, f"must be true or false (a boolean), got {type_name(value)} {value!r}")

    @overload
    def number(
        self, key: str, *, minimum: float = 0.0, required: Literal[True] = True, default: float | None = None
    ) -> float: ...
    @overload
    def number(
        self, key: str, *, minimum: float = 0.0, required: bool, default: float | None = None
    ) -> float | None: ...
    def number(
        self, key: str, *, minimum: float = 0.0, required: bool = True, default: float | None = None
    ) -> float | None:
        """A finite number (integer or float) >= ``minimum``; strings and booleans are errors."""
        if key not in self.obj:
            if required:
                raise self.error(key, "required field missing")
            return default
        value = self.obj[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"must be a number, got {type_name(value)} {value!r}")
        if not math.isfinite(value) or value < minimum:
            raise self.error(key, f"must be a finite number >= {minimum:g}, got {value!r}")
        return float(value)

    @overload
    def int_list(
        self,
        key: str,
        *,
        minimum: builtins.int = 0,
        maximum: builtins.int | None = None,
        required: Literal[True] = True,
    ) -> tuple[builtins.int, ...]: ...
    @overload
    def int_list(
        self, key: str, *, minimum: builtins.int = 0, maximum: builtins.int | None = None, required: bool
    ) -> tuple[builtins.int, ...] | None: ...
    def int_list(
        self, key: str, *, minimum: builtins.int = 0, maximum: builtins.int | None = None, required: bool = True
    ) -> tuple[builtins.int, ...] | None:
        """A list of integers in [``minimum``, ``maximum``]; the failing element is named ``key[i]``."""
        if key not in self.obj:
            if required:
                raise self.error(key, "required field missing")
            return None
        values = self.obj[key]
        if not isinstance(values, list):
            raise self.error(key, f"must be a list of integers, got {type_name(values)}")
        for index, value in enumerate(values):
            if type(value) is not int or value < minimum or (maximum is not None and value > maximum):
                check_int(value, minimum, lambda m, i=index: self.error(f"{key}[{i}]", m), maximum)
        return tuple(values)

    def number_list(self, key: str, *, minimum: float = 0.0) -> tuple[float, ...]:
        """A required list of finite numbers >= ``minimum``."""
        values = self.obj.get(key)
        if key not in self.obj:
            raise self.error(key, "required field missing")
        if not isinstance(values, list):
            raise self.error(key, f"must be a list of numbers, got {type_name(values)}")
        out = []
        for index, value in enumerate(values):
            if not is_finite_number(value, minimum):
                raise self.error(f"{key}[{index}]", f"must be a finite number >= {minimum:g}, got {value!r}")
            out.append(float(value))
        return tuple(out)

    @overload
    def identifier(self, key: str, *, required: Literal[True] = True, allow_int: bool = True) -> str: ...
    @overload
    def identifier(self, key: str, *, required: bool, allow_int: bool = True) -> str | None: ...
    def identifier(self, key: str, *, required: bool = True, allow_int: bool = True) -> str | None:
        """A non-empty string (or an integer, when ``allow_int``), returned as a string."""
        if key not in self.obj:
            if required:
                raise self.error(key, "required field missing")
            return None
        value = self.obj[key]
        kinds = (str, int) if allow_int else (str,)
        if isinstance(value, bool) or not isinstance(value, kinds) or value == "":
            expected = "a non-empty string or an integer" if allow_int else "a non-empty string"
            raise self.error(key, f"must be {expected}, got {type_name(value)} {value!r}")
        return str(value)

    def list(self, key: str, *, min_length: builtins.int = 0) -> builtins.list[Any]:
        """A required list with at least ``min_length`` entries."""
        if key not in self.obj:
            raise self.error(key, "required field missing")
        values = self.obj[key]
        if not isinstance(values, list):
            raise self.error(key, f"must be a list, got {type_name(values)}")
        if len(values) < min_length:
            raise self.error(
                key, f"must have at least {min_length} entr{'y' if min_length == 1 else 'ies'}, got {len(values)}"
            )
        return values


def check_int(value: Any, minimum: int, fail: Any, maximum: int | None = None) -> int:
    """Return ``value`` if it is an integer in [``minimum``, ``maximum``], else raise
    ``fail(message)``."""
    if type(value) is not int:
        raise fail(f"must be an integer, got {type_name(value)} {value!r}")
    if value < minimum:
        raise fail(f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise fail(f"must be <= {maximum}, got {value}")
    return value


def try_json(text: str) -> Any:
    """``json.loads(text)``, or ``None`` when it is not JSON (for format detection); JSON that
    Python cannot read (an integer of more than 4,300 digits) raises its ``ValueError``, which
    detection reports at the line (as ``RecursionError``), instead of a format it cannot tell."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def check_messages(record: Fields, key: str = "messages") -> list[dict[str, Any]]:
    """A non-empty OpenAI chat message list: objects with a string ``role``."""
    messages = record.list(key, min_length=1)
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise record.error(f"{key}[{index}]", f"must be a message object, got {type_name(message)}")
        if not isinstance(message.get("role"), str):
            raise record.error(
                f"{key}[{index}].role", "required: a string such as 'user', 'assistant', 'system' or 'tool'"
            )
    return messages


def payload_output_tokens(record: Fields) -> int | None:
    """The response length a verbatim request body asks for (``max_completion_tokens`` or
    ``max_tokens``, an integer >= 1), or ``None`` when it sets neither; first the fields the
    replay reads the reply by are checked as the server checks them: ``stream`` and
    ``stream_options.include_usage`` true, false or null, ``stream_options`` an object or null.
    (A ``"stream": "false"`` would load, and every request get HTTP 400.)"""
    record.flag("stream")
    options = record.obj.get("stream_options")
    if options is not None:
        record.child(options, "stream_options").flag("include_usage")
    key = record.one_of("max_completion_tokens", "max_tokens", required=False)
    return record.int(key, minimum=1) if key else None
