"""Build the bundled default tokenizer (pytest_llmreplay/workloads/assets/tokenizer.json), offline.

A byte-level BPE (GPT-2/Llama-3 style pre-tokenisation, so any text round-trips) with a
4,096-token vocabulary, trained with the ``tokenizers`` library on the Python language reference
text that ships with CPython (``pydoc_data.topics``): English prose and code, no download.
Run: ``python scripts/build_tokenizer.py [OUT]``. The file is committed; rerun only to change it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "pytest_llmreplay" / "workloads" / "assets" / "tokenizer.json"


def corpus() -> list[str]:
    """The training text: every topic of the bundled Python language reference."""
    from pydoc_data.topics import topics

    return [topics[name] for name in sorted(topics)]


def build() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return tokenizer


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    build().save(str(out))
    print(f"wrote {out}")
