"""`qat` stage: INT8 quantization of the pruned model: a post-training (PTQ) baseline, then
quantization-aware training (QAT) distilled from the FP32 model.

1. wrap the FP32 model in `DeployLM` with the `scheme` (stages.common.compress.quant): int8 per-channel weights on
   every matmul (the output projection too), per-tensor activation quantizers on every matmul input,
   int8 embedding rows;
2. calibrate the activation observers on `calibration_batches` training windows, freeze them: that is
   the PTQ model;
3. QAT: from the PTQ model, fine-tune the weights through the fake quantizers (straight-through
   gradients; activation scales stay frozen, weight scales follow the weights) with distillation from
   the FP32 model, in the train stage's loop (`stages.common.distill.finetune`: the trainer with a
   distillation loss, data-parallel over torchrun's processes, checkpointed under `checkpoint_dir` so
   a killed run resumes);
4. validation perplexity per tier of FP32, PTQ and QAT (torch, fake-quantized: the same numbers the
   INT8 ONNX graph computes up to rounding; `export` measures the ONNX models themselves).

`python -m stages.qat` (the dvc.yaml command) launches `torchrun` with `nproc_per_node` workers, as
the train stage does (stages.common.runtime.cli), once `check_inputs` passed: the token shards hold a micro
batch and a validation window in every tier. QAT runs on CPU in fp32.

Outputs (rank 0; each model = a normal checkpoint + its frozen quantizer state):

    <out_dir>/qat/model.safetensors, quant.safetensors
    <out_dir>/ptq/model.safetensors, quant.safetensors
"""
from __future__ import annotations

import copy
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from stages.common.compress.deployable import DeployLM
from stages.common.compress.distill import (
    DistillOptim,
    DistillParams,
    even_sampler,
    finetune,
    frozen_teacher,
    kl_span,
    trainable,
    val_perplexity,
)
from stages.common.compress.quant import QUANT_NAME, QuantScheme, freeze, save_quant_state, set_mode
from stages.common.lm.model import CHECKPOINT_NAME, read_config, save_checkpoint
from stages.common.lm.token_shards import TIERS, check_tier_tokens, read_manifest
from stages.common.runtime import digest
from stages.common.runtime.atomic import atomic_dir
from stages.common.runtime.cli import stage_main
from stages.common.runtime.device import seed_everything
from stages.common.runtime.metrics import val_ppl, write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import param, validate
from stages.common.training.checkpoint import CheckpointParams
from stages.common.training.parallel import DistEnv, barrier, distributed

log = logging.getLogger("refinery.qat")
STAGE = "qat"


def _qat_distill() -> DistillParams:
    # The distillation loss (KL + LM) at a low rate: weights move by fractions of a quantization step.
    # (Pure KL, kd_weight 1 / lm_weight 0, measured on the demo: no gain over PTQ, which is already within
    # 0.2% of FP32 there; the LM term also keeps training the model, see docs/compress.md).
    return DistillParams(steps=60, optim=DistillOptim(lr=1e-4, warmup_steps=5))


@dataclass(frozen=True)
class Params:
    # placement=True: does not change the QAT weights, so checkpoints written under other values resume
    # (the inputs count by content: the model's digest, the token shards' manifest)
    model_dir: str = param(placement=True)  # the FP32 model to quantize (model.safetensors); also the teacher
    tokens_dir: str = param(placement=True)
    out_dir: str = param(placement=True)
    metrics_path: str = param(placement=True)  # headline figures (DVC metrics)
    detail_path: str = param(placement=True)  # every figure: FP32, PTQ and QAT perplexity, KL
    checkpoint_dir: str = param(placement=True)  # step_<n>/: the QAT fine-tune's checkpoints
    seed: int = param(0, min=0)
    # torch CPU threads per process; 0 = cores / processes (QAT runs on CPU in fp32)
    num_threads: int = param(0, min=0, placement=True)
    # data-parallel processes torchrun starts (the student replicated by DDP)
    nproc_per_node: int = param(2, min=1, placement=True)
    # torchrun restarts the workers after a failure; they resume from the last checkpoint
    max_restarts: int = param(2, min=0, placement=True)
    progress_bar: bool = param(True, placement=True)
    # training windows (distill.batch_size x max_seq_len) seen by the observers
    calibration_batches: int = param(8, min=1)
    val_batches: int = param(0, min=0, placement=True)  # validation batches per tier (0 = every window)
    scheme: QuantScheme = field(default_factory=QuantScheme)
    distill: DistillParams = field(default_factory=_qat_distill)
    checkpoint: CheckpointParams = param(default_factory=lambda: CheckpointParams(every=20), placement=True)

    def __post_init__(self) -> None:
        validate(self, STAGE)
        self.distill.check_processes(STAGE, self.nproc_per_node)


def calibrate(model: DeployLM, batches: list[torch.Tensor]) -> None:
    set_mode(model, "observe")
    with torch.inference_mode():
        for inputs in batches:
            model(inputs)
    freeze(model)


def fingerprint(params: Params, model_file: Path) -> str:
    """The run's identity (stages.common.runtime.digest): the params but the placement-only ones, the
    FP32 model's and the token shards' contents, the code this stage imports."""
    manifest = json.dumps(read_manifest(params.tokens_dir), sort_keys=True).encode()
    return digest.fingerprint(params, [digest.file_digest(model_file).encode(), manifest], sys.modules[__name__])


def processes(params: Params) -> tuple[int, int]:
    """What `python -m stages.qat` launches torchrun with: processes and restart budget."""
    return params.nproc_per_node, params.max_restarts


def check_inputs(params: Params) -> None:
    """Inputs exist, outputs are this stage's to replace and every tier of the token shards fills a micro
    batch and a validation window (ConfigError otherwise): first thing in every worker, and before torchrun
    starts them (it restarts failed workers whatever the cause)."""
    check_owned_paths(STAGE, {"model_dir": params.model_dir, "tokens_dir": params.tokens_dir},
                      {"out_dir": params.out_dir})
    max_seq_len = read_config(Path(params.model_dir) / CHECKPOINT_NAME).max_seq_len
    check_tier_tokens(params.tokens_dir, params.distill.shard_needs(STAGE, params.nproc_per_node, max_seq_len))


def run(params: Params) -> dict[str, Any] | None:
    """Quantize on this process (one of torchrun's workers, or alone). Returns the metrics on rank 0."""
    check_inputs(params)
    start = time.perf_counter()
    with distributed("cpu", params.num_threads) as env:
        seed_everything(params.seed)
        model_file = Path(params.model_dir) / CHECKPOINT_NAME
        fp32 = frozen_teacher(model_file)
        metrics: dict[str, Any] = {"num_params": fp32.num_params(), "num_processes": env.world_size}
        evaluate = evaluator(params, fp32.config.max_seq_len, env)
        if env.is_main:
            metrics.update({f"fp32.{val_ppl(k)}": v for k, v in evaluate(fp32).items()})

        t0 = time.perf_counter()
        ptq = post_training(fp32, params)  # every rank: the same batches give the same ranges
        metrics["ptq.seconds"] = round(time.perf_counter() - t0, 3)
        if env.is_main:
            metrics.update({f"ptq.{val_ppl(k)}": v for k, v in evaluate(ptq).items()})

        t0 = time.perf_counter()
        qat, history, resumed = quantization_aware(ptq, fp32, params, env, fingerprint(params, model_file))
        barrier()
        if not env.is_main:
            return None
        metrics.update({"qat.seconds": round(time.perf_counter() - t0, 3),
                        "qat.resumed_from_step": resumed if resumed is not None else -1,
                        **{f"qat.{val_ppl(k)}": v for k, v in evaluate(qat).items()}})
        if span := kl_span(history):
            metrics["qat.kl_first"], metrics["qat.kl_last"] = span
        for name in ("ptq", "qat"):
            ratio = metrics[f"{name}.{val_ppl('all')}"] / metrics[f"fp32.{val_ppl('all')}"]
            metrics[f"{name}.val_ppl_ratio"] = round(ratio, 4)
        save_models(params, {"ptq": ptq, "qat": qat})
        metrics["seconds"] = round(time.perf_counter() - start, 3)
        write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
        log.info("qat: val ppl fp32 %.3f, ptq %.3f, qat %.3f",
                 *(metrics[f"{name}.{val_ppl('all')}"] for name in ("fp32", "ptq", "qat")))
        return metrics


def evaluator(params: Params, max_seq_len: int, env: DistEnv) -> Callable[[torch.nn.Module], dict[str, float]]:
    """Validation perplexity per tier of a model, on rank 0 with every local rank's cores."""
    return lambda model: val_perplexity(model, params.tokens_dir, max_seq_len, params.distill.batch_size,
                                        params.val_batches, env)


def post_training(fp32: torch.nn.Module, params: Params) -> DeployLM:
    """The PTQ model: `fp32` wrapped in the scheme's quantizers, observers calibrated on training windows
    and frozen (the same batches on every rank give the same ranges; DDP also syncs rank 0's)."""
    calibration = even_sampler(params.tokens_dir, fp32.config.max_seq_len, params.distill.batch_size, 1,
                               params.seed + 1)
    ptq = DeployLM(copy.deepcopy(fp32), params.scheme)
    calibrate(ptq, [calibration.batch(i).inputs for i in range(params.calibration_batches)])
    return ptq


def quantization_aware(ptq: DeployLM, fp32: torch.nn.Module, params: Params, env: DistEnv,
                       run_id: str) -> tuple[DeployLM, list[dict[str, Any]], int | None]:
    """QAT: a copy of the PTQ model fine-tuned through its fake quantizers, distilled from `fp32`. Returns
    the model, the trainer's rows and the step it resumed from (collective under torchrun)."""
    distill_p = params.distill
    seq_len = distill_p.seq_len or fp32.config.max_seq_len
    qat = trainable(copy.deepcopy(ptq))
    train = even_sampler(params.tokens_dir, seq_len, distill_p.batch_size, distill_p.steps, params.seed + 2)
    # fp32: fake quantization is defined on fp32 tensors, and bf16 would blur the rounding QAT learns
    history, resumed = finetune(qat, fp32, train, distill_p, env, "fp32", Path(params.checkpoint_dir), run_id,
                                params.checkpoint, fp32.flops_per_token(seq_len), desc="qat",
                                progress_bar=params.progress_bar)
    return qat, history, resumed


def save_models(params: Params, models: dict[str, DeployLM]) -> None:
    """Each model as a normal checkpoint plus its frozen quantizer state, under `out_dir/<name>/`."""
    with atomic_dir(params.out_dir, stage=STAGE) as out:
        for name, model in models.items():
            save_checkpoint(model.model, out / name / CHECKPOINT_NAME)
            save_quant_state(model, params.scheme, out / name / QUANT_NAME)


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: the QAT model's validation perplexity per tier (INT8 fake-quant), and
    its perplexity relative to the FP32 model's."""
    return {**{val_ppl(tier): metrics[f"qat.{val_ppl(tier)}"] for tier in TIERS},
            "val_ppl_vs_fp32": metrics["qat.val_ppl_ratio"]}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv, torchrun=processes, check=check_inputs)


if __name__ == "__main__":
    main()
