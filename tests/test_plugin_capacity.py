"""Goodput and capacity at SLO in pytest (pytester): goodput's per-request limits come from the
test's ``slo``; the ``capacity`` key searches the load; the SLO keys, the stored result and the
gate on capacity. The search itself: ``test_search.py``."""

import pytest

# 8 single-turn sessions, Poisson arrivals at 4/s (as test_plugin_perf.py's)
WORKLOAD = """\
synthetic:
  sessions: 8
  input_tokens: {dist: uniform, min: 64, max: 256}
  output_tokens: {dist: uniform, min: 8, max: 32}
  rate: 4
  seed: 7
"""


@pytest.fixture
def project(pytester):
    pytester.makeini("[pytest]\n")
    pytester.path.joinpath("wl.yaml").write_text(WORKLOAD)
    return pytester


def test_goodput_under_pytest_takes_its_per_request_limits_from_the_slo(project):
    # latency.p50 < 150ms: a good request is one whose own latency is at most 150 ms; the body
    # counts them from the request table, and the summary's share and rate must agree
    project.makepyfile(test_goodput="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"latency.p50": "< 150ms", "goodput": "> 0%", "goodput.rate": "> 0 req/s"})
        def test_good(llm_result):
            table = llm_result.request_table()
            good = int((table["latency"] <= 0.15).sum())
            assert 0 < good < len(table), "the limit must split the requests for this test to mean anything"
            start, end = llm_result.span
            assert llm_result.summary["goodput"]["value"] == good / len(table)
            assert llm_result.summary["goodput"]["rate"] == pytest.approx(good / (end - start))
    """)
    result = project.runpytest("--llm-offline", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["SLOs met: 3 of 3", "goodput*> 0%*%*ok", "goodput.rate*> 0 req/s*req/s*ok"])


def test_goodput_in_req_per_s_is_the_rate_of_good_requests(project):
    project.makepyfile(test_goodput="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml", slo={"ttft.p99": "< 1s", "goodput": ">= 1000 req/s"})
        def test_rate(llm_result):
            pass
    """)
    result = project.runpytest("--llm-offline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["SLO breached: 1 of 2", "goodput*>= 1000 req/s*req/s*BREACH"])
