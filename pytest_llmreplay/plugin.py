"""The pytest plugin: options with ini twins, fixtures, and the report header.

Imports nothing heavy at load time (formats, numpy and tokenizers are imported by the fixtures
that need them), so pytest runs that do not use the plugin pay nothing for it.

Options (group ``llmreplay``; each has an ini key of the same name with ``_`` for ``-``):

- ``--llm-tokenizer NAME|PATH``: tokenizer for generated prompts (default: the bundled one);
- ``--llm-seed N``: seed of generated prompts (default 0).

Fixtures: ``llm_tokenizer`` (session), ``llm_prompts`` (a :class:`PromptFactory`, session),
``llm_workload`` (a callable: ``llm_workload("workloads/x.jsonl", format=None, **options)``
loads a workload relative to the rootdir, validated, cached per session).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from .errors import LLMReplayError

OPTIONS = (
    ("--llm-tokenizer", "llm_tokenizer", "tokenizer for generated prompts: a hub id, a local folder or a tokenizer.json (default: the bundled one)", None),
    ("--llm-seed", "llm_seed", "seed of generated prompt tokens (default: 0)", "0"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmreplay", "LLM serving performance tests (pytest-llmreplay)")
    for flag, ini, help_text, default in OPTIONS:
        group.addoption(flag, dest=ini, default=None, help=help_text)
        parser.addini(ini, help=help_text, default=default)


def option(config: pytest.Config, name: str) -> Any:
    """The command-line value of an option, else its ini twin (else the ini default)."""
    value = config.getoption(name)
    return value if value is not None else config.getini(name)


def seed_option(config: pytest.Config) -> int:
    raw = option(config, "llm_seed")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"--llm-seed / llm_seed: expected an integer, got {raw!r}") from None


def pytest_report_header(config: pytest.Config) -> str:
    tokenizer = option(config, "llm_tokenizer") or "bundled (llmreplay-bpe-4k)"
    return f"llmreplay: tokenizer {tokenizer}, seed {seed_option(config)}"


@pytest.fixture(scope="session")
def llm_tokenizer(pytestconfig: pytest.Config):
    """The tokenizer of ``--llm-tokenizer`` (the bundled one by default), loaded once."""
    from .tokenizer import load_tokenizer

    try:
        return load_tokenizer(option(pytestconfig, "llm_tokenizer"))
    except LLMReplayError as exc:
        pytest.fail(f"--llm-tokenizer: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def llm_prompts(llm_tokenizer, pytestconfig: pytest.Config):
    """A :class:`~pytest_llmreplay.prompts.PromptFactory` for the session's tokenizer and seed."""
    from .prompts import PromptFactory

    return PromptFactory(llm_tokenizer, seed=seed_option(pytestconfig))


@pytest.fixture(scope="session")
def llm_workload(pytestconfig: pytest.Config) -> Callable[..., Any]:
    """``llm_workload(path, format=None, **options) -> Workload``; relative paths start at the
    rootdir; a bad file fails the test with one line naming file, line and field."""
    from .formats import load_workload

    cache: dict[tuple, Any] = {}

    def load(path: str | Path, format: str | None = None, **options: Any):
        resolved = Path(path) if Path(path).is_absolute() else pytestconfig.rootpath / path
        key = (str(resolved), format, tuple(sorted(options.items())))
        if key not in cache:
            try:
                cache[key] = load_workload(resolved, format=format, **options)
            except LLMReplayError as exc:
                pytest.fail(str(exc), pytrace=False)
        return cache[key]

    return load
