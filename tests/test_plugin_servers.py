"""Servers declared by tests (``server:`` in the marker, a spec file or an ``llm_server``
parameter), as a user meets them (pytester): pooled by config, started once each in collection
order, at most ``--llm-max-servers`` at once, a log per start, a dead one failing only its
test, bad configs refused in one line. The servers are ``llmreplay sim`` over HTTP; each start
is a log file in ``--llm-report``'s ``servers/`` folder, whose ready line has the server's URL."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mockserver import free_port, gone, wait_until_gone
from test_plugin_perf import TINY_WORKLOAD, refuses_connections, wait_for_file

from pytest_llmreplay.gate.repeats import run_count

SIM = f"{sys.executable} -m pytest_llmreplay.cli.main sim --port {{port}}"


@pytest.fixture
def project(pytester):
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("tiny.yaml").write_text(TINY_WORKLOAD)
    return pytester


def server_ports_in(log: str) -> list[int]:
    """The port of each server start a log holds (its ready lines)."""
    return [int(port) for port in re.findall(r"on http://127\.0\.0\.1:(\d+) ", log)]


def server_ports(report) -> dict[str, int]:
    """Log file name -> the port its server listened on, from its ready line."""
    return {
        log.name: int(re.search(r"on http://127\.0\.0\.1:(\d+) ", log.read_text()).group(1))
        for log in sorted((report / "servers").iterdir())
    }


# interleaved in the file; EXPECTED_WHILE_B: the configs whose servers run during test_b1
TWO_CONFIGS = """
import pathlib
import re
import socket

import pytest

from pytest_llmreplay.plugin.servers import parse_server

A = {"cmd": "SIM --seed 1"}
B = {"cmd": "SIM --seed 2", "env": {"X": "1", "HF_TOKEN": "s3cret"}}
NAMES = {parse_server(A).digest: "a", parse_server(B).digest: "b"}


def running():
    up = set()
    for log in pathlib.Path("report/servers").iterdir():
        port = int(re.search(r"127\\.0\\.0\\.1:(\\d+)", log.read_text()).group(1))
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                up.add(NAMES[log.name.split("-")[1]])
    return up


@pytest.mark.llmreplay(workload="tiny.yaml", concurrency=3, server=A)
def test_a1(llm_result, llm_endpoint):
    assert llm_result.summary["requests"]["ok"] == 3
    assert llm_endpoint.kind == "live" and llm_endpoint.fingerprint["server"]["cmd"] == A["cmd"]


@pytest.mark.llmreplay(workload="tiny.yaml", concurrency=3, server=B)
def test_b1(llm_result):
    assert running() == EXPECTED_WHILE_B


@pytest.mark.llmreplay(workload="tiny.yaml", concurrency=3, server=A)
def test_a2(llm_result):
    assert running() == {"a"}


@pytest.mark.parametrize("llm_server", [A, B])
def test_each(llm_replay):
    assert llm_replay("tiny.yaml", concurrency=3).summary["requests"]["ok"] == 3


@pytest.mark.parametrize("llm_server", [B])
def test_endpoint_only(llm_endpoint):  # llm_endpoint alone takes the parameter
    assert llm_endpoint.fingerprint["server"]["cmd"] == B["cmd"]
""".replace("SIM", SIM)


@pytest.mark.parametrize(("max_servers", "while_b"), [(None, {"b"}), ("2", {"a", "b"})])
def test_two_declared_configs_start_two_servers_each_once(project, max_servers, while_b):
    """Seven tests (markers, a parametrized pair and one, a spec file) over two configs, interleaved in
    the files: collection groups them, so each config starts once (one log each); with one
    server at a time the first is stopped before the second starts, with two both stay up."""
    project.makepyfile(test_servers=TWO_CONFIGS.replace("EXPECTED_WHILE_B", repr(while_b)))
    spec = {"workload": "tiny.yaml", "concurrency": 3, "server": {"cmd": f"{SIM} --seed 1"}}
    project.path.joinpath("zz.llmreplay.yaml").write_text(json.dumps(spec))
    flags = ["--llm-max-servers", max_servers] if max_servers else []
    result = project.runpytest("-v", "--llm-repeat", "1", "--llm-report", "report", *flags)
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(
        [
            "llmreplay servers: 7 tests declare a server (2 configs), each started once when first needed; "
            "the session's endpoint above serves none of them"
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*::test_a1 PASSED*",
            "*::test_a2 PASSED*",
            "*::test_each?* sim --seed 1? PASSED*",
            "*zz.llmreplay.yaml::zz PASSED*",
            "*::test_b1 PASSED*",
            "*::test_each?* sim --seed 2? PASSED*",
            "*::test_endpoint_only?* sim --seed 2? PASSED*",
        ]
    )
    ports = server_ports(project.path / "report")
    assert len(ports) == 2 and all(name.endswith("-1.log") for name in ports), ports
    assert all(refuses_connections(port) for port in ports.values()), "a server outlived the session"
    commands = {
        json.loads(path.read_text())["fingerprint"]["server"]["cmd"]
        for path in (project.path / "report" / "tests").glob("*.json")
    }
    assert commands == {f"{SIM} --seed 1", f"{SIM} --seed 2"}  # {port} as written
    summary = (project.path / "report" / "summary.md").read_text()  # the endpoint line of each test
    assert f"server.cmd {SIM} --seed 2, server.env.HF_TOKEN \\*\\*\\*, server.env.X 1" in summary  # masked, escaped
    assert "s3cret" not in summary + "".join(p.read_text() for p in (project.path / "report" / "tests").iterdir())


def test_a_modules_pytestmark_declares_the_server_of_its_tests(project):
    """`pytestmark = pytest.mark.llmreplay(server=...)` beside each test's own marker was ignored:
    the tests measured the in-process simulator and passed (a new user's trial). A module's or a
    class's marker gives its settings to every test in it, a test's own marker wins key by key."""
    project.makepyfile(
        test_module=f"""
        import pytest

        pytestmark = pytest.mark.llmreplay(server={{"cmd": "{SIM} --seed 1"}}, concurrency=2)

        @pytest.mark.llmreplay(workload="tiny.yaml")
        def test_module_server(llm_result):
            pass

        class TestOwn:
            pytestmark = pytest.mark.llmreplay(concurrency=3)

            @pytest.mark.llmreplay(workload="tiny.yaml", server={{"cmd": "{SIM} --seed 2"}})
            def test_own_server(self, llm_result):
                pass
        """
    )
    result = project.runpytest("--llm-repeat", "1", "--llm-report", "report")
    result.assert_outcomes(passed=2)
    stored = {
        json.loads(path.read_text())["test"]: json.loads(path.read_text())
        for path in (project.path / "report" / "tests").glob("*.json")
    }
    module, own = stored["test_module.py::test_module_server"], stored["test_module.py::TestOwn::test_own_server"]
    assert module["fingerprint"]["server"]["cmd"] == f"{SIM} --seed 1" and module["settings"]["concurrency"] == 2
    assert own["fingerprint"]["server"]["cmd"] == f"{SIM} --seed 2" and own["settings"]["concurrency"] == 3
    # a second session empties the report folder of the first one's server logs (they piled up: a
    # new user's trial found three sessions' starts in one log)
    project.runpytest("--llm-repeat", "1", "--llm-report", "report").assert_outcomes(passed=2)
    logs = sorted((project.path / "report" / "servers").iterdir())
    assert len(logs) == 2 and all(len(server_ports_in(log.read_text())) == 1 for log in logs)


def test_a_server_that_exits_at_once_fails_its_tests_and_is_not_started_again(project):
    """Its first test fails with the exit status and the log's last lines; the config's later
    tests (a marker's and a spec file's) fail at once with that error, naming the first test,
    without another start (one log): a server that does not start for one test does not for the
    next, and each start may wait ``ready_timeout`` (minutes) first."""
    project.makepyfile("""
        import pytest

        BROKEN = {"cmd": "sh -c 'echo cannot load the model on {port}; exit 3'"}

        @pytest.mark.llmreplay(workload="tiny.yaml", server=BROKEN)
        def test_one(llm_result):
            pass

        def test_offline(llm_replay):
            llm_replay("tiny.yaml")

        @pytest.mark.llmreplay(workload="tiny.yaml", server=BROKEN)
        def test_two(llm_result):
            pass
    """)
    spec = {"workload": "tiny.yaml", "server": {"cmd": "sh -c 'echo cannot load the model on {port}; exit 3'"}}
    project.path.joinpath("zz.llmreplay.yaml").write_text(json.dumps(spec))
    result = project.runpytest("--llm-repeat", "1", "--llm-report", "report")
    result.assert_outcomes(passed=1, errors=2, failed=1)  # a marker's replay runs in its fixture: a setup error
    result.stdout.fnmatch_lines(
        [
            "llmreplay servers: 3 tests declare a server (1 config), each started once when first needed; "
            "the other perf test runs on the session's endpoint above"
        ]
    )
    (log,) = (project.path / "report" / "servers").iterdir()
    assert log.name.endswith("-1.log")
    first = [
        f"server command \"sh -c 'echo cannot load the model on *; exit 3'\" exited with status 3; "
        f"last lines of its log ({log}):",
        "cannot load the model on *",
    ]
    again = "(not started again for this session's later tests of this server: its start for test_*.py::test_one failed as above)"
    result.stdout.fnmatch_lines(["*ERROR at setup of test_one*", *first, "*ERROR at setup of test_two*", *first, again])
    result.stdout.fnmatch_lines(["*llmreplay spec zz*", *first, again])
    assert result.stdout.str().count("starting server") == 1
    assert "Traceback" not in result.stdout.str()
    assert not re.search(r"pytest_llmreplay/\S+\.py:\d+", result.stdout.str()), "a frame of ours is shown"
    # the summary and the reports name the perf tests that errored before any result: they listed
    # only the others, green ("llmreplay: 1 perf test", PASS), and wrote nothing when every one errored
    result.stdout.re_match_lines(
        [r"test_.*::test_one +error", r"test_.*::test_two +error", r"zz.llmreplay.yaml.* +error"]
    )
    summary = (project.path / "report" / "summary.md").read_text()
    assert summary.startswith("## llmreplay: 1 perf test result; 3 perf tests errored before measuring")
    assert "no result: 3 perf tests errored before measuring: test_" in summary and "exited with status 3" in summary
    assert "errored before measuring" in (project.path / "report" / "index.html").read_text()


def test_a_server_that_dies_during_a_test_fails_it_and_the_next_test_gets_a_fresh_one(project):
    """The test body has its server killed while a replay runs: that test fails with the exit
    status and the log, and the next test of the config starts the server again."""
    project.path.joinpath("long.yaml").write_text(
        "synthetic:\n  sessions: 2\n  input_tokens: 32\n  output_tokens: 400\n  seed: 1\n"
    )
    project.makepyfile(
        """
        import os, signal, threading

        import pytest

        SERVER = {"cmd": "sh -c 'echo $$ >> pids.txt; exec SIM'"}

        @pytest.mark.parametrize("llm_server", [SERVER])
        def test_killed(llm_replay):
            llm_replay("tiny.yaml", concurrency=3)  # starts it
            pid = int(open("pids.txt").read().split()[-1])
            threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
            llm_replay("long.yaml", concurrency=1, name="long")

        @pytest.mark.parametrize("llm_server", [SERVER])
        def test_next(llm_replay):
            assert llm_replay("tiny.yaml", concurrency=3).summary["requests"]["ok"] == 3
    """.replace("SIM", SIM)
    )
    result = project.runpytest("--llm-repeat", "1")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["server command * exited with status -9; last lines of its log (*-1.log):"])
    assert len(project.path.joinpath("pids.txt").read_text().split()) == 2


def test_a_server_that_dies_after_a_repeat_keeps_the_runs_before_it(project):
    """Killed after its second of three runs (by a metrics hook, which runs after each replay):
    the test fails with the server's error, and the first run is stored and reported, never lost."""
    project.makeconftest(
        """
        import os, pathlib, signal, time

        def pytest_llmreplay_metrics():
            def kill_after_the_second_run(result):
                calls = pathlib.Path("calls.txt")
                calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
                if calls.read_text() == "xx":
                    pid = int(pathlib.Path("pids.txt").read_text().split()[-1])
                    os.kill(pid, signal.SIGKILL)
                    while pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
                        time.sleep(0.01)  # dead, not yet reaped: the plugin's check sees it
                return {}
            return {"kill_switch": kill_after_the_second_run}
        """
    )
    project.makepyfile(
        """
        import pytest

        @pytest.mark.llmreplay(workload="tiny.yaml", concurrency=3, server={"cmd": "sh -c 'echo $$ >> pids.txt; exec SIM'"})
        def test_dies(llm_result):
            pass
    """.replace("SIM", SIM)
    )
    result = project.runpytest_subprocess("--llm-repeat", "3", "--llm-save", "--llm-report", "report")
    result.assert_outcomes(errors=1)
    # the plugin sees it dead after the second run (1 kept), or, its process not yet reaped then,
    # when the third cannot start (2 kept)
    kept = re.search(r"^\(the (\d) runs? before it (?:is|are) kept\)$", result.stdout.str(), re.M)
    assert kept is not None, result.stdout.str()
    runs = int(kept[1])
    (stored,) = project.path.joinpath(".llmreplay").glob("*/*.json")
    record = json.loads(stored.read_text())
    assert record["summary"]["requests"]["ok"] == 3 and run_count(record) == runs
    assert any(w.startswith(f"ran {runs} of 3 times: run {runs + 1} failed (") for w in record["warnings"])
    (reported,) = (project.path / "report" / "tests").glob("*.json")
    assert json.loads(reported.read_text())["failed_by"] == ["its server died"]


def test_a_server_that_dies_during_a_capacity_search_keeps_the_points_before_it(project):
    """Killed after the search's first point (by a conftest that wraps the reset before each
    point): the test fails with the server's exit status and log, and the search is stored and
    reported with that point, marked incomplete, never lost."""
    project.makeconftest(
        """
        import os, pathlib, signal, time

        from pytest_llmreplay.search import capacity

        fresh_server = capacity.Search.fresh_server

        def kill_before_the_second_point(self):
            if len(self.points) == 0 and getattr(self, "resets", 0) == 1:
                pid = int(pathlib.Path("pids.txt").read_text().split()[-1])
                os.kill(pid, signal.SIGKILL)
                while pathlib.Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
                    time.sleep(0.01)  # dead, not yet reaped: the plugin's check sees it
            self.resets = getattr(self, "resets", 0) + 1
            return fresh_server(self)

        capacity.Search.fresh_server = kill_before_the_second_point
        """
    )
    project.makepyfile(
        """
        import pytest

        @pytest.mark.llmreplay(
            workload="tiny.yaml",
            server={"cmd": "sh -c 'echo $$ >> pids.txt; exec SIM'"},
            capacity={"by": "concurrency", "slo": {"ttft.p99": "< 60s"}, "max": 3},
        )
        def test_search(llm_result):
            pass
    """.replace("SIM", SIM)
    )
    result = project.runpytest_subprocess("--llm-save", "--llm-report", "report")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "point 1/12 * low concurrency 1: pass *",
            "server command * exited with status -9; last lines of its log (*-1.log):",
            "*llmreplay sim: * on http://127.0.0.1:*",
            "(the capacity search's 1 run before it kept, stored marked incomplete: "
            "stopped by the server's failure after 1 of at most 12 runs)",
        ]
    )
    (stored,) = project.path.joinpath(".llmreplay").glob("*/*.json")
    search = json.loads(stored.read_text())["capacity"]
    assert search["incomplete"].startswith("server command ") and "exited with status -9" in search["incomplete"]
    assert [point["load"] for point in search["points"]] == [1]
    (reported,) = (project.path / "report" / "tests").glob("*.json")
    assert json.loads(reported.read_text())["failed_by"] == ["its server died"]


@pytest.mark.parametrize(
    ("server", "error"),
    [
        ("'vllm serve M'", "server: expected a mapping with cmd (and env, health, ready_timeout), got 'vllm serve M'"),
        (
            {"cmd": "vllm serve M --port {port}", "gpus": 1},
            "server.gpus: unknown field; expected one of cmd, env, health, ready_timeout",
        ),
        (
            {"cmd": "vllm serve M --port 8000"},
            "server.cmd: 'vllm serve M --port 8000' has no {port}: the plugin picks a free port and puts it there (... --port {port})",
        ),
        ({"env": {"A": "1"}}, "server.cmd: expected the command that starts the server, got None"),
        (
            {"cmd": "vllm serve M --port {port}", "env": {"N": 64}},
            "server.env.N: expected a string value (quote it), got 64",
        ),
        (
            {"cmd": "vllm serve M --port {port}", "health": "health"},
            "server.health: expected a path starting with /, e.g. /health, got 'health'",
        ),
        (
            {"cmd": "vllm serve M --port {port}", "ready_timeout": 0},
            "server.ready_timeout: expected a number of seconds > 0, got 0",
        ),
        (
            {"cmd": "vllm serve M --port {port}", "ready_timeout": True},
            "server.ready_timeout: expected a number of seconds > 0, got True",
        ),
        (
            {"cmd": "vllm serve 'M --port {port}"},
            'server.cmd: cannot split "vllm serve \'M --port {port}" into words: No closing quotation',
        ),
        (
            {"cmd": "vllm serve $LLMREPLAY_UNSET_DIR/m.gguf --port {port}"},
            "server.cmd: $LLMREPLAY_UNSET_DIR is not set in the environment pytest runs in (set it, or write $$ for a literal $)",
        ),
        (
            {"cmd": "vllm serve M --port {port}", "env": {"HF_HOME": "${LLMREPLAY_UNSET_DIR}/hf"}},
            "server.env.HF_HOME: $LLMREPLAY_UNSET_DIR is not set in the environment pytest runs in (set it, or write $$ for a literal $)",
        ),
    ],
)
def test_a_bad_server_is_one_error_naming_the_field(project, server, error):
    """In a marker: a collection error of the test; in a spec file: of the file, named."""
    project.makepyfile(f"""
        import pytest

        @pytest.mark.llmreplay(workload="tiny.yaml", server={server if isinstance(server, str) else repr(server)})
        def test_x(llm_result):
            pass
    """)
    spec = project.path / "bad.llmreplay.yaml"
    spec.write_text(
        json.dumps({"workload": "tiny.yaml", "server": server.strip("'") if isinstance(server, str) else server})
    )
    result = project.runpytest()
    assert result.ret == 2
    result.stdout.fnmatch_lines([f"{spec}: {error}"])
    result.stdout.fnmatch_lines([f"In test_x: {error}"])
    assert "Traceback" not in result.stdout.str()


def test_expand_variables_reads_a_command_as_a_shell_does():
    from pytest_llmreplay.errors import LLMReplayError
    from pytest_llmreplay.plugin.servers import expand_variables

    env = {"HOME": "/home/ci", "M": "qwen"}
    assert expand_variables("$HOME/models/${M}.gguf", "f", env, command=True) == "/home/ci/models/qwen.gguf"
    assert expand_variables("sh -c 'echo $HOME' \"$M's\"", "f", env, command=True) == "sh -c 'echo $HOME' \"qwen's\""
    assert expand_variables("a \\$HOME $$M $ 5$", "f", env, command=True) == "a \\$HOME $M $ 5$"
    assert expand_variables("'$HOME' x", "f", env) == "'/home/ci' x"  # an env value has no quotes
    with pytest.raises(LLMReplayError, match=r"^server.env.X: \$NOPE is not set"):
        expand_variables("a ${NOPE}", "server.env.X", env)


def test_a_declared_servers_cmd_and_env_expand_environment_variables(project, monkeypatch):
    """``$VAR`` in ``cmd`` and ``${VAR}`` in an ``env`` value are the environment's values when
    the server starts (not inside single quotes, which the inner shell expands); the fingerprint
    keeps the command as written."""
    monkeypatch.setenv("LLMREPLAY_PYTHON", sys.executable)
    monkeypatch.setenv("LLMREPLAY_DIR", "/data/models")
    cmd = "sh -c 'echo MODELS=$MODELS; exec \"$0\" -m pytest_llmreplay.cli.main sim --port {port}' $LLMREPLAY_PYTHON"
    project.makepyfile(f"""
        import pytest

        @pytest.mark.llmreplay(workload="tiny.yaml", server={{"cmd": {cmd!r}, "env": {{"MODELS": "${{LLMREPLAY_DIR}}/x"}}}})
        def test_x(llm_result, llm_endpoint):
            assert llm_endpoint.fingerprint["server"]["cmd"] == {cmd!r}
    """)
    result = project.runpytest("--llm-repeat", "1", "--llm-report", "report")
    result.assert_outcomes(passed=1)
    (log,) = (project.path / "report" / "servers").iterdir()
    assert log.read_text().splitlines()[0] == "MODELS=/data/models/x"


def test_a_server_not_healthy_at_its_health_path_within_ready_timeout_fails_its_test(project):
    """``health`` replaces the default probe: the simulator answers /health, not /nope."""
    project.makepyfile(f"""
        import pytest

        @pytest.mark.parametrize("llm_server", [{{"cmd": "{SIM}", "health": "/nope", "ready_timeout": 1.5}}])
        def test_x(llm_replay):
            llm_replay("tiny.yaml")
    """)
    result = project.runpytest("--llm-repeat", "1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "server command * was not ready at http://127.0.0.1:*/nope within 1.5 s "
            "(raise server.ready_timeout if it needs longer); last lines of its log (*-1.log):",
            "llmreplay sim: * on http://127.0.0.1:* (Ctrl-C stops)",
        ]
    )


def test_llm_endpoint_wins_over_declared_servers_which_are_not_started(project):
    port = free_port()
    project.makepyfile(
        """
        import pytest

        @pytest.mark.llmreplay(workload="tiny.yaml", server={"cmd": "sh -c 'touch started; sleep 60 {port}'"})
        def test_x(llm_result, llm_endpoint):
            assert llm_endpoint.url == "http://127.0.0.1:PORT" and "server" not in llm_endpoint.fingerprint
    """.replace("PORT", str(port))
    )
    command = f"{SIM.replace('{port}', str(port))}"
    result = project.runpytest(
        "--llm-repeat", "1", "--llm-endpoint", f"http://127.0.0.1:{port}", "--llm-server-cmd", command
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "llmreplay servers: 1 test declares a server (1 config), not started: --llm-endpoint serves every test",
            f"llmreplay servers: --llm-endpoint http://127.0.0.1:{port} served every test: the declared servers were not started",
        ]
    )
    assert not project.path.joinpath("started").exists()
    # an --llm-endpoint nothing answers at served no test, and the notes do not say it did
    result = project.runpytest("--llm-repeat", "1", "--llm-endpoint", f"http://127.0.0.1:{free_port()}")
    result.assert_outcomes(errors=1)
    assert "served every test" not in result.stdout.str()


def test_under_xdist_each_worker_pools_its_own_servers_and_logs_in_a_folder_of_its_own(project):
    """Two workers, two configs: a worker starts a config at most once, and its logs go to
    ``servers/gwN/`` (two workers' first starts of a config would otherwise share one file)."""
    project.makepyfile(
        """
        import pytest

        A = {"cmd": "SIM --seed 1"}
        B = {"cmd": "SIM --seed 2"}

        @pytest.mark.parametrize("llm_server", [A, B])
        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_x(llm_replay, n):
            assert llm_replay("tiny.yaml", concurrency=3).summary["requests"]["ok"] == 3
    """.replace("SIM", SIM)
    )
    result = project.runpytest_subprocess(
        "-n", "2", "--llm-repeat", "1", "--llm-report", "report", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=6, warnings=1)  # the first worker's, once
    result.stdout.fnmatch_lines(
        [
            "*PytestWarning: llmreplay: 6 tests declare a server (2 configs); under --dist load each of the 2 workers may "
            "start every config its tests use, up to 2 servers at once (--llm-max-servers counts per worker); run with "
            "--dist loadgroup to start each config once, on one worker"
        ]
    )
    logs = sorted((project.path / "report" / "servers").glob("*/*.log"))
    assert {log.parent.name for log in logs} <= {"gw0", "gw1"} and 2 <= len(logs) <= 4, logs
    assert all(log.name.endswith("-1.log") and "(Ctrl-C stops)" in log.read_text() for log in logs)


def test_under_xdist_loadgroup_each_config_runs_on_one_worker_and_starts_once(project):
    """``--dist loadgroup``: a declared server's tests are one group, sent to one worker, so each
    config starts exactly once in the whole run (with ``load`` it may start on each worker); the
    tests of an ``xdist_group`` marker are one group too (xdist's own grouping fails under pytest 9)."""
    project.makepyfile(
        """
        import pytest

        A = {"cmd": "SIM --seed 1"}
        B = {"cmd": "SIM --seed 2"}

        @pytest.mark.parametrize("llm_server", [A, B])
        @pytest.mark.parametrize("n", [1, 2, 3, 4])
        def test_x(llm_replay, n):
            assert llm_replay("tiny.yaml", concurrency=3).summary["requests"]["ok"] == 3

        @pytest.mark.parametrize("n", [1, 2, 3, 4])
        def test_plain(n):
            pass

        @pytest.mark.xdist_group("g")
        @pytest.mark.parametrize("n", [1, 2, 3, 4])
        def test_grouped(n):
            pass
    """.replace("SIM", SIM)
    )
    before = set(Path(tempfile.gettempdir()).glob("llmreplay-groups-*"))
    result = project.runpytest_subprocess(
        "-n", "2", "--dist", "loadgroup", "--llm-repeat", "1", "--llm-report", "report", "-v", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=16)  # and no warning: each config starts once
    assert len(set(re.findall(r"\[(gw\d)\] .*PASSED .*test_grouped\[", result.stdout.str()))) == 1  # xdist_group too
    logs = sorted((project.path / "report" / "servers").glob("*/*.log"))
    digests = [log.name.split("-")[1] for log in logs]
    assert len(logs) == 2 and len(set(digests)) == 2, logs
    workers_of = {}
    for worker, seed in re.findall(r"\[(gw\d)\] .*PASSED .*test_x\[\d-.*--seed (\d)\]", result.stdout.str()):
        workers_of.setdefault(seed, set()).add(worker)
    assert {seed: len(workers) for seed, workers in workers_of.items()} == {"1": 1, "2": 1}, workers_of
    assert set(Path(tempfile.gettempdir()).glob("llmreplay-groups-*")) <= before, (
        "the groups folder outlived the session"
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_a_declared_server_dies_with_a_pytest_run_stopped_by_ctrl_c_or_killed(project, signum):
    """Ctrl-C (SIGINT) in a test: pytest stops and the session's end stops the server. No
    teardown runs after SIGKILL: the watchdog that every started server has stops it."""
    project.makepyfile(
        """
        import time
        from pathlib import Path

        import pytest

        @pytest.mark.parametrize("llm_server", [{"cmd": "sh -c 'echo $$ > server.pid; exec SIM'"}])
        def test_wait(llm_replay):
            llm_replay("tiny.yaml")
            Path("running").touch()
            time.sleep(600)
    """.replace("SIM", SIM)
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--llm-repeat", "1"],
        cwd=project.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pid = None
    try:
        wait_for_file(project.path / "running", run)
        pid = int(project.path.joinpath("server.pid").read_text())
        assert not gone(pid)
        run.send_signal(signum)
        returncode = run.wait(60)
        assert wait_until_gone(pid, 30), f"the declared server outlived the pytest run stopped by {signum.name}"
        assert returncode == (pytest.ExitCode.INTERRUPTED if signum == signal.SIGINT else -signal.SIGKILL)
    finally:
        run.kill()
        run.wait()
        if pid is not None and not gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_declared_servers_port_is_drawn_below_the_ephemeral_range_where_no_bind_to_port_0_lands():
    """The CI failure this prevents: a test's own listener, bound to port 0, got the port a
    declared server had been given and was still starting on, and took its readiness probes."""
    import socket

    from pytest_llmreplay.plugin import servers

    start = servers.ephemeral_start()
    ports = {servers.free_port() for _ in range(20)}
    assert all(start - servers.FREE_PORT_SPAN <= port < start for port in ports) and len(ports) > 1, ports
    with socket.socket() as sock:  # free: it binds
        sock.bind(("127.0.0.1", ports.pop()))
    kernel = {socket.create_server(("127.0.0.1", 0)) for _ in range(20)}  # what bind to port 0 gives
    try:
        assert all(sock.getsockname()[1] >= start for sock in kernel)
    finally:
        for sock in kernel:
            sock.close()


def test_where_the_ephemeral_range_leaves_no_room_below_the_kernel_picks_the_port(monkeypatch, tmp_path):
    from pytest_llmreplay.plugin import servers

    real_start = servers.ephemeral_start()
    (tmp_path / "range").write_text("2000\t65535\n")
    monkeypatch.setattr(servers, "EPHEMERAL_PORTS", tmp_path / "range")
    assert servers.ephemeral_start() == 2000
    assert servers.free_port() >= real_start  # not one drawn below 2000: the kernel's own pick
