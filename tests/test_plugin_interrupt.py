"""Ctrl-C and SIGTERM during a perf test's replay against a live server, in a real pytest process
(see pytest_llmreplay/plugin/interrupt.py): the replay stops, what it measured goes through the gate
(summary row, stored result, report files), all of it marked interrupted, and the session stops
with pytest's status, the server it started stopped."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from mockserver import free_port
from test_plugin_perf import refuses_connections

MOCK = Path(__file__).with_name("mockserver.py")
# 40 requests over 8 s, each 8 tokens 50 ms apart: the run is still sending when it is stopped
SLOW_WORKLOAD = """\
synthetic:
  sessions: 40
  input_tokens: 32
  output_tokens: 8
  rate: 5
  seed: 1
"""
TESTS = """
    import pytest

    @pytest.mark.llmreplay(workload="slow.yaml", slo={"ttft.p99": "< 30s", "error_rate": "== 0"})
    def test_slow(llm_result):
        assert llm_result.summary["requests"]["ok"] == 40  # not on a partial result: the body is skipped

    def test_after(): pass
"""


def finished(url: str) -> int:
    """Replies the mock server has streamed to their end (0 while it is not up yet)."""
    try:
        with urllib.request.urlopen(f"{url}/mock/stats", timeout=2) as reply:
            return json.load(reply)["finished"]
    except OSError:
        return 0


def signalled_pytest(pytester, options: list[str], replies: int, signum: int) -> tuple[Any, str, str, int]:
    """Run pytest in ``pytester.path`` against a slow mock server it starts
    (``--llm-server-cmd``, 50 ms a token), send ``signum`` to pytest's process group once the
    server has streamed ``replies`` replies to their end; (the process, stdout, stderr, port)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        f"--llm-endpoint={url}",
        f"--llm-server-cmd={sys.executable} {MOCK} --port {port} --itl-s 0.05",
        *options,
    ]
    run = subprocess.Popen(
        command, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while (
            finished(url) < replies
        ):  # replies finished, not begun: workers that start late send their first requests at once
            assert run.poll() is None and time.monotonic() < deadline, "the replay did not get going"
            time.sleep(0.05)
        time.sleep(0.3)  # the client has read the last reply's end well before this
        os.killpg(run.pid, signum)
        out, err = run.communicate(timeout=120)
    finally:
        run.kill()
        run.wait()
    return run, out, err, port


@pytest.mark.parametrize(
    ("signum", "workers"),
    [(signal.SIGINT, None), (signal.SIGTERM, None), (signal.SIGINT, 2)],
    ids=["SIGINT", "SIGTERM", "SIGINT-on-workers"],
)
def test_a_signal_mid_replay_keeps_what_was_measured_and_stops_the_session(pytester, signum, workers):
    """The signal goes to pytest's process group, as a terminal's Ctrl-C does: with
    ``--llm-workers`` the Ray processes get it too (the server has its own session)."""
    if workers is not None and importlib.util.find_spec("ray") is None:
        # found, not imported: Ray imported into this process this early made the first ray.init of
        # test_workers.py, many tests later in the same process, die of SIGSEGV in protobuf's upb
        pytest.skip("needs ray (the test extra installs it; CI runs this)")
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("slow.yaml").write_text(SLOW_WORKLOAD)
    pytester.makepyfile(test_perf=TESTS)
    options = ["--llm-save", "--llm-report=report", "--junitxml=junit.xml"]
    options += [] if workers is None else [f"--llm-workers={workers}"]
    run, out, err, port = signalled_pytest(pytester, options, replies=3, signum=signum)
    assert run.returncode == (pytest.ExitCode.INTERRUPTED if signum == signal.SIGINT else 128 + signal.SIGTERM), (
        out + err
    )
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
    lines = out.splitlines()
    # interrupted, not failed: the body did not run on the partial result (issue 31 A3), nor did its cancelled requests fail it
    assert any(line.startswith("test_perf.py::test_slow") and " interrupted " in f"{line} " for line in lines), out
    assert (
        f"llmreplay interrupted: {signum.name} stopped the replay of test_perf.py::test_slow: its result covers the requests measured until then"
        in out
    )
    assert f"Interrupted: llmreplay: {signum.name} stopped the replay of test_perf.py::test_slow" in out
    assert "1 interrupted" in lines[-1] and "failed" not in lines[-1] and "passed" not in lines[-1], lines[-1]
    assert "test_after" not in out  # the session stopped after the interrupted test

    stored = list(pytester.path.joinpath(".llmreplay").glob("*/*.json"))
    assert len(stored) == 1, out
    record = json.loads(stored[0].read_text())
    assert record["interrupted"] == signum.name and "runs" not in record  # the repeats after it were not started
    assert any(w.startswith(f"interrupted by {signum.name} at ") for w in record["warnings"])
    counts = record["summary"]["requests"]
    assert 3 <= counts["ok"] < 40 and counts["planned"] == 40  # what was measured before the signal, and no more
    assert f"saved baseline {stored[0]} (marked interrupted: never used as a comparison baseline)" in out

    report = pytester.path / "report"
    assert json.loads(next(report.joinpath("tests").glob("*.json")).read_text())["interrupted"] == signum.name
    for page in ("summary.md", "index.html"):
        assert f"interrupted by {signum.name}" in report.joinpath(page).read_text(), page
        assert "INTERRUPTED" in report.joinpath(page).read_text() and "FAIL" not in report.joinpath(page).read_text(), (
            page
        )
    properties = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "junit.xml").iter("property")}
    assert properties["llmreplay.interrupted"] == signum.name
    assert refuses_connections(port)  # the --llm-server-cmd server was stopped


CAPACITY_TESTS = """
    import pytest

    @pytest.mark.llmreplay(
        workload="short.yaml",
        capacity={"by": "rate", "min": 4, "max": 8, "slo": {"ttft.p99": "< 30s"}, "arrival": "constant"},
    )
    def test_capacity(llm_result):
        pass

    def test_after(): pass
"""
SHORT_WORKLOAD = """\
synthetic:
  sessions: 20
  input_tokens: 32
  output_tokens: 4
  seed: 1
"""


def test_a_signal_mid_capacity_search_keeps_the_points_run_and_stops_the_session(pytester):
    """A search's points are replays: the first signal cuts the one running and starts no other,
    as ``llmreplay sweep`` does; the result (the point at capacity) is stored marked interrupted."""
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("short.yaml").write_text(SHORT_WORKLOAD)
    pytester.makepyfile(test_perf=CAPACITY_TESTS)
    run, out, err, port = signalled_pytest(pytester, ["--llm-save"], replies=22, signum=signal.SIGINT)
    assert run.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
    assert "test_after" not in out and "1 interrupted" in out.splitlines()[-1], out
    (stored,) = pytester.path.joinpath(".llmreplay").glob("*/*.json")
    record = json.loads(stored.read_text())
    assert record["interrupted"] == "SIGINT" and record["summary"]["requests"]["ok"] == 20  # the low point, run out
    assert any(
        w.startswith("the capacity search was interrupted by SIGINT after 2 of at most ") for w in record["warnings"]
    )
    assert refuses_connections(port)


CUT_SHORT = """
    import pytest

    @pytest.mark.llmreplay(workload="chat.yaml", slo={"ttft.p99": "< 30s"})
    def test_a(llm_result):
        BODY

    def test_b():
        assert False

    @pytest.mark.llmreplay(workload="chat.yaml", slo={"ttft.p99": "< 30s"})
    def test_c(llm_result): pass
"""


def test_a_perf_test_whose_xdist_worker_crashed_is_failed_not_unjudged(pytester):
    """xdist reports the test a worker died under as failed (``when`` "???"), and starts another
    worker, which sends its collected tests: the crash is that test's verdict, not an interrupted
    session's missing one."""
    pytester.makefile(".yaml", chat="synthetic:\n  sessions: 4\n  input_tokens: 32\n  output_tokens: 4\n  seed: 1\n")
    pytester.makepyfile(test_cut=CUT_SHORT.replace("BODY", "import os; os._exit(1)"))
    result = pytester.runpytest_subprocess("-n", "1", "--llm-repeat=1", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*worker 'gw0' crashed while running 'test_cut.py::test_a'*"])
    assert "not judged" not in result.stdout.str()


@pytest.mark.parametrize(
    ("body", "options", "why", "not_judged"),
    [
        ("pass", ["-x"], "the session stopped: stopping after 1 failures", ["test_c"]),
        ("raise KeyboardInterrupt", [], "the session was interrupted", ["test_a", "test_c"]),
        # under xdist the worker collects and stops (-x), the controller names what it left unrun
        ("pass", ["-n", "1", "-x"], "the session stopped: stopping after 1 failures", ["test_c"]),
    ],
)
def test_perf_tests_a_stopped_session_did_not_run_to_the_end_are_not_judged(pytester, body, options, why, not_judged):
    """-x after test_b left test_c unrun, and a Ctrl-C in test_a's body cut it off after its
    replay: the terminal's summary and summary.md read as a whole session passed (test_a PASS,
    test_c absent), or test_a FAIL for a verdict it never reached. Each such test is now
    'not judged', in the summary's rows, in a line that says why, and in the report's title."""
    pytester.makefile(".yaml", chat="synthetic:\n  sessions: 4\n  input_tokens: 32\n  output_tokens: 4\n  seed: 1\n")
    pytester.makepyfile(test_cut=CUT_SHORT.replace("BODY", body))
    result = pytester.runpytest_subprocess(*options, "--llm-repeat=1", "--llm-report=rep", "-p", "no:cacheprovider")
    ids = [f"test_cut.py::{name}" for name in not_judged]
    result.stdout.fnmatch_lines(
        [f"{test_id}*not judged*-*" for test_id in ids]
        + [f"llmreplay: not judged: {len(ids)} perf test* did not run to the end ({why}): {', '.join(ids)}"]
    )
    summary = (pytester.path / "rep" / "summary.md").read_text()
    assert summary.startswith(f"## llmreplay: 1 perf test result; {len(ids)} perf test")
    assert f"**not judged: {len(ids)} perf test" in summary and "FAIL" not in summary
    # test_a's result: judged when it ran to the end, else NOT JUDGED (not FAIL: the body raised KeyboardInterrupt)
    status = "NOT JUDGED · the session was interrupted" if "test_a" in not_judged else "PASS"
    assert f"### test_cut.py::test_a\n\n**{status} · 1/1 SLOs met" in summary
