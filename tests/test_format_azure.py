"""Azure LLM inference trace loader (CSV): header, time stamps, counts, arrivals."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_llmreplay import Session, Synthetic, Turn, Workload, WorkloadError, load_workload, write_workload

FORMAT = "azure"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
GOOD = "2023-11-16 18:17:03.9799600,4808,10"


def write_csv(tmp_path: Path, lines: list[str], name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def load(tmp_path: Path, rows: list[str]):
    return load_workload(write_csv(tmp_path, [HEADER, *rows]))


def assert_error(path: Path, line: int, field: str | None, expected: str) -> None:
    with pytest.raises(WorkloadError) as info:
        load_workload(path, format=FORMAT)
    error = info.value
    assert str(error).startswith(f"{path}:{line}: " + (f"{field}: " if field else "")), str(error)
    assert (error.line, error.field) == (line, field)
    assert expected in error.reason, error.reason


@pytest.fixture
def local_time_zone(monkeypatch):
    """Set the process's local time zone (POSIX TZ string); restored afterwards."""

    def set_zone(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


def test_rows_become_single_requests(tmp_path):
    workload = load(tmp_path, [GOOD, "2023-11-16 18:17:04.0319600,3180,8"])
    assert (workload.format, workload.timed) == (FORMAT, True)
    assert [s.id for s in workload.sessions] == ["line2", "line3"]
    assert [s.arrival_s for s in workload.sessions] == pytest.approx([0.0, 0.052])
    assert [(t.input_tokens, t.output_tokens, t.prompt) for s in workload for t in s.turns] == [
        (4808, 10, Synthetic()),
        (3180, 8, Synthetic()),
    ]


def test_arrivals_are_relative_to_the_earliest_row_and_sorted(tmp_path):
    rows = ["2023-11-16 18:00:10.5,5,1", "2023-11-16 18:00:00.25,6,2", "2023-11-16 18:01:00,7,3"]
    workload = load(tmp_path, rows)
    assert [(s.id, s.arrival_s) for s in workload.sessions] == [("line3", 0.0), ("line2", 10.25), ("line4", 59.75)]


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        ("2023-11-16 18:17:03", 3.0),
        ("2023-11-16 18:17:03.5", 3.5),
        ("2023-11-16 18:17:03.0000001", 3.0000001),
        ("2023-11-16 18:18:00.0000000", 60.0),
        ("2023-11-17 00:00:00.0000000", 5 * 3600 + 43 * 60.0),  # across midnight
        # the 2024 week-long release (AzureLLMInferenceTrace_conv_1week.csv) writes a UTC offset
        ("2023-11-16 18:17:03.009930+00:00", 3.00993),
        ("2023-11-16 19:17:03+01:00", 3.0),
        ("2023-11-16 17:17:03.5-01:00", 3.5),
        ("2023-11-16 18:17:03Z", 3.0),
    ],
)
def test_fractional_digits_and_dates(tmp_path, stamp, seconds):
    workload = load(tmp_path, ["2023-11-16 18:17:00,1,1", f"{stamp},1,1"])
    assert workload.sessions[1].arrival_s == pytest.approx(seconds, abs=1e-6)


def test_spaces_and_blank_lines_are_tolerated(tmp_path):
    workload = load(tmp_path, ["", " 2023-11-16 18:17:03.5 , 12 , 3 ", ""])
    assert [(t.input_tokens, t.output_tokens) for _, _, t in workload.turns()] == [(12, 3)]


@pytest.mark.parametrize(
    ("zone", "day"),
    [
        ("CET-1CEST,M3.5.0,M10.5.0/3", ("2023-03-26", "2023-03-27")),  # a 23-hour local day
        ("CET-1CEST,M3.5.0,M10.5.0/3", ("2023-10-29", "2023-10-30")),  # a 25-hour local day
        ("EST5EDT,M3.2.0,M11.1.0", ("2023-03-12", "2023-03-13")),
    ],
)
def test_arrivals_do_not_depend_on_the_local_time_zone(tmp_path, local_time_zone, zone, day):
    """The trace's time stamps are wall-clock readings one hour apart; the machine running the
    loader must not change that (the Azure traces have no time zone)."""
    local_time_zone(zone)
    workload = load(tmp_path, [f"{day[0]} 23:30:00,1,1", f"{day[1]} 00:30:00,1,1"])
    assert workload.sessions[1].arrival_s == pytest.approx(3600.0)


@pytest.mark.parametrize(
    "header",
    [
        "timestamp,ContextTokens,GeneratedTokens",
        "TIMESTAMP,ContextTokens",
        "TIMESTAMP,ContextTokens,GeneratedTokens,Extra",
        GOOD,
    ],
)
def test_wrong_header(tmp_path, header):
    path = write_csv(tmp_path, [header, GOOD])
    assert_error(path, 1, None, f"expected the header {HEADER}, got {header!r}")


def test_empty_file_has_no_header(tmp_path):
    path = write_csv(tmp_path, [])
    assert_error(path, 1, None, f"expected the header {HEADER}, got ''")


@pytest.mark.parametrize(("row", "count"), [("2023-11-16 18:17:03,5", 2), ("2023-11-16 18:17:03,5,1,0", 4), ("5", 1)])
def test_wrong_column_count(tmp_path, row, count):
    path = write_csv(tmp_path, [HEADER, GOOD, row])
    assert_error(path, 3, None, f"expected 3 columns ({HEADER}), got {count}")


@pytest.mark.parametrize(
    "stamp",
    [
        "2023-11-16T18:17:03.9799600",
        "2023-11-16 25:00:00",
        "2023-11-16 18:60:00",
        "2023-13-01 00:00:00",
        "2023-02-30 00:00:00",
        "2023-11-16 18:17",
        "2023-11-16 18:17:03.97a",
        "1700158623.98",
        "",
        "2023-11-16 18:17:03+1:00",
        "2023-11-16 18:17:03+00:0x",
        "2023-11-16 18:17:03+00:99",  # no time zone's offset: it moved a request by 1 h 39 min
        "2023-11-16 18:17:03-99:00",
    ],
)
def test_bad_timestamp(tmp_path, stamp):
    path = write_csv(tmp_path, [HEADER, GOOD, f"{stamp},5,1"])
    assert_error(path, 3, "TIMESTAMP", f"expected a date-time like 2023-11-16 18:17:03.9799600, got {stamp!r}")


@pytest.mark.parametrize("column", ["ContextTokens", "GeneratedTokens"])
@pytest.mark.parametrize("value", ["0", "-3", "4.5", "", "abc", "1e3", "²"])
def test_bad_counts(tmp_path, column, value):
    row = f"2023-11-16 18:17:05,{value},1" if column == "ContextTokens" else f"2023-11-16 18:17:05,1,{value}"
    path = write_csv(tmp_path, [HEADER, GOOD, row])
    assert_error(path, 3, column, f"must be an integer >= 1, got {value!r}")


@pytest.mark.parametrize("ending", ["\r", "\r\n"])
def test_lines_ended_by_a_carriage_return_alone_or_with_a_line_feed_read_alike(tmp_path, ending):
    """Excel's "CSV (Macintosh)" ends lines with CR alone: the csv module raised a traceback."""
    path = tmp_path / "mac.csv"
    path.write_bytes(ending.join([HEADER, GOOD, "2023-11-16 18:17:04.1,100,5", ""]).encode())
    workload = load_workload(path)  # detected too
    assert workload.format == FORMAT
    assert [session.arrival_s for session in workload.sessions] == pytest.approx([0.0, 0.12004])
    mixed = tmp_path / "mixed.csv"
    mixed.write_bytes(f"{HEADER}\n{GOOD}\r2023-11-16 18:17:04.1,x,5\n".encode())
    assert_error(mixed, 3, "ContextTokens", "must be an integer >= 1, got 'x'")


def test_what_the_csv_module_refuses_is_one_error_at_its_line(tmp_path):
    path = write_csv(tmp_path, [HEADER, GOOD, "2023-11-16 18:17:05," + "1" * 200_000 + ",1"])
    assert_error(path, 3, None, "not CSV: field larger than field limit")


def test_line_numbers_count_blank_lines(tmp_path):
    path = write_csv(tmp_path, [HEADER, GOOD, "", "2023-11-16 18:17:05,0,1"])
    assert_error(path, 4, "ContextTokens", "must be an integer >= 1, got '0'")


@pytest.mark.parametrize(
    ("name", "requests"),
    [("AzureLLMInferenceTrace_code.csv.gz", 8_819), ("AzureLLMInferenceTrace_conv.csv.gz", 19_366)],
)
def test_real_traces(trace_data, name, requests):
    workload = load_workload(trace_data / "azure" / name)
    assert (workload.format, workload.timed, workload.num_requests) == (FORMAT, True, requests)
    arrivals = [s.arrival_s for s in workload.sessions]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert 3_300 < arrivals[-1] < 3_600  # about an hour
    assert all(t.input_tokens >= 1 and t.output_tokens >= 1 for _, _, t in workload.turns())


def test_written_stamps_carry_a_fraction_that_rounds_up_into_the_second(tmp_path):
    """1.99999999 s rounds to 2.0000000 in the trace's 7 digits, not to '1.10000000' (read back as 1.1 s)."""
    arrivals = [0.0, 1.99999999, 61.999999996]
    workload = Workload(
        sessions=tuple(Session(f"s{i}", at, (Turn(10, 5, Synthetic()),)) for i, at in enumerate(arrivals)),
        format="llmservingsim",
        source="near.jsonl",
        timed=True,
    )
    path = tmp_path / "near.csv"
    write_workload(workload, path, "azure")
    assert path.read_text().splitlines()[2:] == [
        "2023-11-16 00:00:02.0000000,10,5",
        "2023-11-16 00:01:02.0000000,10,5",
    ]
    assert [s.arrival_s for s in load_workload(path)] == pytest.approx([0.0, 2.0, 62.0])
