"""`perplexity` stage: train a reference LM, score every document, tier by per-language percentiles,
and write the tiered token shards the `train` stage reads.

1. tokenize every document (parallel, Rust) into a scratch token file, in input order; the split (a hash
   of each id) is then known, and each split must be able to give every tier `min_tokens_per_tier`, what
   the train stage reads of it (`check_split_tokens`: ConfigError naming `val_fraction` otherwise);
2. reference LM: trained on the reference subset's training-split documents (the top
   `reference.subset_fraction` of each language by `quality_score` when the input has that column,
   else a seeded hash sample) or on the user's `reference.input_dir`, or loaded from
   `reference.checkpoint` (those two paths are not DVC deps: add them to dvc.yaml to have them tracked).
   It trains with the train stage's loop (`stages.common.training.trainer`), in this process (no
   torchrun, no checkpoints), on uniform random windows of its documents (`WindowSampler`), for
   `reference.steps` or fewer: no more than `reference.max_epochs` passes over its tokens (`reference_steps`);
3. score every document (`stages.common.lm.scoring`): perplexity = exp(mean token NLL), on shards of
   `read_batch_docs` documents: in this process (executor local) or as Ray tasks on CPU workers, the
   model in the object store once (executor ray; stages/common/runtime/executor.py). Each shard's scores stay
   in `work_dir` with a completion marker until the stage succeeds: a rerun with the same reference LM
   rescores only unfinished shards;
4. cutoffs per language at `percentiles` (or pooled, or frozen from a CSV) -> easy/medium/hard; every
   (split, tier) holds `min_tokens_per_tier` of its split, checked again before anything is written;
5. write, streaming the input again:

    <out_dir>/docs/part-*.parquet          input columns + perplexity, tier, split, num_tokens
    <out_dir>/tokens/{train,val}/{easy,medium,hard}.bin|.idx.npy   token shards (stages.common.lm.token_shards)
    <out_dir>/tokens/manifest.json         vocabulary, eos id, dtype, docs and tokens per shard
    <out_dir>/cutoffs.csv                  lang, easy_max, medium_max, num_docs, source
    <out_dir>/README.md                    the dataset card of docs/ (stages.common.text.dataset_card)
    <model_dir>/model.safetensors          the reference LM (config in its metadata)

plus `metrics_path` and `plot_path` (per-language histogram of log10 perplexity, cutoffs marked).
Every document lands in exactly one (split, tier) shard; checked before anything is published.
"""
from __future__ import annotations

import dataclasses
import contextlib
import logging
import math
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from stages.common.lm import bpe, order_stats
from stages.common.lm.corpus import (
    ScoredCorpus,
    chunked,
    reference_docs,
    reference_subset,
    tokenize_corpus,
)
from stages.common.lm.doc_columns import id_hash
from stages.common.lm.model import (
    CHECKPOINT_NAME,
    PRESETS,
    ModelConfig,
    Transformer,
    load_checkpoint,
    preset,
    save_checkpoint,
)
from stages.common.lm.scoring import (
    CUTOFF_COLUMNS,
    HISTOGRAM_COLUMNS,
    POOLED,
    Cutoffs,
    assign_tiers,
    cutoff_rows,
    read_cutoffs,
    score_documents,
    streamed_cutoffs,
    streamed_histogram_rows,
)
from stages.common.lm.token_shards import (
    SPLITS,
    TIERS,
    TokenShard,
    TokenShardWriter,
    WindowSampler,
    format_tiers,
    is_validation,
)
from stages.common.runtime.atomic import atomic_dir, write_csv, write_json
from stages.common.runtime.cli import stage_main
from stages.common.runtime.device import PRECISIONS, resolve_device, resolve_precision, seed_everything
from stages.common.runtime.digest import fingerprint
from stages.common.runtime.executor import WorkDir, check_executor, map_shards
from stages.common.runtime.metrics import select, write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import ConfigError, param, validate
from stages.common.runtime.parquet import PartWriter, iter_rows
from stages.common.text.dataset_card import write_dataset_card
from stages.common.training.optim import OptimParams
from stages.common.training.trainer import DynamicClip, TrainConfig, in_process

log = logging.getLogger("refinery.perplexity")
STAGE = "perplexity"
CARD_NOTES = (
    "`load_dataset` gives every document in its `train` split; the pipeline's own train/validation split is "
    "the `split` column (`docs.filter(lambda d: d[\"split\"] == \"val\")`). Also in this folder, not part "
    "of the dataset: `tokens/`, the documents as token shards per split and tier (what the train stage reads, "
    "`tokens/manifest.json` describes them), and `cutoffs.csv`, the perplexity cutoffs between tiers per "
    "language.",)
NEW_COLUMNS = [("perplexity", pa.float32()), ("tier", pa.string()), ("split", pa.string()), ("num_tokens", pa.int32())]


@dataclass(frozen=True)
class ReferenceOptim(OptimParams):
    """The reference LM trains for a few hundred steps: a higher peak rate and a short warmup."""
    lr: float = param(2e-3, gt=0.0)  # a field declared again loses its rules: they are stated again
    warmup_steps: int = param(30, min=0)


@dataclass(frozen=True)
class ReferenceParams:
    checkpoint: str = ""  # score with this checkpoint (e.g. a promoted model) instead of training one
    input_dir: str = ""  # train on these Parquet docs (id, text) instead of the subset of the input
    preset: str = param("cpu_small", choices=PRESETS)
    # per language: the top share by quality_score, else a seeded sample
    subset_fraction: float = param(0.3, gt=0.0, max=1.0)
    steps: int = param(300, min=1)  # at most; fewer when max_epochs is reached first (`reference_steps`)
    # passes over the reference LM's training tokens: steps <= ceil(max_epochs x tokens / (batch_size x
    # max_seq_len)), so a small corpus is not memorised; 0 = always `steps`
    max_epochs: float = param(1.0, min=0.0)
    batch_size: int = param(16, min=1)
    optim: ReferenceOptim = field(default_factory=ReferenceOptim)

    def __post_init__(self) -> None:
        if self.checkpoint and self.input_dir:
            raise ValueError("params 'perplexity.reference.checkpoint' and '.input_dir' exclude each other")


@dataclass(frozen=True)
class TierTokens:
    """Tokens (end-of-document tokens included) each tier of a split must hold: what the train stage reads
    of it with its default params; 0 = no minimum."""
    train: int = param(2049, min=0)  # one micro batch: train.micro_batch_size 8 x seq_len 256, + 1
    val: int = param(257, min=0)  # one validation window: train's seq_len 256, + 1


@dataclass(frozen=True, kw_only=True)  # keyword-only: the path fields have no default, wherever they sit
class Params:
    input_dir: str  # Parquet docs: id, text, lang (+ quality_score when present)
    tokenizer_dir: str
    out_dir: str
    model_dir: str
    metrics_path: str  # headline figures (DVC metrics)
    detail_path: str  # every figure: cutoffs, documents and tokens per tier, reference LM training
    plot_path: str
    seed: int = param(0, min=0)
    device: str = param("auto", choices=("auto", "cpu", "cuda"))  # auto: cuda when available
    precision: str = param("auto", choices=PRECISIONS)  # auto (bf16 where native) | fp32 | bf16
    # placement=True (here and the executor params below): where the work runs, not what it computes
    num_threads: int = param(0, min=0, placement=True)  # torch CPU threads; 0 = torch's default (all cores)
    val_fraction: float = param(0.02, min=0.0, lt=1.0)  # documents held out (hash of id) for validation
    min_tokens_per_tier: TierTokens = field(default_factory=TierTokens)  # per split: what train reads of a tier
    percentiles: tuple[float, ...] = param((33.3, 66.7), gt=0.0, lt=100.0)  # cutoffs easy|medium and medium|hard
    min_docs_per_lang: int = param(100, min=0)  # fewer: the language gets the pooled cutoffs
    cutoffs_from: str = "all"  # all | reference (the reference subset's scores) | path to a cutoffs CSV
    max_score_tokens: int = param(1024, min=0)  # leading tokens scored per document; 0 = all
    score_batch_tokens: int = param(8192, min=1)
    read_batch_docs: int = param(2048, min=1)  # documents per tokenize/score/write batch (bounds memory)
    rows_per_part: int = param(100_000, min=1)
    # scoring: local (in this process, num_threads) | ray (one CPU per task)
    executor: str = param("local", placement=True)
    address: str = param("", placement=True)  # ray only: "auto" joins a running cluster, "" starts a local one
    num_workers: int = param(0, min=0, placement=True)  # ray only: CPUs of the local cluster it starts; 0 = all cores
    work_dir: str  # per-shard scores and completion markers, until the stage succeeds
    reference: ReferenceParams = field(default_factory=ReferenceParams)

    def __post_init__(self) -> None:
        validate(self, STAGE)
        if len(self.percentiles) != 2 or not 0 < self.percentiles[0] < self.percentiles[1] < 100:
            raise ValueError(f"param 'perplexity.percentiles' must be two increasing values in (0, 100), "
                             f"got {list(self.percentiles)}")
        if self.cutoffs_from == "reference" and self.reference.input_dir:
            raise ValueError("param 'perplexity.cutoffs_from: reference' needs the reference subset of the input, "
                             "not 'reference.input_dir'")
        check_executor(STAGE, self.executor, self.address)


def external_reference(params: Params, tokenizer: Tokenizer, validation: bool) -> Iterator[np.ndarray]:
    """Token ids of the user's reference corpus (`reference.input_dir`): its training documents, or with
    `validation` its validation ones (split by id like the input); read and encoded a batch at a time."""
    rows = iter_rows(params.reference.input_dir, ["id", "text"], batch_size=params.read_batch_docs)
    for batch in chunked(rows, params.read_batch_docs):
        yield from bpe.encode(tokenizer, [r["text"] for r in batch
                                          if is_validation(r["id"], params.seed, params.val_fraction) == validation])


def reference_steps(ref: ReferenceParams, num_tokens: int, seq_len: int) -> tuple[int, ReferenceOptim]:
    """The reference LM's steps: `ref.steps`, or fewer where `ref.max_epochs` passes over its `num_tokens`
    training tokens come first; the warmup keeps its share of the steps."""
    steps = ref.steps
    if ref.max_epochs:
        steps = max(1, min(ref.steps, math.ceil(ref.max_epochs * num_tokens / (ref.batch_size * seq_len))))
    warmup = min(ref.optim.warmup_steps, math.ceil(ref.optim.warmup_steps * steps / ref.steps))
    return steps, dataclasses.replace(ref.optim, warmup_steps=warmup)


def split_sizes(corpus: ScoredCorpus, tiered: bool) -> tuple[np.ndarray, np.ndarray]:
    """(documents, tokens) of each (split, tier), shape (len(SPLITS), len(TIERS)), end-of-document tokens
    included as in the shards; without `tiered` (before the tiers are known) all in the first tier."""
    docs = np.zeros((len(SPLITS), len(TIERS)), dtype=np.int64)
    tokens = np.zeros_like(docs)
    for s in corpus.columns.slices():
        cell = corpus.columns["split"][s].astype(np.intp) * len(TIERS)
        if tiered:
            cell += corpus.columns["tier"][s]
        docs += np.bincount(cell, minlength=docs.size).reshape(docs.shape)
        doc_tokens = corpus.doc_tokens(s)
        for c in np.unique(cell):
            tokens.flat[c] += int(doc_tokens[cell == c].sum())
    return docs, tokens


def check_split_tokens(params: Params, docs: np.ndarray, tokens: np.ndarray, tiered: bool) -> None:
    """ConfigError unless every tier of each split can hold `min_tokens_per_tier` of that split. `docs`,
    `tokens`: per (split, tier), from `split_sizes`. Without `tiered` (before the reference LM has scored
    anything, when only the split is known): the split's documents and tokens against three tiers' worth; with
    it: each (split, tier) shard."""
    for s, split in enumerate(SPLITS):
        need = getattr(params.min_tokens_per_tier, split)
        if not need:
            continue
        if not tiered:
            num_split_docs, num_split_tokens = int(docs[s].sum()), int(tokens[s].sum())
            if num_split_docs >= len(TIERS) and num_split_tokens >= len(TIERS) * need:
                continue
            found = f"{num_split_docs} documents, {num_split_tokens:,} tokens"
            needed = f"{len(TIERS)} documents and {len(TIERS) * need:,} tokens, {need:,} per tier"
        else:
            sizes = {tier: int(tokens[s, t]) for t, tier in enumerate(TIERS)}
            if min(sizes.values()) >= need:
                continue
            found, needed = f"tiers of {format_tiers(sizes)} tokens", f"{need:,} tokens in each tier"
        raise ConfigError(split_error(params, split, found, needed, int(docs.sum()), int(tokens.sum())))


def split_error(params: Params, split: str, found: str, needed: str, num_docs: int, num_tokens: int) -> str:
    """One line: what the split holds, what the train stage needs of it, and the param to change."""
    if split == "train":
        return (f"param 'perplexity.min_tokens_per_tier.train': the training split ({num_docs} documents, "
                f"val_fraction {params.val_fraction:g}) holds {found}; the train stage needs {needed} (one micro "
                "batch: train.micro_batch_size x seq_len, + 1): add documents, lower perplexity.val_fraction, or "
                "lower train.micro_batch_size or train.seq_len and this minimum with them")
    # A share that holds twice what is needed on average: tiers and the hash split are uneven.
    share = math.ceil(200 * max(len(TIERS) * params.min_tokens_per_tier.val / max(1, num_tokens),
                                len(TIERS) / num_docs)) / 100
    return (f"param 'perplexity.val_fraction': {params.val_fraction:g} of {num_docs} documents gives a validation "
            f"split of {found}; the train stage's validation needs {needed} (perplexity.min_tokens_per_tier.val: "
            "one window of its seq_len, + 1): raise perplexity.val_fraction"
            + (f" (about {share:g} for this corpus)" if share < 0.5
               else f"; this corpus ({num_tokens:,} tokens) is too small to hold that out: add documents"))


def train_reference(params: Params, docs: Iterable[np.ndarray], vocab_size: int, eos_id: int, precision: str,
                    device: torch.device, scratch: Path) -> tuple[Transformer, dict[str, Any]]:
    """The reference LM, trained on `docs` (token ids without the end-of-document token), which are first
    streamed into a scratch token shard: it samples its windows from there, not from memory."""
    ref = params.reference
    writer = TokenShardWriter(scratch / "reference", vocab_size, eos_id)
    for doc in docs:
        writer.add(doc)
    writer.close()
    shard = TokenShard(scratch / "reference")
    seed_everything(params.seed)
    model = Transformer(preset(ref.preset, vocab_size)).to(device)
    seq_len = model.config.max_seq_len
    if shard.num_windows(seq_len) < 1:
        raise ConfigError(f"param 'perplexity.reference.subset_fraction': the reference LM's {shard.num_docs} training "
                          f"documents hold {shard.num_tokens} tokens, fewer than one {seq_len + 1}-token window of "
                          f"preset {ref.preset}: raise reference.subset_fraction or use a preset with a shorter "
                          "max_seq_len")

    # Clipping at the fixed optim.grad_clip only: the train stage's adaptive threshold is not a
    # perplexity.reference param.
    steps, optim = reference_steps(ref, shard.num_tokens, seq_len)
    cfg = TrainConfig(max_steps=steps, micro_batch_size=ref.batch_size, gradient_accumulation_steps=1,
                      seq_len=seq_len, precision=precision, optim=optim, dynamic_clip=DynamicClip(enabled=False),
                      eval_windows=0)
    trainer = in_process(model, WindowSampler(shard, seq_len, ref.batch_size, params.seed), cfg, device)
    log.info("perplexity: training reference LM (%s, %.2fM params, %s) on %d docs, %d tokens, %d steps "
             "(%.2f epochs)", ref.preset, model.num_params() / 1e6, precision, shard.num_docs, shard.num_tokens, steps,
             steps * ref.batch_size * seq_len / shard.num_tokens)
    t0 = time.perf_counter()
    model.train()
    trainer.fit({}, 0, 0, lambda: None, log_every=50, desc="reference LM", log_lines=True)
    model.eval()
    seconds = time.perf_counter() - t0
    losses = [row["loss"] for row in trainer.history if math.isfinite(row["loss"])]
    return model, {
        "reference.trained": 1,
        "reference.num_params": model.num_params(),
        "reference.num_docs": shard.num_docs,
        "reference.num_tokens": shard.num_tokens,
        "reference.steps": steps,
        "reference.tokens_seen": trainer.tokens_seen,
        "reference.epochs": round(trainer.tokens_seen / shard.num_tokens, 4),
        "reference.first_loss": round(losses[0], 4),
        "reference.final_loss": round(float(np.mean(losses[-max(1, len(losses) // 10):])), 4),
        "reference.num_skipped_steps": trainer.counters.num_skipped_steps,
        "reference.train_seconds": round(seconds, 3),
        "reference.train_tokens_per_s": round(trainer.tokens_seen / seconds, 1),
    }


_scorer: tuple | None = None  # (model, eos_id, max_tokens, batch_tokens, precision, device), once per process
SCORES_FILE = "scores.npz"


def _init_scorer(config_json: str, state: dict[str, torch.Tensor], eos_id: int, max_tokens: int, batch_tokens: int,
                 precision: str, device: str) -> None:
    global _scorer
    model = Transformer(ModelConfig.from_json(config_json))
    model.load_state_dict(state)
    resolved = resolve_device(device)
    _scorer = (model.to(resolved), eos_id, max_tokens, batch_tokens, precision, resolved)


def _score_shard(docs: list[np.ndarray], folder: Path) -> dict[str, Any]:
    assert _scorer is not None, "worker not initialised"
    model, eos_id, max_tokens, batch_tokens, precision, device = _scorer
    nll_sum, num_scored = score_documents(model, docs, eos_id, max_tokens, batch_tokens, precision, device)
    np.savez(folder / SCORES_FILE, nll_sum=nll_sum, num_scored=num_scored)
    return {"num_docs": len(docs)}


def score_corpus(params: Params, model: Transformer, corpus: ScoredCorpus, eos_id: int, precision: str,
                 device: torch.device) -> dict[str, int]:
    """Columns `nll_sum` (summed NLL), `num_scored` (scored tokens) and `perplexity` of every document; returns
    shard counts. Shards of `read_batch_docs` documents; the local executor scores them in this process with
    this model, Ray tasks on their CPUs with a copy."""
    num_docs = corpus.num_docs
    nll_sum, num_scored = corpus.columns.create("nll_sum", np.float64), corpus.columns.create("num_scored", np.int64)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    digest = b"".join(t.numpy().tobytes() for _, t in sorted(state.items()))
    inputs = [*sorted(Path(params.input_dir).glob("part-*.parquet")), model.config.to_json().encode() + digest]
    work = WorkDir(params.work_dir, fingerprint(params, inputs, sys.modules[__name__]))
    ray_device = "cpu" if params.executor == "ray" else str(device)  # Ray tasks hold a CPU, no GPU
    initargs = (model.config.to_json(), state, eos_id, params.max_score_tokens, params.score_batch_tokens, precision,
                ray_device)
    def ranges() -> Iterator[tuple[int, int]]:
        return ((lo, min(num_docs, lo + params.read_batch_docs)) for lo in range(0, num_docs, params.read_batch_docs))

    payloads = ([corpus.doc(i) for i in range(lo, hi)] for lo, hi in ranges())
    num_workers = params.num_workers if params.executor == "ray" else 1
    counts = {"num_shards": 0, "num_shards_resumed": 0}
    with tqdm(total=num_docs, desc="score", unit="doc", mininterval=2.0) as bar:
        for shard, (lo, hi) in zip(map_shards(_score_shard, payloads, work, params.executor, params.address,
                                              num_workers, _init_scorer, initargs), ranges()):
            scores = np.load(shard.folder / SCORES_FILE)
            nll_sum[lo:hi], num_scored[lo:hi] = scores["nll_sum"], scores["num_scored"]
            counts["num_shards"] += 1
            counts["num_shards_resumed"] += shard.resumed
            bar.update(hi - lo)
    perplexity = corpus.columns.create("perplexity", np.float64)
    for s in corpus.columns.slices():
        perplexity[s] = np.exp(nll_sum[s] / num_scored[s])
    return counts


def write_outputs(params: Params, corpus: ScoredCorpus, vocab_size: int, eos_id: int,
                  out: Path) -> dict[tuple[str, str], TokenShardWriter]:
    files = sorted(Path(params.input_dir).glob("part-*.parquet"))
    schema = pq.read_schema(files[0])
    for name, dtype in NEW_COLUMNS:
        if name in schema.names:
            raise ValueError(f"{params.input_dir}: input already has a {name!r} column")
        schema = schema.append(pa.field(name, dtype))
    schema = schema.remove_metadata()
    docs = PartWriter(out / "docs", schema, params.rows_per_part)
    shards = {(split, tier): TokenShardWriter(out / "tokens" / split / tier, vocab_size, eos_id)
              for split in SPLITS for tier in TIERS}
    columns, num_docs, start = corpus.columns, corpus.num_docs, 0
    rows = iter_rows(params.input_dir, batch_size=params.read_batch_docs)
    with tqdm(total=num_docs, desc="write", unit="doc", mininterval=2.0) as bar:
        for batch in chunked(rows, params.read_batch_docs):
            s = slice(start, min(num_docs, start + len(batch)))
            hashes, splits, tiers = (columns[name][s].tolist() for name in ("id_hash", "split", "tier"))
            perplexity = columns["perplexity"][s].tolist()
            for i, row in enumerate(batch):
                if i >= len(hashes) or id_hash(row["id"]) != hashes[i]:
                    raise RuntimeError(f"{params.input_dir} changed while the stage ran (row {start + i})")
                split, tier = SPLITS[splits[i]], TIERS[tiers[i]]
                doc_ids = corpus.doc(start + i)
                docs.write({**row, "perplexity": perplexity[i], "tier": tier, "split": split,
                            "num_tokens": len(doc_ids)})
                shards[split, tier].add(doc_ids)
            start = s.stop
            bar.update(len(batch))
    docs.close()
    for writer in shards.values():
        writer.close()
    if docs.num_rows != num_docs or sum(w.num_docs for w in shards.values()) != num_docs:
        raise RuntimeError(f"accounting broken: {num_docs} docs scored, {docs.num_rows} written, "
                           f"{sum(w.num_docs for w in shards.values())} in token shards")
    return shards


# Characters per token of a byte-level BPE, on the low side (a small corpus's tokenizer merges less), so
# that a projection errs towards more tokens: an error from it is an error of the real run too.
LOW_CHARS_PER_TOKEN = {"zh": 1.2, "ja": 1.2, "ko": 1.2, "th": 1.5}
LOW_CHARS_PER_TOKEN_DEFAULT = 2.5


def check_data(params: Params, context: dict[str, Any]) -> list[tuple[str, str]]:
    """`refinery check`: the tokens each split and tier would get, projected from clean's projection (before
    the semantic filter, at a generous tokens-per-character rate): an error where even that misses
    `min_tokens_per_tier`. `context["perplexity"]` gets the projection for train's check."""
    projected = context.get("clean")
    if not projected or not projected["chars"]:
        return []
    tokens = sum(chars / LOW_CHARS_PER_TOKEN.get(lang, LOW_CHARS_PER_TOKEN_DEFAULT)
                 for lang, chars in projected["chars"].items())
    num_docs = sum(projected["docs"].values())
    per_tier = {"train": tokens * (1 - params.val_fraction) / len(TIERS),
                "val": tokens * params.val_fraction / len(TIERS)}
    context["perplexity"] = {"tokens_per_tier": per_tier, "num_docs": num_docs}
    findings = [("note", f"about {num_docs:,.0f} documents and at most {tokens:,.0f} tokens would reach it (before the "
                         f"semantic filter): per tier about {per_tier['train']:,.0f} training and "
                         f"{per_tier['val']:,.0f} validation tokens")]
    if per_tier["val"] < params.min_tokens_per_tier.val:
        share = min(0.5, math.ceil(100 * len(TIERS) * params.min_tokens_per_tier.val / max(1.0, tokens)) / 100)
        findings.append(("error", f"param 'perplexity.val_fraction': {params.val_fraction:g} of about {tokens:,.0f} "
                                  f"tokens leaves about {per_tier['val']:,.0f} per validation tier; train's validation "
                                  f"needs {params.min_tokens_per_tier.val} (perplexity.min_tokens_per_tier.val): raise "
                                  f"perplexity.val_fraction (to about {share:g}) or add documents"))
    if per_tier["train"] < params.min_tokens_per_tier.train:
        findings.append(("error", f"param 'perplexity.min_tokens_per_tier.train': about {per_tier['train']:,.0f} "
                                  f"tokens per training tier, fewer than the {params.min_tokens_per_tier.train} train "
                                  "reads at once: add documents, or lower train.micro_batch_size or train.seq_len"))
    context["perplexity"]["short"] = any(level == "error" for level, _ in findings)
    return findings


def run(params: Params) -> dict[str, Any]:
    """Score and tier `params.input_dir`; return the metrics (also written to `metrics_path`)."""
    check_paths(params)
    start = time.perf_counter()
    if params.num_threads:
        torch.set_num_threads(params.num_threads)
    device = resolve_device(params.device)
    precision = resolve_precision(params.precision, device)
    tokenizer = bpe.load(params.tokenizer_dir)
    eos_id = bpe.special_token_id(tokenizer, bpe.eos_token_of(params.tokenizer_dir))
    seconds: dict[str, float] = {}
    with atomic_dir(params.out_dir, stage=STAGE) as out, atomic_dir(params.model_dir, stage=STAGE) as model_out:
        scratch = out / "_scratch"
        with timed(seconds, "tokenize"):
            corpus = read_corpus(params, tokenizer, eos_id, scratch)
        with timed(seconds, "reference"):
            model, reference_metrics = reference_model(params, corpus, tokenizer, eos_id, precision, device, scratch)
            save_checkpoint(model, model_out / CHECKPOINT_NAME)
        with timed(seconds, "score"):
            shard_counts = score_corpus(params, model, corpus, eos_id, precision, device)
        cutoffs = tier_corpus(params, corpus)
        check_split_tokens(params, *split_sizes(corpus, tiered=True), tiered=True)
        with timed(seconds, "write"):
            shards = write_outputs(params, corpus, tokenizer.get_vocab_size(), eos_id, out)
            metrics = summarize(corpus, cutoffs, shards, reference_metrics, seconds["score"])
            plot_rows = streamed_histogram_rows(corpus.scan("perplexity"), corpus.langs, cutoffs)
            shutil.rmtree(scratch)
            write_csv(out / "cutoffs.csv", CUTOFF_COLUMNS, cutoff_rows(cutoffs))
            write_manifest(out / "tokens" / "manifest.json", shards, tokenizer.get_vocab_size(), eos_id)
            write_dataset_card(out, STAGE, sys.modules[__name__], params, CARD_NOTES)
    shutil.rmtree(Path(params.work_dir).resolve(), ignore_errors=True)  # scores are only dropped once published

    metrics.update({f"seconds.{k}": round(v, 3) for k, v in seconds.items()})
    metrics["seconds"] = round(time.perf_counter() - start, 3)
    metrics.update({f"score.{k}": v for k, v in shard_counts.items()})
    write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
    write_csv(params.plot_path, HISTOGRAM_COLUMNS, plot_rows)
    log.info("perplexity: %d docs, %d tokens; reference val ppl %.2f; hard/easy %s; %.1fs", corpus.num_docs,
             metrics["num_tokens"], metrics.get("reference.val_perplexity", float("nan")),
             {k.split(".")[1]: v for k, v in metrics.items() if k.startswith("hard_easy_ratio.")}, metrics["seconds"])
    return metrics


def check_paths(params: Params) -> None:
    """Inputs exist and the outputs are this stage's to replace (ConfigError otherwise), before any work."""
    cutoffs_file = "" if params.cutoffs_from in ("all", "reference") else params.cutoffs_from
    check_owned_paths(STAGE, {"input_dir": params.input_dir, "tokenizer_dir": params.tokenizer_dir,
                              "reference.checkpoint": params.reference.checkpoint,
                              "reference.input_dir": params.reference.input_dir, "cutoffs_from": cutoffs_file},
                      {"out_dir": params.out_dir, "model_dir": params.model_dir}, {"work_dir": params.work_dir})


@contextlib.contextmanager
def timed(seconds: dict[str, float], phase: str) -> Iterator[None]:
    """Add the wall time of the block to `seconds[phase]` (the metrics' `seconds.<phase>`)."""
    t0 = time.perf_counter()
    yield
    seconds[phase] = seconds.get(phase, 0.0) + time.perf_counter() - t0


def read_corpus(params: Params, tokenizer: Tokenizer, eos_id: int, scratch: Path) -> ScoredCorpus:
    """The input tokenized into the scratch folder, its splits checked to hold enough tokens, and the
    reference subset marked (none when the reference LM trains on `reference.input_dir`)."""
    corpus = tokenize_corpus(params.input_dir, tokenizer, eos_id, scratch, seed=params.seed,
                             val_fraction=params.val_fraction, batch_docs=params.read_batch_docs)
    check_split_tokens(params, *split_sizes(corpus, tiered=False), tiered=False)
    if params.reference.input_dir:  # the input's documents are all unseen by the reference LM
        corpus.columns.create("in_reference", np.bool_)
    else:
        reference_subset(corpus, params.reference.subset_fraction)
    return corpus


def reference_model(params: Params, corpus: ScoredCorpus, tokenizer: Tokenizer, eos_id: int, precision: str,
                    device: torch.device, scratch: Path) -> tuple[Transformer, dict[str, Any]]:
    """The reference LM and its metrics: the checkpoint `reference.checkpoint` names, or one trained on
    `reference.input_dir` (scored on its own validation documents), or on the corpus's reference subset."""
    vocab_size = tokenizer.get_vocab_size()
    if params.reference.checkpoint:
        model = load_checkpoint(params.reference.checkpoint, device)
        if model.config.vocab_size != vocab_size:
            raise ValueError(f"{params.reference.checkpoint}: vocabulary {model.config.vocab_size} != "
                             f"tokenizer's {vocab_size}")
        return model, {"reference.trained": 0, "reference.num_params": model.num_params()}
    if params.reference.input_dir:
        model, metrics = train_reference(params, external_reference(params, tokenizer, False), vocab_size, eos_id,
                                         precision, device, scratch)
        metrics.update(external_validation(params, model, tokenizer, eos_id, precision, device))
        return model, metrics
    return train_reference(params, reference_docs(corpus), vocab_size, eos_id, precision, device, scratch)


def tier_corpus(params: Params, corpus: ScoredCorpus) -> dict[str, Cutoffs]:
    """The per-language cutoffs (`cutoffs_from`: over every document, over the reference subset, or from a
    cutoffs.csv) and each document's tier by them, in the corpus's `tier` column; returns the cutoffs."""
    if params.cutoffs_from == "all":
        cutoffs = streamed_cutoffs(corpus.scan("perplexity"), corpus.langs, params.percentiles,
                                   params.min_docs_per_lang)
    elif params.cutoffs_from == "reference":
        cutoffs = streamed_cutoffs(corpus.scan("perplexity", corpus.in_reference_langs), corpus.langs,
                                   params.percentiles, params.min_docs_per_lang)
    else:
        cutoffs = read_cutoffs(params.cutoffs_from)
    tiers, lang_names = corpus.columns.create("tier", np.int8), np.array(corpus.langs, dtype=object)
    for s in corpus.columns.slices():
        tiers[s] = assign_tiers(corpus.columns["perplexity"][s], lang_names[corpus.columns["lang"][s]], cutoffs)
    return cutoffs


def write_manifest(path: Path, shards: dict, vocab_size: int, eos_id: int) -> None:
    """tokens/manifest.json: what the trainer needs to read the shards (vocabulary, eos id, dtype) and the
    documents and tokens of each split and tier."""
    write_json(path, {
        "vocab_size": vocab_size, "eos_id": eos_id, "dtype": shards["train", "easy"].dtype.name,
        "tiers": list(TIERS), "splits": list(SPLITS),
        "shards": {f"{split}/{tier}": {"num_docs": w.num_docs, "num_tokens": w.num_tokens}
                   for (split, tier), w in shards.items()},
    })


def external_validation(params: Params, model: Transformer, tokenizer: Tokenizer, eos_id: int, precision: str,
                        device: torch.device) -> dict[str, Any]:
    """The reference LM's validation documents and perplexity on the validation split of `reference.input_dir`,
    scored `read_batch_docs` documents at a time."""
    num_docs, nll_total, scored_total = 0, 0.0, 0
    for docs in chunked(external_reference(params, tokenizer, True), params.read_batch_docs):
        nll, num_scored = score_documents(model, docs, eos_id, params.max_score_tokens, params.score_batch_tokens,
                                          precision, device)
        num_docs, nll_total, scored_total = num_docs + len(docs), nll_total + nll.sum(), scored_total + num_scored.sum()
    out: dict[str, Any] = {"reference.val_num_docs": num_docs}
    if num_docs:
        out["reference.val_perplexity"] = round(float(np.exp(nll_total / scored_total)), 4)
    return out


def summarize(corpus: ScoredCorpus, cutoffs: dict, shards: dict, reference_metrics: dict[str, Any],
              score_seconds: float) -> dict[str, Any]:
    """The figures of the scored and tiered documents (all but the timings), from passes over the columns:
    counts and sums per chunk, medians by `order_stats` (exact)."""
    columns, langs, num_langs = corpus.columns, corpus.langs, len(corpus.langs)
    per_tier = np.zeros((num_langs, len(TIERS)), dtype=np.int64)  # documents per (language, tier)
    ppl_sum = np.zeros((num_langs, len(TIERS)))  # their summed perplexity
    # (documents, summed NLL, scored tokens) of the validation split, and of its reference-subset part
    val = {"val": [0, 0.0, 0], "reference.val": [0, 0.0, 0]}
    num_scored_tokens = 0
    for s in columns.slices():
        lang, tier, ppl = columns["lang"][s], columns["tier"][s], columns["perplexity"][s]
        nll_sum, num_scored = columns["nll_sum"][s], columns["num_scored"][s]
        is_val = columns["split"][s] == 1
        num_scored_tokens += int(num_scored.sum())
        for key, mask in (("val", is_val), ("reference.val", is_val & columns["in_reference"][s])):
            val[key] = [val[key][0] + int(mask.sum()), val[key][1] + nll_sum[mask].sum(),
                        val[key][2] + num_scored[mask].sum()]
        cell = lang.astype(np.intp) * len(TIERS) + tier
        for c in np.unique(cell):
            per_tier.flat[c] += int((cell == c).sum())
            ppl_sum.flat[c] += ppl[cell == c].sum()

    metrics: dict[str, Any] = {
        "num_docs": corpus.num_docs,
        "num_tokens": int(sum(w.num_tokens - w.num_docs for w in shards.values())),
        "num_scored_tokens": num_scored_tokens,
        # the reference LM's own validation documents: the subset's, unless it trained on reference.input_dir
        "reference.val_num_docs": val["reference.val"][0],
        **reference_metrics,
        "num_val_docs": val["val"][0],
        "num_pooled_langs": sum(1 for lang, c in cutoffs.items() if lang != POOLED and c.source == "pooled"),
        "score_tokens_per_s": round(float(num_scored_tokens) / score_seconds, 1),
    }
    # A perplexity over no documents is left out, never NaN; token-weighted, as validation perplexity is usually
    # reported.
    for key in ("reference.val", "val"):
        num_docs, nll_total, scored_total = val[key]
        if f"{key}_perplexity" not in metrics and num_docs:
            metrics[f"{key}_perplexity"] = round(float(np.exp(nll_total / scored_total)), 4)
    for (split, tier), writer in sorted(shards.items()):
        metrics[f"docs.{split}.{tier}"] = writer.num_docs
        metrics[f"tokens.{split}.{tier}"] = writer.num_tokens - writer.num_docs  # end-of-document ids not counted

    medians = order_stats.medians(corpus.scan("perplexity"), range(num_langs))

    def seen_or_unseen(s: slice) -> np.ndarray:  # 2 x language (+ 1 when unseen), or -1 (a validation document seen)
        lang, in_reference = columns["lang"][s].astype(np.int64), columns["in_reference"][s]
        seen = in_reference & (columns["split"][s] == 0)
        return np.where(seen, 2 * lang, np.where(~in_reference, 2 * lang + 1, -1))

    bias_medians = order_stats.medians(corpus.scan("perplexity", seen_or_unseen), range(2 * num_langs))
    for code, lang in sorted(enumerate(langs), key=lambda item: item[1]):
        c = cutoffs.get(lang, cutoffs[POOLED])
        metrics[f"cutoffs.{lang}.easy_max"] = round(c.easy_max, 4)
        metrics[f"cutoffs.{lang}.medium_max"] = round(c.medium_max, 4)
        metrics[f"cutoffs.{lang}.pooled"] = int(c.source != "lang")
        means = {}
        for t, tier in enumerate(TIERS):
            metrics[f"docs.{lang}.{tier}"] = int(per_tier[code, t])
            if per_tier[code, t]:  # a language with pooled cutoffs can leave a tier empty
                means[tier] = float(ppl_sum[code, t] / per_tier[code, t])
                metrics[f"mean_perplexity.{lang}.{tier}"] = round(means[tier], 4)
        if "hard" in means and "easy" in means:
            metrics[f"hard_easy_ratio.{lang}"] = round(means["hard"] / means["easy"], 4)
        metrics[f"median_perplexity.{lang}"] = round(medians[code], 4)
        # How much lower the reference LM scores its own training documents than unseen ones (membership bias).
        if 2 * code in bias_medians and 2 * code + 1 in bias_medians:
            metrics[f"reference_bias.{lang}"] = round(bias_medians[2 * code + 1] / bias_medians[2 * code], 4)
    return metrics


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: the reference LM's validation perplexity, the median document
    perplexity per language and the scoring throughput."""
    ref = {"ref_val_ppl": metrics["reference.val_perplexity"]} if "reference.val_perplexity" in metrics else {}
    return {**ref, **{f"median_ppl.{lang}": v for lang, v in select(metrics, "median_perplexity").items()},
            "tokens_per_s": metrics["score_tokens_per_s"]}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)

if __name__ == "__main__":
    main()
