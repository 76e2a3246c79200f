"""The train stage in one process: outputs, validation, resume, damaged checkpoints, guards, clipping,
loss scaling, freezing. The multi-process layouts run under torchrun in tests/integration/test_train_torchrun.py."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from stages import train
from stages.common.lm.model import CHECKPOINT_NAME, Transformer, load_checkpoint, preset, save_checkpoint
from stages.common.lm.token_shards import TIERS, TierMix, TierSampler, open_tiers
from stages.common.runtime import digest
from stages.common.runtime.params import ConfigError, from_dict, read_params
from stages.common.training import checkpoint
from stages.common.training.optim import OptimParams, configure_optimizer
from stages.common.training.parallel import ParallelParams, parallelize
from stages.common.training.trainer import DynamicClip, Freeze, LossScaler, TrainConfig, Trainer
from tests.fixtures.train_inputs import PATHS, VOCAB, write_token_shards

ROOT = Path(__file__).resolve().parents[2]


def tiny_params(tmp_path: Path, **overrides) -> train.Params:
    data = {
        "tokens_dir": str(write_token_shards(tmp_path / "tokens")) if not (tmp_path / "tokens").exists()
        else str(tmp_path / "tokens"),
        "model_dir": str(tmp_path / "model"), "checkpoint_dir": str(tmp_path / "ckpt"),
        "metrics_path": str(tmp_path / "metrics" / "train.json"),
        "detail_path": str(tmp_path / "metrics" / "train.detail.json"),
        "steps_path": str(tmp_path / "metrics" / "steps.csv"),
        "val_path": str(tmp_path / "metrics" / "val.csv"), "preset": "debug", "max_steps": 30, "micro_batch_size": 4,
        "gradient_accumulation_steps": 2, "precision": "fp32", "num_threads": 1, "progress_bar": False,
        "parallel": {"data_parallel_size": 1},
        "optim": {"lr": 0.01, "warmup_steps": 3}, "checkpoint": {"every": 10, "keep": 2},
        "eval": {"every": 10, "windows": 16},
    }
    for key, value in overrides.items():
        if isinstance(value, dict):
            data[key] = {**data.get(key, {}), **value}
        else:
            data[key] = value
    return from_dict(train.Params, data, prefix="train.")


@pytest.fixture(autouse=True)
def restore_threads():
    num_threads = torch.get_num_threads()
    yield
    torch.set_num_threads(num_threads)


def test_run_writes_model_metrics_and_curves_and_lowers_validation_perplexity(tmp_path):
    params = tiny_params(tmp_path)
    metrics = train.run(params)
    model = load_checkpoint(tmp_path / "model" / CHECKPOINT_NAME)
    assert model.config == preset("debug", VOCAB)
    assert metrics["steps"] == 30 and metrics["tokens_seen"] == 30 * 8 * 64
    assert metrics["num_skipped_steps"] == 0 and metrics["resumed_from_step"] == -1
    for tier in TIERS:
        assert metrics[f"val.{tier}.perplexity"] < metrics[f"val.{tier}.perplexity_start"], tier
    assert json.loads((tmp_path / "metrics" / "train.detail.json").read_text()) == pytest.approx(metrics)
    headline = json.loads((tmp_path / "metrics" / "train.json").read_text())  # what `dvc metrics show` lists
    assert sorted(headline) == ["loss", "tokens_per_s", "val_ppl.all", "val_ppl.easy", "val_ppl.hard",
                                "val_ppl.medium"]
    steps = (tmp_path / "metrics" / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("step,loss,lr,grad_norm,clip_threshold") and len(steps) == 31
    assert [int(line.split(",")[0]) for line in steps[1:]] == list(range(30))
    val = (tmp_path / "metrics" / "val.csv").read_text().splitlines()
    assert [int(line.split(",")[0]) for line in val[1:]] == [0, 10, 20, 30]
    # the whole validation split: the tiers' losses weighted by their tokens
    header, last = val[0].split(","), dict(zip(val[0].split(","), map(float, val[-1].split(","))))
    assert "loss_all" in header and "perplexity_all" in header
    shards = json.loads((tmp_path / "tokens" / "manifest.json").read_text())["shards"]
    tokens = {t: shards[f"val/{t}"]["num_tokens"] for t in TIERS}
    weighted = sum(last[f"loss_{t}"] * n for t, n in tokens.items()) / sum(tokens.values())
    assert last["loss_all"] == pytest.approx(weighted)
    assert metrics["val.all.perplexity"] == pytest.approx(math.exp(last["loss_all"]))
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path / "ckpt")] == ["step_00000020", "step_00000030"]


def test_a_run_without_validation_has_no_validation_figures(tmp_path):
    metrics = train.run(tiny_params(tmp_path, max_steps=4, eval={"windows": 0}, checkpoint={"every": 0}))
    assert metrics["steps"] == 4 and not any(key.startswith("val.") for key in metrics)
    headline = json.loads((tmp_path / "metrics" / "train.json").read_text())
    assert sorted(headline) == ["loss", "tokens_per_s"]


def test_a_rerun_of_a_finished_run_trains_nothing_and_gives_the_same_model(tmp_path):
    params = tiny_params(tmp_path, max_steps=10)
    train.run(params)
    first = load_file(str(tmp_path / "model" / CHECKPOINT_NAME))
    metrics = train.run(params)
    assert metrics["resumed_from_step"] == 10
    again = load_file(str(tmp_path / "model" / CHECKPOINT_NAME))
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_resume_skips_a_damaged_newest_checkpoint_and_ends_identical(tmp_path):
    params = tiny_params(tmp_path, max_steps=20, checkpoint={"every": 5, "keep": 3})
    reference = train.run(params)
    reference_weights = load_file(str(tmp_path / "model" / CHECKPOINT_NAME))
    newest = checkpoint.list_checkpoints(tmp_path / "ckpt")[-1]
    shard = next(newest.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    shard.write_bytes(bytes(data))
    assert "damaged" in checkpoint.verify(newest)

    resumed = train.run(params)  # newest (step 20) is damaged: resumes from step 15 and redoes 15..19
    assert resumed["resumed_from_step"] == 15
    weights = load_file(str(tmp_path / "model" / CHECKPOINT_NAME))
    assert all(torch.equal(reference_weights[k], weights[k]) for k in weights)
    steps = (tmp_path / "metrics" / "steps.csv").read_text().splitlines()[1:]
    assert [int(line.split(",")[0]) for line in steps] == list(range(20))  # no gap, no repeat
    assert resumed["final_loss"] == reference["final_loss"]


def test_an_incomplete_checkpoint_is_skipped(tmp_path):
    params = tiny_params(tmp_path, max_steps=10, checkpoint={"every": 5, "keep": 3})
    train.run(params)
    newest = checkpoint.list_checkpoints(tmp_path / "ckpt")[-1]
    (newest / "_SUCCESS").unlink()
    assert checkpoint.verify(newest).startswith("incomplete")
    assert checkpoint.newest_valid(tmp_path / "ckpt").name == "step_00000005"


def test_checkpoints_of_another_configuration_are_cleared_not_resumed(tmp_path):
    train.run(tiny_params(tmp_path, max_steps=10))
    metrics = train.run(tiny_params(tmp_path, max_steps=10, seed=1))
    assert metrics["resumed_from_step"] == -1
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path / "ckpt")] == ["step_00000010"]


def test_params_reject_bad_values():
    tier_mix = {**PATHS, "tier_mix": {"schedule": "random"}}
    with pytest.raises(ValueError, match=r"^param 'train\.tier_mix\.schedule': must be one of constant, linear, "
                                         r"cosine, uniform, got 'random'$"):
        from_dict(train.Params, tier_mix, prefix="train.")
    with pytest.raises(ValueError, match=r"^param 'train\.tier_mix\.start\.hard': must be >= 0"):
        from_dict(train.Params, {**PATHS, "tier_mix": {"start": {"easy": 1, "medium": 1, "hard": -1}}},
                  prefix="train.")
    with pytest.raises(ValueError, match="train.precision"):
        train.Params(**PATHS, precision="fp8")
    with pytest.raises(ValueError, match="'train.parallel.data_parallel_mode: fsdp'"):
        train.Params(**PATHS, parallel=ParallelParams(data_parallel_size=2, tensor_parallel_size=2))
    with pytest.raises(ValueError, match="'train.parallel.ddp_comm_hook'"):
        train.Params(**PATHS, parallel=ParallelParams(data_parallel_mode="fsdp", ddp_comm_hook="fp16"))
    with pytest.raises(ValueError, match=r"^param 'train\.parallel\.tensor_parallel_size': must divide .* "
                                         r"one of 1, 2, got 3$"):
        ParallelParams(tensor_parallel_size=3).check_model(2, 4, 2, 64, train.PARALLEL_PREFIX)


@pytest.mark.parametrize("overrides, message", [
    ({"parallel": ParallelParams(tensor_parallel_size=3)},
     "param 'train.parallel.tensor_parallel_size': must divide the model's heads (4), kv heads (2) and MLP width "
     "(64): one of 1, 2, got 3"),
    ({"parallel": ParallelParams(pipeline_parallel_size=3), "gradient_accumulation_steps": 4},
     "param 'train.parallel.pipeline_parallel_size': must be at most the model's 2 layers, got 3"),
    ({"parallel": ParallelParams(pipeline_parallel_size=2), "gradient_accumulation_steps": 1},
     "param 'train.gradient_accumulation_steps': the 1f1b pipeline schedule needs at least one micro-batch per "
     "stage, >= 2 (train.parallel.pipeline_parallel_size), got 1"),
    ({"parallel": ParallelParams(data_parallel_size=2), "nproc_per_node": 3},
     "params 'train.parallel': data x tensor x pipeline parallel = 2 x 1 x 1 = 2 processes, but 3 processes run"),
])
def test_the_parallel_layout_is_checked_against_model_processes_and_batch(overrides, message):
    """Before torchrun starts any worker: what `parallelize`, `resolve` and the pipeline schedule would
    refuse in each of them."""
    with pytest.raises(ValueError) as e:
        train.Params(**PATHS, preset="debug", **overrides)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    train.Params(**PATHS, preset="debug", gradient_accumulation_steps=1,  # GPipe takes fewer micro-batches
                 parallel=ParallelParams(pipeline_parallel_size=2, pipeline_schedule="gpipe"))


@pytest.mark.parametrize("stage, section, inputs, processes", [
    ("train", {"parallel": {"data_parallel_size": 2, "tensor_parallel_size": 2, "data_parallel_mode": "fsdp"},
               "max_restarts": 3}, ["tokens_dir"], 4),
    ("prune", {"nproc_per_node": 4, "max_restarts": 3}, ["teacher_dir", "tokens_dir"], 4),
    ("qat", {"nproc_per_node": 2, "max_restarts": 3}, ["model_dir", "tokens_dir"], 2),
])
def test_distributed_stages_launch_torchrun_with_an_argument_list(tmp_path, monkeypatch, stage, section, inputs,
                                                                  processes):
    """`python -m stages.<stage>` outside torchrun launches torchrun (the real launches run in
    tests/integration); here only the command it builds is captured."""
    import importlib
    import subprocess

    import yaml
    for key in inputs:  # checked before the launch: they must exist, the shards must fill a batch
        section[key] = str(tmp_path / key)
    write_token_shards(tmp_path / "tokens_dir")
    for key in set(inputs) - {"tokens_dir"}:
        save_checkpoint(Transformer(preset("debug", VOCAB)), tmp_path / key / CHECKPOINT_NAME)
    params_path = tmp_path / "my params.yaml"
    params_path.write_text(yaml.safe_dump({stage: {**read_params(ROOT / "params.yaml")[stage], **section}}))
    calls = []
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda argv, check, env: calls.append((argv, env))
                        or subprocess.CompletedProcess(argv, 0))
    with pytest.raises(SystemExit) as exit_code:
        importlib.import_module(f"stages.{stage}").main(["--params", str(params_path)])
    assert exit_code.value.code == 0
    ((argv, env),) = calls
    assert env["OMP_NUM_THREADS"] == "1"  # what torchrun would set, without its banner saying so
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert f"--nproc-per-node={processes}" in argv and "--max-restarts=3" in argv
    assert argv[-4:] == ["-m", f"stages.{stage}", "--params", str(params_path)]  # one argument, spaces and all


def launch(stage: str, section: dict, tmp_path: Path, monkeypatch) -> tuple[int, list]:
    """`python -m stages.<stage>` outside torchrun with `section` over the repo's params: (exit status, the
    commands it launched)."""
    import importlib
    import subprocess

    import yaml
    params_path = tmp_path / "params.yaml"
    params_path.write_text(yaml.safe_dump({stage: {**read_params(ROOT / "params.yaml")[stage], **section}}))
    calls = []
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda argv, check, env: calls.append(argv)
                        or subprocess.CompletedProcess(argv, 0))
    with pytest.raises(SystemExit) as exit_code:
        importlib.import_module(f"stages.{stage}").main(["--params", str(params_path)])
    return exit_code.value.code, calls


@pytest.mark.parametrize("stage, inputs", [("train", ["tokens_dir"]), ("prune", ["teacher_dir", "tokens_dir"]),
                                           ("qat", ["model_dir", "tokens_dir"])])
def test_a_validation_split_too_small_stops_before_torchrun_in_one_line(tmp_path, monkeypatch, capsys, stage,
                                                                        inputs):
    """A corpus of a few dozen documents leaves a tier of the validation split without one window: the stage
    says so in one line naming the param, before torchrun starts (it would restart the failing workers), and
    a worker started anyway stops at the same check, before joining the process group."""
    tokens = write_token_shards(tmp_path / "tokens_dir", num_val_docs=0)
    section = {"tokens_dir": str(tokens), "preset": "debug"} if stage == "train" else {"tokens_dir": str(tokens)}
    for key in set(inputs) - {"tokens_dir"}:
        save_checkpoint(Transformer(preset("debug", VOCAB)), tmp_path / key / CHECKPOINT_NAME)
        section[key] = str(tmp_path / key)
    status, calls = launch(stage, section, tmp_path, monkeypatch)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and calls == []  # torchrun never started
    assert len(err) == 1 and err[0].startswith(f"error: {tokens}: too few tokens: the val tiers hold easy 0, "
                                               "medium 0, hard 0 tokens, 65 needed in each for validation")
    assert "raise 'perplexity.val_fraction' and rerun perplexity" in err[0]


def test_each_worker_checks_the_shards_before_joining_the_process_group(tmp_path, monkeypatch):
    params = tiny_params(tmp_path, micro_batch_size=200)  # 200 windows of 64 tokens: more than a tier holds
    monkeypatch.setattr(train, "distributed", lambda *args: pytest.fail("joined the process group"))
    with pytest.raises(ConfigError, match=r"the train tiers hold easy 11,880, medium 11,560, hard 12,040 tokens, "
                                          r"12,801 needed in each for one micro batch of train.micro_batch_size 200 "
                                          r"windows of seq_len 64 \(preset debug\): give perplexity a larger "
                                          r"corpus, or lower 'train.micro_batch_size' or 'train.seq_len'$"):
        train.run(params)
    assert not (tmp_path / "model").exists() and not (tmp_path / "ckpt").exists()


def test_validation_needs_a_window_per_pipeline_micro_batch_and_nothing_without_validation(tmp_path):
    params = tiny_params(tmp_path)
    windows = {need.split: need.min_tokens for need in train.shard_needs(params)}
    assert windows == {"train": 4 * 64 + 1, "val": 64 + 1}
    pipeline = dataclasses.replace(params, gradient_accumulation_steps=4, parallel=ParallelParams(
        pipeline_parallel_size=2, data_parallel_mode="fsdp"))
    assert [n.min_tokens for n in train.shard_needs(pipeline) if n.split == "val"] == [4 * 64 + 1]
    no_val = dataclasses.replace(params, eval=train.EvalParams(windows=0))
    assert [n.split for n in train.shard_needs(no_val)] == ["train"]


# ---- the trainer's pieces, in-process on the debug model ---------------------------------------------
def make_trainer(tmp_path: Path, **cfg_overrides) -> Trainer:
    tokens = write_token_shards(tmp_path / "tokens")
    torch.manual_seed(0)
    model = Transformer(preset("debug", VOCAB))
    cfg = TrainConfig(max_steps=20, micro_batch_size=2, gradient_accumulation_steps=2, seq_len=64, precision="fp32",
                      optim=OptimParams(lr=0.01, warmup_steps=2), eval_windows=4)
    cfg = dataclasses.replace(cfg, **cfg_overrides)
    scaler = LossScaler(cfg.precision == "fp16")
    parts = parallelize(model, None, ParallelParams(), torch.device("cpu"), cfg.gradient_accumulation_steps, None)
    sampler = TierSampler(open_tiers(tokens, "train"), TierMix(), 64, 4, cfg.max_steps, seed=0)
    return Trainer(parts, configure_optimizer(model, cfg.optim, torch.device("cpu")), sampler, cfg,
                   torch.device("cpu"), model.flops_per_token(64), scaler)


def test_non_finite_steps_are_skipped_then_stop_the_run_with_the_checkpoint_intact(tmp_path):
    trainer = make_trainer(tmp_path, max_bad_steps=3)
    model = trainer.parts.module
    for _ in range(2):
        trainer.train_step()
    checkpoint.save(tmp_path / "ckpt", trainer.step, model, trainer.optimizer, trainer.state_dict(), keep=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.norm.register_forward_hook(lambda module, args, out: out * math.nan)
    for _ in range(2):
        row = trainer.train_step()
        assert row["skipped"] and math.isnan(row["loss"])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # no update from a bad step
    with pytest.raises(FloatingPointError, match="3 consecutive steps with a non-finite"):
        trainer.train_step()
    assert trainer.counters.num_skipped_steps == 3
    assert checkpoint.verify(tmp_path / "ckpt" / "step_00000002") is None


def test_dynamic_clip_threshold_follows_the_median_of_recent_norms(tmp_path):
    trainer = make_trainer(tmp_path, dynamic_clip=DynamicClip(factor=0.8, window=4, min_history=3),
                           optim=OptimParams(lr=0.01, warmup_steps=2, grad_clip=1.0))
    assert trainer.clip_threshold() == 1.0
    trainer.norm_history = [0.5, 0.25]
    assert trainer.clip_threshold() == 1.0  # fewer than min_history norms: the fixed limit
    trainer.norm_history = [9.0, 0.5, 0.25, 0.75, 0.5]
    assert trainer.clip_threshold() == pytest.approx(0.8 * 0.5)  # median of the last 4
    trainer.norm_history = [5.0, 5.0, 5.0]
    assert trainer.clip_threshold() == 1.0  # never above grad_clip
    row = trainer.train_step()
    assert row["clip_threshold"] == 1.0 and row["clipped"] == (row["grad_norm"] > 1.0)


def test_loss_scaler_halves_on_overflow_and_grows_after_clean_steps():
    scaler = LossScaler(True, init_scale=1024.0, growth_interval=3)
    scaler.update(overflow=True)
    assert scaler.scale == 512.0
    for _ in range(3):
        scaler.update(overflow=False)
    assert scaler.scale == 1024.0
    restored = LossScaler(True)
    restored.load_state_dict(scaler.state_dict())
    assert restored.scale == 1024.0 and not LossScaler(False).enabled and LossScaler(False).scale == 1.0


def test_fp16_training_steps_scale_the_loss_and_stay_finite(tmp_path):
    trainer = make_trainer(tmp_path, precision="fp16")
    rows = [trainer.train_step() for _ in range(5)]
    assert all(math.isfinite(r["loss"]) and r["loss_scale"] >= 2.0 ** 15 for r in rows)
    assert rows[-1]["loss"] < rows[0]["loss"]


def test_frozen_layers_do_not_move_during_the_freeze(tmp_path):
    trainer = make_trainer(tmp_path, freeze=Freeze(layers=1, steps=3))
    model = trainer.parts.module
    frozen_before = {k: v.clone() for k, v in model.layers[0].state_dict().items()}
    free_before = model.layers[1].feed_forward.w1.weight.clone()
    for _ in range(3):
        trainer.train_step()
    assert all(torch.equal(frozen_before[k], v) for k, v in model.layers[0].state_dict().items())
    assert not torch.equal(free_before, model.layers[1].feed_forward.w1.weight)
    trainer.train_step()  # the freeze is over
    assert not torch.equal(frozen_before["feed_forward.w1.weight"], model.layers[0].feed_forward.w1.weight)


def test_the_run_fingerprint_covers_params_data_and_training_code(monkeypatch):
    params = train.Params(**PATHS)
    base = train.fingerprint(params, {"vocab_size": 256})
    assert train.fingerprint(dataclasses.replace(params, seed=1), {"vocab_size": 256}) != base
    assert train.fingerprint(params, {"vocab_size": 512}) != base
    assert train.fingerprint(dataclasses.replace(params, log_every=1), {"vocab_size": 256}) == base  # cadence only
    read_source = digest.read_source  # the trainer as if edited: never resume a run of the old code
    monkeypatch.setattr(digest, "read_source", lambda path: read_source(path) + b"\n# a changed line\n"
                        if path.name == "trainer.py" else read_source(path))
    assert train.fingerprint(params, {"vocab_size": 256}) != base
