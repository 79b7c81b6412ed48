"""Tokenizers: the protocol the project uses, the bundled default, and transformers loading.

The default is the project's own 4,096-token byte-level BPE (``assets/tokenizer.json``, built
offline by ``scripts/build_tokenizer.py``), loaded with the light ``tokenizers`` library.
Anything else (a hub id or a local folder) loads through transformers' ``AutoTokenizer``,
imported only then: from local files first (a folder, or a hub id already in the Hugging Face
cache, which then never contacts the hub: without network the hub client retries for about 45
s before it falls back to the cache), and only when that fails from the hub. Special tokens are
never added: the ids are the prompt's own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from ..errors import LLMReplayError

BUNDLED_PATH = Path(__file__).resolve().parent / "assets" / "tokenizer.json"
DEFAULT_NAMES = (None, "", "default", "llmreplay")
PIECE_CHARS = 1 << 20  # the most characters encode_within hands a tokenizer at once: ~160 MB with the bundled one


class Tokenizer(Protocol):
    """What prompts and metrics need of a tokenizer."""

    name: str

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class FastTokenizer:
    """A ``tokenizers`` JSON file (the bundled default, or any ``tokenizer.json``). ``lazy``
    (the bundled file, known good): ``tokenizers`` is imported and the file read at the first
    use, so a replay of keyed prompts, which never tokenizes, pays neither (9 MB and ~10 ms);
    any other file is read at once, so that a bad one fails where it is named."""

    def __init__(self, path: str | Path, name: str | None = None, lazy: bool = False) -> None:
        self.path = str(path)
        self.name = name or self.path
        if not lazy:
            _ = self._raw

    @cached_property
    def _raw(self) -> Any:
        from tokenizers import Tokenizer as RawTokenizer

        try:
            return RawTokenizer.from_file(self.path)
        except Exception as exc:  # tokenizers raises a bare Exception on a bad file
            raise LLMReplayError(f"cannot load tokenizer file {self.path}: {exc}") from None

    @cached_property
    def vocab_size(self) -> int:
        return int(self._raw.get_vocab_size())

    def encode(self, text: str) -> list[int]:
        return self._raw.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._raw.decode(list(ids), skip_special_tokens=False)


class TransformersTokenizer:
    """A tokenizer loaded with ``transformers.AutoTokenizer`` (hub id or local folder)."""

    def __init__(self, name_or_path: str) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:  # pragma: no cover - transformers is a dependency
            raise LLMReplayError(f"loading tokenizer {name_or_path!r} needs transformers: {exc}") from None
        try:
            try:
                self._hf = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
            except (OSError, ValueError):  # not on disk: the hub's answer (or its error) is the one to give
                self._hf = AutoTokenizer.from_pretrained(name_or_path)
        except (OSError, ValueError) as exc:
            raise LLMReplayError(
                f"cannot load tokenizer {name_or_path!r}: {exc}. Give a local folder with the "
                "tokenizer files, a tokenizer.json, or a hub id available in the local cache"
            ) from None
        self.name = name_or_path
        self.vocab_size = len(self._hf)

    def encode(self, text: str) -> list[int]:
        return list(self._hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        text = self._hf.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert isinstance(text, str)  # one sequence of ids decodes to one string (a batch, to a list)
        return text


def encode_within(tokenizer: Tokenizer, text: str, limit: int, piece_chars: int = PIECE_CHARS) -> list[int]:
    """``tokenizer.encode(text)`` for a text that may be huge, within a bounded memory: when the
    result would hold more than ``limit`` ids, the ids of a head of ``text`` holding more than
    ``limit`` are returned instead (the caller refuses a prompt by its length: it holds at least
    that many tokens).

    A text of up to ``piece_chars`` characters is encoded at once. A longer one is encoded a piece
    at a time (:func:`text_pieces`), stopping at the first piece that takes the count past
    ``limit``: encoding holds about 700 bytes a token on top of the text (the bundled tokenizer:
    a 15 MB message of 3M words peaked at 2.2 GB encoded whole, and 30 MB aborted the process
    under a 4 GB limit), so memory stays that of one piece, whatever the text's length. Pieces
    are cut before a space between two other characters, where byte-level BPE pre-tokenizers
    (GPT-2's, Llama 3's, Qwen's, the bundled one) split anyway, so the pieces' ids are the whole
    text's; with other tokenizers they may differ by a token where two pieces meet."""
    ids: list[int] = []
    for piece in text_pieces(text, piece_chars):
        ids += tokenizer.encode(piece)
        if len(ids) > limit:
            break
    return ids


def text_pieces(text: str, size: int) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``size`` characters, each but the last cut just
    before a space that has a character other than whitespace on either side (a piece is cut at
    ``size`` only when its stretch holds no such space)."""
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = text.rfind(" ", start + 1, end)
        while cut > start and (text[cut - 1].isspace() or text[cut + 1].isspace()):
            cut = text.rfind(" ", start + 1, cut)
        start, piece = (cut, text[start:cut]) if cut > start else (end, text[start:end])
        yield piece
    yield text[start:]


def load_tokenizer(name_or_path: str | None = None) -> Tokenizer:
    """The bundled tokenizer for ``None``/``"default"``, a ``tokenizer.json`` file, or transformers."""
    if name_or_path in DEFAULT_NAMES:
        return FastTokenizer(BUNDLED_PATH, name="llmreplay-bpe-4k", lazy=True)
    path = Path(str(name_or_path))
    if path.is_file():
        return FastTokenizer(path)
    if not path.exists() and _names_a_path(str(name_or_path)):
        raise LLMReplayError(f"tokenizer {name_or_path!r}: no such file or folder")
    return TransformersTokenizer(str(name_or_path))


def _names_a_path(name: str) -> bool:
    """True for what cannot be a hub id (``org/name``): absolute, ``./``, ``../``, ``~`` or a ``.json`` file."""
    return name.startswith(("/", "./", "../", "~", ".\\", "..\\")) or name.endswith(".json") or Path(name).is_absolute()
