"""`prune` stage: progressive structured pruning of the trained model, each step recovered by distillation.

For each step of the schedule (fractions of the ORIGINAL MLP width and head count removed so far):
1. score every MLP channel and attention head group of the current model on calibration batches
   (`method`: magnitude, activation or gradient; stages.common.compress.pruning); rank 0 decides, every rank
   applies the same choice;
2. keep the top units of each layer (the same count in every layer) -> a physically smaller model;
3. fine-tune it with distillation from the trained teacher (KL on softened logits plus the LM loss) in
   the train stage's loop: `stages.common.compress.distill.finetune` runs
   `stages.common.training.trainer.Trainer` with a distillation loss, data-parallel over torchrun's
   processes, checkpointed under `<checkpoint_dir>/step_<i>/` so a killed run resumes where it stopped;
4. measure validation perplexity per tier before and after the fine-tune, and save the step.

`python -m stages.prune` (the dvc.yaml command) launches `torchrun` with `nproc_per_node` workers, as
the train stage does (stages.common.runtime.cli), once `check_inputs` passed: the token shards hold a micro
batch and a validation window in every tier.

Outputs (rank 0):

    <out_dir>/step_<i>/model.safetensors   the model after step i (config in its metadata)
    <out_dir>/model.safetensors            the last step's model (what `qat` quantizes)
    <metrics_path>                         per step: widths, parameters, perplexity, KL, seconds
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from stages.common.compress.distill import (
    DistillParams,
    even_sampler,
    finetune,
    frozen_teacher,
    kl_span,
    trainable,
    val_perplexity,
)
from stages.common.compress.pruning import METHODS, Keep, importance, prune, select, units_to_keep
from stages.common.lm.model import CHECKPOINT_NAME, Transformer, read_config, save_checkpoint
from stages.common.lm.token_shards import TIERS, TierSampler, check_tier_tokens, read_manifest
from stages.common.runtime import digest
from stages.common.runtime.atomic import atomic_dir
from stages.common.runtime.cli import stage_main
from stages.common.runtime.device import PRECISIONS, resolve_precision, seed_everything
from stages.common.runtime.metrics import val_ppl, write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import param, validate
from stages.common.training.checkpoint import CheckpointParams
from stages.common.training.parallel import DistEnv, barrier, distributed

log = logging.getLogger("refinery.prune")
STAGE = "prune"


@dataclass(frozen=True)
class Params:
    # placement=True: does not change the pruned weights, so checkpoints written under other values resume
    # (the inputs count by content: the teacher's digest, the token shards' manifest)
    teacher_dir: str = param(placement=True)  # the trained FP32 model (model.safetensors): the train stage's model_dir
    tokens_dir: str = param(placement=True)  # {train,val}/{easy,medium,hard} token shards
    out_dir: str = param(placement=True)
    metrics_path: str = param(placement=True)  # headline figures (DVC metrics)
    detail_path: str = param(placement=True)  # every figure, per step
    checkpoint_dir: str = param(placement=True)  # step_<i>/step_<n>/: each step's distillation checkpoints
    seed: int = param(0, min=0)
    device: str = param("auto", choices=("auto", "cpu", "cuda"), placement=True)  # auto: cuda when available
    # distillation autocast: auto | fp32 | bf16 (evaluation is always fp32)
    precision: str = param("auto", choices=PRECISIONS)
    num_threads: int = param(0, min=0, placement=True)  # torch CPU threads per process; 0 = cores / processes
    # data-parallel processes torchrun starts (the student replicated by DDP)
    nproc_per_node: int = param(2, min=1, placement=True)
    # torchrun restarts the workers after a failure; they resume from the last checkpoint
    max_restarts: int = param(2, min=0, placement=True)
    progress_bar: bool = param(True, placement=True)
    # magnitude | activation | gradient (each combined with weight magnitude)
    method: str = param("activation", choices=METHODS)
    calibration_batches: int = param(8, min=1)  # training windows (batch_size x max_seq_len) used to score units
    # shares of the original MLP width / head groups removed after each step
    mlp_schedule: tuple[float, ...] = param((0.25, 0.5, 0.5), min=0.0, lt=1.0)
    head_schedule: tuple[float, ...] = param((0.0, 0.0, 0.25), min=0.0, lt=1.0)
    channel_multiple: int = param(16, min=1)  # kept MLP widths are multiples of this
    val_batches: int = param(0, min=0, placement=True)  # validation batches per tier (0 = every window)
    distill: DistillParams = field(default_factory=lambda: DistillParams(steps=60))
    checkpoint: CheckpointParams = param(default_factory=lambda: CheckpointParams(every=20), placement=True)

    def __post_init__(self) -> None:
        validate(self, STAGE)
        self.distill.check_processes(STAGE, self.nproc_per_node)
        if not self.mlp_schedule or len(self.mlp_schedule) != len(self.head_schedule):
            raise ValueError("params 'prune.mlp_schedule' and 'prune.head_schedule' need the same, non-zero length")
        for name in ("mlp_schedule", "head_schedule"):
            values = getattr(self, name)
            if any(not 0 <= v < 1 for v in values) or list(values) != sorted(values):
                raise ValueError(f"param 'prune.{name}' must be non-decreasing fractions in [0, 1), got {list(values)}")


def fingerprint(params: Params, teacher_file: Path) -> str:
    """The run's identity (stages.common.runtime.digest): the params but the placement-only ones, the
    teacher's and the token shards' contents, the code this stage imports."""
    manifest = json.dumps(read_manifest(params.tokens_dir), sort_keys=True).encode()
    return digest.fingerprint(params, [digest.file_digest(teacher_file).encode(), manifest], sys.modules[__name__])


def _broadcast_keep(keep: Keep) -> Keep:
    """Rank 0's choice of units on every rank (scores could differ in the last bits between processes)."""
    if dist.is_initialized():
        for index in (*keep.mlp, *keep.groups):
            dist.broadcast(index, src=0)
    return keep


def processes(params: Params) -> tuple[int, int]:
    """What `python -m stages.prune` launches torchrun with: processes and restart budget."""
    return params.nproc_per_node, params.max_restarts


def check_inputs(params: Params) -> None:
    """Inputs exist, outputs are this stage's to replace and every tier of the token shards fills a micro
    batch and a validation window (ConfigError otherwise): first thing in every worker, and before torchrun
    starts them (it restarts failed workers whatever the cause)."""
    check_owned_paths(STAGE, {"teacher_dir": params.teacher_dir, "tokens_dir": params.tokens_dir},
                      {"out_dir": params.out_dir})
    max_seq_len = read_config(Path(params.teacher_dir) / CHECKPOINT_NAME).max_seq_len
    check_tier_tokens(params.tokens_dir, params.distill.shard_needs(STAGE, params.nproc_per_node, max_seq_len))


@dataclass
class Context:
    """What every prune step reads: the params, the process group, the frozen teacher and the run's identity."""
    params: Params
    env: DistEnv
    teacher: Transformer
    precision: str
    run_id: str
    teacher_ppl: float = math.nan  # the teacher's validation perplexity on all tiers (rank 0)

    @property
    def seq_len(self) -> int:
        return self.params.distill.seq_len or self.teacher.config.max_seq_len

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return val_perplexity(model, self.params.tokens_dir, self.teacher.config.max_seq_len,
                              self.params.distill.batch_size, self.params.val_batches, self.env)


def run(params: Params) -> dict[str, Any] | None:
    """Prune on this process (one of torchrun's workers, or alone). Returns the metrics on rank 0."""
    check_inputs(params)
    start = time.perf_counter()
    with distributed(params.device, params.num_threads) as env:
        seed_everything(params.seed)
        teacher_file = Path(params.teacher_dir) / CHECKPOINT_NAME
        teacher = frozen_teacher(teacher_file, env.device)
        ctx = Context(params, env, teacher, resolve_precision(params.precision, env.device),
                      fingerprint(params, teacher_file))
        if env.is_main:
            drop_other_steps(Path(params.checkpoint_dir), len(params.mlp_schedule))
        metrics = teacher_metrics(ctx)
        ctx.teacher_ppl = metrics.get(f"teacher.{val_ppl('all')}", math.nan)
        calibration = even_sampler(params.tokens_dir, teacher.config.max_seq_len, params.distill.batch_size, 1,
                                   params.seed + 1)
        student = trainable(copy.deepcopy(teacher))
        with atomic_dir(params.out_dir, stage=STAGE) if env.is_main else contextlib.nullcontext() as out:
            for i, fractions in enumerate(zip(params.mlp_schedule, params.head_schedule), start=1):
                student, step = prune_step(ctx, student, calibration, i, *fractions)
                if env.is_main:
                    save_checkpoint(student, out / f"step_{i}" / CHECKPOINT_NAME)
                    metrics.update(step)
            if env.is_main:
                save_checkpoint(student, out / CHECKPOINT_NAME)
        if not env.is_main:
            return None
        metrics.update({"num_steps": len(params.mlp_schedule), "tiers": ",".join(TIERS),
                        "seconds": round(time.perf_counter() - start, 3)})
        write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
        return metrics


def drop_other_steps(root: Path, num_steps: int) -> None:
    """Remove checkpoint folders of steps beyond the schedule: they belong to an older configuration."""
    steps = {f"step_{i}" for i in range(1, num_steps + 1)}
    for stale in (d for d in (root.iterdir() if root.is_dir() else ()) if d.is_dir() and d.name not in steps):
        shutil.rmtree(stale)


def teacher_metrics(ctx: Context) -> dict[str, Any]:
    """The run's settings and the teacher's size and shape; its validation perplexity per tier on rank 0."""
    teacher, cfg = ctx.teacher, ctx.teacher.config
    metrics: dict[str, Any] = {"teacher.num_params": teacher.num_params(), "teacher.ffn_dim": cfg.hidden_dim,
                               "teacher.num_heads": cfg.num_heads, "method": ctx.params.method,
                               "precision": ctx.precision, "num_processes": ctx.env.world_size}
    if ctx.env.is_main:
        metrics.update({f"teacher.{val_ppl(tier)}": ppl for tier, ppl in ctx.evaluate(teacher).items()})
    return metrics


def prune_step(ctx: Context, student: nn.Module, calibration: TierSampler, i: int, mlp_frac: float,
               head_frac: float) -> tuple[nn.Module, dict[str, Any]]:
    """Step i: score the student's units, keep the top ones, recover by distillation. Returns the smaller
    student and, on rank 0, the step's figures (`step_<i>.*`)."""
    params, env, cfg = ctx.params, ctx.env, ctx.teacher.config
    t0 = time.perf_counter()
    windows = [torch.cat((b.inputs, b.targets[:, -1:]), dim=1).to(env.device)
               for b in (calibration.batch(j) for j in range(params.calibration_batches))]
    scores = importance(student, params.method, windows)
    num_mlp = units_to_keep(cfg.hidden_dim, mlp_frac, params.channel_multiple)
    num_groups = max(1, round(cfg.kv_heads * (1 - head_frac)))
    student = prune(student, _broadcast_keep(select(scores, num_mlp, num_groups))).to(env.device)
    before = ctx.evaluate(student) if env.is_main else {}
    sampler = even_sampler(params.tokens_dir, ctx.seq_len, params.distill.batch_size, params.distill.steps,
                           params.seed + 100 * i)
    history, resumed = finetune(student, ctx.teacher, sampler, params.distill, env, ctx.precision,
                                Path(params.checkpoint_dir) / f"step_{i}", f"{ctx.run_id}-step{i}", params.checkpoint,
                                student.flops_per_token(ctx.seq_len), desc=f"prune step {i}",
                                progress_bar=params.progress_bar)
    barrier()
    if not env.is_main:
        return student, {}
    after = ctx.evaluate(student)
    kl_first, kl_last = kl_span(history) or (0.0, 0.0)
    prefix = f"step_{i}."
    step = {
        prefix + "mlp_fraction_pruned": mlp_frac, prefix + "head_fraction_pruned": head_frac,
        prefix + "ffn_dim": student.config.hidden_dim, prefix + "num_heads": student.config.num_heads,
        prefix + "num_kv_heads": student.config.kv_heads, prefix + "num_params": student.num_params(),
        prefix + "param_ratio": round(student.num_params() / ctx.teacher.num_params(), 4),
        **{f"{prefix}val_ppl_pruned.{t}": v for t, v in before.items()},
        **{f"{prefix}{val_ppl(t)}": v for t, v in after.items()},
        prefix + "val_ppl_ratio": round(after["all"] / ctx.teacher_ppl, 4),
        prefix + "kl_first": kl_first, prefix + "kl_last": kl_last,
        prefix + "resumed_from_step": resumed if resumed is not None else -1,
        prefix + "seconds": round(time.perf_counter() - t0, 3),
    }
    log.info("prune step %d: ffn %d, heads %d, %.2fM params; val ppl %.2f -> %.2f (teacher %.2f)", i,
             student.config.hidden_dim, student.config.num_heads, student.num_params() / 1e6, before["all"],
             after["all"], ctx.teacher_ppl)
    return student, step


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: the final pruned model's parameters and validation perplexity per tier."""
    last = f"step_{metrics['num_steps']}" if metrics["num_steps"] else "teacher"
    return {"num_params": metrics[f"{last}.num_params"],
            **{val_ppl(tier): metrics[f"{last}.{val_ppl(tier)}"] for tier in TIERS}}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv, torchrun=processes, check=check_inputs)


if __name__ == "__main__":
    main()
