"""A corpus as the perplexity stage scores it (`ScoredCorpus`): every document's tokens in one scratch token
shard, and its per-document state as columns on disk, read a chunk at a time, so that nothing grows in memory
with the number of documents. `tokenize_corpus` builds it from parquet parts; `reference_subset` marks the
documents a reference LM trains on; `reference_docs` reads them back."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from tokenizers import Tokenizer
from tqdm import tqdm

from stages.common.lm import bpe, order_stats
from stages.common.lm.doc_columns import DocColumns, id_hash
from stages.common.lm.order_stats import Chunks, sortable_keys
from stages.common.lm.token_shards import TokenShard, TokenShardWriter, is_validation
from stages.common.runtime.digest import hash_unit
from stages.common.runtime.parquet import iter_rows

QUALITY_COLUMN = "quality_score"  # an input column that ranks documents for the reference subset (higher: better)


@dataclass
class ScoredCorpus:
    """Every document's tokens in one scratch shard, and its per-document state as columns on disk
    (`DocColumns`, np.memmap files beside the shard), in input order: `id_hash` (that a second read of the
    input gives the same documents), `lang` (an index into `langs`), `split` (index into SPLITS), `quality`
    (with a quality_score column) or `ref_unit` (the seeded hash that samples the reference subset without
    one); later `in_reference`, `nll_sum`, `num_scored`, `perplexity` and `tier`. Nothing here grows in memory
    with the number of documents: a pass reads the columns a chunk at a time (`slices`)."""
    columns: DocColumns
    langs: list[str]  # the language of each code, in order of first appearance
    has_quality: bool
    tokens: TokenShard

    @property
    def num_docs(self) -> int:
        return self.columns.num_docs

    def doc(self, i: int) -> np.ndarray:
        return self.tokens.doc(i)[:-1]  # without the end-of-document token

    def doc_tokens(self, s: slice) -> np.ndarray:
        """Tokens of documents `s` in the shards, end-of-document tokens included."""
        return np.diff(self.tokens.doc_offsets[s.start:s.stop + 1])

    def in_reference_langs(self, s: slice) -> np.ndarray:
        """The language code of documents `s` in the reference subset, -1 for the others."""
        return np.where(self.columns["in_reference"][s], self.columns["lang"][s], -1)

    def scan(self, values: str, groups: Callable[[slice], np.ndarray] | None = None) -> Chunks:
        """A pass over column `values` in chunks, with each document's group (default: its language code), as
        `order_stats` and the streamed cutoffs read it."""
        def chunks():
            for s in self.columns.slices():
                yield self.columns[values][s], (self.columns["lang"][s] if groups is None else groups(s))
        return chunks


def tokenize_corpus(input_dir: str, tokenizer: Tokenizer, eos_id: int, scratch: Path, *, seed: int,
                    val_fraction: float, batch_docs: int) -> ScoredCorpus:
    """Read `input_dir`'s part-*.parquet documents (`id`, `text`, `lang`, and `quality_score` when the first
    file has it) `batch_docs` at a time: their tokens into `scratch/all`, their columns into
    `scratch/columns` (the split drawn by `is_validation(id, seed, val_fraction)`)."""
    files = sorted(Path(input_dir).glob("part-*.parquet"))
    if not files:
        raise ValueError(f"{input_dir}: no part-*.parquet files")
    has_quality = QUALITY_COLUMN in pq.read_schema(files[0]).names
    names = ["id", "text", "lang"] + ([QUALITY_COLUMN] if has_quality else [])
    writer = TokenShardWriter(scratch / "all", tokenizer.get_vocab_size(), eos_id)
    columns = DocColumns(scratch / "columns")
    codes: dict[str, int] = {}
    rows = iter_rows(input_dir, names, batch_size=batch_docs)
    with tqdm(desc="tokenize", unit="doc", mininterval=2.0) as bar:
        for batch in chunked(rows, batch_docs):
            for doc_ids in bpe.encode(tokenizer, [r["text"] for r in batch]):
                writer.add(doc_ids)
            ids = [r["id"] for r in batch]
            if has_quality:
                sample = {"quality": np.array([r[QUALITY_COLUMN] for r in batch], dtype=np.float64)}
            else:
                sample = {"ref_unit": np.array([hash_unit(f"ref:{i}", seed, "little") for i in ids],
                                               dtype=np.float64)}
            columns.append(id_hash=np.array([id_hash(i) for i in ids], dtype=np.uint64),
                           lang=np.array([codes.setdefault(r["lang"], len(codes)) for r in batch], dtype=np.int32),
                           split=np.array([is_validation(i, seed, val_fraction) for i in ids],
                                          dtype=np.int8), **sample)
            bar.update(len(batch))
    writer.close()
    columns.close()
    if not columns.num_docs:
        raise ValueError(f"{input_dir}: no documents")
    return ScoredCorpus(columns, list(codes), has_quality, TokenShard(scratch / "all"))


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """`items` in lists of `size` (the last one shorter)."""
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def reference_subset(corpus: ScoredCorpus, fraction: float) -> np.ndarray:
    """Column `in_reference`: per language, the top `fraction` by quality score (ties in input order), or,
    without scores, documents whose seeded hash falls below `fraction`. The score of a language's last
    document in is one order statistic (`order_stats.select`, exact, bounded memory); those above it are in,
    and of those equal to it the first ones in input order."""
    columns = corpus.columns
    mask = columns.create("in_reference", np.bool_)
    if not corpus.has_quality:
        for s in columns.slices():
            mask[s] = columns["ref_unit"][s] < fraction
        return mask

    def keys(s: slice) -> np.ndarray:  # in the order of the top first (descending score, NaN last)
        return sortable_keys(-columns["quality"][s])

    def negated():
        return ((-quality, langs) for quality, langs in corpus.scan("quality")())

    num_langs = len(corpus.langs)
    counts = {code: n for code, (n, _) in order_stats.group_counts(negated, range(num_langs)).items()}
    take = [max(1, round(fraction * counts[code])) for code in range(num_langs)]
    last = order_stats.select(negated, {code: [take[code] - 1] for code in range(num_langs)}, counts)
    last_key = sortable_keys(np.array([last[code, take[code] - 1] for code in range(num_langs)]))
    remaining = np.array(take, dtype=np.int64)  # then: how many to take of those at the last key
    for s in columns.slices():
        langs = columns["lang"][s]
        remaining -= np.bincount(langs[keys(s) < last_key[langs]], minlength=num_langs)
    for s in columns.slices():
        k, langs = keys(s), columns["lang"][s]
        chosen = k < last_key[langs]
        at_last = np.flatnonzero(k == last_key[langs])
        for code in np.unique(langs[at_last]):
            taken = at_last[langs[at_last] == code][:remaining[code]]
            chosen[taken] = True
            remaining[code] -= len(taken)
        mask[s] = chosen
    return mask


def reference_docs(corpus: ScoredCorpus) -> Iterator[np.ndarray]:
    """The reference subset's training-split documents, in input order, read from the token shard."""
    for s in corpus.columns.slices():
        chosen = corpus.columns["in_reference"][s] & (corpus.columns["split"][s] == 0)
        for i in np.flatnonzero(chosen):
            yield corpus.doc(s.start + int(i))
