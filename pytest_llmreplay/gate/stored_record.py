"""Reading a stored result back: a file or a store's bytes -> a record whose shape every reader
can rely on, or one :class:`~pytest_llmreplay.errors.LLMReplayError` naming where it came from.

What a stored result holds is :mod:`~pytest_llmreplay.gate.baseline`'s docstring. This module checks,
in one place, what the readers (the comparison, the history, the reports) take for granted, so
that a file with the right ``schema`` and wrong contents is refused as unreadable instead of
failing somewhere downstream with an ``AttributeError``:

- the text is JSON (nesting too deep for the parser is refused, not a ``RecursionError``), with
  no object naming a key twice (JSON would keep the second value silently: a hand-edited or
  merged file whose figures no one can tell apart);
- ``schema`` is :data:`SCHEMA`; ``fingerprint`` is an object, and so are ``workload``,
  ``settings``, ``capacity`` and ``regression`` where present;
- ``summary``: an object of metric -> object of statistic -> a number or null;
- ``samples``: an object of metric -> list of numbers; ``sample_keys`` (where present): metric ->
  list of integers, as many as that metric's samples;
- ``slo`` (where present): a list of objects, each ``measured`` a number or null;
- ``runs`` (repeated runs, :mod:`~pytest_llmreplay.gate.repeats`, where present): a list of objects
  whose ``sizes`` add up to each metric's samples, each with its ``summary``.

A store that meets a result failing these checks skips it as unreadable
(:meth:`~pytest_llmreplay.gate.store.Store.newest_complete`), as it skips a file that is not JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError
from ..json_text import JSONTextError, parse_json

SCHEMA = 1
NOT_RESET = "off"  # a run's ``cache_reset`` when the user turned resets off (gate/repeats.py, target.py)
REQUIRED = ("schema", "summary", "samples", "fingerprint")
OPTIONAL_OBJECTS = ("workload", "settings", "capacity", "regression")
_NUMBER_OR_NULL = {int, float, type(None)}  # a summary's values as JSON gives them


# what a stored result records of itself but two results gated against each other need not share:
# where the workload file lies (its bytes are its digest: a file moved, or named ./w.yaml, is the
# same workload) and the server's version (an engine repository's every commit builds another,
# 0.11.1.dev101+g1a2b3c4, and what a commit does to the engine is what its gate measures; the
# engine itself, ``engine``, stays)
NOT_IDENTITY = {"workload": ("path",), "fingerprint": ("server_version",)}


def identity(record: Mapping[str, Any], part: str) -> dict[str, Any]:
    """``record``'s ``part`` (``fingerprint``, ``workload``, ``settings``) less what
    :data:`NOT_IDENTITY` leaves out: what two results gated against each other share."""
    return {key: value for key, value in (record.get(part) or {}).items() if key not in NOT_IDENTITY.get(part, ())}


def partial_reason(record: Mapping[str, Any]) -> str | None:
    """Why a stored result measured only part of what it set out to, or nothing, or None:
    ``interrupted`` (the signal that stopped its run), its capacity search's ``incomplete`` (the
    error of the server that failed during it), or :func:`nothing_measured`. Such a result is
    kept and reported, never taken as a baseline or a point of the history (one that measured
    nothing, taken as a baseline, skipped every row of the next comparison: "0 regressions" for
    a server twice as slow)."""
    if record.get("interrupted"):
        return f"interrupted by {record['interrupted']}"
    capacity = record.get("capacity")
    if isinstance(capacity, Mapping) and capacity.get("incomplete"):
        return "an incomplete capacity search (its server failed during it)"
    return nothing_measured(record)


def nothing_measured(record: Mapping[str, Any]) -> str | None:
    """``no request succeeded (N failed)`` for a result whose summary counts no ok request (a
    repeated one: in the median run), else None. A capacity search's result is the point at
    capacity, which has ok requests even where no load met the SLOs."""
    requests = (record.get("summary") or {}).get("requests")
    if not isinstance(requests, Mapping) or requests.get("ok") != 0:
        return None
    return f"no request succeeded ({requests.get('failed', 0)} failed)"


def read_record(path: str | Path) -> dict[str, Any]:
    """A stored result; :class:`LLMReplayError` naming the file when it is not one."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LLMReplayError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LLMReplayError(f"{path}: not a stored llmreplay result ({exc})") from None
    return parse_record(text, str(path))


def parse_record(text: str, where: str) -> dict[str, Any]:
    """The stored result in ``text`` (read from ``where``, a file or a store's URL), its shape
    checked (module docstring); an :class:`LLMReplayError` naming ``where`` when it is not one."""
    try:
        record = parse_json(text)
    except JSONTextError as exc:
        raise LLMReplayError(f"{where}: not a stored llmreplay result ({exc})") from None
    missing = [key for key in REQUIRED if not isinstance(record, dict) or key not in record]
    if missing:
        raise LLMReplayError(
            f"{where}: not a stored llmreplay result (missing {', '.join(missing)}); pass a baseline file or a report's JSON"
        )
    if record["schema"] != SCHEMA:
        raise LLMReplayError(f"{where}: stored with schema {record['schema']!r}, this version reads {SCHEMA}")
    problem = shape_problem(record)
    if problem:
        raise LLMReplayError(f"{where}: not a stored llmreplay result ({problem})")
    return record


def shape_problem(record: Mapping[str, Any]) -> str | None:
    """What in ``record`` is not shaped as a stored result (``samples.ttft: expected a list of
    numbers, got null``), or None (module docstring)."""
    for key in ("fingerprint", *OPTIONAL_OBJECTS):
        if key in record and not (key != "fingerprint" and record[key] is None) and not isinstance(record[key], dict):
            return f"{key}: expected an object, got {_kind(record[key])}"
    problem = _summary_problem(record["summary"], "summary") or _slo_problem(record.get("slo"))
    if problem:
        return problem
    samples = record["samples"]
    if not isinstance(samples, dict):
        return f"samples: expected an object of lists of numbers, got {_kind(samples)}"
    for metric, values in samples.items():
        if not _finite_numbers(values):
            return f"samples.{metric}: expected a list of numbers, got {_kind(values)}"
    keys = record.get("sample_keys")
    if keys is not None:
        if not isinstance(keys, dict):
            return f"sample_keys: expected an object of lists of integers, got {_kind(keys)}"
        for metric, listed in keys.items():
            if not isinstance(listed, list):
                return f"sample_keys.{metric}: expected a list of integers, got {_kind(listed)}"
            odd = [] if set(map(type, listed)) <= {int} else [k for k in listed if type(k) is not int]
            if odd:
                return f"sample_keys.{metric}: expected a list of integers, got {json.dumps(odd[0])[:20]} in it"
            if len(listed) != len(samples.get(metric, ())):
                return f"sample_keys.{metric}: {len(listed)} keys for {len(samples.get(metric, ()))} samples"
    return _runs_problem(record)


def _summary_problem(summary: Any, where: str) -> str | None:
    if not isinstance(summary, dict):
        return f"{where}: expected an object of metrics, got {_kind(summary)}"
    for metric, stats in summary.items():
        if not isinstance(stats, dict):
            return f"{where}.{metric}: expected an object of statistics, got {_kind(stats)}"
        if set(map(type, stats.values())) <= _NUMBER_OR_NULL:  # at the speed of C; else find the culprit
            continue
        for stat, value in stats.items():
            if value is not None and not _is_number(value):
                return f"{where}.{metric}.{stat}: expected a number, got {_kind(value)}"
    return None


def _slo_problem(checks: Any) -> str | None:
    """``slo`` (where present): a list of objects whose ``measured`` is a number or null."""
    if checks is None:
        return None
    if not isinstance(checks, list) or not all(isinstance(check, dict) for check in checks):
        return f"slo: expected a list of objects, got {_kind(checks)}"
    for index, check in enumerate(checks):
        measured = check.get("measured")
        if measured is not None and not _is_number(measured):
            return f"slo[{index}].measured: expected a number, got {_kind(measured)}"
    return None


def _runs_problem(record: Mapping[str, Any]) -> str | None:
    """``runs`` must account for the stored samples (:mod:`~pytest_llmreplay.gate.repeats`)."""
    runs = record.get("runs")
    if runs is None:
        return None
    if not isinstance(runs, list) or not all(
        isinstance(run, dict) and isinstance(run.get("sizes"), dict) for run in runs
    ):
        return "runs: expected a list of objects with sizes"
    for index, run in enumerate(runs):
        if not all(
            isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in run["sizes"].values()
        ):
            return f"runs[{index}].sizes: expected counts"
        problem = _summary_problem(run.get("summary"), f"runs[{index}].summary")  # each run's requests count
        if problem:
            return problem
    for metric, values in record["samples"].items():
        if sum(run["sizes"].get(metric, 0) for run in runs) != len(values):
            return f"runs: the sizes of {metric} do not add up to its {len(values)} samples"
    return None


def _finite_numbers(values: Any) -> bool:
    """Whether ``values`` is a list of finite numbers (JSON's: ``int`` and ``float``, no
    ``bool``), checked at the speed of C (``map``): a stored result holds thousands of samples."""
    return isinstance(values, list) and set(map(type, values)) <= {int, float} and all(map(math.isfinite, values))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    """A JSON value's kind in words, for messages: ``null``, ``a string``, ``a list``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"a string ({value[:20]!r})"
    if isinstance(value, list):
        odd = [v for v in value if not (_is_number(v) and math.isfinite(v))]
        return f"a list holding {_kind(odd[0])}" if odd else "a list"
    if isinstance(value, dict):
        return "an object"
    return "a number" if math.isfinite(value) else str(value)
