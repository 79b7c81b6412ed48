"""Azure LLM inference traces (AzurePublicDataset, 2023 and the 2024 week): CSV, one request a row.

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:17:03.9799600,4808,10
    2024-05-10 00:00:00.009930+00:00,2162,5

``TIMESTAMP`` is a wall-clock date-time (any number of fractional digits; a UTC offset ``+HH:MM``,
``-HH:MM`` or ``Z`` as the 2024 release writes it, else UTC); arrival times are seconds since the
earliest row. ``ContextTokens`` and ``GeneratedTokens`` are integers >= 1. Lines may end in LF,
CRLF or CR alone (Excel's "CSV (Macintosh)"). The trace carries no prompt contents, so prompts
are synthetic (no prefix sharing).
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

from ...errors import WorkloadError
from ..workload import Session, Synthetic, Turn, Workload
from ._compressed import open_for_writing
from ._text import text_lines
from ._writing import Losses, cannot, known_lengths, lengths_only, reasoning_losses, untimed_losses

NAME = "azure"
HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
EPOCH_ORDINAL = datetime(1970, 1, 1).toordinal()
TICKS_PER_SECOND = 10**7  # the 7 fractional digits the trace writes


def detect(first_line: str) -> bool:
    """The CSV header names the three Azure columns (up to a CR: a file whose lines end in CR
    alone is one line to a reader that splits on LF)."""
    header = first_line.splitlines()[0] if first_line.strip() else ""
    return tuple(c.strip() for c in header.strip().split(",")) == HEADER


def load(path: str | Path) -> Workload:
    """Load an Azure CSV trace; session ids are ``line<N>``."""
    path = Path(path)
    rows: list[tuple[float, int, int, int]] = []
    day_seconds: dict[str, float] = {}
    # a line ended by CR alone is a line too: the csv module refuses a CR inside an unquoted field
    reader = csv.reader(part for _, text in text_lines(path) for part in text.splitlines(keepends=True))
    try:
        header = next(reader, None)
        if header is None or tuple(c.strip() for c in header) != HEADER:
            raise WorkloadError(
                f"expected the header {','.join(HEADER)}, got {','.join(header or [])!r}", path=path, line=1
            )
        for record in reader:
            line = reader.line_num
            if not record or not "".join(record).strip():
                continue
            if len(record) != 3:
                raise WorkloadError(f"expected 3 columns ({','.join(HEADER)}), got {len(record)}", path=path, line=line)
            stamp = _seconds(record[0].strip(), day_seconds, path, line)
            context = _count(record[1], "ContextTokens", path, line)
            generated = _count(record[2], "GeneratedTokens", path, line)
            rows.append((stamp, line, context, generated))
    except csv.Error as exc:  # a quoted field the file ends inside, a NUL byte
        raise WorkloadError(f"not CSV: {exc}", path=path, line=reader.line_num) from None
    rows.sort()
    start = rows[0][0] if rows else 0.0
    sessions = tuple(
        Session(f"line{line}", stamp - start, (Turn(context, generated, Synthetic()),))
        for stamp, line, context, generated in rows
    )
    return Workload(sessions=sessions, format=NAME, source=str(path), timed=True)


def _seconds(text: str, day_seconds: dict[str, float], path: Path, line: int) -> float:
    """Seconds since 1970-01-01 UTC of ``YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM|-HH:MM|Z]``, read
    as UTC where no offset is given, whatever the machine's time zone (dates parsed once each)."""
    try:
        date, clock = text.split(" ", 1)
        base = day_seconds.get(date)
        if base is None:
            base = day_seconds[date] = (datetime.strptime(date, "%Y-%m-%d").toordinal() - EPOCH_ORDINAL) * 86400.0
        clock, offset = _utc_offset(clock)
        base -= offset
        hms, _, fraction = clock.partition(".")
        hours, minutes, seconds = (int(part) for part in hms.split(":"))
        if not (0 <= hours < 24 and 0 <= minutes < 60 and 0 <= seconds < 61) or (
            fraction and not (fraction.isascii() and fraction.isdigit())
        ):
            raise ValueError
        return base + hours * 3600 + minutes * 60 + seconds + (float("0." + fraction) if fraction else 0.0)
    except ValueError:
        raise WorkloadError(
            f"expected a date-time like 2023-11-16 18:17:03.9799600, got {text!r}",
            path=path,
            line=line,
            field="TIMESTAMP",
        ) from None


def _utc_offset(clock: str) -> tuple[str, int]:
    """``clock`` without its UTC offset, and the offset in seconds (``+01:00``: 3600; ``Z`` or
    none: 0); :class:`ValueError` for an offset that is not ``+HH:MM``/``-HH:MM`` with HH at most
    14 and MM at most 59 (the offsets time zones have: ``+00:99`` moved a request by 1 h 39 min)."""
    if clock.endswith("Z"):
        return clock[:-1], 0
    sign = max(clock.rfind("+"), clock.rfind("-"))  # the time of day holds neither
    if sign < 0:
        return clock, 0
    hours, colon, minutes = clock[sign + 1 :].partition(":")
    if not (colon and len(hours) == len(minutes) == 2 and (hours + minutes).isascii() and (hours + minutes).isdigit()):
        raise ValueError(clock)
    if int(hours) > 14 or int(minutes) > 59:
        raise ValueError(clock)
    seconds = int(hours) * 3600 + int(minutes) * 60
    return clock[:sign], seconds if clock[sign] == "+" else -seconds


def _count(text: str, name: str, path: Path, line: int) -> int:
    value = text.strip()
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise WorkloadError(f"must be an integer >= 1, got {text!r}", path=path, line=line, field=name)
    return int(value)


def write(workload: Workload, path: str | Path, *, allow_loss: bool = False) -> list[str]:
    """Write one row a request; only one-turn sessions with known lengths can be expressed.

    Time stamps count from 2023-11-16 00:00:00 (the loader only keeps differences). Prompt
    contents (token ids, hash ids, prefix groups) and an untimed workload's arrivals are losses.
    """
    losses = Losses(NAME)
    reasoning_losses(workload, losses)
    untimed_losses(workload, losses)
    rows = []
    for session in workload.sessions:
        if len(session.turns) != 1:
            raise cannot(NAME, session, None, f"{len(session.turns)} turns (Azure rows are single requests)")
        input_tokens, output_tokens = known_lengths(NAME, session, 0)
        if not lengths_only(session.turns[0].prompt):
            losses.add("prompt contents (token ids, hash ids or prefix groups): only lengths are kept")
        rows.append((session.arrival_s if workload.timed else 0.0, input_tokens, output_tokens))
    notes = losses.settle(allow_loss)
    base = datetime(2023, 11, 16)
    with open_for_writing(path, newline="") as stream:
        out = csv.writer(stream, lineterminator="\n")
        out.writerow(HEADER)
        for arrival, context, generated in rows:
            # rounded to the 7 digits as a whole, so 1.99999999 s carries into 2.0000000, not .10000000
            whole, ticks = divmod(round(arrival * TICKS_PER_SECOND), TICKS_PER_SECOND)
            stamp = (base + timedelta(seconds=whole)).strftime("%Y-%m-%d %H:%M:%S")
            out.writerow((f"{stamp}.{ticks:07d}", context, generated))
    return notes
