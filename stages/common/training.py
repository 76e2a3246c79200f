"""The single-process training loop: AdamW with decay/no-decay groups, linear warmup then cosine decay,
global-norm gradient clipping, fp32 or bf16 autocast, seeded.

The pieces are separate functions so the distributed `train` stage can reuse them around its own
parallelism (it wraps the model, not this loop's logic): `configure_optimizer`, `lr_multiplier`,
`autocast`, `train_step`, `evaluate`. `fit` is the plain loop built from them, used by the
perplexity stage's reference LM and as the single-process baseline the train stage is measured against.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from stages.common.params import param

log = logging.getLogger("refinery.training")
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class OptimParams:
    lr: float = param(3e-4, gt=0.0)  # peak learning rate, reached after the warmup
    min_lr_ratio: float = param(0.1, min=0.0, max=1.0)  # the cosine decays to lr * min_lr_ratio at the last step
    warmup_steps: int = param(500, min=0)
    weight_decay: float = param(0.1, min=0.0)  # on matrices and embeddings only (not norms)
    beta1: float = param(0.9, min=0.0, lt=1.0)
    beta2: float = param(0.95, min=0.0, lt=1.0)
    eps: float = param(1e-8, gt=0.0)
    grad_clip: float = param(1.0, min=0.0)  # max global gradient norm; 0 = off

    def __post_init__(self) -> None:
        if self.lr <= 0 or not 0 <= self.min_lr_ratio <= 1 or self.warmup_steps < 0 or self.grad_clip < 0:
            raise ValueError(f"invalid optimiser params: {self}")


def resolve_device(device: str) -> torch.device:
    """`auto`: CUDA when available, else CPU; `cpu` / `cuda` as named."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else torch.device(device)


def resolve_precision(precision: str, device: torch.device) -> str:
    """`auto`: bf16 where the hardware computes it natively (CUDA with bf16, CPUs with AVX512-BF16 or
    AMX), else fp32 (emulated bf16 matmuls on other CPUs are slower than fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if _cpu_has_native_bf16() else "fp32"


def _cpu_has_native_bf16() -> bool:
    try:
        flags = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:  # not Linux: no cheap way to tell, stay with fp32
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision for the forward pass: weights and optimizer state stay fp32."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision == "fp16":  # needs loss scaling (the train stage's LossScaler)
        return torch.autocast(device.type, dtype=torch.float16)
    return contextlib.nullcontext()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def configure_optimizer(model: nn.Module, p: OptimParams, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on 2-D+ parameters (matrices, embeddings) and none on norms/biases."""
    params = [param for param in model.parameters() if param.requires_grad]  # a tied weight appears once
    groups = []
    # Under tensor parallelism some parameters are DTensors and the rest (replicated) plain tensors; one
    # fused kernel call cannot mix the two, so they go into separate groups.
    for distributed in (False, True):
        kind = [param for param in params if hasattr(param, "device_mesh") == distributed]
        for decay in (True, False):
            group = [param for param in kind if (param.dim() >= 2) == decay]
            if group:
                groups.append({"params": group, "weight_decay": p.weight_decay if decay else 0.0})
    # The fused kernel exists on CPU and CUDA in current torch; it is one kernel per step instead of many.
    return torch.optim.AdamW(groups, lr=p.lr, betas=(p.beta1, p.beta2), eps=p.eps, fused=device.type in ("cpu", "cuda"))


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """Linear warmup from lr/warmup to lr over `warmup_steps`, then cosine down to lr * min_lr_ratio at
    the last step (step is 0-based)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - 1 - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_scheduler(optimizer: torch.optim.Optimizer, p: OptimParams,
                   total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, p.warmup_steps, total_steps, p.min_lr_ratio))


@dataclass
class StepStats:
    step: int
    loss: float
    lr: float
    grad_norm: float
    tokens: int
    seconds: float


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
               inputs: torch.Tensor, targets: torch.Tensor, precision: str, grad_clip: float) -> tuple[float, float]:
    """One optimiser step on one batch; returns (loss, gradient norm before clipping)."""
    with autocast(precision, inputs.device):
        loss = model(inputs, targets)
    loss.backward()
    # clip_grad_norm_ with an infinite max still returns the norm, which the metrics want either way.
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else math.inf)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return loss.item(), grad_norm.item()


@torch.inference_mode()
def evaluate(model: nn.Module, batches: Iterable[torch.Tensor], precision: str, device: torch.device) -> float:
    """Mean token loss over windows (B, T + 1); nan when there are none."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for window in batches:
        window = window.to(device)
        with autocast(precision, device):
            loss = model(window[:, :-1], window[:, 1:])
        total += loss.item() * window[:, 1:].numel()
        count += window[:, 1:].numel()
    model.train(was_training)
    return total / count if count else float("nan")


def fit(model: nn.Module, next_batch: Callable[[int], tuple[torch.Tensor, torch.Tensor]], steps: int,
        optim: OptimParams, precision: str, device: torch.device, log_every: int = 50,
        desc: str = "train") -> list[StepStats]:
    """Train `model` for `steps` steps on `next_batch(step) -> (inputs, targets)`; returns per-step stats."""
    model.train()
    optimizer = configure_optimizer(model, optim, device)
    scheduler = make_scheduler(optimizer, optim, steps)
    history: list[StepStats] = []
    with tqdm(total=steps, desc=desc, unit="step", mininterval=2.0) as bar:
        for step in range(steps):
            t0 = time.perf_counter()
            inputs, targets = next_batch(step)
            inputs, targets = inputs.to(device), targets.to(device)
            lr = optimizer.param_groups[0]["lr"]
            loss, grad_norm = train_step(model, optimizer, scheduler, inputs, targets, precision, optim.grad_clip)
            if not math.isfinite(loss):
                raise FloatingPointError(f"{desc}: loss is {loss} at step {step}")
            history.append(StepStats(step, loss, lr, grad_norm, targets.numel(), time.perf_counter() - t0))
            bar.update()
            if step % log_every == 0 or step == steps - 1:
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
                log.info("%s step %d/%d loss %.4f lr %.2e grad_norm %.3f", desc, step, steps, loss, lr, grad_norm)
    model.eval()
    return history
