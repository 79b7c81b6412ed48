"""Build llama.cpp's ``llama-server`` and a tiny random-weight GGUF Llama once, for the engine tests.

Run: ``python scripts/setup_llama_cpp.py [--port P] [--scratch DIR] [--json]`` with a Python that
has the ``gguf`` package (the project's ``[test]`` extra; it writes the model). The script itself
is standard library only. It is idempotent: a finished step leaves a stamp and is skipped next
time, so the engine tests call it on every run and pay the build once per machine. The server's
stamp names the sources, the cmake options and the CPU's flags (the build is for the building
CPU), so a cache moved to another CPU, or a changed option, builds again.

Where things go (``$LLMREPLAY_ENGINE_HOME``, default ``$XDG_CACHE_HOME/llmreplay/engines``, else
``~/.cache/llmreplay/engines``, as for ``setup_vllm_cpu.py``)::

    llama-cpp-0.3.36/bin/llama-server   the server, linked statically (nothing else is kept)
    models/gguf-llama-tiny-<digest>.gguf the tiny model (tokenizer and chat template inside)

Steps:
1. ``pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36``: the source
   distribution (76 MB, checked against its SHA-256 below) vendors the full llama.cpp tree
   (``vendor/llama.cpp``, upstream commit ``0c1e57098``), ``tools/server`` included. It is
   unpacked in a temporary folder, configured with cmake (Release, CPU only, static, no tests,
   examples, web UI or OpenSSL) and only the ``llama-server`` target is built, with one job per
   core. On this project's 2-core machine the first build took the time written in
   ``docs/engines.md``; the sources and objects are removed afterwards.
2. ``fixtures/tiny_model/build_tiny_gguf.py``, run by this Python. The file's name carries a
   digest of the recipe and the tokenizer, so editing the recipe builds a new model.

The last line printed is the result: the server binary, the model and the command that serves it
(``--port``; ``--scratch``: the folder for ``--slot-save-path``, made here); with ``--json`` one
object with keys ``server``, ``model``, ``version`` and ``command``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import sys
import tarfile
import tempfile
from pathlib import Path

from engine_setup import engine_home, is_stamped, locked, run, stamp

SCRIPT = "setup_llama_cpp"
VERSION = "0.3.36"  # llama-cpp-python, whose sdist carries llama.cpp's sources
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
LLAMA_CPP_COMMIT = "0c1e57098"  # the llama.cpp it vendors (its CHANGELOG)
VENDORED = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "fixtures" / "tiny_model" / "build_tiny_gguf.py"
SHAPE = RECIPE.with_name("build_tiny_model.py")  # the recipe takes the shape and chat template from it
TOKENIZER = ROOT / "pytest_llmreplay" / "workloads" / "assets" / "tokenizer.json"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    # -O1, not Release's -O3: a quarter less compiling (measured: 8.7 CPU minutes, -O3 11.4), and
    # the tiny model's server is no slower for the tests (ggml's kernels are intrinsics)
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary: the build folder can go
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",  # no npm build of the web UI ...
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # ... and no download of a prebuilt one: the server has none
    "-DLLAMA_OPENSSL=OFF",
    f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}",  # else "unknown": an sdist has no .git
)
SLOTS, SLOT_CONTEXT = 4, 8192  # -np and each slot's context (the model's positions, as vLLM's --max-model-len)


def fetch_sources(work: Path) -> Path:
    """Download the sdist into ``work``, check its digest, unpack llama.cpp; its source folder."""
    run(
        SCRIPT,
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
        + ["--dest", str(work), f"llama-cpp-python=={VERSION}"],
        f"downloading llama-cpp-python {VERSION}'s sources (76 MB)",
    )
    sdist = work / SDIST
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        sys.exit(f"{SCRIPT}: {sdist} has SHA-256 {digest}, expected {SDIST_SHA256}")
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(VENDORED) and (m.isfile() or m.isdir())]
        archive.extractall(work, members=members)  # regular files and folders under one prefix: no links
    return work / VENDORED


def cpu_flags() -> str:
    """This CPU's instruction-set flags (``/proc/cpuinfo``'s first ``flags`` line), else the
    machine's name: ggml's default ``GGML_NATIVE`` compiles for the building CPU
    (``-march=native``), so a binary from a cache restored onto another CPU may die of SIGILL."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() + " " + platform.processor()


def build_identity() -> str:
    """What the binary depends on, as its stamp says it: the sources' digest, the cmake options
    and :func:`cpu_flags`; a change in any builds again."""
    built_for = hashlib.sha256("\n".join((*CMAKE_OPTIONS, cpu_flags())).encode()).hexdigest()[:16]
    return f"{SDIST_SHA256} options+cpu {built_for}"


def ensure_server(home: Path) -> Path:
    """``llama-server``'s path, building it if its stamp is missing or names another
    :func:`build_identity`."""
    folder = home / f"llama-cpp-{VERSION}"
    server = folder / "bin" / "llama-server"
    identity = build_identity()
    if is_stamped(folder, identity):
        return server
    with tempfile.TemporaryDirectory(prefix="llama-cpp-build-", dir=home) as work:
        source = fetch_sources(Path(work))
        build = Path(work) / "build"
        run(SCRIPT, ["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS], "configuring llama.cpp")
        run(
            SCRIPT,
            ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(os.cpu_count() or 1)],
            "building llama-server (minutes)",
        )
        server.parent.mkdir(parents=True, exist_ok=True)
        (build / "bin" / "llama-server").replace(server)
    run(SCRIPT, [str(server), "--version"], "checking that llama-server runs")
    stamp(folder, identity)
    return server


def recipe_digest() -> str:
    """12 hex digits over the recipe (with the module it reads the shape from) and the tokenizer:
    a new recipe, a new file."""
    digest = hashlib.sha256()
    for path in (RECIPE, SHAPE, TOKENIZER):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_model(home: Path) -> Path:
    """The tiny GGUF model's path, building it if it is missing (written under another name and
    renamed, so a file that exists is whole); models of older recipes are removed."""
    model = home / "models" / f"gguf-llama-tiny-{recipe_digest()}.gguf"
    if not model.is_file():
        partial = model.with_suffix(".partial")
        run(
            SCRIPT,
            [sys.executable, str(RECIPE), "--tokenizer", str(TOKENIZER), "--out", str(partial)],
            f"building the tiny GGUF model {model} (needs the gguf package: pip install gguf)",
        )
        partial.replace(model)
        for stale in model.parent.glob("gguf-llama-tiny-*"):
            if stale != model:
                stale.unlink()
    return model


def server_command(server: Path, model: Path, port: str, scratch: Path) -> list[str]:
    """The command that serves ``model`` as ``tiny`` on 127.0.0.1:``port``: ``SLOTS`` requests at
    once, each in a slot of ``SLOT_CONTEXT`` tokens (``--ctx-size`` is all slots' together),
    one thread (the tiny model gains nothing from a second, and on a busy 2-core machine a
    second waits for a core at every step's barrier: 20-55 ms a token instead of 0.3 seen),
    Prometheus ``/metrics``, the slot actions
    (``POST /slots/{id}?action=erase`` needs ``--slot-save-path``: ``scratch``, made here) and
    no host-memory prompt cache (``--cache-ram 0``: erasing the slots then empties every cache)."""
    scratch.mkdir(parents=True, exist_ok=True)
    return [
        str(server),
        "--model",
        str(model),
        "--alias",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--ctx-size",
        str(SLOTS * SLOT_CONTEXT),
        "--parallel",
        str(SLOTS),
        "--threads",
        "1",
        "--metrics",
        "--slots",
        "--slot-save-path",
        str(scratch),
        "--cache-ram",
        "0",
        "--no-warmup",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument(
        "--port",
        default="8080",
        help="the port of the printed server command (default 8080; '{port}' for a declared server's command)",
    )
    parser.add_argument(
        "--scratch", type=Path, help="the --slot-save-path folder of the printed command (default: a new temp folder)"
    )
    args = parser.parse_args(argv)
    home = engine_home()
    with locked(home, "llama-cpp"):
        server = ensure_server(home)
        model = ensure_model(home)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="llmreplay-llama-cpp-"))
    command = shlex.join(server_command(server, model, args.port, scratch))
    result = {
        "server": str(server),
        "model": str(model),
        "version": f"llama.cpp {LLAMA_CPP_COMMIT}",
        "command": command,
    }
    print(json.dumps(result) if args.json else "\n".join(f"{key}={value}" for key, value in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
