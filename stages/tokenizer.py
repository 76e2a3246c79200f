"""`tokenizer` stage: train a byte-level BPE tokenizer on the filtered documents.

    <out_dir>/tokenizer.json (+ tokenizer_config.json, special_tokens_map.json)

loadable by `tokenizers.Tokenizer.from_file` and by `transformers.PreTrainedTokenizerFast` /
`AutoTokenizer.from_pretrained(out_dir)`. Trained on every document, or on a deterministic sample of
about `max_train_chars` characters (BPE merge counts converge long before a large corpus is read).
Metrics: vocabulary size, training sample size, characters per token per language.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from stages.common.lm import bpe
from stages.common.runtime.atomic import atomic_dir, check_owned_paths
from stages.common.runtime.cli import stage_main
from stages.common.runtime.metrics import select, write_metrics
from stages.common.runtime.params import param, validate
from stages.common.runtime.parquet import read_table

log = logging.getLogger("refinery.tokenizer")
STAGE = "tokenizer"
NUM_EVAL_DOCS_PER_LANG = 1000


@dataclass(frozen=True)
class Params:
    input_dir: str  # Parquet docs (id, text, lang, ...)
    out_dir: str
    metrics_path: str  # headline figures (DVC metrics)
    detail_path: str  # every figure
    vocab_size: int = 4096
    min_frequency: int = param(2, min=0)  # a pair seen fewer times is never merged
    eos_token: str = param("<|endoftext|>", nonempty=True)  # ends every document (and so starts the next); id 0
    pad_token: str = param("<|pad|>", nonempty=True)  # id 1
    extra_special_tokens: tuple[str, ...] = ()  # ids 2, 3, ...
    max_train_chars: int = param(0, min=0)  # 0 = train on every document; else a sample of about this many characters
    seed: int = param(0, min=0)  # picks the sample

    def __post_init__(self) -> None:
        validate(self, STAGE)
        num_special = 2 + len(self.extra_special_tokens)
        if self.vocab_size < 256 + num_special:
            raise ValueError(f"param 'tokenizer.vocab_size' must be >= {256 + num_special} (256 bytes + special "
                             f"tokens), got {self.vocab_size}")
        if self.eos_token == self.pad_token:
            raise ValueError("params 'tokenizer.eos_token' and 'tokenizer.pad_token' must differ")


def training_sample(ids: list[str], texts: list[str], max_chars: int, seed: int) -> list[int]:
    """Indices of the documents to train on, in input order: all, or those first in a seeded hash order
    until `max_chars` characters are taken."""
    if not max_chars:
        return list(range(len(texts)))
    order = sorted(range(len(ids)), key=lambda i: hashlib.blake2b(f"{seed}:{ids[i]}".encode(), digest_size=8).digest())
    lengths = np.array([len(texts[i]) for i in order])
    num_taken = int(np.searchsorted(np.cumsum(lengths), max_chars)) + 1
    return sorted(order[:num_taken])


def run(params: Params) -> dict[str, Any]:
    check_owned_paths(STAGE, {"input_dir": params.input_dir}, {"out_dir": params.out_dir})
    start = time.perf_counter()
    table = read_table(params.input_dir, ["id", "text", "lang"])
    ids, texts, langs = (table.column(c).to_pylist() for c in ("id", "text", "lang"))
    if not texts:
        raise ValueError(f"{params.input_dir}: no documents to train a tokenizer on")
    sample = training_sample(ids, texts, params.max_train_chars, params.seed)
    log.info("tokenizer: training BPE (vocab %d) on %d of %d documents", params.vocab_size, len(sample), len(texts))
    tokenizer = bpe.train_bpe((texts[i] for i in sample), params.vocab_size, params.min_frequency, params.eos_token,
                              params.pad_token, params.extra_special_tokens)
    train_seconds = time.perf_counter() - start
    with atomic_dir(params.out_dir) as tmp:
        bpe.save(tokenizer, tmp, params.eos_token, params.pad_token)

    # Compression per language, on the first documents of each (cheap, and the same ones every run).
    by_lang: dict[str, list[str]] = defaultdict(list)
    for text, lang in zip(texts, langs):
        if len(by_lang[lang]) < NUM_EVAL_DOCS_PER_LANG:
            by_lang[lang].append(text)
    metrics: dict[str, Any] = {
        "vocab_size": tokenizer.get_vocab_size(),
        "num_docs": len(texts),
        "num_train_docs": len(sample),
        "train_chars": sum(len(texts[i]) for i in sample),
        "train_seconds": round(train_seconds, 3),
    }
    for lang, sample_texts in sorted(by_lang.items()):
        num_tokens = sum(len(ids) for ids in bpe.encode(tokenizer, sample_texts))
        metrics[f"chars_per_token.{lang}"] = round(sum(map(len, sample_texts)) / max(1, num_tokens), 4)
    metrics["seconds"] = round(time.perf_counter() - start, 3)
    write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
    log.info("tokenizer: vocab %d, trained in %.1fs; chars/token %s", metrics["vocab_size"], train_seconds,
             {k.split(".")[1]: v for k, v in metrics.items() if k.startswith("chars_per_token.")})
    return metrics


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: vocabulary size and characters per token per language."""
    return {"vocab_size": metrics["vocab_size"],
            **{f"chars_per_token.{lang}": v for lang, v in select(metrics, "chars_per_token").items()}}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)

if __name__ == "__main__":
    main()
