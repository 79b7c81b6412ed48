"""The lock that keeps perf tests against one live endpoint from overlapping across xdist workers:
held per URL for the length of a replay; the simulator takes none."""

import threading

import pytest

from pytest_llmreplay.plugin.live_lock import live_lock
from pytest_llmreplay.target import Target


def test_a_second_replay_of_the_same_live_url_waits_for_the_first():
    target = Target("live", url="http://127.0.0.1:8000")
    order = []
    entered = threading.Event()

    def second():
        with live_lock(target):
            order.append("second")
        entered.set()

    with live_lock(target):
        thread = threading.Thread(target=second)
        thread.start()
        assert not entered.wait(0.3)  # blocked while the first replay holds the lock
        order.append("first done")
    thread.join(5)
    assert order == ["first done", "second"]


def test_other_urls_and_the_simulator_do_not_wait():
    with live_lock(Target("live", url="http://127.0.0.1:8000")):
        with live_lock(Target("live", url="http://127.0.0.1:8001")):
            with live_lock(Target("offline")) as held:
                assert held is None
    assert live_lock(Target("offline")).path is None


def test_the_lock_file_goes_with_the_lock_and_every_waiter_still_takes_turns():
    # one lock file per URL stayed in the temporary folder for ever (a declared server has a new
    # port each session); removed as released, the waiters that had opened it lock the path again
    target = Target("live", url="http://127.0.0.1:8002")
    inside, overlaps = [], []
    threads = []

    def replay(name):
        with live_lock(target):
            if inside:
                overlaps.append((inside[0], name))
            inside.append(name)
            threading.Event().wait(0.02)
            inside.remove(name)

    with live_lock(target) as held:
        assert held is None and live_lock(target).path.exists()
        for index in range(4):
            threads.append(threading.Thread(target=replay, args=(index,)))
            threads[-1].start()
        threading.Event().wait(0.1)  # every waiter has opened the file the first holder removes
    for thread in threads:
        thread.join(5)
    assert overlaps == [] and not inside
    assert not live_lock(target).path.exists()


WAITER = """
import os, signal, sys, threading
from pytest_llmreplay.plugin.interrupt import Interruption
from pytest_llmreplay.plugin.live_lock import live_lock
from pytest_llmreplay.target import Target

target = Target("live", url=sys.argv[1])
held, done = threading.Event(), threading.Event()

def other_test():
    with live_lock(target):
        held.set()
        done.wait(30)

threading.Thread(target=other_test, daemon=True).start()
held.wait(10)
threading.Timer(0.3, os.kill, (os.getpid(), signal.{signal})).start()
interruption = Interruption()
try:
    with live_lock(target, interruption, "t.py::test_x"):
        print("replayed")
except Exception as exc:
    print(type(exc).__name__, exc)
print(interruption.signal, interruption.test, signal.getsignal(signal.{signal}) is signal.{handler})
done.set()
"""


@pytest.mark.parametrize(("name", "handler"), [("SIGINT", "default_int_handler"), ("SIGTERM", "SIG_DFL")])
def test_a_signal_while_waiting_for_the_lock_ends_the_wait_and_replays_nothing(name, handler):
    """Under xdist, a worker waiting for another test's replay against the URL let Ctrl-C pass,
    took the lock when the interrupted replay released it, and replayed its whole test (a stores
    review): the wait ends, nothing is replayed, the session stops, and the handlers are back."""
    import subprocess
    import sys

    url = "http://127.0.0.1:8009"
    done = subprocess.run(
        [sys.executable, "-c", WAITER.replace("{signal}", name).replace("{handler}", handler), url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.splitlines() == [
        f"NotReplayed not replayed: {name} came while t.py::test_x waited for another replay against {url} "
        "to end; the session stops",
        f"{name} t.py::test_x True",
    ], done.stderr
