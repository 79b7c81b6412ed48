"""A declarative perf test: what the ``llmreplay`` marker and ``*.llmreplay.yaml|toml`` files say.

Keys (the same in both)::

    workload: workloads/trace.jsonl   # relative to the spec file (marker: to the rootdir)
    format: mooncake                  # optional, detected when absent
    format_options: {block_size: 16}  # optional, passed to the format's loader
    concurrency: 8                    # any replay setting: mode, speedup, concurrency, rate,
                                      # arrival, duration_s, grace_s, max_requests, max_sessions,
                                      # warmup_requests, warmup_s, order, seed, prompt_format
    slo: {"ttft.p99": "< 2s", "error_rate": "== 0"}
    regression: {"ttft.p50": "10%", "ttft.p90": "off"}   # allowed change per compared metric
    capacity: {by: rate, slo: {"ttft.p99": "< 1s"}, min: 1, max: 64, resolution: 5%}
                                      # optional: search the highest load meeting capacity.slo
                                      # (pytest_llmreplay.search.capacity) instead of one replay; the
                                      # search sets mode, rate, concurrency and arrival itself
    repeat: 3                         # runs of the test (default: --llm-repeat; a capacity
                                      # search runs once), see gate/repeats.py
    server: {cmd: "vllm serve M --port {port}", env: {K: V}, health: /health, ready_timeout: 600}
                                      # optional: the server this test runs against, started by
                                      # the plugin on a free port and shared by the tests that
                                      # declare an equal one (plugin/servers.py)
    description: free text            # optional, shown nowhere but read by people

Everything is checked before anything is sent; a problem is one :class:`LLMReplayError` naming
the key (the caller adds the file). YAML is read with ``yaml``'s safe loader (a key given twice
in one mapping is an error naming its line: ``formats._yaml``) and TOML with ``tomllib``: no code runs.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import LLMReplayError, WorkloadError
from ..json_text import beyond_syntax, too_deep
from ..replayer.plan import ReplaySettings
from .servers import ServerConfig, parse_server

SETTING_TYPES = {
    f.name: (
        "number"
        if "float" in str(f.type)
        else "integer"
        if "int" in str(f.type)
        else "boolean"
        if "bool" in str(f.type)
        else "string"
    )
    for f in fields(ReplaySettings)
}
SPEC_KEYS = (
    "workload",
    "format",
    "format_options",
    "slo",
    "regression",
    "repeat",
    "description",
    "capacity",
    "server",
)
SPEC_SUFFIXES = (".llmreplay.yaml", ".llmreplay.yml", ".llmreplay.toml")


@dataclass
class PerfSpec:
    """A checked spec: the workload's resolved path and options, replay settings, SLOs, tolerances."""

    workload: Path
    format: str | None = None
    format_options: dict[str, Any] = field(default_factory=dict)
    settings: ReplaySettings = field(default_factory=ReplaySettings)
    slo: dict[str, str] = field(default_factory=dict)
    regression: dict[str, Any] = field(default_factory=dict)
    capacity: Any = None  # a search.CapacityPlan, or None: one replay
    repeat: int | None = None  # None: the session's --llm-repeat
    server: ServerConfig | None = None  # None: the session's endpoint


def _typed(key: str, value: Any) -> Any:
    kind = SETTING_TYPES[key]
    ok = {
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "string": isinstance(value, str),
    }[kind]
    if not ok and value is not None:
        raise LLMReplayError(f"{key}: expected {'an' if kind == 'integer' else 'a'} {kind}, got {value!r}")
    return value


MERGED_KEYS = ("slo", "regression")  # per metric, across a test's markers (marker_arguments)


def marker_arguments(node: Any) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The arguments of the ``llmreplay`` markers on the test ``node`` and around it (its
    class's, its module's ``pytestmark``) as one marker's: a nearer marker's setting wins, key by
    key (a module's ``server=`` and a test's ``workload=`` make one test's settings; a test's own
    ``server=`` replaces its module's); the mappings of :data:`MERGED_KEYS` merge, a nearer
    marker's metric winning (a module's ``slo={"error_rate": "== 0"}`` and a test's
    ``slo={"ttft.p99": "< 1s"}`` check both; ``"off"`` drops one); None when there is none."""
    markers = list(node.iter_markers("llmreplay"))  # the nearest first
    if not markers:
        return None
    kwargs: dict[str, Any] = {}
    for marker in reversed(markers):
        for key, value in marker.kwargs.items():
            farther = kwargs.get(key)
            if key in MERGED_KEYS and isinstance(farther, Mapping) and isinstance(value, Mapping):
                value = {**farther, **value}
            kwargs[key] = value
    return tuple(arg for marker in markers for arg in marker.args), kwargs


def marker_settings(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of an ``@pytest.mark.llmreplay(...)``: every one by name, ``workload=``
    among them, and ``server=`` checked if given (the rest is checked by :func:`parse_spec`
    when the test runs)."""
    if args:
        raise LLMReplayError("@pytest.mark.llmreplay: give every setting by name (workload=..., slo=...)")
    if "workload" not in kwargs:
        raise LLMReplayError(
            "@pytest.mark.llmreplay: missing key workload= (the workload file to replay, relative to the rootdir)"
        )
    if "server" in kwargs:
        parse_server(kwargs["server"])
    return dict(kwargs)


def parse_spec(data: Any, base: Path, extra_metrics: tuple[str, ...] = ()) -> PerfSpec:
    """A :class:`PerfSpec` from a mapping; relative workload paths start at ``base``."""
    from ..gate.baseline import tolerances
    from ..metrics.slo import parse_slos

    if data is None:  # an empty file
        raise LLMReplayError("empty: expected a mapping of keys, at least workload (and slo, ...)")
    if not isinstance(data, Mapping):
        raise LLMReplayError(f"expected a mapping of keys (workload, slo, ...), got {type(data).__name__}")
    unknown = [key for key in data if key not in SPEC_KEYS and key not in SETTING_TYPES]
    if unknown:
        raise LLMReplayError(
            f"{unknown[0]}: unknown key; expected one of {', '.join(SPEC_KEYS + tuple(SETTING_TYPES))}"
        )
    workload = data.get("workload")
    if not isinstance(workload, (str, Path)) or not str(workload):
        raise LLMReplayError(f"workload: expected the path of a workload file, got {workload!r}")
    path = Path(workload) if Path(workload).is_absolute() else base / workload
    if not path.exists():
        raise LLMReplayError(f"workload: {path}: no such file or directory")
    for key in ("format", "description"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise LLMReplayError(f"{key}: expected a string, got {data[key]!r}")
    for key in ("format_options", "slo", "regression"):
        if data.get(key) is not None and not isinstance(data[key], Mapping):
            raise LLMReplayError(f"{key}: expected a mapping, got {data[key]!r}")
    if "slo" in data and not data["slo"]:  # `slo:` with nothing under it: a test that checks nothing, by mistake
        raise LLMReplayError(
            'slo: empty; give at least one (ttft.p99: "< 1s"), indented under it, or leave the key out'
        )
    _check_format(data.get("format"), dict(data.get("format_options") or {}), path)
    repeat = data.get("repeat")
    if repeat is not None:
        repeat = check_repeat("repeat", repeat)
    settings = ReplaySettings(**{key: _typed(key, value) for key, value in data.items() if key in SETTING_TYPES})
    settings.validate()
    capacity = None
    if data.get("capacity") is not None:
        from ..search.capacity import VARIED_SETTINGS, parse_capacity

        capacity = parse_capacity(data["capacity"])
        varied = [key for key in VARIED_SETTINGS if key in data]
        if varied:
            raise LLMReplayError(f"{varied[0]}: the capacity search sets it at each point; leave it out")
        if repeat is not None:
            raise LLMReplayError("repeat: a capacity search runs once (its points are replays already); leave it out")
    slo = dict(data.get("slo") or {})
    from ..search.capacity import check_test_slos

    check_test_slos(parse_slos(slo, extra_metrics), capacity)
    regression = dict(data.get("regression") or {})
    tolerances(regression)
    server = parse_server(data["server"]) if data.get("server") is not None else None
    return PerfSpec(
        path,
        data.get("format"),
        dict(data.get("format_options") or {}),
        settings,
        slo,
        regression,
        capacity,
        repeat,
        server,
    )


def _check_format(name: str | None, options: dict[str, Any], workload: Path) -> None:
    """A named format must exist and take ``options``; without a name, options are checked
    against the detected format (its first line is read), else nothing is read here."""
    from ..workloads.formats import check_format_options, detect_format, format_module

    if name is None and not options:
        return
    try:
        module = format_module(name if name is not None else detect_format(workload))
    except LLMReplayError as exc:
        raise LLMReplayError(f"{'format' if name is not None else 'workload'}: {exc}") from None
    try:
        check_format_options(module, options)
    except LLMReplayError as exc:
        raise LLMReplayError(f"format_options: {exc}") from None


MAX_REPEAT = 1000


def check_repeat(name: str, value: Any) -> int:
    """``value`` as a number of runs (1 to :data:`MAX_REPEAT`); LLMReplayError naming ``name``."""
    if (
        isinstance(value, str) and value.strip().lstrip("+-").isdigit()
    ):  # an integer however given, so "-2" reads as -2, as 0 does
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_REPEAT:
        raise LLMReplayError(f"{name}: expected a number of runs from 1 to {MAX_REPEAT}, got {value!r}")
    return value


def read_spec_file(path: Path) -> Any:
    """The mapping in a ``.llmreplay.yaml``/``.yml`` (safe YAML) or ``.llmreplay.toml`` file; a
    byte that is not UTF-8 is an error at its line and column, as in workload files, and so is
    text that is not YAML (:func:`~pytest_llmreplay.workloads.formats._yaml.load_yaml`), in one line."""
    from ..workloads.formats._text import read_text

    try:
        text = read_text(path, expected="UTF-8 YAML or TOML")
    except WorkloadError as exc:
        raise LLMReplayError(f"line {exc.line}: {exc.reason}") from None
    except OSError as exc:
        raise LLMReplayError(f"cannot read: {exc}") from None
    if path.name.endswith(".toml"):
        if sys.version_info < (3, 11):  # no tomllib
            raise LLMReplayError("TOML spec files need Python >= 3.11 (tomllib); use .llmreplay.yaml")
        else:  # an else, not code after the raise: mypy's 3.10 pass skips it (no tomllib there)
            import tomllib

            try:
                return tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise LLMReplayError(f"not valid TOML: {exc}{toml_line_shown(str(exc), text)}") from None
            except RecursionError:
                raise LLMReplayError(f"not valid TOML: {too_deep()}") from None
            except ValueError as exc:  # past its syntax: an integer of more than 4,300 digits
                raise LLMReplayError(f"not valid TOML: {beyond_syntax(exc)}") from None
    from ..workloads.formats._yaml import YamlProblem, load_yaml

    try:
        return load_yaml(text)
    except YamlProblem as exc:
        column = f", column {exc.column}" if exc.column is not None else ""
        where = f"line {exc.line}{column}: " if exc.line is not None else ""
        raise LLMReplayError(f"{where}not valid YAML: {exc.reason}{unquoted_greater(text, exc.line)}") from None


def unquoted_greater(text: str, line: int | None) -> str:
    """What to write when YAML failed at a line where a value starts with ``>`` (``goodput: >=
    90%``: YAML reads ``>`` as the start of folded text and says ``expected chomping or
    indentation indicators``; in ``{...}``, ``'>' that cannot start any token``): quote it, as
    ``<`` needs not be; else nothing."""
    lines = text.splitlines()
    found = (
        re.search(r"([A-Za-z_][\w.]*)\s*:\s+(>[^,}#]*?)\s*(?:[,}#]|$)", lines[line - 1])
        if line and line <= len(lines)
        else None
    )
    if found is None:
        return ""
    key, threshold = found.groups()
    return f"; a threshold that starts with '>' is quoted in YAML: {key}: \"{threshold}\""


def toml_line_shown(message: str, text: str) -> str:
    """``: `LINE` `` for the line a tomllib message points at (``(at line N, column M)``; its error
    names no key, so a key given twice reads ``Cannot overwrite a value``), else nothing."""
    found = re.search(r"\(at line (\d+), column \d+\)", message)
    lines = text.splitlines()
    if found is None or not 1 <= int(found.group(1)) <= len(lines):
        return ""
    return f": `{lines[int(found.group(1)) - 1].strip()[:120]}`"
