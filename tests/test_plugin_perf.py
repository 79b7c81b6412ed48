"""The plugin's perf-test features as a user meets them (pytester): options and their ini twins,
the ``llmreplay`` marker, ``llm_replay`` in code, spec files, the endpoint fixtures, report
files, pytest-xdist and the hooks. Baselines and comparisons: ``test_plugin_baselines.py``.

Most runs use ``--llm-offline`` (the simulator in virtual time: deterministic and fast) and a
workload of a few sessions."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from mockserver import free_port, gone, group_members, wait_until_gone

from pytest_llmreplay.sim.profile_files import profile_path

# 8 single-turn sessions, Poisson arrivals: a replay of it takes well under a second offline
WORKLOAD = """\
synthetic:
  sessions: 8
  input_tokens: {dist: uniform, min: 64, max: 256}
  output_tokens: {dist: uniform, min: 8, max: 32}
  rate: 4
  seed: 7
"""
# 3 short requests replayed by concurrency: for the runs that go over HTTP in wall-clock time
TINY_WORKLOAD = """\
synthetic:
  sessions: 3
  input_tokens: 32
  output_tokens: 4
  seed: 1
"""
FLAGS = (
    "--llm-endpoint",
    "--llm-model",
    "--llm-api",
    "--llm-api-key-env",
    "--llm-ignore-eos",
    "--llm-extra-body",
    "--llm-server-cmd",
    "--llm-server-timeout",
    "--llm-max-servers",
    "--llm-metrics-interval",
    "--llm-sim-profile",
    "--llm-offline",
    "--llm-tokenizer",
    "--llm-seed",
    "--llm-baseline-dir",
    "--llm-save",
    "--llm-compare",
    "--llm-fail-on-regression",
    "--llm-fail-on-unstable",
    "--llm-report",
    "--llm-summary-md",
    "--llm-repeat",
    "--llm-cache-reset",
    "--llm-workers",
    "--llm-ray-address",
)
HEADER_END = "tokenizer bundled (llmreplay-bpe-4k), seed 0"


@pytest.fixture
def project(pytester):
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("wl.yaml").write_text(WORKLOAD)
    pytester.path.joinpath("tiny.yaml").write_text(TINY_WORKLOAD)
    return pytester


def report_files(folder) -> dict:
    """test id -> (JSON, CSV) of each test's report files in ``folder/tests``; checks that the
    folder holds nothing else and that each test has one pair."""
    found = {}
    for path in sorted((folder / "tests").glob("*.json")):
        test = json.loads(path.read_text())["test"]
        assert test not in found, f"two report files for {test}"
        found[test] = (path, path.with_suffix(".csv"))
        assert test.rsplit("::", 1)[-1].split("[")[0] in path.stem, "the file name shows the test"
    assert sorted((folder / "tests").iterdir()) == sorted(p for pair in found.values() for p in pair)
    return found


def no_traceback(result) -> None:
    """The output shows the user's message, not Python internals."""
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text
    assert "pytest_llmreplay/" not in text and "pytest_llmreplay\\" not in text
    assert "LLMReplayError" not in text


def refuses_connections(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) != 0


# ------------------------------------------------------------------------ options


def test_every_option_and_its_ini_twin_are_in_the_help(project):
    from pytest_llmreplay.plugin.options import OPTIONS

    assert tuple(flag for flag, *_ in OPTIONS) == FLAGS
    result = project.runpytest("--help")
    assert result.ret == 0
    out = result.stdout.str()
    assert "LLM serving performance tests (pytest-llmreplay):" in out
    for flag, ini, kind, _, help_text in OPTIONS:
        assert re.search(rf"^  {flag}(=| |$)", out, re.M), f"{flag} missing from --help"
        assert re.search(rf"^  {ini} \({kind}\):", out, re.M), f"ini key {ini} missing from --help"
        # the first words of the help text, as argparse wraps it
        assert " ".join(help_text.split()[:4]) in " ".join(out.split()), f"help of {flag}"
    result.stdout.fnmatch_lines(["  --llm-compare=[[]REF[]]*compare with the stored result of REF*"])


def test_report_header_names_the_simulator_baselines_and_tokenizer(project):
    project.makepyfile("def test_nothing(): pass")
    result = project.runpytest("--llm-offline", "--llm-save", "--llm-baseline-dir", "perf/store")
    result.stdout.fnmatch_lines(
        [
            f"llmreplay: simulator llama-3.1-8b-h100 (offline, virtual time); baselines {project.path / 'perf' / 'store'} (save, no compare); {HEADER_END}",
        ]
    )
    result.assert_outcomes(passed=1)


def test_report_header_of_a_default_session(project):
    project.makepyfile("def test_nothing(): pass")
    result = project.runpytest()
    result.stdout.fnmatch_lines(
        [
            f"llmreplay: simulator llama-3.1-8b-h100 (offline, virtual time); baselines {project.path / '.llmreplay'} (no save, no compare); {HEADER_END}",
        ]
    )
    # a session whose tests measure nothing starts no simulator and prints no llmreplay section
    assert "= llmreplay =" not in result.stdout.str()


def test_the_built_in_simulator_is_offline_by_default(project):
    """A first run of a new project gives its figures in seconds (issue 31 D16: over HTTP in wall
    time it took a minute); llm_offline = false serves the simulator over HTTP instead."""
    project.makepyfile("""
        def test_kind(llm_endpoint):
            assert llm_endpoint.kind == "offline"
    """)
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["llmreplay: simulator llama-3.1-8b-h100 (offline, virtual time); *"])


def test_ini_llm_sim_profile_picks_the_profile(project):
    project.makeini("[pytest]\nllm_offline = true\nllm_sim_profile = dynamo-mocker-polynomial\n")
    project.makepyfile("""
        def test_profile(llm_endpoint):
            assert llm_endpoint.fingerprint["sim_profile"] == "dynamo-mocker-polynomial"
            assert llm_endpoint.name == "sim:dynamo-mocker-polynomial (offline, virtual time)"
    """)
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["llmreplay: simulator dynamo-mocker-polynomial (offline, virtual time); *"])


def test_ini_llm_save_and_llm_report(project):
    project.makeini("[pytest]\nllm_offline = true\nllm_save = true\nllm_report = out/perf\n")
    project.makepyfile(
        test_saved="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml")
        def test_stored(): pass
    """
    )
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    stored = list((project.path / ".llmreplay").glob("*/*.json"))
    assert len(stored) == 1
    assert json.loads(stored[0].read_text())["test"] == "test_saved.py::test_stored"
    result.stdout.fnmatch_lines([f"saved baseline {stored[0]}"])
    report = project.path / "out" / "perf"
    assert (report / "summary.md").is_file() and (report / "index.html").is_file()
    assert list(report_files(report)) == ["test_saved.py::test_stored"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--llm-api", "grpc"],
            "--llm-api / llm_api: expected one of chat, completions, responses, messages, got 'grpc'",
        ),
        (
            ["--llm-endpoint", "localhost:8000"],
            "--llm-endpoint / llm_endpoint: expected http://host:port (or https://), got 'localhost:8000'",
        ),
        (
            ["--llm-endpoint", "http://127.0.0.1:99999"],
            "--llm-endpoint / llm_endpoint: invalid port '99999' in 'http://127.0.0.1:99999'; expected 1 to 65535",
        ),
        (
            ["--llm-endpoint", "http://127.0.0.1: 80"],
            "--llm-endpoint / llm_endpoint: a space in the URL; expected http://host:port, got 'http://127.0.0.1: 80'",
        ),
        (
            ["--llm-endpoint", "http://127.0.0.1:9/v1/chat/completions"],
            "--llm-endpoint / llm_endpoint: 'http://127.0.0.1:9/v1/chat/completions' names the route /v1/chat/completions; give the server's address, 'http://127.0.0.1:9' *",
        ),
        (
            ["--llm-server-cmd", "vllm serve x"],
            "--llm-server-cmd needs --llm-endpoint: the URL the started server listens on",
        ),
        (
            ["--llm-offline", "--llm-endpoint", "http://127.0.0.1:9"],
            "--llm-offline and --llm-endpoint exclude each other: the offline simulator has no URL",
        ),
        (
            ["--llm-extra-body", '{"min_tokens": 2'],
            "--llm-extra-body / llm_extra_body: line 1 column *: not valid JSON: *",
        ),
        (["--llm-extra-body", "3"], "--llm-extra-body / llm_extra_body: expected a JSON object, got int"),
        (
            ["--llm-extra-body", '{"min_tokens": 2, "min_tokens": 8}'],
            "--llm-extra-body / llm_extra_body: duplicate key 'min_tokens'",
        ),
        (
            ["--llm-offline", "--llm-sim-profile", "no-such-gpu"],
            "--llm-sim-profile / llm_sim_profile: unknown profile 'no-such-gpu'; available: *llama-3.1-8b-h100*",
        ),
        (
            ["--llm-sim-profile", "profiles/fast.json"],
            "--llm-sim-profile / llm_sim_profile: profile file not found: profiles/fast.json",
        ),
    ],
)
def test_usage_errors(project, args, message):
    project.makepyfile("def test_x(): pass")
    result = project.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "test_x" not in result.stdout.str()


def test_ini_api_is_checked_like_the_option(project):
    project.makeini("[pytest]\nllm_api = grpc\n")
    project.makepyfile("def test_x(): pass")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --llm-api / llm_api: expected one of chat, completions, responses, messages, got 'grpc'"]
    )


def test_command_line_offline_wins_over_an_ini_endpoint(project):
    # the ini file names a server; `pytest --llm-offline` asks for the offline simulator instead
    project.makeini("[pytest]\nllm_endpoint = http://127.0.0.1:9\n")
    project.makepyfile("""
        def test_kind(llm_endpoint):
            assert llm_endpoint.kind == "offline"
    """)
    result = project.runpytest("--llm-offline")
    if result.ret == pytest.ExitCode.USAGE_ERROR:  # refusing the combination is as good
        result.stderr.fnmatch_lines(["ERROR: *--llm-offline*llm_endpoint*"])
        return
    result.stdout.fnmatch_lines(["llmreplay: simulator llama-3.1-8b-h100 (offline, virtual time); *"])
    result.assert_outcomes(passed=1)


def test_command_line_endpoint_wins_over_ini_offline(project):
    project.makeini("[pytest]\nllm_offline = true\n")
    project.makepyfile("def test_nothing(): pass")
    result = project.runpytest("--llm-endpoint", "http://127.0.0.1:9")
    result.assert_outcomes(passed=1)  # nothing is sent until a test measures
    result.stdout.fnmatch_lines(["llmreplay: endpoint http://127.0.0.1:9; baselines *"])


def test_server_command_that_dies_is_a_usage_error_with_its_log(project):
    project.makepyfile("def test_x(): pass")
    port = free_port()
    command = "sh -c 'echo no GPU found >&2; exit 3'"
    result = project.runpytest("--llm-endpoint", f"http://127.0.0.1:{port}", "--llm-server-cmd", command)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f'ERROR: --llm-server-cmd: server command "{command}" exited with status 3; last lines of its log:',
            "no GPU found",
        ]
    )


def test_a_path_value_in_the_space_form_that_moves_the_rootdir_is_warned_about(project, tmp_path_factory):
    """pytest picks the rootdir before it knows the plugin's options: the value of
    ``--llm-report DIR`` is taken for a test path, the rootdir moves up, the ini file is lost."""
    project.makeini("[pytest]\nllm_seed = 3\n")
    project.makepyfile("def test_x(): pass")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    profile = elsewhere / "p.json"
    profile.write_text(profile_path("llama-3.1-8b-h100").read_text())
    result = project.runpytest(
        "--llm-offline", "--llm-report", str(elsewhere / "rep"), "--llm-sim-profile", str(profile)
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"rootdir: {project.path.parent}"])  # moved, and the ini (seed 3) is lost
    result.stdout.fnmatch_lines(
        [
            f"*PytestConfigWarning: --llm-sim-profile {profile}: pytest took {profile} for a test path when it chose the rootdir, "
            f"which is now {project.path.parent} (no configfile); write --llm-sim-profile={profile}"
        ]
    )
    assert "--llm-report" not in result.stdout.str()  # DIR did not exist yet: not taken for a path

    result = project.runpytest("--llm-offline", f"--llm-report={elsewhere / 'rep'}", f"--llm-sim-profile={profile}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["llmreplay: *, seed 3", f"rootdir: {project.path}"])
    assert "PytestConfigWarning" not in result.stdout.str()

    result = project.runpytest("--llm-offline", "--llm-report", str(elsewhere / "rep"))  # it exists now
    result.stdout.fnmatch_lines(
        [
            f"*PytestConfigWarning: --llm-report {elsewhere / 'rep'}: pytest took *; write --llm-report={elsewhere / 'rep'}"
        ]
    )


def test_a_path_value_inside_the_project_in_the_space_form_is_not_warned_about(project):
    project.makepyfile("def test_x(): pass")
    project.path.joinpath("rep").mkdir()
    result = project.runpytest("--llm-offline", "--llm-report", "rep")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"rootdir: {project.path}"])
    assert "PytestConfigWarning" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        (
            ["--llm-offline", "--llm-server-timeout=5"],
            "--llm-server-timeout / llm_server_timeout: ignored without --llm-server-cmd: no server is started here, so none is waited for",
        ),
        (
            ["--llm-endpoint=http://127.0.0.1:9", "--llm-sim-profile=llama-3.1-8b-h100"],
            "--llm-sim-profile / llm_sim_profile: ignored with --llm-endpoint: the live server is measured, not the simulator",
        ),
        (
            ["--llm-offline", "--llm-model=foo"],
            "--llm-model / llm_model: ignored by the simulator, which serves its profile's model whatever the request names; it applies to --llm-endpoint and to declared servers",
        ),
        (["--llm-model=foo"], "--llm-model / llm_model: ignored by the simulator, *"),
        (
            ["--llm-api=messages"],
            "--llm-api / llm_api: ignored offline: the in-process simulator takes every request *",
        ),
        (
            ["--llm-cache-reset=off"],
            "--llm-cache-reset / llm_cache_reset: ignored offline: every run of the in-process simulator starts on a fresh engine, *"
            "; tests that declare a server (server=) use it",
        ),
        # a CI job that left --llm-compare out gated nothing and said nothing
        (
            ["--llm-fail-on-regression"],
            "--llm-fail-on-regression / llm_fail_on_regression: ignored without --llm-compare: nothing is compared, so no regression can fail a test",
        ),
        (["--llm-fail-on-unstable"], "--llm-fail-on-unstable / llm_fail_on_unstable: ignored without --llm-compare: *"),
    ],
)
def test_an_option_the_session_ignores_is_warned_about_once(project, args, warning):
    project.makepyfile("def test_x(): pass")
    result = project.runpytest(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*PytestConfigWarning: {warning}"])
    assert result.stdout.str().count(": PytestConfigWarning: ") == 1


def test_an_ini_option_for_the_mode_the_command_line_left_is_not_warned_about(project):
    """The ini file configures a live server; the command line asks for the offline simulator."""
    project.makeini("[pytest]\nllm_model = served-model\nllm_server_timeout = 900\n")
    project.makepyfile("def test_x(): pass")
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(passed=1)
    assert "PytestConfigWarning" not in result.stdout.str()
    result = project.runpytest()  # the ini alone: nothing there uses either
    result.assert_outcomes(passed=1)
    assert result.stdout.str().count(": PytestConfigWarning: ") == 2
    result.stdout.fnmatch_lines(["*PytestConfigWarning: --llm-server-timeout / llm_server_timeout: ignored *"])
    result.stdout.fnmatch_lines(["*PytestConfigWarning: --llm-model / llm_model: ignored *"])


SERVER_WITH_A_CHILD = """\
import http.server, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # an engine worker, say
with open("server.pids.tmp", "w") as pids:
    pids.write(f"{os.getpid()} {child.pid}")
os.replace("server.pids.tmp", "server.pids")
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def wait_for_file(path, run: subprocess.Popen) -> None:
    """Wait for ``path`` to appear while the pytest run ``run`` lives (it fails the test if the
    run ends first); a minute at most, for a loaded machine."""
    deadline = time.monotonic() + 60
    while not path.exists():
        assert run.poll() is None, f"the pytest run ended (status {run.returncode}) before {path.name} appeared"
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_server_started_by_the_plugin_dies_with_a_killed_run(project, tmp_path_factory, sig):
    """A run killed by SIGTERM or SIGKILL runs no teardown: the server (and its children) must
    not live on under init, holding the port and the GPU, nor its temporary log folder in /tmp."""
    temp_root = tmp_path_factory.mktemp("tmp")  # the run's TMPDIR, to see what it leaves there
    project.path.joinpath("server.py").write_text(SERVER_WITH_A_CHILD)
    project.makepyfile(
        test_wait="""
        import time
        from pathlib import Path

        def test_wait():
            Path("running").touch()
            time.sleep(600)
    """
    )
    port = free_port()
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--llm-endpoint=http://127.0.0.1:{port}",
            f"--llm-server-cmd={sys.executable} server.py {port}",
        ],
        cwd=project.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(temp_root)},
    )
    pids: list[int] = []
    try:
        wait_for_file(project.path / "running", run)
        pids = [int(pid) for pid in project.path.joinpath("server.pids").read_text().split()]
        assert not any(gone(pid) for pid in pids)
        run.send_signal(sig)
        run.wait(30)
        for pid in pids:
            assert wait_until_gone(pid, 30), f"process {pid} of the server outlived the pytest run killed by {sig.name}"
        # nothing else of its process group either (the port is no witness: another test's server may take it)
        assert group_members(pids[0]) == [], f"the server's process group outlived the pytest run killed by {sig.name}"
        deadline = time.monotonic() + 30  # the watchdog removes the log folder once the server is gone
        while list(temp_root.glob("llmreplay-server-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not list(temp_root.glob("llmreplay-server-*")), "the killed run left its server's log folder behind"
    finally:
        run.kill()
        run.wait()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_server_that_never_becomes_healthy_times_out_with_one_line(project, refused_url):
    """The command never listens; ``refused_url``'s port stays unanswered however long the wait
    (a merely free port could be taken by another test's server meanwhile, under xdist)."""
    project.makepyfile("def test_x(): pass")
    command = f"{sys.executable} -c 'import time; time.sleep(60)'"
    result = project.runpytest_subprocess(
        f"--llm-endpoint={refused_url}", f"--llm-server-cmd={command}", "--llm-server-timeout=1.5"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        [f"waiting for {command} at {refused_url} to become healthy: [01] s of 1.5 s"]
    )  # 1 s on a loaded machine
    result.stderr.fnmatch_lines(
        [
            f'ERROR: --llm-server-cmd: server command "{command}" was not ready at {refused_url}/health within 1.5 s '
            "(raise --llm-server-timeout if it needs longer); last lines of its log:",
            "(empty log)",
        ]
    )
    no_traceback(result)


def test_ini_server_timeout_is_read_and_checked(project):
    project.makeini("[pytest]\nllm_server_timeout = soon\n")
    project.makepyfile("def test_x(): pass")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --llm-server-timeout / llm_server_timeout: expected a number of seconds > 0, got 'soon'"]
    )


# ------------------------------------------------------------------------ the marker


def test_marker_with_met_slos_passes_and_the_body_reads_the_summary(project):
    project.makepyfile(
        test_marker="""
        import pytest
        from pytest_llmreplay.metrics.result import Result

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p99": "< 2s", "error_rate": "== 0"})
        def test_fast(llm_result):
            assert isinstance(llm_result, Result)
            assert llm_result.summary["requests"]["ok"] == 8
            assert llm_result.summary["ttft"]["p99"] < 2
    """
    )
    result = project.runpytest("--llm-offline", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*= llmreplay =*",
            "test*outcome*TTFT p50*TTFT p99*TPOT p50*TTFAT p90*cache hit, session mean*steady output tok/s",
            "test_marker.py::test_fast*passed* ms * ms * ms*",
            "llmreplay: test_marker.py::test_fast",
            "completed=8/8 requests*",
            "SLOs met: 2 of 2",
            "metric*threshold*measured*margin*status",
            "ttft.p99*< 2s*s*+*s (+*%)*ok",
            "error_rate*== 0*0*0*ok",
        ]
    )


def test_a_modules_slo_and_a_tests_own_slo_both_apply(project):
    """A module's ``pytestmark`` SLO was replaced whole by a test's own ``slo=``: the suite-wide
    ``ttft.p50 < 1ms`` (here: one no run meets) was dropped for every test with an SLO of its
    own, which then passed. The mappings merge, the test's metric winning; ``"off"`` drops one."""
    project.makepyfile(
        test_marker="""
        import pytest

        pytestmark = pytest.mark.llmreplay(slo={"ttft.p50": "< 1ms", "error_rate": "== 0"}, regression={"ttft.p50": "1%"})

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p99": "< 60s"})
        def test_own_slo(llm_result):
            pass

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p50": "off", "ttft.p99": "< 60s"})
        def test_turns_one_off(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_own_slo FAILED*", "*test_turns_one_off PASSED*"])
    result.stdout.fnmatch_lines(["SLO breached: 1 of 3", "*ttft.p50*< 1ms*BREACH"])
    result.stdout.fnmatch_lines(["SLOs met: 2 of 2", "*error_rate*== 0*ok", "*ttft.p99*< 60s*ok"])


def test_marker_arguments_merge_slo_and_regression_per_metric():
    from types import SimpleNamespace

    from pytest_llmreplay.plugin.spec import marker_arguments

    nearest_first = [
        SimpleNamespace(args=(), kwargs={"workload": "w.yaml", "slo": {"ttft.p99": "< 2s"}, "regression": "10%"}),
        SimpleNamespace(args=(), kwargs={"slo": {"ttft.p99": "< 9s", "error_rate": "== 0"}, "concurrency": 2}),
        SimpleNamespace(args=(), kwargs={"regression": {"ttft.p50": "off"}, "concurrency": 1}),
    ]
    node = SimpleNamespace(iter_markers=lambda name: iter(nearest_first))
    assert marker_arguments(node) == (
        (),
        {
            "regression": "10%",  # a number beside a mapping replaces it, as any other key
            "concurrency": 2,
            "slo": {"ttft.p99": "< 2s", "error_rate": "== 0"},
            "workload": "w.yaml",
        },
    )


# a perf test that writes its summary to summary.json, for a test to compare the tables with
SUMMARY_WRITER = """
import json

import pytest

@pytest.mark.llmreplay(workload="wl.yaml")
def test_fast(llm_result):
    with open("summary.json", "w") as file:
        json.dump(llm_result.summary, file)
"""


def test_terminal_summary_writes_each_figure_in_its_unit(project):
    project.makepyfile(test_in_units=SUMMARY_WRITER)
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(passed=1)
    from pytest_llmreplay.metrics.units import format_value

    summary = json.loads((project.path / "summary.json").read_text())
    header = next(i for i, line in enumerate(result.outlines) if line.startswith("test ") and "TTFT p50" in line)
    assert re.split(r"\s{2,}", result.outlines[header].strip()) == [
        "test",
        "outcome",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TTFAT p90",
        "cache hit, session mean",  # cache_hit_rate.mean (sessions' mean), not the client's Σ cached / Σ prompt
        "steady output tok/s",  # output_throughput.steady_state: the overall rate differs by the ramp-up
    ]
    row = re.split(
        r"\s{2,}",
        next(line for line in result.outlines[header:] if line.startswith("test_in_units.py::test_fast ")).strip(),
    )
    # the figures go through JUnit's properties unrounded: the row's digits are the other tables'
    # (rounded to 6 decimals first, 41.7650574 ms showed as 41.76 here and 41.77 there)
    expected = [
        format_value(metric, summary[metric][stat])
        for metric, stat in (
            ("ttft", "p50"),
            ("ttft", "p99"),
            ("tpot", "p50"),
            ("ttfat", "p90"),
            ("cache_hit_rate", "mean"),
            ("output_throughput", "steady_state"),
        )
    ]
    assert row == ["test_in_units.py::test_fast", "passed", *expected]
    assert row[2].endswith(" ms") and row[6].endswith("%") and row[7].endswith(" tok/s")


def test_marker_without_asking_for_llm_result_still_replays(project):
    project.makepyfile(
        test_marker="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p99": "< 1us"})
        def test_body_ignores_the_result():
            pass
    """
    )
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["SLO breached: 1 of 1"])


def test_breached_slos_fail_with_one_table_of_all_of_them(project):
    project.makepyfile(
        test_marker="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", concurrency=2,
                               slo={"ttft.p99": "< 1us", "error_rate": "== 0", "tpot.p50": "< 1ms", "output_throughput.steady_state": "> 1000000 tok/s"})
        def test_slow(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline", "-rf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_slow _*",
            "SLO breached: 3 of 4",
            "metric*threshold*measured*margin*status",
            "ttft.p99*< 1us*us*-*us (-*%)*BREACH",
            "error_rate*== 0*0*0*ok",
            "tpot.p50*< 1ms*ms*-*ms (-*%)*BREACH",
            "output_throughput.steady_state*> 1000000 tok/s*tok/s*-*tok/s (-*%)*BREACH",
            "*- llmreplay -*",
            "llmreplay: test_marker.py::test_slow",
        ]
    )
    result.stdout.fnmatch_lines(["FAILED test_marker.py::test_slow - *SLO breached: 3 of 4"])
    no_traceback(result)
    assert "def test_slow" not in result.stdout.str()


def test_positional_marker_arguments_are_a_collection_error(project):
    project.makepyfile(
        test_marker="""
        import pytest

        @pytest.mark.llmreplay("wl.yaml")
        def test_positional(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR collecting test_marker.py*",
            "In test_positional: @pytest.mark.llmreplay: give every setting by name (workload=..., slo=...)",
        ]
    )
    no_traceback(result)


def test_marker_without_workload_is_a_collection_error_naming_the_key(project):
    project.makepyfile(
        test_marker="""
        import pytest

        @pytest.mark.llmreplay(slo={"error_rate": "== 0"})
        def test_no_workload():
            pass
    """
    )
    result = project.runpytest("--llm-offline")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR collecting test_marker.py*", "In test_no_workload: @pytest.mark.llmreplay: missing key workload= (*)"]
    )
    no_traceback(result)
    assert "TypeError" not in result.stdout.str()


def test_marker_added_after_collection_without_workload_fails_with_one_line(project):
    project.makeconftest("""
        import pytest

        def pytest_collection_modifyitems(items):
            for item in items:
                item.add_marker(pytest.mark.llmreplay(concurrency=2))
    """)
    project.makepyfile("def test_late(llm_result): pass")
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(errors=1)  # in the llm_result fixture's setup
    result.stdout.fnmatch_lines(["*ERROR at setup of test_late*", "@pytest.mark.llmreplay: missing key workload= (*)"])
    no_traceback(result)


def test_llm_result_without_a_marker_says_how_to_add_one(project):
    project.makepyfile("def test_unmarked(llm_result): pass")
    result = project.runpytest("--llm-offline")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["llm_result: the test has no @pytest.mark.llmreplay(workload=...) marker"])


@pytest.mark.parametrize(
    ("slo", "message"),
    [
        ('{"ttft.p100": "< 2s"}', "SLO 'ttft.p100': ttft has no statistic 'p100'; expected one of *"),
        ('{"tfft.p99": "< 2s"}', "SLO 'tfft.p99': unknown metric 'tfft' (did you mean 'ttft'?); expected one of *"),
        ('{"e2el.p99": "< 2s"}', "SLO 'e2el.p99': unknown metric 'e2el' (did you mean 'latency'?); expected one of *"),
        ('{"ttft.median": "< 2s"}', "SLO 'ttft.median': ttft has no statistic 'median' (did you mean 'p50'?); *"),
        ('{"throughput.overall": "> 2 tok/s"}', "SLO 'throughput.overall': unknown metric 'throughput'; expected *"),
        ('{"ttft.p99": "fast"}', "SLO 'ttft.p99': cannot read threshold 'fast'; *"),
        (
            '{"ttft.p99": "< 2 sec"}',
            "SLO 'ttft.p99': cannot read threshold '< 2 sec': unknown unit 'sec' (did you mean 's'?); expected *",
        ),
        (
            '{"ttft.p99": "=< 2s"}',
            "SLO 'ttft.p99': cannot read threshold '=< 2s': unknown operator '=<' (did you mean '<='?); expected *",
        ),
        (
            '{"output_throughput.overall": ">= 5 tokens/s"}',
            "SLO 'output_throughput.overall': cannot read threshold '>= 5 tokens/s': unknown unit 'tokens/s' (did you mean 'tok/s'?); *",
        ),
        ('{"ttft.p99": "< 2 req/s"}', "SLO 'ttft.p99': unit 'req/s' does not fit ttft* (a time metric)*"),
    ],
)
def test_bad_slo_in_the_marker_names_the_key(project, slo, message):
    project.makepyfile(
        test_marker=f"""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", slo={slo})
        def test_bad_slo(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([message])
    no_traceback(result)
    # checked before anything is replayed
    assert "llmreplay: test_marker.py::test_bad_slo" not in result.stdout.str()


def test_bad_replay_setting_in_the_marker_names_it(project):
    project.makepyfile(
        test_marker="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", concurrency=0)
        def test_bad_setting(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["concurrency: expected an integer >= 1, got 0"])
    no_traceback(result)


# ------------------------------------------------------------------------ llm_replay in code


def test_llm_replay_returns_a_result_checked_when_the_body_ends(project):
    project.makepyfile(
        test_code="""
        from pytest_llmreplay.metrics.result import Result

        def test_code(llm_replay):
            result = llm_replay("wl.yaml", concurrency=4, slo={"error_rate": "== 0"})
            assert isinstance(result, Result)
            assert result.summary["requests"]["ok"] == 8
            assert result.summary["error_rate"]["value"] == 0
            result.assert_slo({"ttft.p99": "< 10s"}, error_rate="== 0")
    """
    )
    result = project.runpytest("--llm-offline", "-v")
    result.assert_outcomes(passed=1)
    # the run's own SLO, then the body's assert_slo checks
    result.stdout.fnmatch_lines(
        [
            "llmreplay: test_code.py::test_code",
            "SLOs met: 3 of 3",
            "error_rate*== 0*ok",
            "ttft.p99*< 10s*ok",
            "error_rate*== 0*ok",
        ]
    )


def test_assert_slo_failing_shows_the_table_and_keeps_the_measurement(project):
    project.makepyfile(
        test_code="""
        def test_code(llm_replay):
            result = llm_replay("wl.yaml")
            result.assert_slo({"ttft.p50": "< 1us", "error_rate": "== 0"})
    """
    )
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*SLOBreach: SLO breached: 1 of 2",
            "*metric*threshold*measured*margin*status",
            "*ttft.p50*< 1us*BREACH",
            "*error_rate*== 0*ok",
            "*- llmreplay -*",
            "llmreplay: test_code.py::test_code",
        ]
    )
    text = result.stdout.str()
    # the test's own line and the table; no frame of the library, nor its arguments (the summary)
    result.stdout.fnmatch_lines([">       result.assert_slo(*)", "E       *SLOBreach: SLO breached: 1 of 2"])
    assert "pytest_llmreplay/" not in text and "summary = {" not in text and "def assert_slo" not in text


def test_assert_slo_with_a_bad_threshold_is_one_error_at_the_test_line(project):
    project.makepyfile(
        test_code="""
        def test_code(llm_replay):
            result = llm_replay("wl.yaml")
            result.assert_slo({"ttft.p50": "< 2 tok/s"})
    """
    )
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            '>       result.assert_slo({"ttft.p50": "< 2 tok/s"})',
            "E       *LLMReplayError: SLO 'ttft.p50': unit 'tok/s' does not fit ttft.p50 (a time metric); *",
            "test_code.py:3: LLMReplayError",
        ]
    )
    text = result.stdout.str()
    assert "Traceback" not in text and "pytest_llmreplay/" not in text and "def parse_slo" not in text


def test_code_level_slo_checks_are_stored_with_the_runs_own(project):
    project.makepyfile(
        test_code="""
        import pytest
        from pytest_llmreplay.metrics.slo import SLOBreach

        def test_code(llm_replay):
            result = llm_replay("wl.yaml", slo={"error_rate": "== 0"})
            result.assert_slo({"ttft.p99": "< 10s"})
            with pytest.raises(SLOBreach):
                result.assert_slo({}, **{"ttft.p50": "< 1us"})
    """
    )
    result = project.runpytest("--llm-offline", "-v", "--llm-report=rep", "--llm-save")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["llmreplay: test_code.py::test_code", "*", "SLO breached: 1 of 3"], consecutive=False)
    stored = [json.loads(p.read_text()) for p in (project.path / ".llmreplay").rglob("*.json")]
    reported = json.loads(report_files(project.path / "rep")["test_code.py::test_code"][0].read_text())
    for record in (reported, *stored):
        assert [(c["key"], c["threshold"], c["passed"]) for c in record["slo"]] == [
            ("error_rate", "== 0", True),
            ("ttft.p99", "< 10s", True),
            ("ttft.p50", "< 1us", False),
        ]
    assert len(stored) == 1


def test_llm_replay_with_a_bad_workload_fails_with_one_line(project):
    project.makepyfile(
        test_code="""
        def test_code(llm_replay):
            llm_replay("missing.jsonl")
    """
    )
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"workload: {project.path / 'missing.jsonl'}: no such file or directory"])
    no_traceback(result)


def test_two_replays_in_one_test_have_their_own_keys(project):
    project.makepyfile(
        test_code="""
        def test_two(llm_replay):
            llm_replay("wl.yaml", concurrency=1)
            llm_replay("wl.yaml", concurrency=4, slo={"ttft.p99": "< 1us"})
            llm_replay("wl.yaml", name="warm", max_requests=4)
    """
    )
    result = project.runpytest("--llm-offline", "-v", "--junitxml=junit.xml")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_code.py::test_two::2",  # only the second one is breached: the failure names it
            "SLO breached: 1 of 1",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "llmreplay: test_code.py::test_two",
            "llmreplay: test_code.py::test_two::2",
            "llmreplay: test_code.py::test_two::warm",
        ]
    )
    properties = {p.get("name"): float(p.get("value")) for p in ET.parse(project.path / "junit.xml").iter("property")}
    assert {"llmreplay.ttft.p50", "llmreplay.ttft.p50 2", "llmreplay.ttft.p50 warm"} <= properties.keys()
    # the terminal summary: a row per run, each with its own figures (in their units)
    from pytest_llmreplay.metrics.units import format_value

    overview = result.stdout.str().split("= llmreplay =", 1)[1]
    for run, suffix in (
        ("test_code.py::test_two", ""),
        ("test_code.py::test_two::2", " 2"),
        ("test_code.py::test_two::warm", " warm"),
    ):
        row = re.search(rf"^{re.escape(run)} +failed +(\S+ \S+) +(\S+ \S+) ", overview, re.M)
        assert row, run
        assert row.group(1) == format_value("ttft", properties["llmreplay.ttft.p50" + suffix]), run
        assert row.group(2) == format_value("ttft", properties["llmreplay.ttft.p99" + suffix]), run


def test_a_named_first_run_has_its_summary_row(project):
    project.makepyfile(
        test_code="""
        def test_named(llm_replay):
            llm_replay("wl.yaml", name="cold")
    """
    )
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(passed=1)
    overview = result.stdout.str().split("= llmreplay =", 1)[1]
    assert re.search(r"^test_code.py::test_named::cold +passed +[0-9.]+ ", overview, re.M)


# ------------------------------------------------------------------------ spec files


def test_yaml_and_toml_spec_files_are_test_items(project):
    project.path.joinpath("chat_smoke.llmreplay.yaml").write_text(
        "description: the chat smoke test\nworkload: wl.yaml\nconcurrency: 2\nslo:\n  ttft.p99: < 2s\n  error_rate: == 0\n"
    )
    project.path.joinpath("chat_toml.llmreplay.toml").write_text(
        'workload = "wl.yaml"\nmax_requests = 4\n\n[slo]\n"ttft.p99" = "< 2s"\n'
    )
    project.path.joinpath("sub").mkdir()
    project.path.joinpath("sub", "nested.llmreplay.yml").write_text(
        "workload: ../wl.yaml\n"
    )  # relative to the spec file
    result = project.runpytest("--llm-offline", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "chat_smoke.llmreplay.yaml::chat_smoke PASSED*",
            "chat_toml.llmreplay.toml::chat_toml PASSED*",
            "sub/nested.llmreplay.yml::nested PASSED*",
        ],
        consecutive=False,
    )
    result.stdout.fnmatch_lines(
        ["llmreplay: chat_toml.llmreplay.toml::chat_toml", "completed=4/4 requests*", "SLOs met: 1 of 1"]
    )


def test_spec_file_with_a_breached_slo_fails_with_the_table(project):
    project.path.joinpath("slow.llmreplay.yaml").write_text(
        "workload: wl.yaml\nslo:\n  ttft.p99: < 1us\n  error_rate: == 0\n"
    )
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ llmreplay spec slow _*",
            "SLO breached: 1 of 2",
            "metric*threshold*measured*margin*status",
            "ttft.p99*< 1us*BREACH",
            "error_rate*== 0*ok",
        ]
    )
    no_traceback(result)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workload: wl.yaml\nconcurency: 8\n", "concurency: unknown key; expected one of workload, format, *"),
        ("workload: wl.yaml\nslo:\n  ttft.p99: quick\n", "SLO 'ttft.p99': cannot read threshold 'quick'; *"),
        (
            "workload: wl.yaml\nslo:\n  ttft.p99: < 2 tok/s\n",
            "SLO 'ttft.p99': unit 'tok/s' does not fit ttft* (a time metric)*",
        ),
        ("workload: nowhere.jsonl\n", "workload: {dir}/nowhere.jsonl: no such file or directory"),
        (
            "workload: wl.yaml\nslo: [ttft\n",
            "line 3, column 1: not valid YAML: expected ',' or '?', but got '<stream end>' (while parsing a flow sequence that starts at line 2, column 6)",
        ),
        (
            "workload: wl.yaml\nslo: \a\n",
            "line 2, column 6: not valid YAML: character #x0007 is not allowed (expected printable characters, tabs and line breaks)",
        ),
        (
            "workload: wl.yaml\nslo: " + "[" * 100_000 + "]" * 100_000 + "\n",
            "line 2, column *: not valid YAML: nested too deeply: *",
        ),
        ('workload: wl.yaml\nconcurrency: "eight"\n', "concurrency: expected an integer, got 'eight'"),
        (
            "workload: wl.yaml\nregression:\n  ttft.p50: lots\n",
            "regression 'ttft.p50': expected an allowed change such as '10%', 0.1 or 'off', got 'lots'",
        ),
        ("- workload: wl.yaml\n", "expected a mapping of keys (workload, slo, ...), got list"),
        ("# nothing yet\n", "empty: expected a mapping of keys, at least workload (and slo, ...)"),
        # `slo:` with nothing under it (its keys not indented, or not written yet) would check nothing
        ("workload: wl.yaml\nslo:\n", 'slo: empty; give at least one (ttft.p99: "< 1s"), indented under it, or leave*'),
        ("workload: wl.yaml\nslo: {}\n", "slo: empty; *"),
        (
            "workload: wl.yaml\nslo:\n  ttft.p99: < 2s\nconcurrency: 2\nslo:\n  error_rate: == 0\n",
            "line 5: not valid YAML: duplicate key 'slo' (first on line 2)",
        ),
        (
            "workload: wl.yaml\nslo:\n  ttft.p99: < 2s\n  ttft.p99: < 1s\n",
            "line 4: not valid YAML: duplicate key 'ttft.p99' (first on line 3)",
        ),
        (
            "workload: wl.yaml\nformat: moonkake\n",
            "format: unknown workload format 'moonkake'; expected one of *mooncake*",
        ),
        (
            "workload: wl.yaml\nformat: mooncake\nformat_options: {blocksize: 16}\n",
            "format_options: format 'mooncake' takes block_size; got blocksize",
        ),
        (
            "workload: wl.yaml\nformat: mooncake\nformat_options: {block_size: 0}\n",
            "format_options: block_size must be an integer >= 1, got 0",
        ),
        (
            "workload: wl.yaml\nformat_options: {block_size: 16}\n",
            "format_options: format 'synthetic' takes no options; got block_size",
        ),
        # YAML reads a value that starts with '>' as folded text: say to quote it, as '<' need not be
        (
            "workload: wl.yaml\nslo:\n  ttft.p99: < 1s\n  goodput: >= 90%\n",
            "line 4, column 13: not valid YAML: expected chomping or indentation indicators, *; "
            "a threshold that starts with '>' is quoted in YAML: goodput: \">= 90%\"",
        ),
        (
            "workload: wl.yaml\nslo: {ttft.p99: < 1s, output_throughput.overall: > 10 tok/s}\n",
            "line 2, column *: not valid YAML: found character '>' that cannot start any token *; "
            "a threshold that starts with '>' is quoted in YAML: output_throughput.overall: \"> 10 tok/s\"",
        ),
        # thresholds that every run passes, or none does
        ("workload: wl.yaml\nslo:\n  ttft.p99: < 1e400s\n", "SLO 'ttft.p99': '1e400' is too large a number *"),
        (
            "workload: wl.yaml\nslo:\n  error_rate: < 0%\n",
            "SLO 'error_rate': '< 0%' can never hold (error_rate is never negative); write '== 0' or '<= 0'",
        ),
        (
            "workload: wl.yaml\nslo:\n  goodput: '>= 150%'\n  ttft.p99: < 1s\n",
            "SLO 'goodput': expected a threshold from 0 to 100% (goodput is a share), got '>= 150%'",
        ),
        (
            "workload: wl.yaml\nslo:\n  cache_hit_rate.mean: '> 100%'\n",
            "SLO 'cache_hit_rate.mean': '> 100%' can never hold (cache_hit_rate.mean is a share, at most 100%); *",
        ),
        # a goodput without a per-request limit would fail every run as "not measured"
        (
            "workload: wl.yaml\nslo:\n  goodput: '>= 5 req/s'\n  ttft.p99: '> 1ms'\n",
            "slo 'goodput': goodput counts the requests that meet every per-request limit, and none is set by the test's slo; "
            "add an upper bound (< or <=) on ttft, ttfo, tpot, latency or itl, e.g. ttft.p99 < 1s",
        ),
    ],
)
def test_bad_spec_file_is_a_collection_error_naming_file_and_key(project, text, message):
    path = project.path / "broken.llmreplay.yaml"
    path.write_text(text)
    result = project.runpytest("--llm-offline")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR collecting broken.llmreplay.yaml*", f"{path}: {message.format(dir=project.path)}"]
    )
    no_traceback(result)


def spec_file_says(project, name: str, text: str, line: str, **outcomes: int) -> None:
    """A spec file ``name`` holding ``text`` gives ``outcomes`` and prints ``line`` (``{path}``:
    the file's), with no traceback."""
    path = project.path / name
    path.write_text(text)
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(**outcomes)
    result.stdout.fnmatch_lines([line.format(path=path, dir=project.path)])
    no_traceback(result)


def test_a_workload_that_is_not_the_spec_files_format_names_the_format_key(project):
    # wl.yaml is a synthetic spec; read as Mooncake JSON lines it fails at its first line, and
    # the message says it was read so because of the test's format setting
    spec_file_says(
        project,
        "wrong.llmreplay.yaml",
        "workload: wl.yaml\nformat: mooncake\n",
        "format: {dir}/wl.yaml:1: * (read as 'mooncake', as the test's format says)",
        failed=1,
    )


@pytest.mark.parametrize(
    ("name", "data", "where"),
    [
        (
            "broken.llmreplay.yaml",
            b"workload: wl.yaml\nslo:\n  ttft.p99: \xff< 2s\n",
            "line 3: not UTF-8: byte 0xff at column 13",
        ),
        ("broken.llmreplay.toml", b'workload = "wl.yaml"\n# caf\xe9\n', "line 2: not UTF-8: byte 0xe9 at column 6"),
    ],
)
def test_spec_file_with_a_byte_that_is_not_utf8_names_its_line_and_column(project, name, data, where):
    path = project.path / name
    path.write_bytes(data)
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"{path}: {where} (expected UTF-8 YAML or TOML)"])
    no_traceback(result)


@pytest.mark.parametrize(
    "text",
    ['workload = "wl.yaml"\nconcurrency = \n', 'workload = "wl.yaml"\nslo = ' + "[" * 100_000 + "]" * 100_000 + "\n"],
    ids=["syntax", "nested-past-the-recursion-limit"],
)
def test_bad_toml_spec_file_is_a_collection_error(project, text):
    path = project.path / "broken.llmreplay.toml"
    path.write_text(text)
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"{path}: not valid TOML: *"])
    no_traceback(result)


def test_a_key_given_twice_in_a_toml_spec_file_shows_its_line(project):
    # tomllib's message names no key ("Cannot overwrite a value"): the line it points at does
    spec_file_says(
        project,
        "twice.llmreplay.toml",
        'workload = "wl.yaml"\nconcurrency = 2\nconcurrency = 4\n',
        "{path}: not valid TOML: Cannot overwrite a value (at line 3, column 16): `concurrency = 4`",
        errors=1,
    )


# ------------------------------------------------------------------------ endpoint fixtures


def test_llm_endpoint_offline(project):
    project.makepyfile("""
        def test_kind(llm_endpoint):
            assert llm_endpoint.kind == "offline"
            assert llm_endpoint.url is None
            assert llm_endpoint.fingerprint["kind"] == "offline"
            assert llm_endpoint.fingerprint["sim_profile"] == "llama-3.1-8b-h100"
            assert llm_endpoint.fingerprint["hardware"] == "1 x NVIDIA H100 SXM5 80GB"
    """)
    project.runpytest("--llm-offline").assert_outcomes(passed=1)


def test_llm_offline_false_serves_the_simulator_over_http(project):
    project.makepyfile("""
        from pathlib import Path

        def test_sim_server(llm_endpoint, llm_replay):
            assert llm_endpoint.kind == "sim-server"
            assert llm_endpoint.url.startswith("http://127.0.0.1:")
            assert llm_endpoint.name == f"sim:llama-3.1-8b-h100 at {llm_endpoint.url}"
            assert llm_endpoint.fingerprint["kind"] == "sim-server"
            Path("url.txt").write_text(llm_endpoint.url)
            result = llm_replay("tiny.yaml", concurrency=3, slo={"error_rate": "== 0"})
            assert result.summary["requests"]["ok"] == 3
    """)
    result = project.runpytest("-v", "-o", "llm_offline=false")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["llmreplay: simulator llama-3.1-8b-h100 (over HTTP, wall clock); *", "completed=3/3 requests*"]
    )
    port = int(project.path.joinpath("url.txt").read_text().rsplit(":", 1)[1])
    assert refuses_connections(port), "the simulator server outlived the session"


def test_two_tests_share_no_prompt_tokens_even_with_one_workload(project):
    """On one server for the whole session, no test may warm the prefix cache for another, so
    that a test's figures do not depend on the tests before it: each replay salts generated
    prompts with its workload's digest and its test's id (its baseline key)."""
    project.path.joinpath("other.yaml").write_text(TINY_WORKLOAD.replace("seed: 1", "seed: 2"))
    project.makepyfile("""
        def test_first(llm_replay):
            assert llm_replay("tiny.yaml", concurrency=1).summary["cache_hit_rate"]["mean"] == 0

        def test_second(llm_replay):
            assert llm_replay("other.yaml", concurrency=1).summary["cache_hit_rate"]["mean"] == 0

        def test_first_again(llm_replay):
            assert llm_replay("tiny.yaml", concurrency=1).summary["cache_hit_rate"]["mean"] == 0
    """)
    project.runpytest("-o", "llm_offline=false", "--llm-repeat", "1").assert_outcomes(
        passed=3
    )  # repeats would reset the cache before each run


def test_llm_endpoint_live_with_a_server_the_plugin_starts(project, tmp_path_factory, monkeypatch):
    temp_root = tmp_path_factory.mktemp("tmp")
    monkeypatch.setattr("tempfile.tempdir", str(temp_root))  # to see what the session leaves there
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    project.makepyfile(f"""
        def test_live(llm_endpoint, llm_replay):
            assert llm_endpoint.kind == "live"
            assert llm_endpoint.url == "{url}"
            assert llm_endpoint.name == "{url}"
            assert llm_endpoint.fingerprint["kind"] == "live"
            assert llm_endpoint.fingerprint["model"] == llm_endpoint.model
            result = llm_replay("tiny.yaml", concurrency=3, slo={{"error_rate": "== 0"}})
            assert result.summary["requests"]["ok"] == 3
    """)
    command = f"{sys.executable} -m pytest_llmreplay.cli.main sim --port {port}"
    result = project.runpytest("-v", "--llm-endpoint", url, "--llm-server-cmd", command)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"llmreplay: endpoint {url} (started by --llm-server-cmd); baselines *", "completed=3/3 requests*"]
    )
    assert refuses_connections(port), "the --llm-server-cmd server outlived the session"
    assert [p.name for p in temp_root.iterdir() if p.name.startswith("llmreplay-server-")] == [], (
        "its log folder outlived it"
    )


@pytest.mark.parametrize(
    ("given", "resets", "seen"), [(None, "auto", "1"), ("0", "auto", "0"), (None, "off", "unset"), ("1", "off", "1")]
)
def test_a_started_server_gets_vllms_dev_mode_for_cache_resets_unless_the_user_set_it(
    project, monkeypatch, given, resets, seen
):
    """Repeats (3 by default) reset the prefix cache before each run; vLLM has POST
    /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1, so a server the plugin starts gets it,
    unless the environment already says either way, or the session resets no cache
    (``--llm-cache-reset=off``: then nothing needs dev mode's endpoints)."""
    if given is None:
        monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    else:
        monkeypatch.setenv("VLLM_SERVER_DEV_MODE", given)
    port = free_port()
    project.makepyfile("def test_nothing(): pass")
    command = f"sh -c 'echo \"dev mode=${{VLLM_SERVER_DEV_MODE-unset}}\" > seen.txt; exec {sys.executable} -m pytest_llmreplay.cli.main sim --port {port}'"
    result = project.runpytest(
        "--llm-endpoint", f"http://127.0.0.1:{port}", "--llm-server-cmd", command, f"--llm-cache-reset={resets}"
    )
    result.assert_outcomes(passed=1)
    assert project.path.joinpath("seen.txt").read_text().strip() == f"dev mode={seen}"


@pytest.mark.parametrize("ignore_eos", [False, True])
def test_ignore_eos_and_extra_body_reach_every_request(project, ignore_eos):
    """The server stops a request at a simulated EOS (after 1 token on average) unless the
    request says ``ignore_eos``; ``min_tokens`` from the extra body is honoured either way."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    project.makepyfile(f"""
        def test_live(llm_endpoint, llm_replay):
            assert llm_endpoint.fingerprint["extra_body"] == {{"min_tokens": 2{', "ignore_eos": True' if ignore_eos else ""}}}
            records = llm_replay("tiny.yaml", concurrency=3).records
            planned = [r.planned_output_tokens for r in records]
            assert min(planned) > 2
            if {ignore_eos}:
                assert [r.output_tokens for r in records] == planned
            else:
                assert all(2 <= r.output_tokens for r in records) and sum(r.output_tokens for r in records) < sum(planned)
    """)
    command = f"{sys.executable} -m pytest_llmreplay.cli.main sim --port {port} --eos-mean-tokens 1"
    flags = ["--llm-ignore-eos"] if ignore_eos else []
    result = project.runpytest(
        "--llm-endpoint", url, "--llm-server-cmd", command, "--llm-extra-body", '{"min_tokens": 2}', *flags
    )
    result.assert_outcomes(passed=1)
    adds = '{"min_tokens": 2, "ignore_eos": true}' if ignore_eos else '{"min_tokens": 2}'
    result.stdout.fnmatch_lines(
        [f"llmreplay: endpoint {url} (started by --llm-server-cmd), every request adds {adds}; baselines *"]
    )


def test_offline_simulator_checks_the_extra_body_as_its_server_does(project):
    project.makepyfile("""
        def test_offline(llm_replay):
            records = llm_replay("tiny.yaml", concurrency=3).records
            assert {r.error for r in records} == {"http: 400 n: only 1 is supported, got 2"}
    """)
    project.runpytest("--llm-offline", "--llm-extra-body", '{"n": 2}').assert_outcomes(passed=1)


def test_unreachable_endpoint_fails_with_one_line(project, refused_url):
    url = refused_url
    project.makepyfile("def test_kind(llm_endpoint): pass")
    result = project.runpytest("--llm-endpoint", url)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"--llm-endpoint {url}: cannot read /v1/models (connection refused)"])
    no_traceback(result)


def test_sim_profile_is_not_checked_against_a_live_endpoint(project):
    project.makeini("[pytest]\nllm_sim_profile = no-such-gpu\n")
    project.makepyfile("def test_nothing(): pass")
    project.runpytest("--llm-endpoint", "http://127.0.0.1:9").assert_outcomes(passed=1)


def test_llm_model_replaces_the_model_of_verbatim_payloads(project):
    """The bundled AIPerf inputs name "served-model"; the simulator serves "tiny-test"."""
    from test_sim_server import serving

    from pytest_llmreplay.workloads.prompts import PromptFactory
    from pytest_llmreplay.workloads.tokenizer import load_tokenizer

    workload = Path(__file__).parents[1] / "workloads" / "aiperf_inputs_support_chat.json"
    project.makepyfile(f"""
        def test_payloads(llm_replay):
            summary = llm_replay({str(workload)!r}, max_requests=4, concurrency=4).summary
            assert summary["requests"]["ok"] == 4, summary["requests"]
    """)
    with serving(PromptFactory(load_tokenizer(None))) as sim:
        project.runpytest("--llm-endpoint", sim.url, "--llm-model", "tiny-test").assert_outcomes(passed=1)
        project.runpytest("--llm-endpoint", sim.url).assert_outcomes(failed=1)


def test_invalid_sim_profile_file_fails_each_test_with_one_clear_line(project):
    project.makepyfile("def test_kind(llm_endpoint): pass")
    project.path.joinpath("spec.llmreplay.yaml").write_text("workload: wl.yaml\n")
    project.path.joinpath("fast.json").write_text('{"speed": 1}')
    result = project.runpytest(
        "--llm-offline", "--llm-sim-profile", "fast.json", "-rN"
    )  # no short summary: CI prints it untruncated
    result.assert_outcomes(errors=1, failed=1)
    line = "--llm-sim-profile: fast.json: speed: unknown field (expected one of: *)"
    result.stdout.fnmatch_lines([line])
    assert (
        result.stdout.str().count("--llm-sim-profile: fast.json: speed: unknown field") == 3
    )  # once per test (in its section), and for the perf test in the summary's line of tests with no result
    result.stdout.fnmatch_lines(
        ["llmreplay: no result: 1 perf test errored before measuring: spec.llmreplay.yaml::* (*)"]
    )
    assert "During handling" not in result.stdout.str()
    no_traceback(result)


# ------------------------------------------------------------------------ reports


MARKED_TESTS = """
import pytest

@pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p99": "< 2s"})
def test_chat(llm_result):
    pass

@pytest.mark.llmreplay(workload="wl.yaml", concurrency=2, slo={"ttft.p99": "< 1us"})
def test_breach(llm_result):
    pass
"""


def test_report_dir_has_every_test_and_the_session_summary(project):
    project.makepyfile(test_rep=MARKED_TESTS)
    result = project.runpytest("--llm-offline", "--llm-report", "reports")
    result.assert_outcomes(passed=1, failed=1)
    folder = project.path / "reports"
    files = report_files(folder)
    assert sorted(files) == ["test_rep.py::test_breach", "test_rep.py::test_chat"]
    for test, (json_file, csv_file) in files.items():
        record = json.loads(json_file.read_text())
        assert record["test"] == test
        assert record["fingerprint"]["kind"] == "offline"
        assert len(record["samples"]["ttft"]) == 8  # one run of 8 requests: offline without jitter
        csv_lines = csv_file.read_text().splitlines()
        assert len(csv_lines) == 1 + 8  # a header and one row per request
    summary = (folder / "summary.md").read_text()
    assert summary.startswith("## llmreplay: 2 perf tests\n")
    assert re.search(r"^\| test_rep\.py::test_chat +\| PASS +\| 8/8 .*\| 1/1 +\| - +\|$", summary, re.M), summary
    assert re.search(r"^\| test_rep\.py::test_breach +\| FAIL +\| 8/8 .*\| 0/1 +\| - +\|$", summary, re.M), summary
    assert "### test_rep.py::test_breach" in summary and "BREACH" in summary
    page = (folder / "index.html").read_text()
    assert page.startswith("<!doctype html>")
    from pytest_llmreplay.report.html import anchor

    for test in ("test_rep.py::test_chat", "test_rep.py::test_breach"):  # TTFT, TPOT and latency CDFs of both tests
        for metric in ("ttft", "tpot", "latency"):
            plot = f"{anchor(test)}-{metric}"
            assert f'<svg id="{plot}"' in page and f'<g id="{plot}-this-run">' in page
    assert "<title>TTFT: CDF of requests</title>" in page and "-baseline" not in page  # no baseline curve
    assert f'<g id="{anchor("test_rep.py::test_breach")}-ttft-slo-0">' in page  # the threshold line
    result.stdout.fnmatch_lines([f"llmreplay reports: wrote {folder / 'summary.md'}, {folder / 'index.html'}"])


def test_report_dir_drops_files_of_tests_not_run_again(project):
    project.makepyfile(test_rep=MARKED_TESTS)
    project.runpytest("--llm-offline", "--llm-report", "reports")
    result = project.runpytest("--llm-offline", "--llm-report", "reports", "-k", "chat")
    result.assert_outcomes(passed=1, deselected=1)
    assert list(report_files(project.path / "reports")) == ["test_rep.py::test_chat"]
    assert (project.path / "reports" / "summary.md").read_text().startswith("## llmreplay: 1 perf test\n")


def test_report_dir_of_a_session_without_perf_tests_describes_no_old_run(project):
    project.makepyfile(test_rep=MARKED_TESTS + "\ndef test_plain():\n    pass\n")
    project.runpytest("--llm-offline", "--llm-report", "reports").assert_outcomes(passed=2, failed=1)
    result = project.runpytest("--llm-offline", "--llm-report", "reports", "-k", "plain")
    result.assert_outcomes(passed=1, deselected=2)
    folder = project.path / "reports"
    assert list((folder / "tests").iterdir()) == []
    for page in ("summary.md", "index.html"):  # gone, or rewritten: never the previous session's tests
        assert not (folder / page).exists() or "test_rep.py::test_chat" not in (folder / page).read_text(), page


def test_collecting_only_says_nothing_of_perf_tests_not_judged(project):
    """`pytest --collect-only` printed every perf test `not judged` and "the session was
    interrupted" (a new user's trial): collecting runs no test, so none is left unjudged."""
    project.makepyfile(test_rep=MARKED_TESTS)
    result = project.runpytest("--llm-offline", "--collect-only", "-q")
    assert result.ret == 0
    assert "not judged" not in result.stdout.str() and "= llmreplay =" not in result.stdout.str()


def test_github_step_summary_gets_the_markdown_appended(project, monkeypatch):
    step_summary = project.path / "step_summary.md"
    step_summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    project.makepyfile(test_rep=MARKED_TESTS)
    project.runpytest("--llm-offline", "--llm-report", "reports").assert_outcomes(passed=1, failed=1)
    written = (project.path / "reports" / "summary.md").read_text()
    assert step_summary.read_text() == "# earlier step\n" + written
    assert "test_rep.py::test_chat" in written


def test_the_reports_outcome_is_the_tests_as_pytest_reports_it(project):
    """A strict xfail that passed, and a test whose second replay failed, were PASS in the step
    summary and the reports though pytest failed them; a test skipped in its body was FAIL on its
    breached SLO though pytest skipped it (found by a review helper)."""
    project.makepyfile(
        test_outcomes="""
        import pytest

        @pytest.mark.xfail(strict=True, reason="known slow")
        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p99": "< 10s"})
        def test_xpass_strict(llm_result):
            pass

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p99": "< 1us"})
        def test_skip_in_body(llm_result):
            pytest.skip("not today")

        def test_twice(llm_replay):
            llm_replay("wl.yaml", slo={"ttft.p99": "< 10s"})
            llm_replay("wl.yaml", name="second run", slo={"ttft.p99": "< 1us"})
    """
    )
    result = project.runpytest("--llm-offline", "--llm-report", "reports", "test_outcomes.py")
    result.assert_outcomes(failed=2, skipped=1)
    summary = (project.path / "reports" / "summary.md").read_text()
    statuses = {
        cells[1].strip(): cells[2].strip()
        for cells in (line.split("|") for line in summary.splitlines() if line.startswith("| test_outcomes.py::"))
    }
    assert statuses == {
        "test_outcomes.py::test_xpass_strict": "FAIL",
        "test_outcomes.py::test_skip_in_body": "SKIPPED",
        "test_outcomes.py::test_twice": "FAIL",
        "test_outcomes.py::test_twice::second run": "FAIL",
    }, summary
    assert "the test failed" in (project.path / "reports" / "index.html").read_text()
    kept = [json.loads(path.read_text()) for path in (project.path / "reports" / "tests").glob("*.json")]
    assert {record["test"]: record["test_outcome"] for record in kept} == {  # the per-test files say it too
        "test_outcomes.py::test_xpass_strict": "failed",  # pytest fails a strict xfail that passed
        "test_outcomes.py::test_skip_in_body": "skipped",
        "test_outcomes.py::test_twice": "failed",
        "test_outcomes.py::test_twice::second run": "failed",
    }
    assert not list((project.path / "reports" / "tests").glob(".*"))  # no temporary file left


@pytest.mark.parametrize("step_summary", [True, False], ids=["GITHUB_STEP_SUMMARY set", "unset"])
def test_the_step_summary_needs_no_report_folder(project, monkeypatch, step_summary):
    summary = project.path / "step_summary.md"
    private = project.path / "tmp"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))  # where the records' temporary folder goes
    if step_summary:
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    else:
        monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    project.makepyfile(test_rep=MARKED_TESTS)
    project.runpytest_subprocess("--llm-offline", "-p", "no:cacheprovider").assert_outcomes(passed=1, failed=1)
    assert summary.exists() == step_summary  # no file at all when the variable is unset
    if step_summary:
        text = summary.read_text()
        assert text.startswith("## llmreplay: 2 perf tests\n")
        assert re.search(r"^\| ttft\.p99 +\| < 1us +\| .+ \| .+ \| BREACH +\|$", text, re.M), text  # with its margin
        assert re.search(r"^Endpoint: kind offline, .*model ", text, re.M), text  # the server each test measured
    assert not list(private.iterdir())  # the temporary records are gone


def test_llm_summary_md_writes_the_step_summary_anywhere(project, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(project.path / "step_summary.md"))
    project.makepyfile(test_rep=MARKED_TESTS)
    result = project.runpytest("--llm-offline", "--llm-summary-md", "out/summary.md")
    result.assert_outcomes(passed=1, failed=1)
    written = (project.path / "out" / "summary.md").read_text()
    assert written == (project.path / "step_summary.md").read_text()
    assert "test_rep.py::test_chat" in written and "test_rep.py::test_breach" in written
    assert f"wrote {project.path / 'out' / 'summary.md'}" in result.stdout.str()


def test_a_step_summary_near_githubs_limit_gets_a_cut_summary(project, monkeypatch):
    from pytest_llmreplay.report.files import STEP_SUMMARY_LIMIT

    step_summary = project.path / "step_summary.md"
    step_summary.write_text("x" * (STEP_SUMMARY_LIMIT - 1200) + "\n")  # earlier steps left 1.2 KB of room
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    project.makepyfile(test_rep=MARKED_TESTS)
    project.runpytest("--llm-offline", "--llm-summary-md", "whole.md").assert_outcomes(passed=1, failed=1)
    assert step_summary.stat().st_size <= STEP_SUMMARY_LIMIT
    appended = step_summary.read_text().split("\n", 1)[1]
    whole = (project.path / "whole.md").read_text()
    kept, cut_line = appended.rsplit("\n\n", 1)
    assert whole.startswith(kept) and len(kept) > 0
    cut = whole.count("\n") - kept.count("\n") - 1
    assert (
        cut_line
        == f"_{cut} more lines of this summary cut here, to stay under GitHub's 1024 KiB step-summary limit: the whole of it is in --llm-summary-md or --llm-report's summary.md._\n"
    )


def test_junit_xml_carries_the_key_figures(project):
    project.makepyfile(test_rep=MARKED_TESTS)
    project.runpytest("--llm-offline", "--junitxml=out.xml").assert_outcomes(passed=1, failed=1)
    cases = {case.get("name"): case for case in ET.parse(project.path / "out.xml").iter("testcase")}
    assert set(cases) == {"test_chat", "test_breach"}
    for case in cases.values():
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert {
            "llmreplay.ttft.p50",
            "llmreplay.ttft.p99",
            "llmreplay.tpot.p50",
            "llmreplay.error_rate",
            "llmreplay.output_throughput.steady_state",
            "llmreplay.request_throughput.steady_state",
        } <= set(properties)
        assert float(properties["llmreplay.error_rate"]) == 0
        assert 0 < float(properties["llmreplay.ttft.p50"]) <= float(properties["llmreplay.ttft.p99"]) < 2
        assert not any(name.startswith("llmreplay.change.") for name in properties)  # nothing compared


# ------------------------------------------------------------------------ pytest-xdist


@pytest.mark.parametrize("report", [True, False], ids=["--llm-report", "the step summary alone"])
def test_xdist_workers_measure_and_the_controller_reports_every_test(project, monkeypatch, report):
    step_summary = project.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    private = project.path / "tmp"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))  # where the records' temporary folder goes without a report
    project.makepyfile(
        test_many="""
        import pytest

        @pytest.mark.parametrize("concurrency", [1, 2, 3, 4])
        def test_marked(llm_replay, concurrency):
            llm_replay("wl.yaml", concurrency=concurrency, slo={"ttft.p99": "< 5s"})
    """
    )
    project.path.joinpath("spec.llmreplay.yaml").write_text("workload: wl.yaml\nslo:\n  error_rate: == 0\n")
    report_args = ["--llm-report", "rep"] if report else []
    result = project.runpytest_subprocess("-n", "2", "--llm-offline", *report_args, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    tests = [f"test_many.py::test_marked[{c}]" for c in (1, 2, 3, 4)] + ["spec.llmreplay.yaml::spec"]
    out = result.stdout.str()
    summary_section = out.split("= llmreplay =", 1)[1]
    for test in tests:  # the overview: one row per test, from the workers' reports
        assert re.search(rf"^{re.escape(test)} +passed +[0-9.]+ ", summary_section, re.M), test
    summary = step_summary.read_text()  # by the controller alone, once
    assert summary.startswith("## llmreplay: 5 perf tests\n")
    from pytest_llmreplay.report.files import markdown_text

    for test in tests:
        assert f"| {markdown_text(test)} " in summary, test  # test_marked\[1\]: no link in the step summary
    in_order = sorted(tests)  # the rows of each, whichever worker finished first: as a serial run's
    assert [test for test in re.findall(r"^(\S+::\S+) +passed ", summary_section, re.M)] == in_order
    assert re.findall(r"^\| (\S+::\S+) +\| PASS", summary, re.M) == [markdown_text(test) for test in in_order]
    if report:
        assert sorted(report_files(project.path / "rep")) == sorted(tests)
        assert (project.path / "rep" / "summary.md").read_text() == summary
        result.stdout.fnmatch_lines(
            [f"llmreplay reports: wrote {project.path / 'rep' / 'summary.md'}, {project.path / 'rep' / 'index.html'}"]
        )
    else:
        assert not (project.path / "rep").exists()
        assert not list(private.iterdir())  # the workers' records, in the controller's temporary folder, are gone


def test_a_breach_a_hair_past_the_threshold_shows_the_digits_that_breach_it(project):
    # the measured value had 4 significant digits: "<= 7.427ms  measured 7.427 ms  BREACH"
    from pytest_llmreplay.metrics.units import significant

    project.makepyfile(test_measure=SUMMARY_WRITER)
    project.runpytest("--llm-offline", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    measured = json.loads((project.path / "summary.json").read_text())["ttft"]["p50"] * 1000
    rounded = significant(measured, 4)  # what the table showed
    op = "<=" if float(rounded) < measured else ">="  # a threshold the rounded figure meets and the measurement not
    project.makepyfile(
        test_measure=f"""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", slo={{"ttft.p50": "{op} {rounded}ms"}})
        def test_fast(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    rows = [line.split() for line in result.outlines if line.startswith("ttft.p50 ") and "BREACH" in line]
    row = rows[0]
    assert rows == [row] * len(rows)  # the failure's table and the test's section
    shown = float(row[3].replace(",", ""))
    assert row[1:5] == [op, f"{rounded}ms", row[3], "ms"] and row[3] != rounded
    assert not (shown <= float(rounded) if op == "<=" else shown >= float(rounded))  # the number shown breaches
    assert shown == pytest.approx(measured, rel=1e-4)


def test_the_terminal_summary_lists_tests_in_the_order_of_the_reports(project):
    # test_b is defined first: the terminal had its rows in the order the tests ran (under xdist,
    # the order the workers finished in), the step summary and report files by test id
    project.makepyfile(
        test_order="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml")
        def test_b(llm_result):
            pass

        @pytest.mark.llmreplay(workload="wl.yaml")
        def test_a(llm_result):
            pass
    """
    )
    result = project.runpytest("--llm-offline", "--llm-summary-md", "summary.md", "-v")
    result.assert_outcomes(passed=2)
    summary_section = result.stdout.str().split("= llmreplay =", 1)[1]
    rows = re.findall(r"^(\S+::\S+) +passed ", summary_section, re.M)
    assert rows == ["test_order.py::test_a", "test_order.py::test_b"]
    assert re.findall(r"^\| (\S+::\S+) +\| NO SLOS", (project.path / "summary.md").read_text(), re.M) == rows
    tables = re.findall(r"^llmreplay: (\S+::\S+)$", summary_section, re.M)  # -v: each test's tables
    assert tables == rows


# ------------------------------------------------------------------------ hooks


METRIC_CONFTEST = """
def pytest_llmreplay_metrics():
    return {"ttft_spread": lambda result: {"value": result.summary["ttft"]["p99"] / result.summary["ttft"]["p50"]}}
"""


def test_metrics_hook_adds_a_metric_to_the_summary_and_slos(project):
    project.makeconftest(METRIC_CONFTEST)
    project.makepyfile(
        test_metric="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft_spread": "< 1000"})
        def test_spread_ok(llm_result):
            spread = llm_result.summary["ttft_spread"]["value"]
            assert spread == llm_result.summary["ttft"]["p99"] / llm_result.summary["ttft"]["p50"]

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft_spread.value": "> 1000"})
        def test_spread_breached(llm_result):
            pass
    """
    )
    project.path.joinpath("spread.llmreplay.yaml").write_text("workload: wl.yaml\nslo:\n  ttft_spread: < 1000\n")
    result = project.runpytest("--llm-offline", "-v", "--llm-report", "rep")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["SLO breached: 1 of 1", "metric*threshold*measured*margin*status", "ttft_spread.value*> 1000*-*BREACH"]
    )
    result.stdout.fnmatch_lines(
        ["llmreplay: test_metric.py::test_spread_ok", "*", "SLOs met: 1 of 1", "*", "ttft_spread*< 1000*ok"],
        consecutive=False,
    )
    record = json.loads(report_files(project.path / "rep")["spread.llmreplay.yaml::spread"][0].read_text())
    assert record["summary"]["ttft_spread"]["value"] > 1
    assert record["slo"][0]["key"] == "ttft_spread" and record["slo"][0]["passed"] is True


def test_unknown_metric_is_refused_without_the_hook(project):
    project.path.joinpath("spread.llmreplay.yaml").write_text("workload: wl.yaml\nslo:\n  ttft_spread: < 1000\n")
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"{project.path / 'spread.llmreplay.yaml'}: SLO 'ttft_spread': unknown metric 'ttft_spread'; *"]
    )


FORMAT_MODULE = '''
"""A made-up one-request-per-line format: PERFTESTFMT <input tokens> <output tokens>."""

from pytest_llmreplay import Session, Synthetic, Turn, Workload

NAME = "perftestfmt-{suffix}"


def detect(first_line):
    return first_line.startswith("PERFTESTFMT ")


def load(path, scale=1):
    sessions = []
    for number, line in enumerate(open(path, encoding="utf-8"), start=1):
        _, inp, out = line.split()
        sessions.append(Session(f"line{{number}}", 0.25 * number, (Turn(int(inp) * scale, int(out), Synthetic()),)))
    return Workload(tuple(sessions), NAME, source=str(path))
'''


def test_formats_hook_adds_a_workload_format(project):
    suffix = project.path.name
    project.path.joinpath("perftestfmt_module.py").write_text(FORMAT_MODULE.format(suffix=suffix))
    project.makeconftest("""
        import perftestfmt_module

        def pytest_llmreplay_formats():
            return [perftestfmt_module]
    """)
    project.path.joinpath("trace.ptf").write_text("PERFTESTFMT 40 4\nPERFTESTFMT 80 6\nPERFTESTFMT 120 8\n")
    project.makepyfile(
        test_fmt=f"""
        import pytest

        @pytest.mark.llmreplay(workload="trace.ptf", slo={{"error_rate": "== 0"}})
        def test_detected(llm_result):
            assert llm_result.summary["requests"]["ok"] == 3

        @pytest.mark.llmreplay(workload="trace.ptf", format="perftestfmt-{suffix}", format_options={{"scale": 2}})
        def test_named(llm_result, llm_workload):
            workload = llm_workload("trace.ptf", scale=2)
            assert workload.format == "perftestfmt-{suffix}"
            assert [t.input_tokens for _, _, t in workload.turns()] == [80, 160, 240]
            assert llm_result.summary["requests"]["ok"] == 3
    """
    )
    result = project.runpytest_subprocess("--llm-offline", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["llmreplay: test_fmt.py::test_detected", "completed=3/3 requests*"])


def test_formats_hook_with_a_taken_name_is_a_usage_error(project):
    project.path.joinpath("clash_module.py").write_text(
        "NAME = 'mooncake'\ndef detect(first_line): return False\ndef load(path): raise NotImplementedError\n"
    )
    project.makeconftest("""
        import clash_module

        def pytest_llmreplay_formats():
            return [clash_module]
    """)
    project.makepyfile("def test_x(): pass")
    result = project.runpytest_subprocess("--llm-offline", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: pytest_llmreplay_formats: format name 'mooncake' is already taken by pytest_llmreplay.workloads.formats.mooncake"
        ]
    )


def test_a_plugin_metric_may_not_replace_a_built_in_one(project):
    project.makeconftest("""
        def pytest_llmreplay_metrics():
            return {"ttft": lambda result: {"p99": 0.0}}
    """)
    project.makepyfile("""
        def test_perf(llm_replay):
            llm_replay("wl.yaml")
    """)
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*pytest_llmreplay_metrics: 'ttft' is already a metric of the summary; name yours differently*"]
    )
    assert "Traceback" not in result.stdout.str()


def test_two_runs_of_a_test_may_not_share_a_name(project):
    project.makepyfile("""
        def test_perf(llm_replay):
            llm_replay("wl.yaml", name="chat")
            llm_replay("wl.yaml", name="chat", concurrency=2)
    """)
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*llm_replay: name 'chat' is already used by another run of this test*"])
