"""The optimizer and the learning-rate schedule of the training loop (`trainer.Trainer`): AdamW with decay / no-decay parameter groups, linear warmup then cosine decay."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from stages.common.runtime.params import param


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
