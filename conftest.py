"""Repo-wide test settings: pytester for plugin-behaviour tests, and where shared data lives."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``: the real public traces (see its README). Required, never skipped."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"{SHARED_DATA} is missing: the tests read the real traces in ../shared/data", pytrace=False)
    return SHARED_DATA
