"""Fixtures several test modules share: where the real traces are (tests/data), a perf-test
project in a git repository, the same pushed to a bare repository that CI jobs clone, a bare
repository of 16 commits, an S3 server (moto's, a process on loopback), the folder the engine
tests' vLLM is installed in, the vLLM server those tests share, and the bundled tokenizer noting
how long a text it is asked to encode, a prompt factory on it and a simulator's server on a
tiny profile that the reasoning and tool-call tests share."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

# httpx imports httpcore at its first request and maps httpcore's exception classes then, once;
# pytester's inline runs drop every module first imported during them, so a first request made
# in one (a declared server's readiness probe) left a map of classes that later requests no longer
# raise: a refused connection escaped as httpcore.ConnectError. Imported here, one httpcore
# serves the whole session.
import httpcore  # noqa: F401
import pytest
from mockserver import free_port
from test_plugin_baselines import GIT_ENV, PERF_TEST, git, write_profiles
from test_plugin_perf import WORKLOAD

from pytest_llmreplay.workloads.tokenizer import load_tokenizer


@pytest.fixture(scope="session")
def trace_data() -> Path:
    """``tests/data``: the real public traces (and one engine's measured run) the tests read, in
    the repository, the large ones gzipped; its README names each file's source and licence."""
    return Path(__file__).resolve().parent / "data"


@pytest.fixture
def project(pytester, monkeypatch):
    """A git repository on branch main with one commit: a perf test, its workload, two profiles."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("wl.yaml").write_text(WORKLOAD)
    pytester.makepyfile(test_perf=PERF_TEST)
    write_profiles(pytester.path)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "perf tests")
    return pytester


@pytest.fixture
def ci(project, monkeypatch, tmp_path_factory):
    """The project pushed to a bare repository (the forge); returns a function that makes a fresh
    clone of it (a CI job's checkout) and runs pytest there."""
    forge = tmp_path_factory.mktemp("forge") / "perf.git"
    git(project.path, "init", "-q", "--bare", "-b", "main", str(forge))
    git(project.path, "remote", "add", "origin", str(forge))
    git(project.path, "push", "-q", "origin", "main")

    def job(name: str) -> Path:
        checkout = forge.parent / name
        git(forge.parent, "clone", "-q", str(forge), name)
        return checkout

    def run(checkout: Path, *args: str):
        monkeypatch.chdir(checkout)
        return project.runpytest("--llm-offline", *args)

    return job, run


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository with 16 commits on main, the cwd of the test."""
    git(tmp_path, "init", "-q", "-b", "main")
    for i in range(16):
        git(tmp_path, "commit", "-q", "--allow-empty", "-m", f"commit {i}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def s3_env(monkeypatch, tmp_path):
    """moto's standalone S3 server on a loopback port (a process, started and stopped here), a
    bucket ``results`` in it, and the AWS variables that point s3fs at it."""
    port = free_port()
    log = open(tmp_path / "moto.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing-key-id",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto server did not start: {(tmp_path / 'moto.log').read_text()[-2000:]}")
                time.sleep(0.1)
        import boto3

        boto3.client("s3").create_bucket(Bucket="results")
        yield env
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.fixture(scope="session")
def bundled_prompts():
    """A prompt factory on the bundled tokenizer, seed 0."""
    from pytest_llmreplay.workloads.prompts import PromptFactory

    return PromptFactory(load_tokenizer(None))


@pytest.fixture(scope="session")
def tiny_sim(bundled_prompts):
    """The simulator's HTTP server in a thread, on ``test_sim_server.tiny_profile`` (every engine
    iteration 1 ms), shared by the tests of reasoning and tool calls."""
    from test_sim_server import serving

    with serving(bundled_prompts) as thread:
        yield thread


@pytest.fixture(scope="session")
def engine_home() -> str:
    """The folder vLLM and the model are cached in (``scripts/setup_vllm_cpu.py`` installs them on
    first use), resolved once per session: before pytester points ``HOME`` at a temporary folder,
    where the script would install everything again."""
    from test_engine_vllm import setup_vllm_cpu

    return str(Path(setup_vllm_cpu()["python"]).parents[2])


@pytest.fixture(scope="session")
def llamacpp(tmp_path_factory) -> dict[str, str]:
    """``scripts/setup_llama_cpp.py``'s JSON (it builds llama-server and the tiny GGUF model on
    first use), its command a template (``--port {port}``) as a declared server takes it, with a
    slot-save folder; resolved once per session, before pytester points ``HOME`` at a temporary
    folder, where the script would build llama.cpp again (8 CPU minutes)."""
    from engines import run_setup

    scratch = tmp_path_factory.mktemp("llama-slots")
    return run_setup("setup_llama_cpp.py", "--port", "{port}", "--scratch", str(scratch))


SHARED_VLLM = pytest.StashKey[object]()


@pytest.fixture(scope="session")
def shared_vllm(pytestconfig, engine_home, tmp_path_factory):
    """The engine tests' one vLLM server (``test_engine_vllm.SharedVLLM``), its start begun here,
    in the background, so that it overlaps the first test's own work; stopped after the last test
    that uses it (``pytest_runtest_teardown``) and at the end of the session."""
    from test_engine_vllm import SharedVLLM

    server = SharedVLLM(engine_home, tmp_path_factory.mktemp("shared-vllm"), dict(os.environ))
    pytestconfig.stash[SHARED_VLLM] = server
    server.start()
    try:
        yield server
    finally:
        server.stop()
        del pytestconfig.stash[SHARED_VLLM]


@pytest.fixture
def vllm_url(shared_vllm) -> str:
    """The shared vLLM server's URL, its prefix cache empty, as a freshly started server's."""
    return shared_vllm.cold()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The engine tests are one xdist group, ``serial``: under ``-n N --dist loadgroup``
    (scripts/check) they run on one worker, in order, sharing one vLLM server, while the other
    workers run the rest (the plugin's scheduler honours ``xdist_group``:
    ``pytest_llmreplay/plugin/xdist_groups.py``). A test whose timing tolerance a second busy
    worker breaks joins the group with ``@pytest.mark.xdist_group("serial")``: it then never runs
    beside an engine server."""
    for item in items:
        if item.get_closest_marker("engine") is not None:
            item.add_marker(pytest.mark.xdist_group("serial"))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the shared vLLM server (its processes hold about 3 GB of memory)
    as soon as the next test does not use it, rather than idle through the rest of the suite; a
    later test that does starts it again."""
    server = item.config.stash.get(SHARED_VLLM, None)
    if server is not None and (nextitem is None or "shared_vllm" not in getattr(nextitem, "fixturenames", ())):
        server.stop()


class RecordingTokenizer:
    """The bundled tokenizer, noting in :attr:`encoded` the length of every text it encodes."""

    def __init__(self) -> None:
        self.inner = load_tokenizer()
        self.name, self.vocab_size = self.inner.name, self.inner.vocab_size
        self.encoded: list[int] = []

    def encode(self, text: str) -> list[int]:
        self.encoded.append(len(text))
        return self.inner.encode(text)

    def decode(self, ids) -> str:
        return self.inner.decode(ids)


@pytest.fixture
def recording_tokenizer() -> RecordingTokenizer:
    return RecordingTokenizer()
