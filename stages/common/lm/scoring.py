"""Document perplexity under a language model, and perplexity tiers by per-language percentiles.

Scoring: a document is scored as the model sees it inside the training stream, after the previous
document's end-of-document token: inputs `[eos, t1 .. tn-1]`, targets `[t1 .. tn]`. Perplexity is
exp(mean target NLL). Documents longer than the context are cut into consecutive context-sized pieces
(each piece restarts its context), and at most `max_tokens` leading tokens are scored, so a 100 KB
page costs no more than a page of prose (0 = score everything). Pieces are sorted by length and packed
into batches of about `batch_tokens` tokens, so padding stays small; the output projection runs only
on real (non-padding) positions.

Shapes come from a small fixed set: a batch's width is rounded up to a multiple of WIDTH_STEP, its rows to a
power of two (or the full batch), and the positions fed to the output projection to a multiple of
NLL_ROWS_STEP. oneDNN keeps compiled kernels per shape (its bf16 kernels especially) and does not give their
memory back: with every length seen as its own shape, scoring's private memory grew with the corpus
(~0.4 MB per new shape). Padding is never a target and causal attention never looks right, so a real
position's score does not depend on the padding.

Tiers (CCNet, Wenzek et al. 2020): per language, perplexity at or below the first percentile cutoff
is `easy`, at or below the second `medium`, above it `hard`. A language with fewer than `min_docs`
documents gets the cutoffs of all documents pooled.
"""
from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from stages.common.lm import order_stats
from stages.common.lm.model import Transformer
from stages.common.lm.order_stats import ALL, Chunks
from stages.common.lm.token_shards import TIERS
from stages.common.runtime.device import autocast

POOLED = "*"  # the cutoffs row of all languages pooled
WIDTH_STEP = 32  # batch widths: multiples of this (capped at the context)
NLL_ROWS_STEP = 64  # positions per output-projection call: multiples of this

log = logging.getLogger("refinery.perplexity")


def _pieces(lengths: np.ndarray, seq_len: int, max_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(doc, start, length) of every scored piece: targets [start, start + length) of each document."""
    scored = np.minimum(lengths, max_tokens) if max_tokens else lengths
    counts = -(-scored // seq_len)  # ceil
    doc = np.repeat(np.arange(len(lengths)), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    start = (np.arange(counts.sum()) - first) * seq_len
    length = np.minimum(seq_len, scored[doc] - start)
    return doc, start, length


@torch.inference_mode()
def score_documents(model: Transformer, docs: list[np.ndarray], eos_id: int, max_tokens: int, batch_tokens: int,
                    precision: str, device: torch.device,
                    progress: tqdm | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Summed target NLL (nats, float64) and number of scored tokens of each document (ids without eos)."""
    seq_len = model.config.max_seq_len
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    doc, start, length = _pieces(lengths, seq_len, max_tokens)
    order = np.lexsort((np.arange(len(length)), -length))  # longest first, ties in document order: deterministic
    nll_sum = np.zeros(len(docs), dtype=np.float64)
    model.eval()
    i = 0
    while i < len(order):
        width = min(seq_len, _round_up(int(length[order[i]]), WIDTH_STEP))  # the longest piece of this batch
        rows = max(1, batch_tokens // width)
        batch = order[i:i + rows]
        i += len(batch)
        padded_rows = min(rows, 1 << (len(batch) - 1).bit_length())
        inputs = np.full((padded_rows, width), eos_id, dtype=np.int64)  # padding value is irrelevant: never a target
        targets = np.full((padded_rows, width), -100, dtype=np.int64)
        for row, p in enumerate(batch):
            seq = docs[doc[p]]
            s, n = int(start[p]), int(length[p])
            inputs[row, 0] = eos_id if s == 0 else seq[s - 1]
            inputs[row, 1:n] = seq[s:s + n - 1]
            targets[row, :n] = seq[s:s + n]
        x, y = torch.from_numpy(inputs).to(device), torch.from_numpy(targets).to(device)
        mask = y != -100
        num_real = int(mask.sum())
        with autocast(precision, device):
            # (N, dim): padding dropped before the vocabulary projection, N rounded up with rows of no target
            hidden, real_targets = model.hidden_states(x)[mask], y[mask]
            extra = _round_up(num_real, NLL_ROWS_STEP) - num_real
            hidden = torch.nn.functional.pad(hidden, (0, 0, 0, extra))
            nll = model.token_nll(hidden, torch.nn.functional.pad(real_targets, (0, extra), value=-100))[:num_real]
        row_of_token = torch.arange(padded_rows, device=device)[:, None].expand_as(y)[mask]
        per_piece = torch.zeros(padded_rows, dtype=torch.float64, device=device)
        per_piece.index_add_(0, row_of_token, nll.double())
        np.add.at(nll_sum, doc[batch], per_piece[:len(batch)].cpu().numpy())
        if progress is not None:
            progress.update(num_real)
    scored = np.minimum(lengths, max_tokens) if max_tokens else lengths
    return nll_sum, scored


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


@dataclass(frozen=True)
class Cutoffs:
    easy_max: float  # perplexity at or below: easy
    medium_max: float  # at or below (and above easy_max): medium; above: hard
    num_docs: int  # documents the cutoffs were computed on (0 when read from a file)
    source: str  # "lang" (own percentiles), "pooled" (too few documents) or "file"


def compute_cutoffs(perplexity: np.ndarray, langs: np.ndarray, percentiles: tuple[float, float],
                    min_docs: int) -> dict[str, Cutoffs]:
    """Per-language cutoffs at `percentiles`, plus the pooled row (key POOLED)."""
    names, codes = lang_codes(langs)
    return streamed_cutoffs(lambda: [(perplexity, codes)], names, percentiles, min_docs)


def lang_codes(langs: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(the distinct languages, each document's index into them)."""
    names, codes = np.unique(np.asarray(langs, dtype=object), return_inverse=True)
    return names.tolist(), codes.astype(np.int32)


def streamed_cutoffs(chunks: Chunks, langs: list[str], percentiles: tuple[float, float],
                     min_docs: int) -> dict[str, Cutoffs]:
    """`compute_cutoffs` of perplexities streamed in chunks (`order_stats`): `chunks()` yields (perplexity,
    language code) pairs, a code indexing `langs` (negative: a document left out). The same values as
    np.percentile, in memory bounded by the number of languages, not of documents."""
    found = order_stats.percentiles(chunks, [ALL, *range(len(langs))], percentiles)

    def cut(group: int, source: str) -> Cutoffs:
        (low, high), num_docs = found[group]
        return Cutoffs(float(low), float(high), num_docs, source)

    cutoffs = {POOLED: cut(ALL, "pooled")}
    for code, lang in sorted(enumerate(langs), key=lambda item: item[1]):
        if code not in found:  # no document of it counts (not in the reference subset)
            continue
        num_docs = found[code][1]
        if num_docs >= min_docs:
            cutoffs[lang] = cut(code, "lang")
        else:  # too few documents for its own percentiles: a language as small as it is gets the pooled ones
            log.info("perplexity: %d document(s) in %r, fewer than min_docs_per_lang (%d): it gets the pooled "
                     "cutoffs", num_docs, lang, min_docs)
            cutoffs[lang] = Cutoffs(cutoffs[POOLED].easy_max, cutoffs[POOLED].medium_max, num_docs, "pooled")
    return cutoffs


def assign_tiers(perplexity: np.ndarray, langs: np.ndarray, cutoffs: dict[str, Cutoffs]) -> np.ndarray:
    """Index into TIERS per document; a language without its own row uses the pooled one."""
    tiers = np.empty(len(perplexity), dtype=np.int8)
    for lang in set(langs.tolist()):
        c = cutoffs.get(lang, cutoffs[POOLED])
        mask = langs == lang
        tiers[mask] = np.where(perplexity[mask] <= c.easy_max, 0, np.where(perplexity[mask] <= c.medium_max, 1, 2))
    return tiers


CUTOFF_COLUMNS = ["lang", "easy_max", "medium_max", "num_docs", "source"]


def cutoff_rows(cutoffs: dict[str, Cutoffs]) -> list[tuple]:
    return [(lang, round(c.easy_max, 6), round(c.medium_max, 6), c.num_docs, c.source)
            for lang, c in sorted(cutoffs.items())]


def read_cutoffs(path: str | Path) -> dict[str, Cutoffs]:
    """Frozen cutoffs from a CSV written by `cutoff_rows` (e.g. an earlier run's); must have a pooled row."""
    with open(path, newline="", encoding="utf-8") as f:
        cutoffs = {row["lang"]: Cutoffs(float(row["easy_max"]), float(row["medium_max"]), 0, "file")
                   for row in csv.DictReader(f)}
    if POOLED not in cutoffs:
        raise ValueError(f"{path}: cutoffs need a pooled row (lang {POOLED!r}) for languages not listed")
    return cutoffs


HISTOGRAM_COLUMNS = ["lang", "kind", "log10_perplexity", "log10_perplexity_end", "docs", "tier"]


def histogram_rows(perplexity: np.ndarray, langs: np.ndarray, cutoffs: dict[str, Cutoffs],
                   num_bins: int = 40) -> list[tuple]:
    """Rows (HISTOGRAM_COLUMNS) for the distribution plot: `bin` rows are a histogram of log10 perplexity
    per language on shared bins (the 0.5-99.5th percentile range, outliers counted in the edge bins),
    coloured by the tier of the bin's centre; `cutoff` rows mark the two cutoffs of each language."""
    names, codes = lang_codes(langs)
    return streamed_histogram_rows(lambda: [(perplexity, codes)], names, cutoffs, num_bins)


def streamed_histogram_rows(chunks: Chunks, langs: list[str], cutoffs: dict[str, Cutoffs],
                            num_bins: int = 40) -> list[tuple]:
    """`histogram_rows` of perplexities streamed in chunks of (perplexity, language code), as `streamed_cutoffs`."""
    def log_chunks():
        return ((np.log10(perplexity), codes) for perplexity, codes in chunks())

    (low, high), _ = order_stats.percentiles(log_chunks, [ALL], [0.5, 99.5])[ALL]
    high = max(high, low + 1e-6)
    edges = np.linspace(low, high, num_bins + 1)
    centers = (edges[:-1] + edges[1:]) / 2
    counts = np.zeros((len(langs), num_bins), dtype=np.int64)
    present = np.zeros(len(langs), dtype=bool)
    for logp, codes in log_chunks():
        for code in np.unique(codes[codes >= 0]):
            present[code] = True
            counts[code] += np.histogram(np.clip(logp[codes == code], low, high), bins=edges)[0]
    rows: list[tuple] = []
    for code, lang in sorted(enumerate(langs), key=lambda item: item[1]):
        if not present[code]:
            continue
        c = cutoffs.get(lang, cutoffs[POOLED])
        center_tiers = assign_tiers(10 ** centers, np.full(num_bins, lang, dtype=object), {lang: c, POOLED: c})
        rows += [(lang, "bin", round(float(a), 4), round(float(b), 4), int(n), TIERS[t])
                 for a, b, n, t in zip(edges[:-1], edges[1:], counts[code], center_tiers)]
        rows += [(lang, "cutoff", round(float(np.log10(v)), 4), round(float(np.log10(v)), 4), 0, name)
                 for v, name in ((c.easy_max, "easy|medium"), (c.medium_max, "medium|hard"))]
    return rows
