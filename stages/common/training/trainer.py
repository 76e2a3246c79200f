"""The distributed training loop: one optimizer step over any (pp, dp, tp) layout, with gradient
accumulation, fp16 loss scaling, fixed + dynamic global-norm clipping, layer freezing, a non-finite
guard, per-tier validation and resumable state.

`Trainer` drives a `Parallelized` model (stages.common.training.parallel) and a `Sampler` (a `TierSampler`
or `WindowSampler` of stages.common.lm.token_shards); it holds no paths and writes nothing but checkpoints,
through stages.common.checkpoint, and only when its caller asks. Under torchrun it is the train, prune and
qat stages' loop; `in_process` builds one for a model whole in one process, with no process group: the
perplexity stage's reference LM. Every decision that changes the weights (skip a step, clip, loss-scale
update) is taken from globally reduced numbers, so all ranks take it together. The loss is the model's
own next-token loss, or any `LossFn`: the prune and qat stages pass a distillation loss against a
frozen teacher (stages.common.compress.distill).
"""
from __future__ import annotations

import logging
import math
import re
import resource
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from stages.common.lm.model import Transformer
from stages.common.lm.token_shards import TIERS, Batch, TokenShard
from stages.common.runtime.device import autocast
from stages.common.runtime.params import param
from stages.common.training import checkpoint
from stages.common.training.optim import OptimParams, configure_optimizer, make_scheduler
from stages.common.training.parallel import Parallelized, ParallelParams, mesh_coord, parallelize

log = logging.getLogger("refinery.trainer")
LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# Dense bf16/fp16 tensor-core peaks (FLOP/s) of known accelerators, for MFU.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12, "A10": 125e12}


class Sampler(Protocol):
    """Training batches: rows `rows` of step `step`'s global batch, a pure function of the step (so a
    resumed run sees the same data)."""

    def batch(self, step: int, rows: slice = ...) -> Batch: ...


class LossFn(Protocol):
    """A training loss: (module, inputs, targets) -> (the loss to minimise, named extra figures to log,
    each a detached 0-d tensor). Called under the trainer's autocast, once per micro-batch."""

    def __call__(self, module: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]: ...


def lm_loss(module: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The model's mean next-token cross-entropy (the train stage's loss)."""
    return module(inputs, targets), {}


@dataclass(frozen=True)
class DynamicClip:
    """The design's adaptive clipping: threshold = factor x median of the last `window` gradient norms,
    once `min_history` norms are known (until then, and never above it, the fixed `grad_clip`)."""
    enabled: bool = True
    factor: float = param(0.8, gt=0.0)
    window: int = param(100, min=1)
    min_history: int = param(50, min=1)  # and <= window

    def __post_init__(self) -> None:
        if self.factor <= 0 or self.window < 1 or not 1 <= self.min_history <= self.window:
            raise ValueError(f"invalid dynamic clipping params: {self}")


@dataclass(frozen=True)
class Freeze:
    layers: int = param(0, min=0)  # the lowest `layers` blocks get no updates ...
    steps: int = param(0, min=0)  # ... for the first `steps` steps


class LossScaler:
    """Dynamic loss scaling for fp16 (GradScaler's policy: start at 2^16, halve on overflow, double after
    `growth_interval` clean steps). The overflow test is the globally reduced gradient norm, so every
    rank agrees; torch's GradScaler decides from each rank's local shards, which under FSDP, TP or PP
    can differ between ranks (FSDP1 needed a ShardedGradScaler for that)."""

    def __init__(self, enabled: bool, init_scale: float = 2.0 ** 16, growth_interval: int = 2000) -> None:
        self.enabled = enabled
        self.scale = init_scale if enabled else 1.0
        self.growth_interval = growth_interval
        self.clean_steps = 0

    def update(self, overflow: bool) -> None:
        if not self.enabled:
            return
        if overflow:
            self.scale, self.clean_steps = self.scale * 0.5, 0
        else:
            self.clean_steps += 1
            if self.clean_steps == self.growth_interval:
                self.scale, self.clean_steps = self.scale * 2.0, 0

    def state_dict(self) -> dict[str, float]:
        return {"scale": self.scale, "clean_steps": self.clean_steps}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.scale, self.clean_steps = float(state["scale"]), int(state["clean_steps"])


@dataclass
class TrainConfig:
    max_steps: int
    micro_batch_size: int
    gradient_accumulation_steps: int
    seq_len: int
    precision: str  # fp32 | bf16 | fp16
    optim: OptimParams
    dynamic_clip: DynamicClip = field(default_factory=DynamicClip)
    freeze: Freeze = field(default_factory=Freeze)
    max_bad_steps: int = 5  # consecutive non-finite steps before the run stops
    eval_windows: int = 64  # validation windows per tier (0 = no validation)
    peak_flops: float = 0.0  # per device; 0 = from PEAK_FLOPS when the device is known


@dataclass
class Counters:
    num_skipped_steps: int = 0  # non-finite loss or gradient: no update
    num_overflow_steps: int = 0  # fp16 gradient overflow: no update, loss scale halved
    num_clipped_steps: int = 0
    consecutive_bad: int = 0


class Trainer:
    def __init__(self, parts: Parallelized, optimizer: torch.optim.Optimizer, sampler: Sampler,
                 cfg: TrainConfig, device: torch.device, flops_per_token: float, scaler: LossScaler,
                 loss_fn: LossFn = lm_loss) -> None:
        if parts.schedule is not None and loss_fn is not lm_loss:
            raise ValueError("a custom loss (e.g. distillation) needs a layout without pipeline parallelism: "
                             "the pipeline schedule computes its own loss on the last stage")
        self.parts, self.optimizer, self.sampler, self.cfg, self.device = parts, optimizer, sampler, cfg, device
        self.loss_fn = loss_fn
        self.scheduler = make_scheduler(optimizer, cfg.optim, cfg.max_steps)
        self.scaler = scaler  # shared with the pipeline's loss function, which multiplies by its scale
        self.counters = Counters()
        self.norm_history: list[float] = []
        self.history: list[dict[str, Any]] = []  # one row per step (the loss curve)
        self.val_history: list[dict[str, Any]] = []
        self.step = 0
        self.tokens_seen = 0
        self._checkpoints: tuple[Path, str, int] | None = None  # (root, run id, keep): set by `resume`
        self.dp_rank, self.dp_size = mesh_coord(parts.mesh, "dp")
        self.tp_rank, _ = mesh_coord(parts.mesh, "tp")
        self.pp_rank, self.pp_size = mesh_coord(parts.mesh, "pp")
        # The rank that reports a loss: on the last pipeline stage, first of its tensor-parallel group.
        self.reports = parts.is_last_stage and self.tp_rank == 0
        self.flops_per_token = flops_per_token
        self.is_main = True
        self.peak_flops = cfg.peak_flops or _known_peak(device, cfg.precision)
        self.frozen = [p for name, p in parts.module.named_parameters()
                       if (m := LAYER_INDEX.search(name)) and int(m.group(1)) < cfg.freeze.layers]

    # ---- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        scheduler = {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"}
        return {"step": self.step, "tokens_seen": self.tokens_seen, "scheduler": scheduler,
                "scaler": self.scaler.state_dict(), "norm_history": self.norm_history[-self.cfg.dynamic_clip.window:],
                "counters": vars(self.counters), "history": self.history, "val_history": self.val_history}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step, self.tokens_seen = int(state["step"]), int(state["tokens_seen"])
        self.scheduler.load_state_dict({**state["scheduler"], "lr_lambdas": [None] * len(self.optimizer.param_groups)})
        self.scaler.load_state_dict(state["scaler"])
        self.norm_history = list(state["norm_history"])
        self.counters = Counters(**state["counters"])
        self.history, self.val_history = list(state["history"]), list(state["val_history"])

    def resume(self, root: Path, run_id: str, keep: int, is_main: bool) -> int | None:
        """Collective. Continue run `run_id` from its newest valid checkpoint under `root` and return the step
        it was saved at; or start afresh (None), clearing `root`'s checkpoints of another run. From then on
        `save_checkpoint` saves under `root`, keeping the newest `keep`."""
        self._checkpoints = (root, run_id, keep)
        state = checkpoint.resume(root, run_id, self.parts.module, self.optimizer, is_main)
        if state is None:
            return None
        self.load_state_dict(state)
        return self.step

    def save_checkpoint(self) -> None:
        """Collective: the model, optimizer and train state at this step, under the run `resume` named."""
        if self._checkpoints is None:
            raise RuntimeError("save_checkpoint before resume: no run to save under")
        root, run_id, keep = self._checkpoints
        checkpoint.save(root, self.step, self.parts.module, self.optimizer,
                        {**self.state_dict(), "fingerprint": run_id}, keep)

    # ---- one optimizer step ------------------------------------------------------------------------
    @property
    def global_batch(self) -> int:
        return self.dp_size * self.cfg.micro_batch_size * self.cfg.gradient_accumulation_steps

    def _forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """This rank's mean loss over its share of the batch, and the loss function's extra figures (0-d
        tensors; 0 where this rank sees no loss)."""
        cfg, parts = self.cfg, self.parts
        if parts.schedule is not None:
            with autocast(cfg.precision, self.device):
                losses = self._run_pipeline("step", inputs, targets)
            if not losses:
                return {"loss": torch.zeros((), device=self.device)}
            return {"loss": torch.stack([loss.detach().float() for loss in losses]).mean() / self.scaler.scale}
        totals: dict[str, torch.Tensor] = {}
        accum = cfg.gradient_accumulation_steps
        for micro, (x, y) in enumerate(zip(inputs.chunk(accum), targets.chunk(accum))):
            parts.set_gradient_sync(micro == accum - 1)  # reduce gradients once, on the last micro-batch
            with autocast(cfg.precision, self.device):
                loss, extras = self.loss_fn(parts.module, x, y)
            scaled = loss / accum
            (scaled * self.scaler.scale if self.scaler.enabled else scaled).backward()
            for name, value in {"loss": loss, **extras}.items():
                totals[name] = totals.get(name, 0.0) + value.detach().float() / accum
        return totals

    def _run_pipeline(self, method: str, inputs: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
        """One call of the pipeline schedule's `step` (forward + backward) or `eval`: the first stage feeds
        the inputs, the last one the targets; returns the micro-batch losses (on the last stage only)."""
        losses: list[torch.Tensor] = []
        call = getattr(self.parts.schedule, method)
        if self.pp_rank == 0:
            call(inputs, target=targets if self.parts.is_last_stage else None, losses=losses)
        elif self.parts.is_last_stage:
            call(target=targets, losses=losses)
        else:
            call()
        return losses

    def _global_means(self, local: dict[str, torch.Tensor]) -> dict[str, float]:
        """Each figure averaged over the ranks that report a loss (one all-reduce for all of them)."""
        values = torch.stack([v.reshape(()).float() for v in local.values()])
        if dist.is_initialized():
            packed = torch.cat([values * self.reports, torch.tensor([float(self.reports)], device=self.device)])
            dist.all_reduce(packed)
            values = packed[:-1] / packed[-1]
        return dict(zip(local, values.tolist()))

    def _global_grad_norm(self, params: list[nn.Parameter]) -> torch.Tensor:
        """L2 norm of all gradients across every rank, each parameter counted once."""
        groups: dict[Any, list[torch.Tensor]] = {}
        for p in params:
            g = p.grad
            key = (g.device_mesh, g.placements) if hasattr(g, "device_mesh") else None
            groups.setdefault(key, []).append(g)
        squares = torch.zeros((), device=self.device)
        for key, grads in groups.items():
            norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
            if key is not None:
                norm = norm.full_tensor()  # DTensor: reduced over the shards' mesh
            squares += norm.float() ** 2
        if self.pp_size > 1:  # each pipeline stage holds different parameters
            dist.all_reduce(squares, group=self.parts.mesh["pp"].get_group())
        return squares.sqrt()

    def clip_threshold(self) -> float:
        fixed = self.cfg.optim.grad_clip if self.cfg.optim.grad_clip > 0 else math.inf
        dyn = self.cfg.dynamic_clip
        if dyn.enabled and len(self.norm_history) >= dyn.min_history:
            return min(fixed, dyn.factor * statistics.median(self.norm_history[-dyn.window:]))
        return fixed

    def train_step(self) -> dict[str, Any]:
        cfg, step = self.cfg, self.step
        t0 = time.perf_counter()
        rows = cfg.micro_batch_size * cfg.gradient_accumulation_steps
        batch = self.sampler.batch(step, slice(self.dp_rank * rows, (self.dp_rank + 1) * rows))
        inputs, targets = batch.inputs.to(self.device), batch.targets.to(self.device)
        lr = self.optimizer.param_groups[0]["lr"]
        local = self._forward_backward(inputs, targets)
        self.parts.sync_tied_gradients()
        if step < cfg.freeze.steps:
            for p in self.frozen:
                p.grad = None  # AdamW leaves parameters without a gradient untouched (no decay either)
        params = self.parts.grad_params()
        if self.scaler.enabled:
            _scale_grads(params, 1.0 / self.scaler.scale)
        grad_norm = self._global_grad_norm(self.parts.norm_params()).item()
        figures = self._global_means(local)
        loss = figures.pop("loss")
        threshold = self.clip_threshold()
        finite = math.isfinite(grad_norm) and math.isfinite(loss)
        clipped = False
        if finite:
            if grad_norm > threshold:
                _scale_grads(params, threshold / (grad_norm + 1e-6))  # clip_grad_norm_'s formula
                clipped = True
                self.counters.num_clipped_steps += 1
            self.optimizer.step()
            self.norm_history.append(grad_norm)
            del self.norm_history[:-cfg.dynamic_clip.window]
            self.counters.consecutive_bad = 0
        elif self.scaler.enabled and math.isfinite(loss):
            self.counters.num_overflow_steps += 1  # expected now and then: the scale adapts
        else:
            self.counters.num_skipped_steps += 1
            self.counters.consecutive_bad += 1
        self.scaler.update(overflow=not finite)
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if self.counters.consecutive_bad >= cfg.max_bad_steps:
            raise FloatingPointError(
                f"{self.counters.consecutive_bad} consecutive steps with a non-finite loss or gradient "
                f"(last: step {step}, loss {loss}, grad norm {grad_norm}); stopping. The last checkpoint is "
                "intact: lower the learning rate or check the data, then rerun to resume from it.")
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        tokens = self.global_batch * cfg.seq_len
        self.step += 1
        self.tokens_seen += tokens
        row = {"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
               "clip_threshold": threshold if math.isfinite(threshold) else None, "clipped": clipped,
               "skipped": not finite, "tokens_per_s": tokens / seconds, "seconds": seconds,
               "memory_mb": _peak_memory_mb(self.device), "loss_scale": self.scaler.scale,
               **{f"ratio_{tier}": float(r) for tier, r in zip(TIERS, batch.ratios)}, **figures}
        if self.peak_flops:
            row["mfu"] = self.flops_per_token * row["tokens_per_s"] / (self.peak_flops * _world())
        self.history.append(row)
        return row

    # ---- validation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, val_shards: Mapping[str, TokenShard]) -> dict[str, float]:
        """Mean token loss per tier on the first `eval_windows` non-overlapping windows of each validation
        shard, and `all`: their mean weighted by each shard's tokens. Every rank runs the same batches (FSDP,
        TP and PP need all ranks in every forward)."""
        cfg, parts = self.cfg, self.parts
        rows = cfg.micro_batch_size * cfg.gradient_accumulation_steps
        out: dict[str, float] = {}
        for tier in TIERS:
            windows = _val_windows(val_shards[tier], cfg.seq_len, cfg.eval_windows)
            if parts.schedule is not None:  # the pipeline splits a batch into exactly n micro-batches
                windows = windows[:len(windows) - len(windows) % cfg.gradient_accumulation_steps]
            total = torch.zeros(2, dtype=torch.float64, device=self.device)  # loss sum, token count
            for batch in windows.split(rows):
                batch = batch.to(self.device)
                x, y = batch[:, :-1], batch[:, 1:]
                with autocast(cfg.precision, self.device):
                    if parts.schedule is None:
                        loss = parts.module(x, y).float()
                    else:
                        losses = self._run_pipeline("eval", x, y)
                        loss = (torch.stack(losses).float().mean() / self.scaler.scale if losses
                                else torch.zeros((), device=self.device))
                if self.reports:
                    total += torch.stack([loss.double() * y.numel(), torch.tensor(y.numel(), device=self.device)])
            if dist.is_initialized():
                dist.all_reduce(total)  # tensor-parallel and data-parallel copies of the reporter: same numbers
                total /= self._num_reporters()
            out[tier] = (total[0] / total[1]).item() if total[1] > 0 else math.nan
        # The whole validation split: the tiers' losses weighted by their tokens (a stratified estimate of the
        # mean token loss over all of it, whatever the tier shares: the figure to compare tier mixes on).
        weights = {t: val_shards[t].num_tokens for t in TIERS if math.isfinite(out[t])}
        out["all"] = (sum(out[t] * w for t, w in weights.items()) / sum(weights.values())
                      if sum(weights.values()) else math.nan)
        row = {"step": self.step, **{f"loss_{t}": v for t, v in out.items()},
               **{f"perplexity_{t}": math.exp(v) if math.isfinite(v) else math.nan for t, v in out.items()}}
        self.val_history.append(row)
        return out

    def _num_reporters(self) -> int:
        return self.dp_size  # one reporter per data-parallel replica (last stage, tp rank 0)

    # ---- the loop ----------------------------------------------------------------------------------
    def fit(self, val_shards: Mapping[str, TokenShard], eval_every: int, checkpoint_every: int,
            on_checkpoint, log_every: int = 10, is_main: bool = True, progress_bar: bool = True,
            desc: str = "train", log_lines: bool = False) -> None:
        """Run from `self.step` to `max_steps`; `on_checkpoint()` is called (on every rank) at each
        checkpoint step and at the end. Only the main rank logs: a progress bar, or log lines every
        `log_every` steps (with `log_lines`, both)."""
        self.is_main = is_main
        show_progress = is_main and progress_bar
        cfg = self.cfg
        if self.step == 0 and cfg.eval_windows:
            self._log_val(self.evaluate(val_shards))
        with tqdm(total=cfg.max_steps, initial=self.step, desc=desc, unit="step", mininterval=2.0,
                  disable=not show_progress) as bar:
            while self.step < cfg.max_steps:
                row = self.train_step()
                bar.update()
                if row["step"] % log_every == 0 or self.step == cfg.max_steps:
                    bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.1e}",
                                    tok_s=f"{row['tokens_per_s']:.0f}")
                    if is_main and (log_lines or not progress_bar):
                        log.info("%s step %d/%d loss %.4f lr %.2e grad_norm %.3f clip %.3g tokens/s %.0f", desc,
                                 self.step, cfg.max_steps, row["loss"], row["lr"], row["grad_norm"],
                                 row["clip_threshold"] or math.inf, row["tokens_per_s"])
                last = self.step == cfg.max_steps
                if cfg.eval_windows and (last or (eval_every and self.step % eval_every == 0)):
                    self._log_val(self.evaluate(val_shards))
                if last or (checkpoint_every and self.step % checkpoint_every == 0):
                    on_checkpoint()

    def _log_val(self, losses: Mapping[str, float]) -> None:
        if self.is_main:
            log.info("step %d validation perplexity %s", self.step,
                     " ".join(f"{t} {math.exp(v):.2f}" for t, v in losses.items() if math.isfinite(v)))


def in_process(model: Transformer, sampler: Sampler, cfg: TrainConfig, device: torch.device) -> Trainer:
    """A trainer for `model` (already on `device`) whole in this process, as a lone train worker runs it
    but without a process group: no torchrun, no collectives; checkpoints only if the caller saves them.
    The optimizer is `configure_optimizer(cfg.optim)`; the loss is the model's own."""
    parts = parallelize(model, None, ParallelParams(), device, cfg.gradient_accumulation_steps, None)
    return Trainer(parts, configure_optimizer(model, cfg.optim, device), sampler, cfg, device,
                   model.flops_per_token(cfg.seq_len), LossScaler(cfg.precision == "fp16"))


def _scale_grads(params: list[nn.Parameter], factor: float) -> None:
    """Multiply every gradient by `factor`, one foreach call per kind (plain tensors and DTensors cannot
    share one)."""
    plain = [p.grad for p in params if not hasattr(p.grad, "device_mesh")]
    distributed = [p.grad for p in params if hasattr(p.grad, "device_mesh")]
    for grads in (plain, distributed):
        if grads:
            torch._foreach_mul_(grads, factor)


def _val_windows(shard: TokenShard, seq_len: int, max_windows: int) -> torch.Tensor:
    starts = torch.arange(0, shard.num_windows(seq_len), seq_len)[:max_windows].numpy()
    if len(starts) == 0:
        return torch.empty(0, seq_len + 1, dtype=torch.int64)
    return shard.windows(starts, seq_len)


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _known_peak(device: torch.device, precision: str) -> float:
    if device.type != "cuda" or precision not in ("bf16", "fp16"):
        return 0.0
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_FLOPS.items() if key in name), 0.0)
