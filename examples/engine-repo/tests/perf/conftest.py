"""The perf suite's set-up: the engine it measures is checked before any test is collected
(see perf_engine.py), so a typo in PERF_ENGINE is one line, not a collection error per test."""

import perf_engine


def pytest_configure(config):
    perf_engine.check()
