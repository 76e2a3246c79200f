"""Tiny inputs for the prune / qat / export tests: a BPE tokenizer and tiered token shards built from the
synthetic bilingual corpus, and a `debug`-preset teacher trained on them for a few dozen steps."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from stages.common import tokenizer as bpe
from stages.common.model import CHECKPOINT_NAME, Transformer, preset, save_checkpoint
from stages.common.shards import TIERS, TokenShard, TokenShardWriter
from stages.common.training import OptimParams, fit, seed_everything
from tests.lm_corpus import synthetic_docs

EOS, PAD = "<|endoftext|>", "<|pad|>"
MAX_SEQ_LEN = 32  # the debug preset's 64 halved: faster tests, and the tiny val shards hold more windows


def make_inputs(root: Path, teacher_steps: int = 60) -> dict[str, Path]:
    """tokenizer/, tokens/{train,val}/{easy,medium,hard}, teacher/model.safetensors under `root`."""
    docs = synthetic_docs(300, seed=3, noisy_share=0.3)
    tokenizer = bpe.train_bpe((d["text"] for d in docs), vocab_size=320, min_frequency=2, eos_token=EOS,
                              pad_token=PAD)
    tok_dir = root / "tokenizer"
    tok_dir.mkdir(parents=True)
    bpe.save(tokenizer, tok_dir, EOS, PAD)
    eos_id, vocab = tokenizer.token_to_id(EOS), tokenizer.get_vocab_size()
    writers = {(split, tier): TokenShardWriter(root / "tokens" / split / tier, vocab, eos_id)
               for split in ("train", "val") for tier in TIERS}
    for i, (doc, ids) in enumerate(zip(docs, bpe.encode(tokenizer, [d["text"] for d in docs]))):
        split = "val" if i % 5 == 0 else "train"
        tier = TIERS[i % 3]
        writers[split, tier].add(ids)
    for w in writers.values():
        w.close()
    shards = {f"{split}/{tier}": {"num_docs": w.num_docs, "num_tokens": w.num_tokens}
              for (split, tier), w in writers.items()}  # the perplexity stage's manifest
    manifest = {"vocab_size": vocab, "eos_id": eos_id, "shards": shards}
    (root / "tokens" / "manifest.json").write_text(json.dumps(manifest))
    seed_everything(0)
    model = Transformer(preset("debug", vocab, max_seq_len=MAX_SEQ_LEN))
    shards = [TokenShard(root / "tokens" / "train" / t) for t in TIERS]

    def next_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng(step)
        shard = shards[step % 3]
        w = shard.windows(rng.integers(0, shard.num_windows(MAX_SEQ_LEN), 16), MAX_SEQ_LEN)
        return w[:, :-1], w[:, 1:]

    fit(model, next_batch, teacher_steps, dataclasses.replace(OptimParams(), lr=1e-2, warmup_steps=5), "fp32",
        torch.device("cpu"), log_every=1000)
    save_checkpoint(model, root / "teacher" / CHECKPOINT_NAME)
    return {"tokenizer": tok_dir, "tokens": root / "tokens", "teacher": root / "teacher"}


def tiny_prune_params(inputs: dict[str, Path], out: Path):
    from stages import prune
    from stages.common.distill import DistillParams
    return dataclasses.replace(
        prune.Params(), teacher_dir=str(inputs["teacher"]), tokens_dir=str(inputs["tokens"]),
        out_dir=str(out / "pruned"), metrics_path=str(out / "prune.json"),
        checkpoint_dir=str(out / "prune_checkpoints"), num_threads=1, precision="fp32", progress_bar=False,
        calibration_batches=2, mlp_schedule=(0.5, 0.5), head_schedule=(0.0, 0.5), channel_multiple=8,
        distill=DistillParams(steps=4, batch_size=4))


def tiny_qat_params(model_dir: Path, inputs: dict[str, Path], out: Path):
    from stages import qat
    return dataclasses.replace(
        qat.Params(), model_dir=str(model_dir), tokens_dir=str(inputs["tokens"]), out_dir=str(out / "qat"),
        metrics_path=str(out / "qat.json"), checkpoint_dir=str(out / "qat_checkpoints"), num_threads=1,
        progress_bar=False, calibration_batches=4,
        distill=dataclasses.replace(qat.Params().distill, steps=4, batch_size=4))
