"""The static checks of ``scripts/check`` (ruff check, ruff format --check, mypy) fail on what
they exist to catch, and the pre-commit hooks run the same pinned tools as CI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "check"

WELL_MADE = '''"""A module every check accepts."""


def double(value: int) -> int:
    return value * 2
'''


def static_check(*paths: Path) -> subprocess.CompletedProcess[str]:
    """``scripts/check --static PATHS`` with this interpreter's tools."""
    return subprocess.run(
        [str(CHECK), "--static", *map(str, paths)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_well_made_module_passes(tmp_path):
    module = tmp_path / "well_made.py"
    module.write_text(WELL_MADE)
    done = static_check(module)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("source", "failed", "finding"),
    [
        (
            WELL_MADE.replace("def double(value: int)", "def double( value:int )"),
            "ruff format --check",
            "would be reformatted",
        ),
        (WELL_MADE.replace('accepts."""\n', 'accepts."""\n\nimport os\n'), "ruff check", "F401"),
        (WELL_MADE.replace("return value * 2", "return str(value)"), "mypy", "Incompatible return value type"),
    ],
    ids=["badly formatted", "lint finding", "type error"],
)
def test_a_finding_fails_the_check_and_says_which(tmp_path, source, failed, finding):
    module = tmp_path / "module.py"
    module.write_text(source)
    done = static_check(module)
    assert done.returncode == 1
    assert finding in done.stdout + done.stderr
    assert f"scripts/check: failed: {failed};" in done.stderr


def test_pre_commit_pins_the_versions_the_test_extra_installs():
    hooks = (ROOT / ".pre-commit-config.yaml").read_text()
    extra = (ROOT / "pyproject.toml").read_text()
    pinned = dict(re.findall(r'"(ruff|mypy)==([\d.]+)"', extra))
    assert set(re.findall(r'"ruff==([\d.]+)"', hooks)) == {pinned["ruff"]}
    assert "mypy" in pinned


def test_the_readme_and_ci_run_the_suite_through_scripts_check():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    assert any(command.endswith("&& scripts/check") for command in commands), commands
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1].startswith("scripts/check"), ci[-1]
