"""Knowledge distillation: fine-tune a student against a frozen teacher's temperature-softened logits.

loss = kd_weight * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + lm_weight * CE(student, targets)

(Hinton et al.: the T^2 keeps the soft term's gradient scale independent of T.) The fine-tune is the
train stage's own loop (`stages.common.trainer.Trainer`, with `DistillLoss` as its loss): the same
optimizer groups, warmup + cosine, autocast and loss scaling, clipping, non-finite guard, data-parallel
processes under torchrun (the student replicated by DDP: `stages.common.parallel.replicate`) and
resumable checkpoints (`stages.common.training.checkpoint`). The student is any module mapping ids (B, T) to
logits (B, T, V): a pruned `Transformer`, or the fake-quantized model of `stages.common.compress.deployable` during
quantization-aware training.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from stages.common.lm.evaluation import tier_perplexity, torch_token_nll
from stages.common.lm.model import Transformer, load_checkpoint
from stages.common.lm.token_shards import TierMix, TierNeed, TierRatios, TierSampler, open_tiers, window_tokens
from stages.common.runtime.params import param
from stages.common.training.checkpoint import CheckpointParams
from stages.common.training.optim import OptimParams, configure_optimizer
from stages.common.training.parallel import DistEnv, main_rank_cores, replicate
from stages.common.training.trainer import DynamicClip, LossScaler, TrainConfig, Trainer


@dataclass(frozen=True)
class DistillOptim(OptimParams):
    """Fine-tuning a model that already works: a lower peak rate and a short warmup."""
    lr: float = param(5e-4, gt=0.0)  # a field declared again loses its rules: they are stated again
    warmup_steps: int = param(10, min=0)
    weight_decay: float = param(0.0, min=0.0)


@dataclass(frozen=True)
class DistillParams:
    steps: int = param(100, min=0)
    batch_size: int = param(8, min=1)
    seq_len: int = param(0, min=0)  # 0 = the model's max_seq_len
    temperature: float = param(2.0, gt=0.0)
    kd_weight: float = param(0.7, min=0.0)  # weight of the KL term
    lm_weight: float = param(0.3, min=0.0)  # weight of the cross-entropy on the real next tokens
    optim: DistillOptim = field(default_factory=DistillOptim)

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or self.seq_len < 0:
            raise ValueError(f"distillation: steps >= 0, batch_size >= 1, seq_len >= 0 (got {self})")
        if self.temperature <= 0 or self.kd_weight < 0 or self.lm_weight < 0 or self.kd_weight + self.lm_weight <= 0:
            raise ValueError(f"distillation: temperature > 0 and non-negative weights with a positive sum (got {self})")

    def check_processes(self, section: str, num_processes: int) -> None:
        """`finetune` splits each step's batch evenly over the data-parallel processes."""
        if self.steps and self.batch_size % num_processes:
            raise ValueError(f"param '{section}.distill.batch_size': must be a multiple of '{section}.nproc_per_node' "
                             f"({num_processes}), as the processes split each batch; got {self.batch_size}")

    def shard_needs(self, section: str, num_processes: int, max_seq_len: int) -> list[TierNeed]:
        """What the fine-tune and the evaluation read of every tier (`token_shards.check_tier_tokens`): one
        micro batch (a process's share of `batch_size`) of distinct training windows, and one validation
        window of the model's `max_seq_len`, at which perplexity is measured."""
        seq_len = self.seq_len or max_seq_len
        micro = max(1, self.batch_size // num_processes)
        return [TierNeed("train", window_tokens(seq_len, micro),
                         f"one micro batch ({section}.distill.batch_size {self.batch_size} / {num_processes} "
                         f"processes) of seq_len {seq_len} windows",
                         f"give perplexity a larger corpus, or lower '{section}.distill.batch_size' or "
                         f"'{section}.distill.seq_len'"),
                TierNeed("val", window_tokens(max_seq_len),
                         f"validation perplexity: one window of the model's max_seq_len {max_seq_len}",
                         "raise 'perplexity.val_fraction' and rerun perplexity")]


def distill_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, targets: torch.Tensor,
                 temperature: float, kd_weight: float, lm_weight: float
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, KL at temperature T, cross-entropy), each a mean over positions; logits (B, T, V)."""
    vocab = student_logits.shape[-1]
    s = student_logits.float().reshape(-1, vocab)
    t = teacher_logits.float().reshape(-1, vocab)
    kl = F.kl_div(F.log_softmax(s / temperature, -1), F.log_softmax(t / temperature, -1), log_target=True,
                  reduction="batchmean")
    ce = F.cross_entropy(s, targets.reshape(-1))
    return kd_weight * temperature ** 2 * kl + lm_weight * ce, kl, ce


class DistillLoss:
    """The trainer's loss for a student (the module it is called with) against a frozen `teacher`."""

    def __init__(self, teacher: nn.Module, p: DistillParams) -> None:
        self.teacher, self.p = teacher.eval(), p

    def __call__(self, module: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with torch.no_grad():
            teacher_logits = self.teacher(inputs)
        loss, kl, ce = distill_loss(module(inputs), teacher_logits, targets, self.p.temperature, self.p.kd_weight,
                                    self.p.lm_weight)
        return loss, {"kl": kl.detach(), "ce": ce.detach()}


def frozen_teacher(path: Path, device: torch.device | str = "cpu") -> Transformer:
    """The model at `path` in eval mode with no parameter that trains: the teacher of a fine-tune."""
    teacher = load_checkpoint(path, device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def trainable(model: nn.Module) -> nn.Module:
    """`model` with every parameter trainable again (a student made from a frozen copy)."""
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def even_sampler(tokens_dir: str, seq_len: int, batch_size: int, steps: int, seed: int) -> TierSampler:
    """Training windows drawn evenly across tiers, at a constant mix: a compressed model should keep what
    every tier needs."""
    even = TierRatios(1.0, 1.0, 1.0)
    return TierSampler(open_tiers(tokens_dir, "train"), TierMix(even, even, "constant"), seq_len, batch_size,
                       max(1, steps), seed)


def val_perplexity(model: nn.Module, tokens_dir: str, seq_len: int, batch_size: int, max_batches: int,
                   env: DistEnv) -> dict[str, float]:
    """Validation perplexity per tier and over all (`max_batches` 0: every window), computed by the main rank
    with the cores of every local rank (the others wait)."""
    with main_rank_cores(env):
        return tier_perplexity(lambda windows: torch_token_nll(model, windows, env.device), tokens_dir, seq_len,
                               batch_size, max_batches)


def finetune(student: nn.Module, teacher: nn.Module, sampler: TierSampler, p: DistillParams, env: DistEnv,
             precision: str, root: Path, run_id: str, ckpt: CheckpointParams, flops_per_token: float,
             desc: str = "distill", progress_bar: bool = True) -> tuple[list[dict[str, Any]], int | None]:
    """Distil `teacher` into `student` (in place) for `p.steps` steps of `sampler`'s global batches
    (`p.batch_size` sequences, split over the data-parallel processes), checkpointing under `root` every
    `ckpt.every` steps and at the end. A run with the same `run_id` resumes from its newest valid
    checkpoint (a finished one trains nothing). Collective under torchrun.

    Returns the trainer's rows (one per step: loss, kl, ce, lr, grad_norm, ...) and the step it resumed
    from (None for a fresh start)."""
    if p.steps == 0:
        return [], None
    if p.batch_size % env.world_size:
        raise ValueError(f"distillation batch_size {p.batch_size} must be a multiple of the {env.world_size} "
                         "data-parallel processes")
    teacher.eval()
    student.train()
    parts = replicate(student, env)
    optimizer = configure_optimizer(parts.module, p.optim, env.device)
    cfg = TrainConfig(max_steps=p.steps, micro_batch_size=p.batch_size // env.world_size,
                      gradient_accumulation_steps=1, seq_len=sampler.seq_len, precision=precision, optim=p.optim,
                      dynamic_clip=DynamicClip(enabled=False), eval_windows=0)
    trainer = Trainer(parts, optimizer, sampler, cfg, env.device, flops_per_token, LossScaler(precision == "fp16"),
                      DistillLoss(teacher, p))
    resumed = trainer.resume(root, run_id, ckpt.keep, env.is_main)
    trainer.fit({}, 0, ckpt.every, trainer.save_checkpoint, log_every=max(1, p.steps // 10), is_main=env.is_main,
                progress_bar=progress_bar, desc=desc)
    student.eval()
    return trainer.history, resumed


def kl_span(history: list[dict[str, Any]], steps: int = 5) -> tuple[float, float] | None:
    """The mean KL of a fine-tune's first and of its last `steps` steps (rounded for the metrics files), or
    None when it trained no step."""
    if not history:
        return None
    kl = [h["kl"] for h in history]
    return round(float(np.mean(kl[:steps])), 4), round(float(np.mean(kl[-steps:])), 4)
