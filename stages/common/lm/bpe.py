"""Byte-level BPE tokenizer (Hugging Face `tokenizers`), saved so `transformers` loads it as is.

Byte-level: every string is representable (no unknown token), Chinese included, whose characters
start as three byte tokens each and get merged where frequent. The saved folder holds
`tokenizer.json` plus the `tokenizer_config.json` / `special_tokens_map.json` that
`PreTrainedTokenizerFast.from_pretrained` / `AutoTokenizer` read, written by transformers itself.

Special tokens take the first ids: the end-of-document token (GPT-2's `<|endoftext|>`; documents are
stored as `ids + [eos]`, so it also marks the start of the next one), the padding token, then extras.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

TOKENIZER_FILE = "tokenizer.json"


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int, eos_token: str, pad_token: str,
              extra_special_tokens: tuple[str, ...] = ()) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    # GPT-2's split rule (letters / digits / punctuation runs, a leading space kept with the word), then bytes.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
        special_tokens=[eos_token, pad_token, *extra_special_tokens],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen in the sample or not
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def save(tokenizer: Tokenizer, out_dir: Path, eos_token: str, pad_token: str) -> None:
    """Write tokenizer.json + the transformers config files into `out_dir` (an existing folder)."""
    from transformers import PreTrainedTokenizerFast  # heavy import, only where needed

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=eos_token, bos_token=eos_token,
                                   pad_token=pad_token, unk_token=None,
                                   clean_up_tokenization_spaces=False)
    fast.save_pretrained(str(out_dir))
    # The config files list keys in insertion order, which is stable; tokenizer.json is written by Rust
    # from ordered maps. Checked byte-identical across runs by a test.


def load(path: str | Path) -> Tokenizer:
    """`path`: a tokenizer folder or its tokenizer.json."""
    path = Path(path)
    return Tokenizer.from_file(str(path / TOKENIZER_FILE if path.is_dir() else path))


def special_token_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"special token {token!r} is not in the tokenizer's vocabulary")
    return token_id


def eos_token_of(path: str | Path) -> str:
    """The end-of-document token named in a saved tokenizer folder's config."""
    config = json.loads((Path(path) / "tokenizer_config.json").read_text(encoding="utf-8"))
    eos = config["eos_token"]
    return eos["content"] if isinstance(eos, dict) else eos


def encode(tokenizer: Tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Token ids per text, encoded in parallel by the Rust side (no offsets computed: faster)."""
    return [np.asarray(e.ids, dtype=np.int32) for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

