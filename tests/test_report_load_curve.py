"""The load curve of a capacity search (``report_load_curve``): ``llmreplay sweep --out`` writes
``load_curve.svg`` and the HTML report draws it for a capacity test, from the stored result.
The SVG is read as XML: its text (axis titles, legend) and where the lines lie."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from test_cli_sweep import WORKLOAD  # the sweep tests' 40 sessions at 10/s

from pytest_llmreplay.cli.main import main
from pytest_llmreplay.metrics.units import format_value
from pytest_llmreplay.report.html import anchor, html_page, load_curve_section

SVG = "{http://www.w3.org/2000/svg}"


def sweep(folder, *options):
    """The stored result and load_curve.svg of ``llmreplay sweep --out`` on the simulator."""
    workload = folder / "wl.yaml"
    workload.write_text(WORKLOAD)
    main(
        ["sweep", str(workload), "--sim", "llama-3.1-8b-h100", "--workers", "1", "--out", str(folder / "out"), *options]
    )
    return json.loads((folder / "out" / "result.json").read_text()), (folder / "out" / "load_curve.svg").read_text()


@pytest.fixture(scope="module")
def rate_sweep(tmp_path_factory):
    return sweep(tmp_path_factory.mktemp("rate"), "--slo", "ttft.p90<150ms", "--slo", "tpot.p90 <= 30ms")


def texts(svg: str) -> list[str]:
    return [t.text.strip() for t in ET.fromstring(svg).iter(f"{SVG}text") if t.text]


def group(svg: str, gid: str) -> ET.Element:
    found = [g for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("id") == gid]
    assert len(found) == 1, gid
    return found[0]


def vertices(svg: str, gid: str) -> list[tuple[float, float]]:
    """The (x, y) vertices of the first path of a line (SVG y grows downwards)."""
    path = group(svg, gid).find(f"{SVG}path").get("d")
    return [(float(x), float(y)) for x, y in re.findall(r"[ML] ([-\d.]+) ([-\d.]+)", path)]


def test_sweep_out_draws_the_load_curve_with_its_slo_lines_and_the_capacity(rate_sweep):
    record, svg = rate_sweep
    capacity = record["capacity"]
    points = sorted(capacity["points"], key=lambda p: p["load"])
    assert any(not p["passed"] for p in points) and capacity["rate"] > 0  # a curve with both kinds of point
    shown = texts(svg)
    assert (
        sum(t.startswith("offered load (req/s") for t in shown) == 2
    )  # linear, or log scale when the loads span a wide range
    assert any(t.startswith("latency (ms") for t in shown) and "throughput (req/s)" in shown
    assert {"TTFT p50", "TTFT p99", "TPOT p50", "ttft.p90", "tpot.p90", "throughput", "goodput"} <= set(shown)
    assert {"SLO ttft.p90 < 150ms", "SLO tpot.p90 <= 30ms", "failed point"} <= set(shown)
    # the capacity line stands on the load axis at the load its point was offered, on both plots;
    # by rate its value is the rate that point carried (here below the rate offered), which the label says
    at = capacity["offered"]["low"]
    assert capacity["rate"] < at and capacity["offered"]["high"] == min(p["load"] for p in points if not p["passed"])
    label = f"capacity {format_value('request_throughput', capacity['rate'])} (carried at {format_value('request_throughput', at)})"
    assert shown.count(label) == 2
    loads = [p["load"] for p in points]
    index = loads.index(at)
    for plot in ("latency", "throughput"):
        line = vertices(svg, f"load-curve-{plot}-capacity")
        assert line[0][0] == line[1][0]
        first_series = "TTFT-p50" if plot == "latency" else "throughput"
        xs = [x for x, _ in vertices(svg, f"load-curve-{plot}-{first_series}")]
        assert line[0][0] == pytest.approx(xs[index], abs=0.01)
    # the ttft.p90 SLO line lies between the points that met it (below: larger y) and those that did not
    slo_y = vertices(svg, "load-curve-slo-0")[0][1]
    for point, (_, y) in zip(points, vertices(svg, "load-curve-latency-ttft-p90"), strict=True):
        assert (y > slo_y) == (point["slo"]["ttft.p90"] < 0.150), point
    # a cross on every failed point of each latency series
    crosses = group(svg, "load-curve-latency-failed-0").iter(f"{SVG}use")
    assert len(list(crosses)) == sum(not p["passed"] and p["ttft_p50"] is not None for p in points)


def test_a_search_where_no_load_meets_the_slos_says_so_on_the_curve(tmp_path):
    record, svg = sweep(tmp_path, "--by", "concurrency", "--slo", "ttft.p99<1us")
    assert record["capacity"]["concurrency"] == 0
    shown = texts(svg)
    assert [t for t in shown if t.startswith("capacity")] == [
        "capacity 0: no load met the SLOs"
    ] * 2  # no capacity line
    assert any(t.startswith("concurrency, sessions in flight") for t in shown)


def test_the_html_report_draws_the_load_curve_of_a_capacity_test_only(rate_sweep):
    record, _ = rate_sweep
    section = load_curve_section(record)
    assert (
        section.startswith("<h3>Load curve</h3>")
        and f"capacity (rate) {format_value('request_throughput', record['capacity']['rate'])}" in section
    )
    page = html_page([record, {**record, "test": "plain", "capacity": None}])
    assert page.count("<h3>Load curve</h3>") == 1
    assert f'id="{anchor(record["test"])}-load-curve"' in page
    assert load_curve_section({**record, "capacity": {"plan": {"by": "rate"}, "points": []}}) == ""
    # no load failed: a lower bound, with no top to its bracket, as llmreplay sweep prints it
    rate = format_value("request_throughput", record["capacity"]["rate"])
    unbounded = {
        **record["capacity"],
        "at_least": True,
        "low": record["capacity"]["rate"],
        "high": record["capacity"]["rate"],
        "offered": {"low": record["capacity"]["rate"], "high": None},
    }
    unbounded_section = load_curve_section({**record, "capacity": unbounded})
    assert f"capacity (rate) at least {rate}, bracket [{rate}, -]" in unbounded_section
    assert (
        texts(unbounded_section[unbounded_section.index("<svg") : unbounded_section.rindex("</svg>") + 6]).count(
            f"capacity at least {rate}"
        )
        == 2
    )  # both legends
    carried_at = format_value("request_throughput", record["capacity"]["offered"]["low"])
    assert (
        texts(section[section.index("<svg") : section.rindex("</svg>") + 6]).count(
            f"capacity {rate} (carried at {carried_at})"
        )
        == 2
    )


def test_two_tests_whose_ids_slug_alike_have_sections_of_their_own():
    """`test_p[a b]` and `test_p[a-b]` shared one section id: the second row's link opened the
    first test's section (found by a review helper)."""
    first, second = anchor("t.py::test_p[a b]"), anchor("t.py::test_p[a-b]")
    assert first != second and first.startswith("test-t-py-test_p-a-b-") and second.startswith("test-t-py-test_p-a-b-")


def test_a_trend_plots_value_ticks_are_written_apart_however_close_the_values():
    """Every tick of a tpot.p50 trend over 12.16, 12.16 and 12.17 ms read "12.2" (three
    significant digits whatever the step), so a -4.8% step could not be read off the axis (a
    reports review): as many digits as tell neighbouring ticks apart."""
    from pytest_llmreplay.report.trend import trend_svg

    series = {"commits": ["a" * 40, "b" * 40, "c" * 40], "values": [0.01216, 0.01216, 0.01217], "change_points": []}
    svg = trend_svg("t", "tpot.p50", series, "main")
    ticks = [text for text in texts(svg) if re.fullmatch(r"[\d.,]+", text)]
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    assert all(float(tick) == pytest.approx(12.165, abs=0.02) for tick in ticks)
