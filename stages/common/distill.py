"""Knowledge distillation: fine-tune a student against a frozen teacher's temperature-softened logits.

loss = kd_weight * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + lm_weight * CE(student, targets)

(Hinton et al.: the T^2 keeps the soft term's gradient scale independent of T.) Single process, built from
the pieces of `stages.common.training` (optimizer groups, warmup + cosine, autocast, clipping), so the
distributed train launcher can wrap `distill_step` the way it wraps `train_step`. The student is any
module mapping ids (B, T) to logits (B, T, V): a pruned `Transformer`, or the fake-quantized model
of `stages.common.deploy` during quantization-aware training.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from stages.common.training import OptimParams, autocast, configure_optimizer, make_scheduler

log = logging.getLogger("refinery.distill")


@dataclass(frozen=True)
class DistillOptim(OptimParams):
    """Fine-tuning a model that already works: a lower peak rate and a short warmup."""
    lr: float = 5e-4
    warmup_steps: int = 10
    weight_decay: float = 0.0


@dataclass(frozen=True)
class DistillParams:
    steps: int = 100
    batch_size: int = 8
    seq_len: int = 0  # 0 = the model's max_seq_len
    temperature: float = 2.0
    kd_weight: float = 0.7  # weight of the KL term
    lm_weight: float = 0.3  # weight of the cross-entropy on the real next tokens
    optim: DistillOptim = field(default_factory=DistillOptim)

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or self.seq_len < 0:
            raise ValueError(f"distillation: steps >= 0, batch_size >= 1, seq_len >= 0 (got {self})")
        if self.temperature <= 0 or self.kd_weight < 0 or self.lm_weight < 0 or self.kd_weight + self.lm_weight <= 0:
            raise ValueError(f"distillation: temperature > 0 and non-negative weights with a positive sum (got {self})")


@dataclass
class DistillStats:
    step: int
    loss: float
    kl: float
    ce: float
    lr: float
    seconds: float


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


def distill_step(student: nn.Module, teacher: nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: torch.optim.lr_scheduler.LRScheduler, inputs: torch.Tensor, targets: torch.Tensor,
                 p: DistillParams, precision: str) -> tuple[float, float, float]:
    """One optimiser step; returns (loss, KL, CE) before the step."""
    with torch.no_grad(), autocast(precision, inputs.device):
        teacher_logits = teacher(inputs)
    with autocast(precision, inputs.device):
        student_logits = student(inputs)
    loss, kl, ce = distill_loss(student_logits, teacher_logits, targets, p.temperature, p.kd_weight, p.lm_weight)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), p.optim.grad_clip if p.optim.grad_clip > 0 else math.inf)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return loss.item(), kl.item(), ce.item()


def distill(student: nn.Module, teacher: nn.Module, next_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
            p: DistillParams, precision: str, device: torch.device, desc: str = "distill") -> list[DistillStats]:
    """Fine-tune `student` for `p.steps` steps on `next_batch(step) -> (inputs, targets)`."""
    teacher.eval()
    student.train()
    optimizer = configure_optimizer(student, p.optim, device)
    scheduler = make_scheduler(optimizer, p.optim, max(1, p.steps))
    history: list[DistillStats] = []
    with tqdm(total=p.steps, desc=desc, unit="step", mininterval=2.0) as bar:
        for step in range(p.steps):
            t0 = time.perf_counter()
            inputs, targets = (t.to(device) for t in next_batch(step))
            lr = optimizer.param_groups[0]["lr"]
            loss, kl, ce = distill_step(student, teacher, optimizer, scheduler, inputs, targets, p, precision)
            if not math.isfinite(loss):
                raise FloatingPointError(f"{desc}: loss is {loss} at step {step}")
            history.append(DistillStats(step, loss, kl, ce, lr, time.perf_counter() - t0))
            bar.update()
            if step % 50 == 0 or step == p.steps - 1:
                bar.set_postfix(kl=f"{kl:.3f}", ce=f"{ce:.3f}")
                log.info("%s step %d/%d loss %.4f kl %.4f ce %.4f lr %.2e", desc, step, p.steps, loss, kl, ce, lr)
    student.eval()
    return history
