"""A plain single-process loop (`train_step`, `evaluate`, `fit`) built from `training.optim` and `runtime.device`; the perplexity stage's reference LM trains with it."""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

from stages.common.runtime.device import autocast
from stages.common.training.optim import OptimParams, configure_optimizer, make_scheduler

log = logging.getLogger("refinery.training")


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
