"""The engine set-up scripts' stamps: a finished llama.cpp build is reused only by the build it
describes (same sources, cmake options and CPU flags: ggml compiles for the building CPU), so a
cache restored onto another CPU builds again instead of crashing with SIGILL. No build runs here:
the step that would fetch the sources is replaced by one that records it was reached."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.fixture
def setup_llama_cpp(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # the script imports engine_setup beside it
    spec = importlib.util.spec_from_file_location("setup_llama_cpp_under_test", SCRIPTS / "setup_llama_cpp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("engine_setup", None)


class BuildStarted(Exception):
    pass


def built_home(tmp_path: Path, module) -> Path:
    """An engine home holding a finished build, stamped by ``module`` as it is now."""
    folder = tmp_path / f"llama-cpp-{module.VERSION}"
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "llama-server").write_text("#!/bin/sh\n")
    module.stamp(folder, module.build_identity())
    return tmp_path


def refuse_to_build(*args):
    raise BuildStarted


def test_a_build_stamped_for_this_cpu_and_options_is_reused(tmp_path, setup_llama_cpp, monkeypatch):
    home = built_home(tmp_path, setup_llama_cpp)
    monkeypatch.setattr(setup_llama_cpp, "fetch_sources", refuse_to_build)
    assert setup_llama_cpp.ensure_server(home) == home / f"llama-cpp-{setup_llama_cpp.VERSION}" / "bin" / "llama-server"


@pytest.mark.parametrize("change", ["another CPU", "another cmake option", "a stamp without the CPU"])
def test_a_build_for_another_cpu_or_recipe_is_built_again(tmp_path, setup_llama_cpp, monkeypatch, change):
    home = built_home(tmp_path, setup_llama_cpp)
    if change == "another CPU":
        monkeypatch.setattr(setup_llama_cpp, "cpu_flags", lambda: "fpu sse2")
    elif change == "another cmake option":
        monkeypatch.setattr(setup_llama_cpp, "CMAKE_OPTIONS", (*setup_llama_cpp.CMAKE_OPTIONS, "-DGGML_NATIVE=OFF"))
    else:  # what the script wrote before its stamp named the CPU
        setup_llama_cpp.stamp(home / f"llama-cpp-{setup_llama_cpp.VERSION}", setup_llama_cpp.SDIST_SHA256)
    monkeypatch.setattr(setup_llama_cpp, "fetch_sources", refuse_to_build)
    with pytest.raises(BuildStarted):
        setup_llama_cpp.ensure_server(home)
