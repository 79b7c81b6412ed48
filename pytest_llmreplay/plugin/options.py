"""The plugin's options and their ini twins: the table (:data:`OPTIONS`), their registration,
reading one (the command line beats the ini file, which beats the default) and the start-up
checks that turn a bad value into one ``pytest.UsageError`` naming the option and its ini key.

Each option has an ini key of the same name with ``_`` for ``-`` (``--llm-seed`` / ``llm_seed``).
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

from ..errors import LLMReplayError

# flag, ini key (= dest), ini type, default, help
OPTIONS = (
    (
        "--llm-endpoint",
        "llm_endpoint",
        "string",
        None,
        "URL of a live OpenAI-compatible server (absent: the built-in simulator)",
    ),
    (
        "--llm-model",
        "llm_model",
        "string",
        None,
        "model name to send, replacing a verbatim payload's (default: the payload's, else the first of /v1/models)",
    ),
    (
        "--llm-api",
        "llm_api",
        "string",
        "chat",
        "API to call: chat (/v1/chat/completions), completions (/v1/completions), responses (/v1/responses) or messages (/v1/messages); default chat",
    ),
    ("--llm-api-key-env", "llm_api_key_env", "string", None, "name of the environment variable holding the API key"),
    (
        "--llm-ignore-eos",
        "llm_ignore_eos",
        "bool",
        False,
        "send ignore_eos: true, so outputs are exactly as long as the workload plans (vLLM, SGLang, llama.cpp, the simulator)",
    ),
    (
        "--llm-extra-body",
        "llm_extra_body",
        "string",
        None,
        "JSON object merged into every request body, e.g. '{\"min_tokens\": 16}'",
    ),
    (
        "--llm-server-cmd",
        "llm_server_cmd",
        "string",
        None,
        "command that starts the server at --llm-endpoint for the session (stopped at the end)",
    ),
    (
        "--llm-server-timeout",
        "llm_server_timeout",
        "string",
        "600",
        "seconds --llm-server-cmd's server may take to become healthy (default 600)",
    ),
    (
        "--llm-max-servers",
        "llm_max_servers",
        "string",
        "1",
        "servers declared by tests (server: {cmd: ...}) running at once; the least recently used is stopped before another starts (default 1)",
    ),
    (
        "--llm-metrics-interval",
        "llm_metrics_interval",
        "string",
        "1",
        "scrape the server's Prometheus /metrics every S seconds during each replay over HTTP, for the server.* figures (default 1; 0: off)",
    ),
    (
        "--llm-sim-profile",
        "llm_sim_profile",
        "string",
        "llama-3.1-8b-h100",
        "simulator profile: a bundled name or a profile JSON file (default llama-3.1-8b-h100)",
    ),
    (
        "--llm-offline",
        "llm_offline",
        "bool",
        True,
        "run the built-in simulator in process, in virtual time (deterministic, no sockets; the default without --llm-endpoint: -o llm_offline=false serves it over HTTP in wall time instead)",
    ),
    (
        "--llm-tokenizer",
        "llm_tokenizer",
        "string",
        None,
        "tokenizer for generated prompts: a hub id (from the local Hugging Face cache when it is there), a local folder or a tokenizer.json (default: the bundled one)",
    ),
    (
        "--llm-seed",
        "llm_seed",
        "string",
        "0",
        "seed of generated prompt tokens and of the simulator's outputs and timing jitter (default 0)",
    ),
    (
        "--llm-baseline-dir",
        "llm_baseline_dir",
        "string",
        ".llmreplay",
        "where results are stored per commit: a folder relative to the rootdir (default .llmreplay), git:REMOTE#REF, or a URL (s3://BUCKET/PREFIX, gs://, az://, file://)",
    ),
    ("--llm-save", "llm_save", "bool", False, "store each perf test's result as a baseline of the current commit"),
    (
        "--llm-compare",
        "llm_compare",
        "string",
        None,
        "compare with the stored result of REF (a commit, tag or branch; bare: the merge-base with the default branch)",
    ),
    (
        "--llm-fail-on-regression",
        "llm_fail_on_regression",
        "bool",
        False,
        "with --llm-compare: fail a test when the comparison calls a regression (without it, warned of: nothing is compared)",
    ),
    (
        "--llm-fail-on-unstable",
        "llm_fail_on_unstable",
        "bool",
        False,
        "with --llm-compare: fail a test when its comparison is unstable: the runs of a side disagree too much (over 3x on a time figure) for any verdict",
    ),
    ("--llm-report", "llm_report", "string", None, "write JSON, CSV, Markdown and HTML reports to DIR"),
    (
        "--llm-summary-md",
        "llm_summary_md",
        "string",
        None,
        "write the Markdown summary (per test: verdict, SLO margins, regressions, server) to PATH; on GitHub Actions it is also appended to $GITHUB_STEP_SUMMARY",
    ),
    (
        "--llm-repeat",
        "llm_repeat",
        "string",
        "5",
        "replay each perf test N times (fresh simulator or a reset server cache each time) and compare runs, then requests (default 5)",
    ),
    (
        "--llm-cache-reset",
        "llm_cache_reset",
        "string",
        "auto",
        "auto: empty a server's prefix cache before each repeat and capacity point (vLLM, SGLang, llama.cpp); off: never, each run may hit the cache the previous one warmed (default auto)",
    ),
    (
        "--llm-workers",
        "llm_workers",
        "string",
        None,
        "replay in N worker processes on Ray (pip install 'pytest-llmreplay[ray]'): a local Ray instance, or the cluster at --llm-ray-address",
    ),
    (
        "--llm-ray-address",
        "llm_ray_address",
        "string",
        None,
        "address of an existing Ray cluster for --llm-workers (default: RAY_ADDRESS, else a local instance)",
    ),
)
METAVARS = {
    "--llm-endpoint": "URL",
    "--llm-extra-body": "JSON",
    "--llm-model": "NAME",
    "--llm-api": "chat|completions|responses|messages",
    "--llm-api-key-env": "NAME",
    "--llm-server-cmd": "CMD",
    "--llm-server-timeout": "S",
    "--llm-max-servers": "N",
    "--llm-metrics-interval": "S",
    "--llm-sim-profile": "NAME|FILE",
    "--llm-tokenizer": "NAME|PATH",
    "--llm-seed": "N",
    "--llm-baseline-dir": "STORE",
    "--llm-report": "DIR",
    "--llm-summary-md": "PATH",
    "--llm-repeat": "N",
    "--llm-cache-reset": "auto|off",
    "--llm-workers": "N",
    "--llm-ray-address": "ADDR",
}

DEFAULTS = {ini: default for _, ini, _, default, _ in OPTIONS}  # ini key -> its default


def add_options(parser: pytest.Parser) -> None:
    """Register every option of :data:`OPTIONS` in the ``llmreplay`` group, with its ini twin."""
    group = parser.getgroup("llmreplay", "LLM serving performance tests (pytest-llmreplay)")
    for flag, ini, kind, default, help_text in OPTIONS:
        if kind == "bool":
            group.addoption(flag, dest=ini, action="store_true", default=None, help=help_text)
        elif flag == "--llm-compare":
            group.addoption(flag, dest=ini, nargs="?", const="auto", default=None, metavar="REF", help=help_text)
        else:
            group.addoption(flag, dest=ini, default=None, metavar=METAVARS.get(flag), help=help_text)
        ini_type: Literal["bool", "string"] = "bool" if kind == "bool" else "string"
        parser.addini(ini, help=help_text, type=ini_type, default=default)


def option(config: pytest.Config, name: str) -> Any:
    """The command-line value of an option, else its ini twin (else the ini default)."""
    value = config.getoption(name)
    return value if value is not None else config.getini(name)


def seed_option(config: pytest.Config) -> int:
    """``--llm-seed``: an integer >= 0, as ``llmreplay run --seed`` and a test's ``seed`` take."""
    raw = option(config, "llm_seed")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = -1
    if value < 0:
        raise pytest.UsageError(f"--llm-seed / llm_seed: expected an integer >= 0, got {raw!r}")
    return value


def server_timeout_option(config: pytest.Config) -> float:
    raw = option(config, "llm_server_timeout")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise pytest.UsageError(
            f"--llm-server-timeout / llm_server_timeout: expected a number of seconds > 0, got {raw!r}"
        )
    return value


def max_servers_option(config: pytest.Config) -> int:
    """``--llm-max-servers``: an integer >= 1."""
    raw = option(config, "llm_max_servers")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value < 1:
        raise pytest.UsageError(f"--llm-max-servers / llm_max_servers: expected an integer >= 1, got {raw!r}")
    return value


def metrics_interval_option(config: pytest.Config) -> float:
    """``--llm-metrics-interval``: seconds >= 0 between scrapes of the server's /metrics (0: off)."""
    raw = option(config, "llm_metrics_interval")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise pytest.UsageError(
            f"--llm-metrics-interval / llm_metrics_interval: expected a number of seconds >= 0 (0: off), got {raw!r}"
        )
    return value


def cache_reset_option(config: pytest.Config) -> bool:
    """``--llm-cache-reset``: ``auto`` (True: reset a server's prefix cache before each run) or ``off``."""
    raw = option(config, "llm_cache_reset")
    if raw not in ("auto", "off"):
        raise pytest.UsageError(f"--llm-cache-reset / llm_cache_reset: expected auto or off, got {raw!r}")
    return raw == "auto"


def check_bool_options(config: pytest.Config) -> None:
    """Read every true/false ini key now, so a bad value stops the session before anything is
    measured, with the key named (pytest checks it only when read, and does not name it)."""
    for flag, ini, kind, _, _ in OPTIONS:
        if kind == "bool":
            try:
                option(config, ini)
            except (ValueError, pytest.UsageError) as exc:
                raise pytest.UsageError(
                    f"{flag} / {ini}: expected true or false (also yes/no, on/off, 1/0): {exc}"
                ) from None


def workers_option(config: pytest.Config, kind: str) -> int | None:
    """``--llm-workers`` checked at start-up: None (one process), else N >= 1, on a target that
    can take them, with Ray installed."""
    raw, address = option(config, "llm_workers"), option(config, "llm_ray_address")
    if raw in (None, ""):
        if address:
            raise pytest.UsageError(
                "--llm-ray-address / llm_ray_address: needs --llm-workers N, the number of workers to run on the cluster"
            )
        return None
    try:
        count = int(raw)
    except (TypeError, ValueError):
        count = 0
    if count < 1:
        raise pytest.UsageError(f"--llm-workers / llm_workers: expected an integer >= 1, got {raw!r}")
    if kind == "offline":
        raise pytest.UsageError(
            "--llm-workers / llm_workers: the offline simulator runs in virtual time, which cannot be shared across processes; "
            "drop --llm-offline (the simulator served over HTTP takes workers) or the workers"
        )
    from ..replayer.workers import import_ray

    try:
        import_ray()
    except LLMReplayError as exc:
        raise pytest.UsageError(f"--llm-workers / llm_workers: {exc}") from None
    return count
