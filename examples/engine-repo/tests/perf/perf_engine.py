"""The engine this suite measures: the table of engines.toml (or of the file ``PERF_ENGINES``
names) that ``PERF_ENGINE`` picks, default ``vllm``.

``server(config)`` is the ``server`` the tests declare: the table's ``serve`` command followed by
the config's engine arguments, with its ``env``. ``requests()`` and ``rate()`` are the table's
request count and fixed rate, and ``workload(name)`` the path of ``workloads/NAME.yaml``. A
missing file or table, a missing or bad field, or an unknown one (a typo) is a
``pytest.UsageError`` naming the file, the table and the field, raised when conftest.py calls
:func:`check` at start-up; a config no table entry has is an error of the test module naming it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
import tomllib

HERE = Path(__file__).resolve().parent
ENGINES_FILE = Path(os.environ.get("PERF_ENGINES") or HERE / "engines.toml")
ENGINE = os.environ.get("PERF_ENGINE") or "vllm"


# each field of an engine's table: whether a value is good, and what is expected (env is optional)
FIELDS = {
    "serve": (lambda v: isinstance(v, str) and "{port}" in v, "a command line with {port}"),
    "env": (lambda v: isinstance(v, dict), "a table of variable names to strings"),
    "requests": (lambda v: type(v) is int and v >= 1, "an integer >= 1"),
    "rate": (lambda v: type(v) in (int, float) and v > 0, "a number of requests/s > 0"),
    "configs": (lambda v: isinstance(v, dict), "a table of engine arguments per config name"),
}


@functools.cache
def _table() -> dict[str, Any]:
    """PERF_ENGINE's table, its fields checked."""
    try:
        engines = tomllib.loads(ENGINES_FILE.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise pytest.UsageError(f"PERF_ENGINES={ENGINES_FILE}: cannot read it ({exc})") from None
    if ENGINE not in engines:
        raise pytest.UsageError(f"PERF_ENGINE={ENGINE}: {ENGINES_FILE} has no [{ENGINE}]; it has {', '.join(engines)}")
    table = engines[ENGINE]
    if not isinstance(table, dict):
        raise pytest.UsageError(f"{ENGINES_FILE}: {ENGINE}: expected a table [{ENGINE}] with serve, got {table!r}")
    unknown = [name for name in table if name not in FIELDS]
    if unknown:
        raise pytest.UsageError(
            f"{ENGINES_FILE}: [{ENGINE}] {unknown[0]}: unknown field; expected one of {', '.join(FIELDS)}"
        )
    for name, (ok, expected) in FIELDS.items():
        if (name in table or name != "env") and not ok(table.get(name)):
            raise pytest.UsageError(f"{ENGINES_FILE}: [{ENGINE}] {name}: expected {expected}, got {table.get(name)!r}")
    for part in ("env", "configs"):
        for key, value in table.get(part, {}).items():
            if not isinstance(value, str):
                raise pytest.UsageError(
                    f"{ENGINES_FILE}: [{ENGINE}.{part}] {key}: expected a string (quote it), got {value!r}"
                )
    return table


def check() -> None:
    """Raise the UsageError that :func:`_table` raises, before any test is collected."""
    _table()


def server(config: str) -> dict[str, Any]:
    """The declared server of ``config``: ``serve``, then the config's engine arguments."""
    table = _table()
    if config not in table["configs"]:
        names = ", ".join(table["configs"]) or "none"
        pytest.fail(f"{ENGINES_FILE}: [{ENGINE}.configs] has no {config!r} (it has {names})", pytrace=False)
    cmd = f"{table['serve']} {table['configs'][config]}".strip()
    return {"cmd": cmd, "env": dict(table.get("env", {})), "ready_timeout": 900}


def requests() -> int:
    """Requests each test replays (the table's ``requests``)."""
    return int(_table()["requests"])


def rate() -> float:
    """Requests/s of the fixed-rate TTFT test (the table's ``rate``)."""
    return float(_table()["rate"])


def workload(name: str) -> str:
    """The path of ``workloads/NAME.yaml`` (absolute, so the suite runs from any rootdir)."""
    return str(HERE / "workloads" / f"{name}.yaml")
