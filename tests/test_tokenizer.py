"""Tokenizer loading: the bundled default, a tokenizer.json file, a local transformers folder;
encoding a huge text piece by piece, no further than a limit."""

import re
from pathlib import Path

import pytest

from pytest_llmreplay import LLMReplayError
from pytest_llmreplay.workloads.prompts import PromptFactory
from pytest_llmreplay.workloads.tokenizer import (
    BUNDLED_PATH,
    PIECE_CHARS,
    FastTokenizer,
    TransformersTokenizer,
    encode_within,
    load_tokenizer,
    text_pieces,
)

TEXT = "Prefix caching keeps the KV blocks of a shared system prompt."


@pytest.mark.parametrize("name", [None, "", "default", "llmreplay"])
def test_default_names_give_the_bundled_tokenizer(name):
    tokenizer = load_tokenizer(name)
    assert isinstance(tokenizer, FastTokenizer)
    assert (tokenizer.name, tokenizer.vocab_size) == ("llmreplay-bpe-4k", 4096)
    assert tokenizer.decode(tokenizer.encode(TEXT)) == TEXT


def test_no_special_tokens_are_added():
    tokenizer = load_tokenizer()
    assert tokenizer.encode("") == []
    assert tokenizer.encode("<|im_start|>") == [1]  # the text's own special token, nothing more


def test_a_tokenizer_json_file_loads_with_the_fast_library(tmp_path):
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes(BUNDLED_PATH.read_bytes())
    tokenizer = load_tokenizer(str(copy))
    assert isinstance(tokenizer, FastTokenizer) and tokenizer.name == str(copy)
    assert tokenizer.encode(TEXT) == load_tokenizer().encode(TEXT)


def test_a_local_transformers_folder_loads_through_autotokenizer(tmp_path):
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_file=str(BUNDLED_PATH), eos_token="<|endoftext|>").save_pretrained(tmp_path)
    tokenizer = load_tokenizer(str(tmp_path))
    assert isinstance(tokenizer, TransformersTokenizer)
    bundled = load_tokenizer()
    assert tokenizer.vocab_size == bundled.vocab_size
    assert tokenizer.encode(TEXT) == bundled.encode(TEXT)
    assert tokenizer.decode(tokenizer.encode(TEXT)) == TEXT
    # generated prompts are the same with either wrapper of the same vocabulary
    assert PromptFactory(tokenizer).stream(42, 0, 50) == PromptFactory(bundled).stream(42, 0, 50)


@pytest.mark.parametrize("name", ["{tmp}/nowhere", "{tmp}/nowhere/tokenizer.json", "./nowhere", "nowhere.json"])
def test_a_missing_tokenizer_path_says_so_without_asking_the_hub(tmp_path, name):
    name = name.format(tmp=tmp_path)
    with pytest.raises(LLMReplayError, match=rf"^tokenizer '{re.escape(name)}': no such file or folder$"):
        load_tokenizer(name)


def test_a_name_that_is_neither_a_path_nor_a_hub_id_is_one_clear_error():
    with pytest.raises(LLMReplayError, match=r"cannot load tokenizer 'not a hub id!'.*Give a local folder"):
        load_tokenizer("not a hub id!")


def test_a_broken_tokenizer_file_is_one_clear_error(tmp_path):
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{}")
    with pytest.raises(LLMReplayError, match=rf"cannot load tokenizer file {broken}"):
        load_tokenizer(str(broken))


def test_a_hub_id_in_the_local_cache_loads_without_contacting_the_hub(tmp_path):
    """A CI runner with the tokenizer cached and no network must not wait on the hub (its
    client retries for about 45 s): the hub here is a loopback server that counts requests."""
    import http.server
    import os
    import subprocess
    import sys
    import threading

    from transformers import PreTrainedTokenizerFast

    revision = "0" * 40
    repo = tmp_path / "hub" / "models--local--tiny"
    snapshot = repo / "snapshots" / revision
    PreTrainedTokenizerFast(tokenizer_file=str(BUNDLED_PATH), eos_token="<|endoftext|>").save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    (repo / ".no_exist" / revision).mkdir(parents=True)
    (repo / ".no_exist" / revision / "config.json").touch()  # how the cache records a file the repo lacks

    asked: list[str] = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            asked.append(self.path)
            self.send_error(503)

        do_GET = do_HEAD

        def log_message(self, *args):
            pass

    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "HF_ENDPOINT": f"http://127.0.0.1:{hub.server_address[1]}",
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    code = f"from pytest_llmreplay.workloads.tokenizer import load_tokenizer; t = load_tokenizer('local/tiny'); print(t.vocab_size, t.encode({TEXT!r}))"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    finally:
        hub.shutdown()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split(" ", 1) == ["4096", f"{load_tokenizer().encode(TEXT)}\n"]
    assert asked == []


def test_text_pieces_cut_before_a_space_between_two_other_characters():
    text = "alpha beta  gamma delta"
    assert list(text_pieces(text, 8)) == ["alpha", " beta  g", "amma", " delta"]  # no space fit in 'beta  gamma'
    assert list(text_pieces(text, len(text))) == [text]


def test_encode_within_gives_the_whole_texts_ids_piece_by_piece(recording_tokenizer):
    text = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    whole = load_tokenizer().encode(text)
    assert encode_within(recording_tokenizer, text, len(whole), piece_chars=4096) == whole
    assert len(recording_tokenizer.encoded) > 1 and max(recording_tokenizer.encoded) <= 4096


def test_encode_within_stops_at_the_piece_that_passes_the_limit(recording_tokenizer):
    """A 3M-word message refused by a 131,072-token context is not tokenized whole: the
    tokenizer sees one piece at a time, and only until the count passes the limit."""
    text = " ".join(["word"] * 3_000_000)
    ids = encode_within(recording_tokenizer, text, 131_072)
    assert len(ids) > 131_072
    assert max(recording_tokenizer.encoded) <= PIECE_CHARS and sum(recording_tokenizer.encoded) < 2 * PIECE_CHARS
