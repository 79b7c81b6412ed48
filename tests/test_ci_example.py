"""The example CI workflow (examples/ci/github-actions.yml) is not a stale example: every
``pytest``/``llmreplay`` command line of its ``run:`` steps, and every ``PYTEST_ADDOPTS`` it sets
or shows in a comment, parses with the plugin's and the CLI's real parsers; the README's "In CI"
section shows the very same command lines; and the save-then-compare commands work for real: CI
jobs (fresh clones of one bare repository) on the offline simulator, the push to main saving,
the dashboard job building the results site from what it saved, the pull request comparing with
it, all through the git store."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
import yaml
from test_plugin_baselines import git, no_traceback

from pytest_llmreplay.cli.main import build_parser
from pytest_llmreplay.cli.main import main as llmreplay
from pytest_llmreplay.plugin.options import OPTIONS

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
README = ROOT / "README.md"
COMMANDS = ("pytest", "llmreplay")
ADDOPTS = re.compile(r"^\s*(?:#\s*)?PYTEST_ADDOPTS:\s*(\S.*)$", re.MULTILINE)


def command_lines(script: str) -> list[str]:
    """The lines of a shell script whose first word is ``pytest`` or ``llmreplay``: backslash
    continuations joined, a ``# comment`` dropped (as bash does, from a ``#`` that starts a word;
    quotes are not looked at), whitespace normalised."""
    found = []
    for line in re.sub(r"\\\n", " ", script).splitlines():
        words = re.sub(r"(^|\s)#.*", "", line).split()
        if words and words[0] in COMMANDS:
            found.append(" ".join(words))
    return found


def workflow_commands(text: str) -> list[str]:
    """Every pytest/llmreplay command line in the ``run:`` steps of a GitHub Actions workflow."""
    workflow = yaml.safe_load(text)
    return [
        line
        for job in workflow["jobs"].values()
        for step in job.get("steps", [])
        if "run" in step
        for line in command_lines(step["run"])
    ]


def workflow_addopts(text: str) -> list[str]:
    """Each ``PYTEST_ADDOPTS`` value the workflow sets or shows in a comment."""
    return [value.strip() for value in ADDOPTS.findall(text)]


def readme_section(text: str, title: str) -> str:
    """The README section headed ``title`` (any level), up to the next heading of its level or above."""
    match = re.search(rf"^(#+) {re.escape(title)}\n", text, re.MULTILINE)
    assert match, f"README.md has no section {title!r}"
    level = len(match.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[match.end() :], re.MULTILINE)
    return text[match.end() : match.end() + end.start() if end else len(text)]


def option_problem(pytester: pytest.Pytester, line: str) -> str | None:
    """None when ``line``'s options parse with the real parser (the plugin's pytest options, or
    ``llmreplay``'s argparse), else the parser's complaint."""
    words = shlex.split(line)
    if words[0] == "llmreplay":
        try:
            build_parser().parse_args(words[1:])
        except SystemExit:
            return f"llmreplay cannot parse {line!r}"
        return None
    try:
        pytester.parseconfig(*words[1:])
    except pytest.UsageError as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------------ the checks themselves


STALE = """
jobs:
  perf:
    steps:
      - run: pip install -e .
      - run: |
          pytest tests/perf --llm-baselines=git:origin#refs/x \\
            --llm-save   # a comment
          llmreplay compare --store git:origin#refs/x --tset t a b
"""


def test_the_checks_find_every_command_and_a_stale_option(pytester):
    lines = workflow_commands(STALE)
    assert lines == [
        "pytest tests/perf --llm-baselines=git:origin#refs/x --llm-save",
        "llmreplay compare --store git:origin#refs/x --tset t a b",
    ]
    assert "--llm-baselines" in option_problem(pytester, lines[0])
    assert option_problem(pytester, lines[1]) is not None
    assert option_problem(pytester, lines[0].replace("--llm-baselines", "--llm-baseline-dir")) is None
    assert option_problem(pytester, lines[1].replace("--tset", "--test")) is None


def test_every_option_of_the_workflow_exists(pytester):
    text = WORKFLOW.read_text()
    lines = workflow_commands(text)
    assert len(lines) >= 2, "the workflow runs no perf tests"
    addopts = workflow_addopts(text)
    assert len(addopts) >= 2, "the workflow names no target (PYTEST_ADDOPTS), live or commented"
    for line in [*lines, *(f"pytest {value}" for value in addopts)]:
        assert option_problem(pytester, line) is None, line


def test_the_readme_shows_the_workflows_commands():
    text = WORKFLOW.read_text()
    section = readme_section(README.read_text(), "In CI")
    assert "examples/ci/github-actions.yml" in section
    shown = [line for block in re.findall(r"```\w*\n(.*?)```", section, re.DOTALL) for line in command_lines(block)]
    assert shown == workflow_commands(text)
    live_addopts = yaml.safe_load(text)["jobs"]["perf"]["env"]["PYTEST_ADDOPTS"]
    assert f"PYTEST_ADDOPTS={live_addopts}" in " ".join(section.split())
    named = set(re.findall(r"--llm-[a-z-]+", section))  # in the prose too (the live-server variant)
    assert named <= {flag for flag, *_ in OPTIONS}, named - {flag for flag, *_ in OPTIONS}


# ------------------------------------------------------------------------ end to end


def job_command(line: str, program: str = "pytest") -> list[str]:
    """A workflow command line as the runner's bash would pass it to ``program``: words split,
    ``$VARIABLES`` expanded, the leading ``program`` dropped."""
    words = [os.path.expandvars(word) for word in shlex.split(line)]
    assert words[0] == program
    return words[1:]


def publish_the_dashboard(job, line: str, saved: str, monkeypatch, capsys) -> None:
    """The dashboard job after the save: a fresh checkout builds the site from the git store, each
    point linking to its commit on the forge."""
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "org/perf")
    pages = job("dashboard")
    monkeypatch.chdir(pages)
    capsys.readouterr()
    assert llmreplay(job_command(line, "llmreplay")) == 0, capsys.readouterr().err
    assert "1 test (0 moved recently), 1 result (1 read from the store" in capsys.readouterr().out
    index = (pages / "dashboard" / "index.html").read_text()
    assert (
        ">tests/perf/test_perf.py::test_chat</a>" in index
        and (pages / "dashboard" / "assets" / "plotly.min.js").is_file()
    )
    page = next((pages / "dashboard" / "tests").iterdir()).read_text()
    assert '"commitUrl":"https://github.com/org/perf/commit/{commit}"' in page and saved in page


def test_the_workflow_saves_on_main_and_gates_a_pull_request(ci, project, monkeypatch, tmp_path, capsys):
    text = WORKFLOW.read_text()
    save, compare, dashboard = workflow_commands(text)
    assert "--llm-save" in save and "--llm-fail-on-regression" in compare
    job, _ = ci
    monkeypatch.setenv("PYTEST_ADDOPTS", yaml.safe_load(text)["jobs"]["perf"]["env"]["PYTEST_ADDOPTS"])

    # the push to main: the perf tests move to tests/perf, as the workflow expects
    main = job("push-to-main")
    (main / "tests" / "perf").mkdir(parents=True)
    git(main, "mv", "test_perf.py", "tests/perf/test_perf.py")
    git(main, "commit", "-q", "-m", "perf tests in tests/perf")
    git(main, "push", "-q", "origin", "main")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "main_summary.md"))  # each job has its own
    monkeypatch.chdir(main)
    result = project.runpytest(*job_command(save))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*simulator llama-3.1-8b-h100 (offline, virtual time)*",
            "saved baseline git:origin#refs/llmreplay/results tests_perf_test_perf.py_test_chat-*/*.json",
        ]
    )
    assert (tmp_path / "main_summary.md").read_text() == (main / "perf-report" / "summary.md").read_text()
    saved = git(main, "rev-parse", "HEAD")[:12]
    publish_the_dashboard(job, dashboard, git(main, "rev-parse", "HEAD"), monkeypatch, capsys)

    # a pull request onto main: a fresh runner, checked out at its merge commit (detached), as on GitHub
    pull = job("pull-request")
    git(pull, "checkout", "-q", "-b", "feature")
    (pull / "notes.txt").write_text("a change under review\n")
    git(pull, "add", "notes.txt")
    git(pull, "commit", "-q", "-m", "change")
    git(pull, "checkout", "-q", "--detach", "origin/main")  # what actions/checkout checks out: the merge
    git(pull, "merge", "-q", "--no-ff", "-m", "Merge feature into main", "feature")
    monkeypatch.setenv("GITHUB_BASE_REF", "main")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "pull_summary.md"))
    monkeypatch.chdir(pull)
    result = project.runpytest(*job_command(compare))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"Compared with origin/main ({saved}), stored {saved} *: 0 regressions"])
    no_traceback(result)
    assert (tmp_path / "pull_summary.md").read_text() == (pull / "perf-report" / "summary.md").read_text()


def test_the_dashboard_job_runs_after_a_failed_perf_job_too():
    """A breached SLO fails the perf job after --llm-save pushed its results; the dashboard job's
    bare `if: github.event_name == 'push'` holds GitHub's implicit success(), so the failing
    commits never reached the site (found by a review helper)."""
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    condition = jobs["dashboard"]["if"]
    assert jobs["dashboard"]["needs"] == "perf"
    assert "!cancelled()" in condition or "always()" in condition, condition
