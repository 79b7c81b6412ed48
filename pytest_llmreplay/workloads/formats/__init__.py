"""Workload formats: one module each, with ``NAME``, ``detect(first_line)`` and ``load(path)``.

:func:`load_workload` detects the format from the file's first non-blank line (or a directory of
AIPerf payload files) unless one is named, and passes format options (e.g. Mooncake's
``block_size``) to its loader. Detection tries the formats in :data:`FORMATS` order.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from ...errors import LLMReplayError, WorkloadError
from ...json_text import beyond_syntax, too_deep
from ..stats import unit_warning
from ..workload import Workload, check_limits
from . import aiperf_inputs, aiperf_payloads, azure, llmservingsim, mooncake, synthetic, trie, vllm_bench
from ._compressed import damage_first
from ._fields import try_json
from ._text import text_lines

FORMATS: dict[str, ModuleType] = {
    module.NAME: module
    for module in (llmservingsim, mooncake, trie, aiperf_payloads, aiperf_inputs, azure, vllm_bench, synthetic)
}


def register_format(module: Any) -> None:
    """Add a plugin's format (``NAME``, ``detect(first_line)``, ``load(path, **options)``) after
    the built-in ones; registering the same module again is a no-op, another module under a
    taken name is an error."""
    name = getattr(module, "NAME", None)
    if (
        not isinstance(name, str)
        or not callable(getattr(module, "detect", None))
        or not callable(getattr(module, "load", None))
    ):
        raise LLMReplayError(
            f"{getattr(module, '__name__', module)!r}: a format needs NAME (a string), detect(first_line) and load(path)"
        )
    if FORMATS.get(name, module) is not module:
        raise LLMReplayError(f"format name {name!r} is already taken by {FORMATS[name].__name__}")
    FORMATS[name] = module


def first_line(path: Path) -> tuple[int, str]:
    """The number and text of the first line that is neither blank nor a ``#`` comment (YAML
    specs start with one); ``(0, "")`` for a file without such a line. A lone ``{`` (pretty
    JSON) is joined with the next such line by a newline, so that detectors see the first key."""
    found: list[str] = []
    number = 0
    for index, text in text_lines(path):
        if text.strip() and not text.lstrip().startswith("#"):
            number = number or index
            found.append(text.strip())
            if found != ["{"]:
                break
    return number, "\n".join(found)


def detect_format(path: str | Path) -> str:
    """The name of the format of ``path``; a directory is a set of AIPerf payload files."""
    path = Path(path)
    if not path.exists():
        raise WorkloadError("no such file or directory", path=path)
    if path.is_dir():
        return aiperf_payloads.NAME
    with damage_first(path):
        return _detect_file(path)


def _detect_file(path: Path) -> str:
    number, line = first_line(path)
    if not line:
        raise WorkloadError("the file is empty (or only blank and comment lines)", path=path)
    try:
        found = next((name for name, module in FORMATS.items() if module.detect(line)), None)
    except RecursionError:  # a detector parsed a line nested past what json reads
        raise WorkloadError(too_deep(), path=path, line=number) from None
    except ValueError as exc:  # ... or holding an integer past what Python reads (try_json)
        raise WorkloadError(f"invalid JSON: {beyond_syntax(exc)}", path=path, line=number) from None
    if found is not None:
        return found
    if line.startswith("{\n"):  # a lone "{" joined with the next line: pretty-printed JSON
        raise WorkloadError(
            "cannot tell the format: the file starts with a lone '{' (pretty-printed JSON?); JSONL formats need "
            'one object a line, and the JSON documents read are an AIPerf inputs.json, {"data": [...]}, and, '
            "named with format vllm-bench, vllm bench serve's result",
            path=path,
            line=number,
        )
    obj = try_json(line)
    if isinstance(obj, dict) and isinstance(obj.get("turns"), list) and "session_id" in obj:
        raise WorkloadError(  # AIPerf's own --custom-dataset-type multi_turn rows: a dead end otherwise
            "cannot tell the format: this looks like AIPerf's multi_turn custom dataset "
            '({"session_id": ..., "turns": [...]}), which is not read; write its turns as mooncake rows '
            "(session_id, text_input or messages, output_length, delay) or as an AIPerf inputs.json",
            path=path,
            line=number,
        )
    raise WorkloadError(
        f"cannot tell the format from the first line {line.strip()[:80]!r}; name it with "
        f"format= (one of {', '.join(FORMATS)})",
        path=path,
        line=number,
    )


def format_module(name: str) -> ModuleType:
    """The module of format ``name``; :class:`LLMReplayError` listing the known ones if none."""
    module = FORMATS.get(name)
    if module is None:
        raise LLMReplayError(f"unknown workload format {name!r}; expected one of {', '.join(FORMATS)}")
    return module


def loader_options(name: str) -> set[str]:
    """The options format ``name``'s loader takes (``{"block_size"}`` for Mooncake)."""
    return _loader_keywords(format_module(name))


def _loader_keywords(module: ModuleType) -> set[str]:
    return set(inspect.signature(module.load).parameters) - {"path"}


def check_format_options(module: ModuleType, options: Mapping[str, Any], *, values: bool = True) -> None:
    """Check a format's options without reading a file: each must be a keyword of its
    ``load``, and (``values``) pass its ``check_options(**options)`` when the format has one:
    the pytest plugin checks both when it collects a spec file; :func:`load_workload` only
    the names, as the loader checks the values itself, naming the file."""
    accepted = _loader_keywords(module)
    unknown = sorted(set(options) - accepted)
    if unknown:
        takes = f"takes {', '.join(sorted(accepted))}" if accepted else "takes no options"
        raise LLMReplayError(f"format {module.NAME!r} {takes}; got {', '.join(unknown)}")
    check = getattr(module, "check_options", None)
    if values and check is not None:
        check(**options)


def load_workload(path: str | Path, format: str | None = None, **options: Any) -> Workload:
    """Load ``path`` into the canonical model, validating every record before returning.

    ``format`` is one of :data:`FORMATS` (detected when ``None``); ``options`` go to the format's
    loader (only ``block_size`` for Mooncake today) and an option the format does not take is an
    error.
    """
    name = format or detect_format(path)
    module = format_module(name)
    check_format_options(module, options, values=False)
    if not Path(path).exists():
        raise WorkloadError("no such file or directory", path=path)
    try:
        with damage_first(path):
            workload = FORMATS[name].load(path, **options)
    except IsADirectoryError:
        raise WorkloadError(f"is a directory; format {name!r} reads a file", path=path) from None
    except WorkloadError as exc:
        if format is not None or not Path(path).is_dir():
            raise
        raise WorkloadError(  # say why a folder of, say, Mooncake traces is read for chat payloads
            f"{exc.reason} (a directory is read as {name} files, one session each: name a file to read another format)",
            path=exc.path,
            line=exc.line,
            field=exc.field,
            column=exc.column,
        ) from None
    if not workload.sessions:
        raise WorkloadError("holds no requests", path=path)
    if name != "synthetic":  # the generator checks its own, naming the spec's fields
        check_limits(workload, path)
    time_units = getattr(module, "TIME_UNITS", None)
    warning = unit_warning(workload, time_units) if time_units else None
    if warning:
        workload = replace(workload, warnings=(*workload.warnings, f"{path}: {warning}"))
    return workload


def write_workload(workload: Workload, path: str | Path, to: str, *, allow_loss: bool = False) -> list[str]:
    """Write ``workload`` to ``path`` in format ``to``; returns notes on what was dropped.

    Raises :class:`LLMReplayError` when ``to`` cannot express the workload, or would drop
    something and ``allow_loss`` is false (the message lists what), and, naming ``path``, when
    ``path`` is the workload's own file (or lies in its folder of payload files), its folder does
    not exist, or it cannot be written.
    """
    module = FORMATS.get(to)
    writer = getattr(module, "write", None)
    if writer is None:
        writable = ", ".join(name for name, m in FORMATS.items() if hasattr(m, "write"))
        raise LLMReplayError(f"cannot write format {to!r}; writable formats: {writable}")
    path = Path(path)
    if workload.source is not None and _overwrites(Path(workload.source), path):
        raise LLMReplayError(
            f"{path}: is the input workload {workload.source} itself; write to another path (the input would be overwritten)"
        )
    if not path.parent.is_dir():
        raise LLMReplayError(f"{path}: the folder {path.parent} does not exist")
    try:
        return writer(workload, path, allow_loss=allow_loss)
    except IsADirectoryError:
        raise LLMReplayError(f"{path}: is a directory; format {to!r} writes a file here") from None
    except OSError as exc:
        raise LLMReplayError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _overwrites(source: Path, target: Path) -> bool:
    """Whether writing ``target`` replaces ``source`` or a file inside it (a folder of payload
    files), whatever the spelling of either path (relative, ``..``, symbolic links) and whatever
    its name (a hard link: the same file, written in place)."""
    if not source.exists():
        return False
    if target.is_file():
        inputs = [source] if source.is_file() else [path for path in source.rglob("*") if path.is_file()]
        if any(os.path.samefile(target, path) for path in inputs):
            return True
    source, target = source.resolve(), target.resolve()
    return target == source or (source.is_dir() and source in target.parents)
