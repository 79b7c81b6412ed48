"""The docs site (mkdocs.yml, docs/) builds with ``mkdocs build --strict``: a broken link or
anchor, a missing page or a generator that fails is an error (marker ``docs``). The generated
references hold every option of the code, and the metrics page the formulas of the docstrings.
Without building: every ``llmreplay`` command shown in README.md and docs/ parses with the real
parser, and every ``--llm-*`` option named there exists."""

from __future__ import annotations

import argparse
import html
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_llmreplay.cli.main import build_parser
from pytest_llmreplay.plugin.options import OPTIONS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CODE_BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def build_site(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """``mkdocs build --strict`` of the repository's site into ``tmp_path``, from the repository
    root (the snippets, bench/README.md and the CI workflow, are read relative to it)."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice on every build
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, site


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.docs
def test_the_site_builds_strict_with_every_option_and_formula(tmp_path):
    done, site = build_site(tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    cli = html.unescape((site / "reference" / "cli" / "index.html").read_text())
    for name, command in subcommands().items():
        assert f"llmreplay {name}" in cli
        for action in command._actions:
            for flag in action.option_strings:
                assert flag in cli or flag in ("-h", "--help"), (name, flag)
    options = html.unescape((site / "reference" / "pytest-options" / "index.html").read_text())
    for flag, ini, *_ in OPTIONS:
        assert flag in options and ini in options, flag
    metrics = html.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / "metrics" / "index.html").read_text()))
    assert "tpot = (latency - ttft) / (output_tokens - 1)" in metrics  # result.py's docstring, rendered
    assert ":func:" not in metrics and ":data:" not in metrics  # Sphinx roles became code (or links)


def shown_commands(text: str, program: str) -> list[str]:
    """The command lines of ``program`` in ``text``'s fenced code blocks (backslash continuations
    joined, comments and a trailing ``&`` dropped)."""
    found = []
    for block in CODE_BLOCK.findall(text):
        for line in re.sub(r"\\\n", " ", block).splitlines():
            words = re.sub(r"(^|\s)#.*", "", line).split()
            if words and words[-1] == "&":
                words.pop()
            if words and Path(words[0]).name == program:
                found.append(" ".join(words))
    return found


def test_every_llmreplay_command_shown_parses(capsys):
    lines = [(page.name, line) for page in PAGES for line in shown_commands(page.read_text(), "llmreplay")]
    assert len(lines) > 10, "no llmreplay commands found: the code blocks are not read"
    failed = []
    for page, line in lines:
        try:
            build_parser().parse_args(shlex.split(line)[1:])
        except SystemExit:
            failed.append(f"{page}: {line}")
    capsys.readouterr()
    assert failed == []


def test_every_llm_option_named_exists():
    known = {flag for flag, *_ in OPTIONS}
    named = {(page.name, flag) for page in PAGES for flag in re.findall(r"--llm-[a-z-]*[a-z]", page.read_text())}
    assert {(page, flag) for page, flag in named if flag not in known} == set()


def test_the_readmes_first_perf_test_prints_what_the_readme_shows(pytester):
    """The quick start's ``test_first.py``, run as the README says (the simulator is
    deterministic): its summary row and its SLO margin are the README's, so a simulator change
    that moves them makes the README say so."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("Save this as `test_first.py`") :]
    source, output = CODE_BLOCK.findall(section)[:2]
    shown_row = next(line for line in output.splitlines() if line.startswith("test_first.py::test_chat "))
    pytester.makepyfile(test_first=source)
    (pytester.path / "workloads").mkdir()
    (pytester.path / "workloads" / "synthetic_chat.yaml").write_bytes(
        (ROOT / "workloads" / "synthetic_chat.yaml").read_bytes()
    )
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert shown_row.split() in [line.split() for line in result.outlines], result.stdout.str()
    margin = re.search(r"`ttft\.p99 < 500ms`\s+measured ([\d.,]+ ms), ([+-][\d.,]+ ms)\)", readme)
    assert margin is not None, "the README no longer quotes the ttft.p99 margin"
    measured, headroom = margin.groups()
    assert any(
        re.search(rf"ttft\.p99\s+< 500ms\s+{re.escape(measured)}\s+{re.escape(headroom)} ", line)
        for line in result.outlines
    ), result.stdout.str()
