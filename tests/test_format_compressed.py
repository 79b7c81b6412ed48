"""Compressed workloads (gzip, and zstd with the zstandard package): every format loads from one
as from the plain file, errors keep their line numbers, damaged data and a missing zstandard are
one line naming the file, convert writes them, and spec files and the marker take them."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import sys
from pathlib import Path

import pytest
import zstandard
from test_format_detection import DETECTED, MESSAGES, error_of, write

from pytest_llmreplay import detect_format, load_workload
from pytest_llmreplay.cli.main import main


def zstd(data: bytes) -> bytes:
    """One zstd frame with a checksum, as the ``zstd`` command writes it."""
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


COMPRESS = {".gz": gzip.compress, ".zst": zstd}
CODEC = {".gz": "gzip", ".zst": "zstd"}
BAD_ARRIVAL = json.dumps({"input_toks": 3, "output_toks": 2, "arrival_time_ns": -1})
GOOD_LINE = json.dumps({"input_toks": 3, "output_toks": 2, "arrival_time_ns": 0})


def compressed_copy(plain: Path, suffix: str) -> Path:
    """``plain`` compressed beside it, named ``plain`` + ``suffix``."""
    compressed = plain.with_name(plain.name + suffix)
    compressed.write_bytes(COMPRESS[suffix](plain.read_bytes()))
    return compressed


def same_but_source(workload, path: Path):
    """``workload`` as loaded from ``path``: only ``source`` says where a workload was read."""
    return dataclasses.replace(workload, source=str(path))


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- the same workload, compressed or not --------------------------------------------------------


@pytest.mark.parametrize("suffix", COMPRESS)
@pytest.mark.parametrize(("text", "expected"), DETECTED.values(), ids=DETECTED.keys())
def test_every_format_detects_and_loads_the_same_compressed(tmp_path, text, expected, suffix):
    plain = write(tmp_path, text)
    compressed = compressed_copy(plain, suffix)
    assert detect_format(compressed) == expected
    assert load_workload(compressed) == same_but_source(load_workload(plain), compressed)


# the small real traces, of three formats, one of them kept gzipped in tests/data
SMALL_REAL = [
    "trie/office_work_8k_slice.jsonl",
    "mooncake/mooncake_tiny_arxiv_head16.jsonl",
    "llmservingsim/example_trace.jsonl",
    "llmservingsim/workload_me2_01_mixed.jsonl.gz",
]


@pytest.mark.parametrize("relative", SMALL_REAL)
def test_a_real_trace_loads_the_same_plain_gzipped_and_zstd(tmp_path, trace_data, relative):
    data = (trace_data / relative).read_bytes()
    plain = tmp_path / Path(relative).name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(data) if relative.endswith(".gz") else data)
    expected = load_workload(plain)
    for suffix in COMPRESS:
        compressed = compressed_copy(plain, suffix)
        assert load_workload(compressed) == same_but_source(expected, compressed)


@pytest.mark.parametrize("suffix", COMPRESS)
def test_the_content_tells_compression_not_the_name(tmp_path, suffix):
    named_plain = tmp_path / "trace.jsonl"
    named_plain.write_bytes(COMPRESS[suffix](f"{GOOD_LINE}\n{GOOD_LINE}\n".encode()))
    assert detect_format(named_plain) == "llmservingsim"
    assert load_workload(named_plain).num_requests == 2


@pytest.mark.parametrize("suffix", COMPRESS)
def test_concatenated_members_and_frames_read_as_one_file(tmp_path, suffix):
    path = tmp_path / f"trace.jsonl{suffix}"
    path.write_bytes(
        COMPRESS[suffix](f"{GOOD_LINE}\n".encode()) + COMPRESS[suffix](f"{GOOD_LINE}\n{GOOD_LINE}\n".encode())
    )
    assert load_workload(path).num_requests == 3


def test_a_directory_of_payload_files_takes_compressed_ones(tmp_path):
    line = json.dumps({"messages": MESSAGES}) + "\n"
    (tmp_path / "a.jsonl").write_text(line)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(line.encode() * 2))
    (tmp_path / "c.jsonl.zst").write_bytes(zstd(line.encode() * 3))
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"not a session"))
    workload = load_workload(tmp_path)
    assert [(s.id, len(s.turns)) for s in workload.sessions] == [("a", 1), ("b", 2), ("c", 3)]


# --- errors keep their place ---------------------------------------------------------------------


@pytest.mark.parametrize("suffix", COMPRESS)
def test_an_error_names_the_compressed_file_and_the_line(tmp_path, suffix):
    path = compressed_copy(write(tmp_path, "\n".join([GOOD_LINE, GOOD_LINE, BAD_ARRIVAL])), suffix)
    assert str(error_of(load_workload, path)) == f"{path}:3: arrival_time_ns: must be >= 0, got -1"


@pytest.mark.parametrize("suffix", COMPRESS)
def test_a_byte_that_is_not_utf8_has_its_line_and_column(tmp_path, suffix):
    path = tmp_path / f"trace.jsonl{suffix}"
    path.write_bytes(COMPRESS[suffix](f"{GOOD_LINE}\n".encode() + b'{"input_toks": "caf\xe9"}\n'))
    assert str(error_of(load_workload, path)) == (
        f"{path}:2: not UTF-8: byte 0xe9 at column 20 (expected UTF-8 JSONL, JSON, CSV or YAML)"
    )


@pytest.mark.parametrize("suffix", COMPRESS)
def test_a_whole_document_format_keeps_its_line_numbers(tmp_path, suffix):
    document = json.dumps({"data": [{"session_id": "a", "payloads": [{"messages": MESSAGES}]}]}, indent=2)
    path = compressed_copy(write(tmp_path, document.replace('"a"', '"a",'), "inputs.json"), suffix)
    assert re.match(rf"{re.escape(str(path))}:4:\d+: not valid JSON: ", str(error_of(load_workload, path)))


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def flipped(data: bytes) -> bytes:
    """One byte of the compressed body changed: the checksum (or the decoder) notices."""
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


@pytest.mark.parametrize("damage", [truncated, flipped])
@pytest.mark.parametrize("suffix", COMPRESS)
def test_damaged_data_is_one_error_naming_the_file(capsys, tmp_path, suffix, damage):
    text = "".join(json.dumps({"input_toks": i, "output_toks": 2, "arrival_time_ns": i}) + "\n" for i in range(1, 3000))
    path = tmp_path / f"trace.jsonl{suffix}"
    path.write_bytes(damage(COMPRESS[suffix](text.encode())))
    message = str(error_of(load_workload, path))
    assert message.startswith(f"{path}: {CODEC[suffix]} data is truncated or corrupt (") and "\n" not in message
    code, out, err = cli(capsys, "validate", str(path))
    assert (code, out, err) == (1, "", f"error: {message}\n")


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("trace.jsonl.gz", f"{GOOD_LINE}\n".encode(), "Not a gzipped file"),  # named gzip, plain text
        ("model.bin", b"\x1f\x8b\x08\x00" + bytes(range(128, 256)), "Error -3 while decompressing"),  # gzip's header
    ],
)
def test_what_claims_to_be_gzip_and_is_not_is_one_error(tmp_path, name, data, says):
    path = tmp_path / name
    path.write_bytes(data)
    assert str(error_of(detect_format, path)).startswith(f"{path}: gzip data is truncated or corrupt ({says}")


@pytest.mark.parametrize("name", ["trace.jsonl.zst", "trace.jsonl"])  # named so, or told by its first bytes
def test_zstd_without_zstandard_says_what_to_install(capsys, monkeypatch, tmp_path, name):
    path = tmp_path / name
    path.write_bytes(zstd(f"{GOOD_LINE}\n".encode()))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now fails
    expected = f"{path}: zstd-compressed: reading or writing it needs the zstandard package (pip install zstandard)"
    assert str(error_of(load_workload, path)) == expected
    assert cli(capsys, "inspect", str(path)) == (1, "", f"error: {expected}\n")


# --- writing -------------------------------------------------------------------------------------

# one workload per writer: JSON lines, CSV, one JSON document
TO_WRITE = {
    "llmservingsim": (
        "trace.jsonl",
        f"{GOOD_LINE}\n{json.dumps({'input_toks': 5, 'output_toks': 1, 'arrival_time_ns': 10})}\n",
    ),
    "azure": ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"),
    "aiperf-inputs": ("inputs.json", json.dumps({"data": [{"session_id": "a", "payloads": [{"messages": MESSAGES}]}]})),
}


@pytest.mark.parametrize("suffix", COMPRESS)
@pytest.mark.parametrize("to", TO_WRITE)
def test_convert_compresses_what_it_writes_by_the_name(capsys, tmp_path, to, suffix):
    name, text = TO_WRITE[to]
    source = tmp_path / name
    source.write_text(text)
    plain, compressed = tmp_path / f"out-{name}", tmp_path / f"out-{name}{suffix}"
    for out in (plain, compressed):
        assert cli(capsys, "convert", str(source), str(out), "--to", to)[0] == 0
    decompress = gzip.decompress if suffix == ".gz" else zstandard.ZstdDecompressor().decompressobj().decompress
    assert decompress(compressed.read_bytes()) == plain.read_bytes()
    assert load_workload(compressed) == same_but_source(load_workload(plain), compressed)


def test_the_same_workload_gzips_to_the_same_bytes(capsys, tmp_path):
    source = tmp_path / "trace.jsonl"
    source.write_text(TO_WRITE["llmservingsim"][1])
    first, second = tmp_path / "a" / "out.jsonl.gz", tmp_path / "b" / "out.jsonl.gz"
    for out in (first, second):
        out.parent.mkdir()
        assert cli(capsys, "convert", str(source), str(out), "--to", "llmservingsim")[0] == 0
    assert first.read_bytes() == second.read_bytes()  # no time stamp in the gzip header


# --- the pytest plugin ---------------------------------------------------------------------------


def test_spec_files_and_the_marker_take_compressed_workloads(project):
    workload = project.path / "wl.yaml"
    project.path.joinpath("wl.yaml.gz").write_bytes(gzip.compress(workload.read_bytes()))
    project.path.joinpath("wl.yaml.zst").write_bytes(zstd(workload.read_bytes()))
    project.path.joinpath("gz.llmreplay.yaml").write_text("workload: wl.yaml.gz\nslo:\n  error_rate: == 0\n")
    project.makepyfile(
        test_zst="""
        import pytest

        @pytest.mark.llmreplay(workload="wl.yaml.zst", slo={"error_rate": "== 0"})
        def test_zst(llm_result):
            assert llm_result.summary["requests"]["ok"] == 8
    """
    )
    result = project.runpytest("--llm-offline", "-v", "gz.llmreplay.yaml", "test_zst.py")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["gz.llmreplay.yaml::gz PASSED*", "test_zst.py::test_zst PASSED*"], consecutive=False)
