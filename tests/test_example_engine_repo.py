"""examples/engine-repo/tests/perf, the suite an engine repository copies, run as its users run it
(a pytester project holding a copy of the example): against the simulator's HTTP server (the
example's own ``sim`` table, with fewer requests), and, marked ``engine``, against vLLM's CPU
build and llama.cpp's llama-server, each serving the tiny model.

What must hold: every category passes; the two server configs the tests declare start exactly
one server each, in the order that starts each once; the results carry each test's config; the
report names both servers; a bad ``PERF_ENGINE`` is one line naming the file and the table.
"""

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
from test_engine_vllm import vllm_server_command

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "engine-repo"
CATEGORIES = (
    "test_throughput_unbounded_rate",
    "test_latency_at_concurrency_1",
    "test_ttft_at_fixed_rate",
    "test_shared_prefix_cache_hits",
    "test_long_prompt_chunked_prefill",
    "test_capacity_at_slo",
)


def engines_file(path: Path, name: str, serve: str, configs: dict[str, str], requests: int, rate: float) -> Path:
    """An engines.toml of one table, as a CI machine's own (``PERF_ENGINES``)."""
    lines = [f"[{name}]", f"serve = {serve!r}", f"requests = {requests}", f"rate = {rate}", f"[{name}.configs]"]
    lines += [f"{config} = {args!r}" for config, args in configs.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def example(pytester, monkeypatch):
    """A copy of the example repository, with this interpreter's scripts (``llmreplay``) first on
    PATH, as in an activated virtual environment."""
    for source in EXAMPLE.rglob("*"):
        if source.is_file() and "__pycache__" not in source.parts:
            target = pytester.path / source.relative_to(EXAMPLE)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return pytester


def run_example(example, engines: Path, engine: str, *options: str):
    example._monkeypatch.setenv("PERF_ENGINES", str(engines))
    example._monkeypatch.setenv("PERF_ENGINE", engine)
    return example.runpytest(
        "tests/perf", "--llm-report=report", "--llm-repeat=1", "-p", "no:cacheprovider", "-v", *options
    )


def check_suite_ran(example, result, configs: dict[str, str]) -> None:
    """Every category passed, and each config's server started once (one log each, named by
    the config's digest, ``ready_timeout`` being perf_engine.py's), and the summary names both."""
    from pytest_llmreplay.plugin.servers import parse_server

    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == len(CATEGORIES), result.stdout.str()[-4000:]
    for name in CATEGORIES:
        result.stdout.fnmatch_lines([f"*test_serving.py::{name} PASSED*"])
    logs = sorted(path.name for path in (example.path / "report" / "servers").rglob("*.log"))
    digests = {parse_server({"cmd": cmd, "ready_timeout": 900}).digest: config for config, cmd in configs.items()}
    assert sorted(digests[name.split("-")[1]] for name in logs) == sorted(configs), logs
    assert all(name.endswith("-1.log") for name in logs), logs
    summary = (example.path / "report" / "summary.md").read_text()
    for cmd in configs.values():
        assert cmd in summary
    result.stdout.fnmatch_lines(["capacity (concurrency): *"])


def cache_hit_rates(example) -> dict[str, float]:
    """Test name -> its mean prefix-cache hit rate, from the report's JSON."""
    rates = {}
    for path in (example.path / "report" / "tests").glob("*.json"):
        stored = json.loads(path.read_text())
        rates[stored["test"].rsplit("::", 1)[1]] = stored["summary"]["cache_hit_rate"]["mean"]
    return rates


def test_example_suite_on_the_simulator(example, tmp_path):
    import tomllib  # Python >= 3.11, as the example itself

    sim = tomllib.loads((EXAMPLE / "tests" / "perf" / "engines.toml").read_text())["sim"]
    engines = engines_file(tmp_path / "engines.toml", "sim", sim["serve"], sim["configs"], requests=8, rate=4)
    result = run_example(example, engines, "sim")
    configs = {name: f"{sim['serve']} {args}".strip() for name, args in sim["configs"].items()}
    check_suite_ran(example, result, configs)
    # the shared-prefix test hits its own prefixes; no test hits another's prompts, though the
    # latency, fixed-rate and capacity tests replay the same workload file on the same server
    hits = cache_hit_rates(example)
    assert hits.pop("test_shared_prefix_cache_hits") > 0.3
    assert hits == dict.fromkeys(set(CATEGORIES) - {"test_shared_prefix_cache_hits"}, 0.0)


def test_an_unknown_engine_is_one_line(example, tmp_path):
    result = run_example(example, EXAMPLE / "tests" / "perf" / "engines.toml", "vllm-typo")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: PERF_ENGINE=vllm-typo: */engines.toml has no [[]vllm-typo[]]; it has vllm, *"])
    assert "Traceback" not in result.stderr.str()


def test_a_bad_engine_field_is_one_line(example, tmp_path):
    engines = tmp_path / "engines.toml"
    engines.write_text('[sim]\nserve = "llmreplay sim"\nrequests = 8\nrate = 4\n[sim.configs]\ndefault = ""\n')
    result = run_example(example, engines, "sim")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: */engines.toml: [[]sim[]] serve: expected a command line with {port}, got 'llmreplay sim'"]
    )


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ("sim = 3", "ERROR: */engines.toml: sim: expected a table [[]sim[]] with serve, got 3"),
        (
            '[sim]\nserve = "llmreplay sim --port {port}"\nrequests = 8\nrate = 4\nenv = "A=1"\n[sim.configs]\ndefault = ""',
            "ERROR: */engines.toml: [[]sim[]] env: expected a table of variable names to strings, got 'A=1'",
        ),
        (
            '[sim]\nserve = "llmreplay sim --port {port}"\nrequests = 8\nrate = 4\nenv = {A = 1}\n[sim.configs]\ndefault = ""',
            "ERROR: */engines.toml: [[]sim.env[]] A: expected a string (quote it), got 1",
        ),
        (
            '[sim]\nserve = "llmreplay sim --port {port}"\nrequests = 8\nrate = 4\n[sim.configs]\ndefault = 512',
            "ERROR: */engines.toml: [[]sim.configs[]] default: expected a string (quote it), got 512",
        ),
        (
            '[sim]\nserve = "llmreplay sim --port {port}"\nrequests = 8\nrate = 4\nsrve = 1\n[sim.configs]\ndefault = ""',
            "ERROR: */engines.toml: [[]sim[]] srve: unknown field; expected one of serve, env, requests, rate, configs",
        ),
    ],
)
def test_a_bad_engine_table_is_one_line_naming_its_entry_and_field(example, tmp_path, table, error):
    """Not a traceback (an INTERNALERROR for a table that is not one, a ValueError at collection
    for an env that is not a table), nor a typo'd field ignored."""
    engines = tmp_path / "engines.toml"
    engines.write_text(table + "\n")
    result = run_example(example, engines, "sim")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([error])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_config_the_table_lacks_is_one_error_naming_it(example, tmp_path):
    engines = engines_file(tmp_path / "engines.toml", "sim", "llmreplay sim --port {port}", {"default": ""}, 8, 4)
    result = run_example(example, engines, "sim")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error of the test module
    result.stdout.fnmatch_lines(
        ["*/engines.toml: [[]sim.configs[]] has no 'chunked_prefill_512' (it has default)", "*short test summary*"]
    )
    assert "perf_engine.py:" not in result.stdout.str()


@pytest.mark.engine
def test_example_suite_on_vllm_cpu(example, engine_home, tmp_path):
    """vLLM's CPU build with the tiny model: the setup script's command, its port the plugin's."""
    placeholder = 65533
    command = vllm_server_command(engine_home, placeholder, tmp_path / "vllm")
    words = shlex.split(command)
    words[words.index(str(placeholder))] = "{port}"
    serve = shlex.join(words)
    configs = {"default": "", "chunked_prefill_512": "--max-num-batched-tokens 512"}
    engines = engines_file(tmp_path / "engines.toml", "vllm-cpu", serve, configs, requests=6, rate=1)
    result = run_example(example, engines, "vllm-cpu", "--llm-ignore-eos")
    check_suite_ran(example, result, {name: f"{serve} {args}".strip() for name, args in configs.items()})


@pytest.mark.engine
def test_example_suite_on_llama_cpp(llamacpp, example, tmp_path):
    """llama.cpp's llama-server with the tiny GGUF model: the setup script's command (``--port
    {port}`` as a declared server takes it), with per-token timings (llama.cpp holds back a
    token that ends inside a UTF-8 sequence; its timings count it)."""
    serve = llamacpp["command"]
    configs = {"default": "", "chunked_prefill_512": "--batch-size 512 --ubatch-size 512"}
    engines = engines_file(tmp_path / "engines.toml", "llama-cpp-cpu", serve, configs, requests=6, rate=1)
    result = run_example(
        example, engines, "llama-cpp-cpu", "--llm-ignore-eos", "--llm-extra-body", '{"timings_per_token": true}'
    )
    check_suite_ran(example, result, {name: f"{serve} {args}".strip() for name, args in configs.items()})
