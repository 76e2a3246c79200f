"""`train` stage: train the decoder-only LM on the perplexity stage's tiered token shards, under torchrun.

`python -m stages.train` (the dvc.yaml command) launches `torchrun --standalone` with the process count
from params and `--max-restarts` for fault tolerance; each worker process (torchrun sets LOCAL_RANK)
runs `run()`. Before the launch, `check_inputs` finds what a restart cannot fix (the params, missing inputs,
token shards too small for a micro batch or a validation window) and stops with one line: torchrun
restarts workers whatever made them fail, so these must never reach a worker. For several nodes, start
`torchrun --nnodes ... -m stages.train` yourself on each: a worker does not care who launched it.

Per worker: join the process group (gloo on CPU, NCCL on GPU), build the model from the preset, apply
the parallel layout (stages.common.training.parallel), resume from the newest valid checkpoint of the same run
if there is one, train (stages.common.training.trainer), checkpoint every `checkpoint.every` steps and at the
end. Rank 0 then writes

    <model_dir>/model.safetensors     the consolidated model (stages.common.lm.model format) for prune/qat/export
    <metrics_path>                    final figures (flat JSON)
    <steps_path>, <val_path>          per-step curves and per-tier validation perplexity (`dvc plots`)

Checkpoints live in `checkpoint_dir` (scratch, not a DVC output: DVC leaves it alone, so a rerun after a
crash resumes); they carry a fingerprint of every param that shapes the result, and checkpoints of another
configuration are cleared rather than resumed.
"""
from __future__ import annotations

import json
import logging
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from stages.common.lm.model import CHECKPOINT_NAME, PRESETS, ModelConfig, Transformer, preset
from stages.common.lm.token_shards import (
    TIERS,
    TierMix,
    TierNeed,
    TierSampler,
    check_tier_tokens,
    open_tiers,
    read_manifest,
    window_tokens,
)
from stages.common.runtime import digest
from stages.common.runtime.atomic import atomic_dir, write_csv
from stages.common.runtime.cli import stage_main
from stages.common.runtime.device import resolve_precision, seed_everything
from stages.common.runtime.metrics import val_perplexity, val_ppl, write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import param, validate
from stages.common.training import checkpoint
from stages.common.training.checkpoint import CheckpointParams
from stages.common.training.optim import OptimParams, configure_optimizer
from stages.common.training.parallel import (
    DistEnv,
    ParallelParams,
    build_mesh,
    distributed,
    parallelize,
    pipeline_loss,
)
from stages.common.training.trainer import DynamicClip, Freeze, LossScaler, TrainConfig, Trainer

log = logging.getLogger("refinery.train")
STAGE = "train"
PARALLEL_PREFIX = f"{STAGE}.parallel."  # where params.yaml holds the layout: its errors name this key
MAX_EPOCHS_NOTED = 20  # `refinery check` notes a max_steps that passes over the training tokens more often
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass(frozen=True)
class EvalParams:
    every: int = param(100, min=0)  # steps between validations (also at step 0 and at the end); 0 = start and end only
    windows: int = param(64, min=0)  # validation windows per tier (of seq_len tokens); 0 = no validation


@dataclass(frozen=True)
class Params:
    # placement=True: does not change the trained weights, so a checkpoint written under other values resumes
    tokens_dir: str  # {train,val}/{easy,medium,hard} shards + manifest.json
    model_dir: str = param(placement=True)
    checkpoint_dir: str = param(placement=True)
    metrics_path: str = param(placement=True)  # headline figures (DVC metrics)
    detail_path: str = param(placement=True)  # every figure
    steps_path: str = param(placement=True)
    val_path: str = param(placement=True)
    seed: int = param(0, min=0)
    preset: str = param("cpu_small", choices=PRESETS)
    seq_len: int = param(0, min=0)  # 0 = the preset's max_seq_len
    max_steps: int = param(400, min=1)
    micro_batch_size: int = param(8, min=1)  # sequences per forward pass per data-parallel rank
    # micro-batches per optimizer step (pipeline micro-batches under PP)
    gradient_accumulation_steps: int = param(1, min=1)
    precision: str = param("auto", choices=PRECISIONS)
    device: str = param("auto", choices=("auto", "cpu", "cuda"), placement=True)
    num_threads: int = param(0, min=0, placement=True)
    nproc_per_node: int = param(0, min=0, placement=True)
    max_restarts: int = param(2, min=0, placement=True)
    progress_bar: bool = param(True, placement=True)
    log_every: int = param(10, min=1, placement=True)
    max_bad_steps: int = param(5, min=1, placement=True)
    peak_flops: float = param(0.0, min=0.0, placement=True)
    parallel: ParallelParams = field(default_factory=lambda: ParallelParams(data_parallel_size=2))
    optim: OptimParams = field(default_factory=lambda: OptimParams(lr=1e-3, warmup_steps=40))
    dynamic_clip: DynamicClip = field(default_factory=DynamicClip)
    freeze: Freeze = field(default_factory=Freeze)
    tier_mix: TierMix = field(default_factory=TierMix)
    checkpoint: CheckpointParams = param(default_factory=CheckpointParams, placement=True)
    eval: EvalParams = param(default_factory=EvalParams, placement=True)

    def __post_init__(self) -> None:
        validate(self, STAGE)
        self.parallel.check_layout(self.nproc_per_node, PRESETS[self.preset], self.gradient_accumulation_steps,
                                   PARALLEL_PREFIX)

    @property
    def num_processes(self) -> int:
        if not (self.nproc_per_node or self.parallel.world_size):
            raise ValueError("param 'train.parallel.data_parallel_size: 0' needs 'train.nproc_per_node' "
                             "(or launch torchrun yourself)")
        return self.nproc_per_node or self.parallel.world_size


def processes(params: Params) -> tuple[int, int]:
    """What `python -m stages.train` launches torchrun with: processes and restart budget."""
    return params.num_processes, params.max_restarts


def check_inputs(params: Params) -> None:
    """Inputs exist, outputs are this stage's to replace and every tier of the token shards fills what
    training and validation read (ConfigError otherwise): first thing in every worker, and before torchrun
    starts them."""
    check_owned_paths(STAGE, {"tokens_dir": params.tokens_dir}, {"model_dir": params.model_dir})
    check_tier_tokens(params.tokens_dir, shard_needs(params))


def shard_needs(params: Params) -> list[TierNeed]:
    """Per tier: one micro batch of distinct training windows and (with validation) one validation window,
    or one per pipeline micro-batch under pipeline parallelism (the pipeline splits a batch into exactly that
    many). With fewer validation tokens a worker would evaluate an empty batch; with fewer training tokens a
    tier's batches would repeat the same few windows."""
    seq_len = params.seq_len or PRESETS[params.preset].max_seq_len
    window = f"seq_len {seq_len}" + ("" if params.seq_len else f" (preset {params.preset})")
    needs = [TierNeed("train", window_tokens(seq_len, params.micro_batch_size),
                      f"one micro batch of train.micro_batch_size {params.micro_batch_size} windows of {window}",
                      "give perplexity a larger corpus, or lower 'train.micro_batch_size' or 'train.seq_len'")]
    if params.eval.windows:
        windows = params.gradient_accumulation_steps if params.parallel.pipeline_parallel_size > 1 else 1
        needs.append(TierNeed("val", window_tokens(seq_len, windows),
                              f"validation: {windows} window(s) of {window}" if windows > 1
                              else f"validation: one window of {window}",
                              "raise 'perplexity.val_fraction' and rerun perplexity, lower 'train.seq_len', "
                              "or set 'train.eval.windows: 0'"))
    return needs


def check_data(params: Params, context: dict[str, Any]) -> list[tuple[str, str]]:
    """`refinery check`: what training needs of each tier against the tokens perplexity's check projects
    (generously: an error here is an error of the real run), and how many times `max_steps` would pass
    over the training tokens."""
    projection = context.get("perplexity") or {}
    projected = projection.get("tokens_per_tier")
    if not projected:
        return []
    findings: list[tuple[str, str]] = []
    for need in shard_needs(params) if not projection.get("short") else []:  # else perplexity's error says it
        if projected[need.split] < need.min_tokens:
            findings.append(("error", f"train: about {projected[need.split]:,.0f} tokens per {need.split} tier, fewer "
                                      f"than {need.why} ({need.min_tokens}): {need.fix}"))
    seq_len = params.seq_len or PRESETS[params.preset].max_seq_len
    per_step = params.micro_batch_size * seq_len * params.gradient_accumulation_steps * max(
        1, params.parallel.data_parallel_size)
    epochs = params.max_steps * per_step / max(1.0, len(TIERS) * projected["train"])
    if epochs > MAX_EPOCHS_NOTED:
        findings.append(("note", f"train.max_steps {params.max_steps} x {per_step:,} tokens a step passes over "
                                 f"about {len(TIERS) * projected['train']:,.0f} training tokens {epochs:.0f} times: "
                                 "the model will learn them by heart; lower train.max_steps or add documents"))
    return findings


def fingerprint(params: Params, manifest: dict[str, Any]) -> str:
    """The run's identity (stages.common.runtime.digest): the params but the placement-only ones, the token
    shards' manifest and the code this stage imports."""
    return digest.fingerprint(params, [json.dumps(manifest, sort_keys=True).encode()], sys.modules[__name__])


# ---- one worker --------------------------------------------------------------------------------------
def run(params: Params) -> dict[str, Any] | None:
    """Train on this process (one of torchrun's workers, or alone). Returns the metrics on rank 0."""
    check_inputs(params)
    started = time.perf_counter()
    with distributed(params.device, params.num_threads) as env:
        precision = resolve_precision("auto", env.device) if params.precision == "auto" else params.precision
        manifest = read_manifest(params.tokens_dir)
        seed_everything(params.seed)  # the same initial weights on every rank, before any sharding
        setup = build(params, env, precision, manifest["vocab_size"])
        trainer = setup.trainer
        root = Path(params.checkpoint_dir)
        resumed_from = trainer.resume(root, fingerprint(params, manifest), params.checkpoint.keep, env.is_main)
        if env.is_main:
            log.info("training %s (%.2fM parameters) for %d steps: %s, global batch %d x %d tokens, %s",
                     params.preset, setup.num_params / 1e6, params.max_steps, describe(setup.parallel, env),
                     setup.global_batch, setup.config.max_seq_len, precision)
        trainer.fit(open_tiers(params.tokens_dir, "val"), params.eval.every, params.checkpoint.every,
                    trainer.save_checkpoint, params.log_every, is_main=env.is_main, progress_bar=params.progress_bar)
        if not env.is_main:
            return None
        # the model from the final checkpoint, which fit() saves at the end
        with atomic_dir(params.model_dir, stage=STAGE) as out:
            checkpoint.consolidate(root / f"step_{trainer.step:08d}", setup.config, out / CHECKPOINT_NAME)
        metrics = summarize(trainer, params, setup.parallel, precision, env.world_size, setup.num_params,
                            resumed_from, time.perf_counter() - started)
        write_outputs(trainer, params, metrics)
        return metrics


@dataclass
class Setup:
    """One worker's share of the run: the trainer over its part of the model, and what the logs report."""
    trainer: Trainer
    config: ModelConfig
    parallel: ParallelParams  # resolved for the world size
    global_batch: int  # sequences per optimizer step, over every data-parallel rank
    num_params: int  # of the whole model, before sharding


def build(params: Params, env: DistEnv, precision: str, vocab_size: int) -> Setup:
    """The model (initialized from the seed), split over the device mesh; its optimizer; the tier sampler
    of the global batch; the trainer that runs them."""
    overrides = {"max_seq_len": params.seq_len} if params.seq_len else {}
    cfg = preset(params.preset, vocab_size, **overrides)
    model = Transformer(cfg).to(env.device)
    flops_per_token, num_params = model.flops_per_token(cfg.max_seq_len), model.num_params()
    scaler = LossScaler(precision == "fp16")
    parallel = params.parallel.resolve(env.world_size, PARALLEL_PREFIX)
    parts = parallelize(model, build_mesh(env, parallel), parallel, env.device, params.gradient_accumulation_steps,
                        lambda logits, targets: pipeline_loss(logits, targets) * scaler.scale)
    optimizer = configure_optimizer(parts.module, params.optim, env.device)
    train_config = TrainConfig(
        max_steps=params.max_steps, micro_batch_size=params.micro_batch_size,
        gradient_accumulation_steps=params.gradient_accumulation_steps, seq_len=cfg.max_seq_len,
        precision=precision, optim=params.optim, dynamic_clip=params.dynamic_clip, freeze=params.freeze,
        max_bad_steps=params.max_bad_steps, eval_windows=params.eval.windows, peak_flops=params.peak_flops)
    global_batch = parallel.data_parallel_size * params.micro_batch_size * params.gradient_accumulation_steps
    sampler = TierSampler(open_tiers(params.tokens_dir, "train"), params.tier_mix, cfg.max_seq_len, global_batch,
                          params.max_steps, params.seed)
    trainer = Trainer(parts, optimizer, sampler, train_config, env.device, flops_per_token, scaler)
    return Setup(trainer, cfg, parallel, global_batch, num_params)


def describe(parallel: ParallelParams, env: DistEnv) -> str:
    return (f"{env.world_size} process(es) as pp={parallel.pipeline_parallel_size} "
            f"dp={parallel.data_parallel_size} ({parallel.data_parallel_mode}) tp={parallel.tensor_parallel_size}")


# ---- outputs -----------------------------------------------------------------------------------------
STEP_COLUMNS = ["step", "loss", "lr", "grad_norm", "clip_threshold", "clipped", "skipped", "tokens_per_s",
                "memory_mb", "loss_scale", "ratio_easy", "ratio_medium", "ratio_hard"]


def summarize(trainer: Trainer, params: Params, parallel: ParallelParams, precision: str, world_size: int,
              num_params: int, resumed_from: int | None, seconds: float) -> dict[str, Any]:
    rows = trainer.history
    # Steady state: leave out the first 10% of steps (allocator warm-up, compile).
    steady = [r["tokens_per_s"] for r in rows[len(rows) // 10:]] or [math.nan]
    last = rows[-10:]
    metrics: dict[str, Any] = {
        "steps": trainer.step, "tokens_seen": trainer.tokens_seen, "num_params": num_params,
        "num_processes": world_size, "precision": precision, "data_parallel_size": parallel.data_parallel_size,
        "tensor_parallel_size": parallel.tensor_parallel_size,
        "pipeline_parallel_size": parallel.pipeline_parallel_size,
        "data_parallel_mode": parallel.data_parallel_mode,
        "final_loss": statistics.fmean(r["loss"] for r in last if math.isfinite(r["loss"])) if last else math.nan,
        "tokens_per_s": statistics.median(steady), "peak_memory_mb": max((r["memory_mb"] for r in rows), default=0.0),
        "resumed_from_step": resumed_from if resumed_from is not None else -1, "seconds": round(seconds, 2),
        **{k: v for k, v in vars(trainer.counters).items() if k != "consecutive_bad"},
    }
    if rows and "mfu" in rows[-1]:
        metrics["mfu"] = statistics.median(r["mfu"] for r in rows[len(rows) // 10:])
    if trainer.val_history:
        first, final = trainer.val_history[0], trainer.val_history[-1]
        for tier in (*TIERS, "all"):
            metrics[val_perplexity(tier, start=True)] = first[f"perplexity_{tier}"]
            metrics[val_perplexity(tier)] = final[f"perplexity_{tier}"]
    return metrics


def write_outputs(trainer: Trainer, params: Params, metrics: dict[str, Any]) -> None:
    write_csv(params.steps_path, STEP_COLUMNS, [[r.get(c) for c in STEP_COLUMNS] for r in trainer.history])
    val_columns = ["step"] + [f"{kind}_{tier}" for kind in ("perplexity", "loss") for tier in (*TIERS, "all")]
    write_csv(params.val_path, val_columns, [[r[c] for c in val_columns] for r in trainer.val_history])
    write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
    log.info("train: %d steps, final loss %.4f, %.0f tokens/s, validation perplexity %s", metrics["steps"],
             metrics["final_loss"], metrics["tokens_per_s"],
             " ".join(f"{t} {metrics.get(val_perplexity(t, start=True), math.nan):.1f}->"
                      f"{metrics.get(val_perplexity(t), math.nan):.1f}" for t in TIERS))


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: validation perplexity per tier and over the whole split (none with
    `eval.windows: 0`), final loss, tokens/s."""
    return {**{val_ppl(tier): metrics[val_perplexity(tier)] for tier in (*TIERS, "all")
               if val_perplexity(tier) in metrics},
            "loss": metrics["final_loss"], "tokens_per_s": metrics["tokens_per_s"]}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv, torchrun=processes, check=check_inputs)


if __name__ == "__main__":
    main()
