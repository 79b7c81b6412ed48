"""A live server on this machine is fingerprinted with this machine's GPUs (else its CPU): an
engine repository's declared server recorded "hardware": None, so an H100 runner's results and an
H200 runner's were compared (a new user's trial)."""

from __future__ import annotations

import os
import stat

import pytest
from mockserver import MockServer, ServerThread

from pytest_llmreplay.replayer import host_hardware as module
from pytest_llmreplay.replayer.host_hardware import host_hardware, on_this_host
from pytest_llmreplay.target import live_fingerprint


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """An ``nvidia-smi`` on PATH that lists the GPUs it is given."""

    def install(*names: str, status: int = 0) -> None:
        program = tmp_path / "nvidia-smi"
        lines = "".join(f"echo '{name}'\n" for name in names)
        program.write_text(f'#!/bin/sh\n[ "$1" = --query-gpu=name ] || exit 9\n{lines}exit {status}\n')
        program.chmod(program.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        host_hardware.cache_clear()

    yield install
    host_hardware.cache_clear()


def test_the_gpus_nvidia_smi_lists_each_model_with_its_count(fake_nvidia_smi):
    fake_nvidia_smi("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")
    assert host_hardware() == "2 x NVIDIA H100 80GB HBM3"
    fake_nvidia_smi("NVIDIA H200", "NVIDIA L4", "NVIDIA H200")
    assert host_hardware() == "2 x NVIDIA H200, 1 x NVIDIA L4"


def test_without_gpus_the_cpu_model(fake_nvidia_smi, monkeypatch):
    fake_nvidia_smi(status=9)  # nvidia-smi present, no driver: it fails
    found = host_hardware()
    assert found is None or found.startswith("cpu: ")
    monkeypatch.setattr(module, "_nvidia_gpus", lambda: [])
    host_hardware.cache_clear()
    assert host_hardware() == found


@pytest.mark.parametrize(
    ("url", "here"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://localhost:8000/v1", True),
        ("http://[::1]:8000", True),
        ("http://127.0.1.1:8000", True),
        ("http://gpu-box.internal:8000", False),
        ("https://api.example.com", False),
    ],
)
def test_a_server_on_loopback_is_on_this_host(url, here):
    assert on_this_host(url) is here


def test_a_live_server_on_this_machine_is_fingerprinted_with_its_hardware(fake_nvidia_smi):
    fake_nvidia_smi("NVIDIA H100 80GB HBM3")
    with ServerThread(MockServer()) as server:
        assert live_fingerprint(server.url, None, "--llm-endpoint")["hardware"] == "1 x NVIDIA H100 80GB HBM3"
        fake_nvidia_smi("NVIDIA H200")
        assert live_fingerprint(server.url, None, "--llm-endpoint")["hardware"] == "1 x NVIDIA H200"


def test_two_simulator_servers_of_one_profile_with_other_settings_are_other_endpoints():
    """`llmreplay sim --max-num-batched-tokens 1024` and the default had one fingerprint (kind
    live, the model, the host): a store put the two configurations in one series and compare
    gated one against the other as the same endpoint (a new user's trial)."""
    import dataclasses

    from test_sim_server import serving, tiny_profile

    from pytest_llmreplay import PromptFactory, load_tokenizer

    prompts = PromptFactory(load_tokenizer(None))
    profile = tiny_profile()
    smaller = dataclasses.replace(profile, engine=dataclasses.replace(profile.engine, max_num_batched_tokens=1024))
    slower = tiny_profile(seconds=0.003)  # each iteration three times as long, under the same name
    found = []
    for each, command_line in ((profile, {}), (smaller, {"max_num_batched_tokens": 1024}), (profile, {}), (slower, {})):
        with serving(prompts, each, command_line=command_line) as server:
            found.append(live_fingerprint(server.url, None, "--llm-endpoint"))
    assert found[0]["sim_profile"] == profile.name and len(found[0]["sim_settings"]) == 12
    assert found[0]["sim_settings"] != found[1]["sim_settings"]
    assert found[0] == found[2]  # the same settings again: the same endpoint
    # a profile edited under its name is the same endpoint, served as offline (docs/simulator.md):
    # its timing in the digest put a 40% slower profile "not compared", passing the gate (a new user's trial)
    assert found[3] == found[0]
