"""Benchmark the train stage against its CPU target: the framework's overhead.

    python -m bench.train                         # params.yaml's model on the demo shards (synthetic if absent)
    python -m bench.train --steps 40 --rounds 1   # shorter

1. plain loop: a minimal single-process training loop (model, fused AdamW, autocast, backward,
   clip_grad_norm_, step, LR schedule) on the same model, batch and precision, fed with the same
   sampler's batches, in its own process;
2. stage, one process: `python -m stages.train` under torchrun with nproc 1 (the real command:
   launcher, process group, sampler, global-norm clipping, guards, metrics, validation and checkpoints
   excluded from the per-step timing as they are in the loop);
3. stage, DDP with 2 processes (1 thread each) and, for reference, FSDP2 with 2.

Tokens/s is the median over steps of per-step tokens/s after the first 10% of steps, on both sides. The
plain loop and the one-process stage run alternately for `--rounds` rounds with `--threads` torch
threads each (default 1: the comparison then holds on a shared machine, where 2 threads per process
slow down many times over); the best round of each side is compared. Target: stage (1 process) >= 0.95 x
plain loop. Results: bench/results/train.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from bench import _provenance
from stages.common.lm.model import Transformer, preset
from stages.common.lm.token_shards import TIERS, TierSampler, TokenShardWriter, open_tiers
from stages.common.runtime.device import autocast, resolve_precision, seed_everything
from stages.common.runtime.params import from_dict, read_params
from stages.common.training.optim import configure_optimizer, make_scheduler
from stages.train import Params

ROOT = Path(__file__).resolve().parents[1]
OVERHEAD_TARGET = 0.95
# The stage and its training loop, the model and the shard reader; the shards' content only feeds the batches
MEASURES = ("stages/train.py", "stages/common/lm", "stages/common/training", "stages/common/runtime", "params.yaml")


def synthetic_tokens(root: Path, vocab_size: int) -> Path:
    rng = np.random.default_rng(0)
    for split, docs in (("train", 3000), ("val", 30)):
        for tier in TIERS:
            writer = TokenShardWriter(root / split / tier, vocab_size, 0)
            for _ in range(docs):
                writer.add(rng.integers(1, vocab_size, size=500))
            writer.close()
    (root / "manifest.json").write_text(json.dumps({"vocab_size": vocab_size, "eos_id": 0}))
    return root


def steady_median(rates: list[float]) -> float:
    return statistics.median(rates[len(rates) // 10:])


def plain_loop(params: Params, steps: int) -> dict:
    """The baseline, run in this (fresh) process: nothing but the training step."""
    torch.set_num_threads(params.num_threads or os.cpu_count() or 1)
    vocab_size = json.loads((Path(params.tokens_dir) / "manifest.json").read_text())["vocab_size"]
    cfg = preset(params.preset, vocab_size, **({"max_seq_len": params.seq_len} if params.seq_len else {}))
    seed_everything(params.seed)
    device = torch.device("cpu")
    precision = resolve_precision("auto", device) if params.precision == "auto" else params.precision
    model = Transformer(cfg)
    optimizer = configure_optimizer(model, params.optim, device)
    scheduler = make_scheduler(optimizer, params.optim, steps)
    batch_size = params.micro_batch_size * params.gradient_accumulation_steps
    sampler = TierSampler(open_tiers(params.tokens_dir, "train"), params.tier_mix, cfg.max_seq_len, batch_size,
                          steps, params.seed)
    rates = []
    for step in range(steps):
        t0 = time.perf_counter()
        batch = sampler.batch(step)
        for x, y in zip(batch.inputs.chunk(params.gradient_accumulation_steps),
                        batch.targets.chunk(params.gradient_accumulation_steps)):
            with autocast(precision, device):
                loss = model(x, y) / params.gradient_accumulation_steps
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), params.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        loss.item()
        rates.append(batch_size * cfg.max_seq_len / (time.perf_counter() - t0))
    return {"tokens_per_s": steady_median(rates), "threads": torch.get_num_threads(), "precision": precision}


def run_stage(base: dict, tmp: Path, name: str, **overrides) -> dict:
    section = {**base, **overrides, "parallel": {**base["parallel"], **overrides.get("parallel", {})}}
    out = tmp / name
    section.update(model_dir=str(out / "model"), checkpoint_dir=str(out / "ckpt"), metrics_path=str(out / "train.json"),
                   detail_path=str(out / "train_detail.json"), steps_path=str(out / "steps.csv"), val_path=str(out / "val.csv"), progress_bar=False)
    out.mkdir(parents=True)
    (out / "params.yaml").write_text(yaml.safe_dump({"train": section}))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "stages.train", "--params", str(out / "params.yaml")], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # every figure (the detail file: precision, layout, ...) under the headline ones
    metrics = {**json.loads((out / "train_detail.json").read_text()), **json.loads((out / "train.json").read_text())}
    metrics["wall_s"] = time.perf_counter() - t0
    return metrics


def markdown(result: dict[str, Any]) -> list[str]:
    plain, ratio, rounds = result["plain_loop_tokens_per_s"], result["stage_over_plain"], result["rounds"]
    return [
        "# train stage benchmark", "", *_provenance.header(result),
        f"torch {result['machine']['torch']}, model `{result['model']}`, precision `{result['precision']}` "
        f"({result['stage_1proc_precision']}), global batch {result['global_batch']} x seq_len, median per-step "
        f"tokens/s after the first 10% of {result['steps']} steps; best of {rounds} alternating rounds for the first "
        f"two rows (plain: {', '.join(f'{r:,.0f}' for r in result['plain_loop_rounds_tokens_per_s'])}; "
        f"stage: {', '.join(f'{r:,.0f}' for r in result['stage_1proc_rounds_tokens_per_s'])}).", "",
        "| run | tokens/s | vs plain loop | final loss |", "| --- | ---: | ---: | ---: |",
        f"| plain single-process loop ({result['plain_loop_threads']} threads) | {plain:,.0f} | 1.00 | |",
        f"| stage, 1 process x {result['threads']} thread(s) (torchrun) | {result['stage_1proc_tokens_per_s']:,.0f} | "
        f"{ratio:.3f} | {result['stage_1proc_final_loss']:.4f} |",
        f"| stage, DDP 2 processes x 1 thread | {result['stage_ddp2_tokens_per_s']:,.0f} | "
        f"{result['stage_ddp2_tokens_per_s'] / plain:.3f} | {result['stage_ddp2_final_loss']:.4f} |",
        f"| stage, FSDP2 2 processes x 1 thread | {result['stage_fsdp2_tokens_per_s']:,.0f} | "
        f"{result['stage_fsdp2_tokens_per_s'] / plain:.3f} | {result['stage_fsdp2_final_loss']:.4f} |", "",
        f"Target: stage (1 process) >= {result['target_stage_over_plain']} x plain loop: "
        f"**{'PASS' if result['pass'] else 'FAIL'}** ({ratio:.3f}).", "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the plain loop and the 1-process stage")
    parser.add_argument("--plain-only", metavar="PARAMS_JSON", help=argparse.SUPPRESS)  # the baseline's subprocess
    args = parser.parse_args()
    if args.plain_only:
        section = json.loads(Path(args.plain_only).read_text())
        print(json.dumps(plain_loop(from_dict(Params, section, prefix="train."), args.steps)))
        return

    stamp = _provenance.stamp("train", MEASURES)
    base = read_params(ROOT / "params.yaml")["train"]
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        tokens = ROOT / base["tokens_dir"]
        if not (tokens / "manifest.json").is_file():
            vocab = read_params(ROOT / "params.yaml")["tokenizer"]["vocab_size"]
            tokens = synthetic_tokens(tmp / "tokens", vocab)
        # Same batch on both sides: one micro-batch of 16 sequences per step, one process.
        common = {"tokens_dir": str(tokens), "max_steps": args.steps, "micro_batch_size": 16,
                  "gradient_accumulation_steps": 1, "checkpoint": {"every": 0, "keep": 1},
                  "eval": {"every": 0, "windows": 8}, "parallel": {"data_parallel_size": 1}}
        base = {**base, **common, "num_threads": args.threads,
                "parallel": {**base["parallel"], **common["parallel"]}}
        (tmp / "plain.json").write_text(json.dumps(base))
        plain_rounds, one_rounds = [], []
        for i in range(args.rounds):
            plain_rounds.append(json.loads(subprocess.run(
                [sys.executable, "-m", "bench.train", "--steps", str(args.steps), "--plain-only",
                 str(tmp / "plain.json")], cwd=ROOT, check=True, capture_output=True, text=True).stdout))
            one_rounds.append(run_stage(base, tmp, f"one_process_{i}"))
        plain = max(plain_rounds, key=lambda r: r["tokens_per_s"])
        one = max(one_rounds, key=lambda r: r["tokens_per_s"])
        ddp = run_stage(base, tmp, "ddp2", micro_batch_size=8, num_threads=1, parallel={"data_parallel_size": 2})
        fsdp = run_stage(base, tmp, "fsdp2", micro_batch_size=8, num_threads=1,
                         parallel={"data_parallel_size": 2, "data_parallel_mode": "fsdp"})

    ratio = one["tokens_per_s"] / plain["tokens_per_s"]
    result = {
        **stamp, "machine": {**stamp["machine"], "torch": torch.__version__},
        "model": base["preset"], "precision": base["precision"], "steps": args.steps, "global_batch": 16,
        "threads": args.threads, "rounds": args.rounds,
        "plain_loop_rounds_tokens_per_s": [r["tokens_per_s"] for r in plain_rounds],
        "stage_1proc_rounds_tokens_per_s": [r["tokens_per_s"] for r in one_rounds],
        "plain_loop_tokens_per_s": plain["tokens_per_s"], "plain_loop_threads": plain["threads"],
        "stage_1proc_tokens_per_s": one["tokens_per_s"], "stage_1proc_precision": one["precision"],
        "stage_over_plain": ratio,
        "stage_ddp2_tokens_per_s": ddp["tokens_per_s"], "stage_fsdp2_tokens_per_s": fsdp["tokens_per_s"],
        "stage_1proc_final_loss": one["final_loss"], "stage_ddp2_final_loss": ddp["final_loss"],
        "stage_fsdp2_final_loss": fsdp["final_loss"], "target_stage_over_plain": OVERHEAD_TARGET,
        "pass": ratio >= OVERHEAD_TARGET,
    }
    _provenance.write(result, markdown)
    print("\n".join(markdown(result)))


if __name__ == "__main__":
    main()
