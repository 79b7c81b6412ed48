"""The SSE wire format: the incremental decoder at every split of a stream, and the chunks of
completions and chat streams as vLLM/SGLang/OpenAI send them (tokens, text, usage, errors)."""

import json

import pytest

from pytest_llmreplay.replayer.sse import SSEDecoder, StreamError, error_message, read_chunk

ROLE_CHUNK = '{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'

# One recorded stream as lines (joined with the line end under test): a comment, fields the
# decoder ignores, a vLLM role chunk, ``data:`` without a space, a three-line event (one line
# keeps a second leading space, one is non-ASCII so some split points cut a UTF-8 character),
# a retry field and a blank line with no data before it, then [DONE] and an event cut off by EOF.
STREAM_LINES = [
    ": ping",
    "event: message",
    "id: 1",
    f"data: {ROLE_CHUNK}",
    "",
    "data:no-space",
    "",
    "data: first line",
    "data:  two spaces",
    "data: h\u00e9llo \u2713",
    "id: 2",
    "",
    "retry: 100",
    ": another comment",
    "",
    "data: [DONE]",
    "",
    "data: tail without blank line",
]
EXPECTED = [
    ROLE_CHUNK,
    "no-space",
    "first line\n two spaces\nh\u00e9llo \u2713",
    "[DONE]",
    "tail without blank line",
]
LINE_ENDS = {"lf": "\n", "crlf": "\r\n", "cr": "\r"}


def stream(eol: str, final_eol: bool = True) -> bytes:
    return (eol.join(STREAM_LINES) + (eol if final_eol else "")).encode("utf-8")


def decode(*pieces: bytes) -> list[str]:
    decoder = SSEDecoder()
    events: list[str] = []
    for piece in pieces:
        events += decoder.feed(piece)
    return events + decoder.close()


@pytest.mark.parametrize("final_eol", [True, False], ids=["tail-eol", "tail-no-eol"])
@pytest.mark.parametrize("eol", LINE_ENDS.values(), ids=LINE_ENDS.keys())
def test_every_split_point_gives_the_same_events(eol, final_eol):
    raw = stream(eol, final_eol)
    assert decode(raw) == EXPECTED
    for split in range(len(raw) + 1):
        assert decode(raw[:split], raw[split:]) == EXPECTED, f"split at byte {split}: {raw[:split]!r} | {raw[split:]!r}"


@pytest.mark.parametrize("eol", LINE_ENDS.values(), ids=LINE_ENDS.keys())
def test_byte_by_byte_gives_the_same_events(eol):
    raw = stream(eol)
    assert decode(*(raw[i : i + 1] for i in range(len(raw)))) == EXPECTED


@pytest.mark.parametrize("eol", LINE_ENDS.values(), ids=LINE_ENDS.keys())
def test_every_split_in_three_around_line_ends(eol):
    """Two cuts, each next to a line end (where a \\r\\n can be torn apart)."""
    raw = stream(eol)
    cuts = sorted({i + d for i, b in enumerate(raw) if b in b"\r\n" for d in (0, 1)})
    for a in cuts:
        for b in cuts:
            if a <= b:
                assert decode(raw[:a], raw[a:b], raw[b:]) == EXPECTED, (a, b)


def test_mixed_line_ends_in_one_stream():
    raw = b"data: a\r\ndata: b\n\rdata: c\r\r\n: c\rdata: d\n\ndata: e\r\n\r\n"
    expected = ["a\nb", "c", "d", "e"]
    for split in range(len(raw) + 1):
        assert decode(raw[:split], raw[split:]) == expected, split


@pytest.mark.parametrize("eol", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_feed_returns_each_event_as_soon_as_its_blank_line_arrives(eol):
    raw = stream(eol)
    blank = (eol + eol).encode()
    # the blank lines that close the first four events: line end, then an empty line
    closing, pending = [], False
    for i, line in enumerate(STREAM_LINES):
        if line.startswith("data"):
            pending = True
        elif line == "" and pending:
            closing.append(i)
            pending = False
    assert len(closing) == 4
    for count, line in enumerate(closing, 1):
        end = len((eol.join(STREAM_LINES[: line + 1]) + eol).encode())
        assert raw[end - len(blank) : end] == blank
        decoder = SSEDecoder()
        assert decoder.feed(raw[: end - 1]) == EXPECTED[: count - 1]  # one byte short: not yet
        assert decoder.feed(raw[end - 1 : end]) == [EXPECTED[count - 1]]
        assert decoder.feed(b"") == []
    decoder = SSEDecoder()
    assert decoder.feed(raw) == EXPECTED[:-1]  # the unterminated last event waits for close()
    assert decoder.close() == EXPECTED[-1:]


def test_lone_cr_at_the_end_of_a_read_is_not_a_blank_line():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == []  # still one event: \r\n is one line end
    assert decoder.feed(b"\n\r\n") == ["a\nb"]
    assert decoder.close() == []


def test_cr_line_ends_complete_an_event_once_the_next_byte_arrives():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == []  # the last \r may be half of a \r\n
    assert decoder.feed(b"d") == ["a"]
    assert decoder.feed(b"ata: b\r\r") == []
    assert decoder.close() == ["b"]


def test_close_returns_an_event_without_its_blank_line():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\ndata: y\n") == []
    assert decoder.close() == ["x\ny"]
    assert decoder.close() == []


def test_close_returns_a_last_line_without_line_end():
    decoder = SSEDecoder()
    assert decoder.feed(b'data: 1\n\ndata: {"a": 2}') == ["1"]
    assert decoder.close() == ['{"a": 2}']


def test_close_of_an_empty_or_comment_only_stream_returns_nothing():
    assert SSEDecoder().close() == []
    decoder = SSEDecoder()
    assert decoder.feed(b": ping\n\n: ping\n\nevent: x\nid: 3\n\n") == []
    assert decoder.close() == []


def test_only_one_leading_space_is_removed_and_colons_in_values_are_kept():
    assert decode(b"data:   three\n\ndata: a: b:c\n\ndata:x:y\n\n") == ["  three", "a: b:c", "x:y"]


def test_empty_data_fields_give_an_empty_event():
    # WHATWG: "data:" and "data" (no colon) append an empty line; the event's data is "".
    assert decode(b"data:\n\n", b"data\n\n") == ["", ""]
    assert decode(b"data:\ndata:\n\n") == ["\n"]


def test_fields_that_only_start_with_data_are_ignored():
    assert decode(b"database: x\ndata_: y\n dat: z\ndata: ok\n\n") == ["ok"]


def test_invalid_utf8_does_not_raise():
    events = decode(b"data: \xff\xfe ok\n\n")
    assert len(events) == 1 and events[0].endswith(" ok")


# --- read_chunk ------------------------------------------------------------------------------


def chat(delta, finish_reason=None, **choice):
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason, **choice}],
        }
    )


def completion(text, finish_reason=None, **choice):
    return json.dumps(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": "m",
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, **choice}],
        }
    )


def test_vllm_role_chunk_carries_no_token():
    chunk = read_chunk(ROLE_CHUNK)
    assert (chunk.tokens, chunk.text, chunk.finish_reason, chunk.usage, chunk.token_ids) == (0, "", None, None, None)


def test_content_chunk_is_one_token_with_its_text():
    chunk = read_chunk(chat({"content": " world"}))
    assert (chunk.tokens, chunk.text, chunk.finish_reason) == (1, " world", None)


def test_role_chunk_with_content_counts_its_token():
    chunk = read_chunk(chat({"role": "assistant", "content": "Hi"}))
    assert (chunk.tokens, chunk.text) == (1, "Hi")


def test_empty_content_without_role_or_finish_reason_is_one_token():
    chunk = read_chunk(chat({"content": ""}))
    assert (chunk.tokens, chunk.text) == (1, "")


def test_closing_chunk_with_empty_delta_and_finish_reason_is_no_token():
    chunk = read_chunk(chat({}, "stop"))
    assert (chunk.tokens, chunk.text, chunk.finish_reason) == (0, "", "stop")
    assert read_chunk(chat({"content": ""}, "length")).tokens == 0


def test_last_content_chunk_with_finish_reason_counts_its_token():
    chunk = read_chunk(chat({"content": "."}, "length"))
    assert (chunk.tokens, chunk.text, chunk.finish_reason) == (1, ".", "length")


def test_completions_text_chunks():
    assert (read_chunk(completion(" the")).tokens, read_chunk(completion(" the")).text) == (1, " the")
    assert read_chunk(completion("")).tokens == 1  # a token that decodes to nothing
    closing = read_chunk(completion("", "length"))
    assert (closing.tokens, closing.finish_reason) == (0, "length")
    last = read_chunk(completion(" end", "stop"))
    assert (last.tokens, last.text, last.finish_reason) == (1, " end", "stop")


def test_token_ids_count_the_tokens():
    chunk = read_chunk(completion(" a b c", token_ids=[11, 12, 13]))
    assert (chunk.tokens, chunk.token_ids, chunk.text) == (3, [11, 12, 13], " a b c")
    chunk = read_chunk(chat({"content": "xyz"}, token_ids=[5, 6, 7]))
    assert (chunk.tokens, chunk.token_ids) == (3, [5, 6, 7])


def test_chat_logprobs_count_the_tokens():
    logprobs = {
        "content": [
            {"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []},
            {"token": "b", "logprob": -0.2, "bytes": [98], "top_logprobs": []},
        ]
    }
    chunk = read_chunk(chat({"content": "ab"}, logprobs=logprobs))
    assert (chunk.tokens, chunk.text) == (2, "ab")


def test_completions_logprobs_count_the_tokens():
    logprobs = {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2], "top_logprobs": None, "text_offset": [0, 1]}
    assert read_chunk(completion("ab", logprobs=logprobs)).tokens == 2


def test_usage_only_chunk():
    usage = {
        "prompt_tokens": 12,
        "completion_tokens": 8,
        "total_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    chunk = read_chunk(json.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage}))
    assert (chunk.tokens, chunk.text, chunk.usage, chunk.finish_reason) == (0, "", usage, None)
    assert read_chunk(json.dumps({"usage": usage})).usage == usage


def test_null_usage_on_a_content_chunk_is_no_usage():
    chunk = read_chunk(
        json.dumps({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}], "usage": None})
    )
    assert (chunk.tokens, chunk.usage) == (1, None)


def test_reasoning_counts_as_text():
    chunk = read_chunk(chat({"reasoning_content": "Let me think"}))
    assert (chunk.tokens, chunk.text) == (1, "Let me think")
    chunk = read_chunk(chat({"reasoning": "hmm"}))
    assert (chunk.tokens, chunk.text) == (1, "hmm")
    chunk = read_chunk(chat({"reasoning_content": None, "content": "answer"}))
    assert (chunk.tokens, chunk.text) == (1, "answer")


def test_error_object_in_stream_is_a_server_error():
    with pytest.raises(StreamError) as info:
        read_chunk(json.dumps({"error": {"message": "boom", "type": "InternalServerError", "code": 500}}))
    assert info.value.kind == "server"
    assert "boom" in str(info.value)


def test_flat_error_object_is_a_server_error():
    with pytest.raises(StreamError) as info:
        read_chunk(json.dumps({"object": "error", "message": "boom", "type": "BadRequestError", "code": 400}))
    assert info.value.kind == "server"
    assert "boom" in str(info.value)


@pytest.mark.parametrize(
    "data",
    ["{not json", "[1, 2]", '"text"', "42", '{"id": "x", "object": "chat.completion.chunk"}', '{"choices": ["x"]}'],
    ids=["not-json", "array", "string", "number", "no-choices-no-usage", "choice-not-object"],
)
def test_malformed_events_are_protocol_errors(data):
    with pytest.raises(StreamError) as info:
        read_chunk(data)
    assert info.value.kind == "protocol"
    assert "malformed" in str(info.value)


def test_protocol_error_clips_a_long_event():
    with pytest.raises(StreamError) as info:
        read_chunk("x" * 1000)
    assert len(str(info.value)) < 300


def test_error_message():
    assert error_message({"error": {"message": "boom", "type": "x"}}) == "boom"
    assert error_message({"object": "error", "message": "boom"}) == "boom"
    assert error_message({"error": "boom"}) == "boom"
    assert "rate" in error_message({"error": {"type": "rate_limit"}})  # no message: the object itself
    assert error_message({"error": None, "choices": []}) is None
    assert error_message({"error": ""}) is None
    assert error_message({"choices": [], "object": "chat.completion.chunk"}) is None
    assert error_message(["error"]) is None
    assert error_message("error") is None
    assert error_message(None) is None
