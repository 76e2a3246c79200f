"""`tokenizer` stage: train a byte-level BPE tokenizer on the filtered documents.

    <out_dir>/tokenizer.json (+ tokenizer_config.json, special_tokens_map.json)

loadable by `tokenizers.Tokenizer.from_file` and by `transformers.PreTrainedTokenizerFast` /
`AutoTokenizer.from_pretrained(out_dir)`. Trained on a deterministic sample of about `max_train_chars`
characters (BPE merge counts converge long before a large corpus is read), or on every document. The docs
are streamed twice: first their ids and lengths, keeping only the sample chosen so far (`training_sample`,
memory bounded by the budget), then the sample's texts, fed to the trainer as they are read.
Metrics: vocabulary size, training sample size, characters per token per language (on the first
NUM_EVAL_DOCS_PER_LANG documents of each).
"""
from __future__ import annotations

import heapq
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.common.lm import bpe
from stages.common.runtime.atomic import atomic_dir
from stages.common.runtime.cli import stage_main
from stages.common.runtime.digest import seeded_hash
from stages.common.runtime.metrics import select, write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import param, validate
from stages.common.runtime.parquet import iter_rows

log = logging.getLogger("refinery.tokenizer")
STAGE = "tokenizer"
NUM_EVAL_DOCS_PER_LANG = 1000
READ_BATCH_DOCS = 1024


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
    # a seeded sample of about this many characters (bounds memory: see params.yaml); 0 = every document
    max_train_chars: int = param(20_000_000, min=0)
    seed: int = param(0, min=0)  # picks the sample

    def __post_init__(self) -> None:
        validate(self, STAGE)
        num_special = 2 + len(self.extra_special_tokens)
        if self.vocab_size < 256 + num_special:
            raise ValueError(f"param 'tokenizer.vocab_size' must be >= {256 + num_special} (256 bytes + special "
                             f"tokens), got {self.vocab_size}")
        if self.eos_token == self.pad_token:
            raise ValueError("params 'tokenizer.eos_token' and 'tokenizer.pad_token' must differ")


def training_sample(docs: Iterable[tuple[str, int]], max_chars: int, seed: int) -> list[int]:
    """Indices of the documents to train on, in input order, given each one's (id, characters): all, or those
    first in a seeded hash order of their id until `max_chars` characters are taken (the one reaching it
    included). One pass holding only the documents chosen so far, in a heap with the last in hash order on top
    (bottom-k): memory bounded by the budget, whatever the number of documents."""
    if not max_chars:
        return [i for i, _ in enumerate(docs)]
    chosen: list[tuple[int, int, int]] = []  # (-hash, -index, characters)
    num_chars = 0
    for index, (doc_id, length) in enumerate(docs):
        key = seeded_hash(doc_id, seed, "big")
        if num_chars >= max_chars and (key, index) > (-chosen[0][0], -chosen[0][1]):
            continue  # after the sample's end in hash order
        heapq.heappush(chosen, (-key, -index, length))
        num_chars += length
        while num_chars - chosen[0][2] >= max_chars:  # the budget is reached without the last one
            num_chars -= heapq.heappop(chosen)[2]
    return sorted(-index for _, index, _ in chosen)


def doc_lengths(input_dir: str) -> Iterator[tuple[str, int]]:
    """(id, characters) of every document in input order; the texts are measured by Arrow, not made into
    Python strings."""
    for path in sorted(Path(input_dir).glob("part-*.parquet")):
        batches = pq.ParquetFile(path, pre_buffer=False).iter_batches(READ_BATCH_DOCS, columns=["id", "text"])
        for batch in batches:
            yield from zip(batch.column("id").to_pylist(), pc.utf8_length(batch.column("text")).to_pylist())


class TrainingTexts:
    """The sample's texts in input order, read as the trainer consumes them; on the way, the first
    NUM_EVAL_DOCS_PER_LANG texts of each language (the compression figures) and the counts."""

    def __init__(self, input_dir: str, sample: list[int] | None) -> None:
        self.input_dir, self.sample = input_dir, sample  # None: every document
        self.eval_texts: dict[str, list[str]] = defaultdict(list)
        self.num_docs = self.num_train_docs = self.train_chars = 0

    def __iter__(self) -> Iterator[str]:
        upcoming = iter(self.sample) if self.sample is not None else None
        next_index = next(upcoming, -1) if upcoming is not None else None
        for index, row in enumerate(iter_rows(self.input_dir, ["text", "lang"], batch_size=READ_BATCH_DOCS)):
            self.num_docs += 1
            text, lang = row["text"], row["lang"]
            if len(self.eval_texts[lang]) < NUM_EVAL_DOCS_PER_LANG:
                self.eval_texts[lang].append(text)
            if next_index is None or index == next_index:
                self.num_train_docs += 1
                self.train_chars += len(text)
                yield text
                if upcoming is not None:
                    next_index = next(upcoming, -1)


def run(params: Params) -> dict[str, Any]:
    check_owned_paths(STAGE, {"input_dir": params.input_dir}, {"out_dir": params.out_dir})
    start = time.perf_counter()
    num_docs = sum(pq.ParquetFile(p).metadata.num_rows for p in Path(params.input_dir).glob("part-*.parquet"))
    if not num_docs:
        raise ValueError(f"{params.input_dir}: no documents to train a tokenizer on")
    sample = (training_sample(doc_lengths(params.input_dir), params.max_train_chars, params.seed)
              if params.max_train_chars else None)
    log.info("tokenizer: training BPE (vocab %d) on %d of %d documents", params.vocab_size,
             num_docs if sample is None else len(sample), num_docs)
    texts = TrainingTexts(params.input_dir, sample)
    tokenizer = bpe.train_bpe(iter(texts), params.vocab_size, params.min_frequency, params.eos_token,
                              params.pad_token, params.extra_special_tokens)
    train_seconds = time.perf_counter() - start
    with atomic_dir(params.out_dir, stage=STAGE) as tmp:
        bpe.save(tokenizer, tmp, params.eos_token, params.pad_token)

    metrics: dict[str, Any] = {
        "vocab_size": tokenizer.get_vocab_size(),
        "num_docs": texts.num_docs,
        "num_train_docs": texts.num_train_docs,
        "train_chars": texts.train_chars,
        "train_seconds": round(train_seconds, 3),
    }
    # Compression per language, on the first documents of each (cheap, and the same ones every run).
    for lang, sample_texts in sorted(texts.eval_texts.items()):
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
