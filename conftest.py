"""Repo-wide test settings: pytester for plugin-behaviour tests, no hub access, and where the
shared data lives."""

import os
import socket
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# The suite never downloads: transformers and huggingface_hub read this when first imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``: the real public traces (see its README). Required, never skipped."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"{SHARED_DATA} is missing: the tests read the real traces in ../shared/data", pytrace=False)
    return SHARED_DATA


@pytest.fixture
def refused_url():
    """``http://127.0.0.1:PORT`` where every connection is refused for the whole test: the port is
    held by a bound socket that never listens, so no other test's server can take it meanwhile
    (a merely free port could be, which made tests that expect a refusal flaky under xdist)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{holder.getsockname()[1]}"
