"""The lock that keeps perf tests against one live endpoint from overlapping across xdist workers:
held per URL for the length of a replay; the simulator takes none."""

import threading

from pytest_llmreplay.plugin.session import live_lock
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
