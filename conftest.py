"""Repo-wide test settings: pytester for plugin-behaviour tests and no hub access."""

import os
import socket

import pytest

pytest_plugins = ["pytester"]

# The suite never downloads: transformers and huggingface_hub read this when first imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def refused_url():
    """``http://127.0.0.1:PORT`` where every connection is refused for the whole test: the port is
    held by a bound socket that never listens, so no other test's server can take it meanwhile
    (a merely free port could be, which made tests that expect a refusal flaky under xdist)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{holder.getsockname()[1]}"
