"""The train stage under real torchrun with gloo processes on CPU, launched exactly as dvc.yaml does
(`python -m stages.train --params ...`).

Every parallel layout trains on the same global batches (the sampler's batch of step k is a function of
(seed, k); each data-parallel rank reads its rows), so each layout must end with the weights of the
single-process run, up to float summation order."""
from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
import yaml
from safetensors.torch import load_file

from stages.common.lm.model import CHECKPOINT_NAME
from tests.conftest import ROOT
from tests.fixtures.train_inputs import write_token_shards

pytestmark = pytest.mark.integration
STEPS = 8


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> Path:
    return write_token_shards(tmp_path_factory.mktemp("tokens"))


def params_file(tmp_path: Path, tokens: Path, **overrides) -> Path:
    """A params.yaml with a `train` section for the debug model on the tiny shards."""
    section = {
        "tokens_dir": str(tokens), "model_dir": str(tmp_path / "model"), "checkpoint_dir": str(tmp_path / "ckpt"),
        "metrics_path": str(tmp_path / "train.json"),
        "detail_path": str(tmp_path / "train.detail.json"), "steps_path": str(tmp_path / "steps.csv"),
        "val_path": str(tmp_path / "val.csv"), "preset": "debug", "max_steps": STEPS, "micro_batch_size": 2,
        "gradient_accumulation_steps": 4, "precision": "fp32", "num_threads": 1, "progress_bar": False,
        "max_restarts": 0, "parallel": {"data_parallel_size": 1}, "optim": {"lr": 0.01, "warmup_steps": 2}, "checkpoint": {"every": 4, "keep": 2},
        "eval": {"every": 4, "windows": 8},
    }
    for key, value in overrides.items():
        section[key] = {**section[key], **value} if isinstance(value, dict) and key in section else value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"train": section}))
    return path


def launch(params: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "stages.train", "--params", str(params)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "model" / CHECKPOINT_NAME))


def losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "steps.csv").read_text().splitlines()[1:]
    return [float(line.split(",")[1]) for line in lines]


@pytest.fixture(scope="module")
def single_process(tmp_path_factory, tokens) -> Path:
    """The reference: one process, global batch 1 x 2 x 4 = 8 sequences, fp32."""
    run_dir = tmp_path_factory.mktemp("single")
    launch(params_file(run_dir, tokens))
    return run_dir


LAYOUTS = {
    "ddp": {"gradient_accumulation_steps": 2, "parallel": {"data_parallel_size": 2}},
    "fsdp": {"gradient_accumulation_steps": 2, "parallel": {"data_parallel_size": 2, "data_parallel_mode": "fsdp"}},
    "tp": {"parallel": {"tensor_parallel_size": 2}},
    "pp_1f1b": {"parallel": {"pipeline_parallel_size": 2}},
    # combinations, on 4 processes: 2-D (FSDP x TP) and 3-D-capable (PP x FSDP, GPipe schedule)
    "fsdp_x_tp": {"gradient_accumulation_steps": 2,
                  "parallel": {"data_parallel_size": 2, "data_parallel_mode": "fsdp", "tensor_parallel_size": 2}},
    "pp_gpipe_x_fsdp": {"gradient_accumulation_steps": 2,
                        "parallel": {"data_parallel_size": 2, "data_parallel_mode": "fsdp",
                                     "pipeline_parallel_size": 2, "pipeline_schedule": "gpipe"}},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_parallel_layout_trains_like_one_process(layout, tmp_path, tokens, single_process):
    launch(params_file(tmp_path, tokens, **LAYOUTS[layout]))
    metrics = json.loads((tmp_path / "train.detail.json").read_text())
    parallel = LAYOUTS[layout]["parallel"]
    assert metrics["num_processes"] == math.prod(parallel.get(k, 1) for k in
                                                 ("data_parallel_size", "tensor_parallel_size", "pipeline_parallel_size"))
    assert losses(tmp_path) == pytest.approx(losses(single_process), abs=1e-5)
    expected, got = weights(single_process), weights(tmp_path)
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=2e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("overrides", [
    {"precision": "bf16", "parallel": {"tensor_parallel_size": 2}},
    {"precision": "fp16", "gradient_accumulation_steps": 2, "parallel": {"data_parallel_size": 2,
                                                                          "data_parallel_mode": "fsdp"}},
    {"gradient_accumulation_steps": 2, "parallel": {"data_parallel_size": 2, "ddp_comm_hook": "fp16"}},
    {"gradient_accumulation_steps": 2, "parallel": {"data_parallel_size": 2, "ddp_comm_hook": "powersgd"}},
], ids=["bf16_tp", "fp16_fsdp", "ddp_fp16_compression", "ddp_powersgd"])
def test_mixed_precision_and_gradient_compression_track_the_fp32_run(overrides, tmp_path, tokens, single_process):
    launch(params_file(tmp_path, tokens, **overrides))
    metrics = json.loads((tmp_path / "train.detail.json").read_text())
    assert metrics["num_skipped_steps"] == 0
    # Same data, lossy arithmetic or communication: close to the fp32 curve, not equal to it.
    assert losses(tmp_path) == pytest.approx(losses(single_process), rel=0.05)
    assert losses(tmp_path)[-1] < losses(tmp_path)[0]


def worker_pids(launcher: psutil.Process) -> list[int]:
    """torchrun's worker processes: the grandchildren of `python -m stages.<name>`."""
    return [p.pid for child in launcher.children() for p in child.children()]


def sigkill_a_worker(command: list[str], ready: Path, num_workers: int = 2, timeout: int = 240) -> str:
    """Start `command` (a stage launching torchrun), SIGKILL one of its workers at a random moment soon
    after `ready` (a checkpoint folder) appears, and return the output once the run ends (it must end 0:
    torchrun restarts the workers, which resume)."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    launcher = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while not ready.is_dir():  # past a checkpoint, so there is one to resume from
        assert time.monotonic() < deadline and proc.poll() is None, "run ended before it could be killed"
        time.sleep(0.01)
    time.sleep(random.uniform(0.0, 0.2))
    victims = worker_pids(launcher)
    assert len(victims) == num_workers and proc.poll() is None
    psutil.Process(random.choice(victims)).send_signal(signal.SIGKILL)
    output, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, output[-5000:]
    return output


def test_sigkill_at_a_random_step_resumes_to_identical_weights(tmp_path, tokens):
    """A worker killed with SIGKILL mid-run: torchrun restarts the workers (--max-restarts), they resume
    from the newest checkpoint, and the run ends exactly where an uninterrupted one does."""
    overrides = {"max_steps": 150, "gradient_accumulation_steps": 2, "max_restarts": 2,
                 "parallel": {"data_parallel_size": 2}, "checkpoint": {"every": 10, "keep": 2},
                 "eval": {"every": 0, "windows": 4}}
    plain = tmp_path / "plain"
    plain.mkdir()
    launch(params_file(plain, tokens, **overrides))

    killed = tmp_path / "killed"
    killed.mkdir()
    params = params_file(killed, tokens, **overrides)
    output = sigkill_a_worker([sys.executable, "-m", "stages.train", "--params", str(params)],
                              killed / "ckpt" / "step_00000020")

    metrics = json.loads((killed / "train.detail.json").read_text())
    assert 20 <= metrics["resumed_from_step"] < 150, output[-3000:]
    steps = [int(line.split(",")[0]) for line in (killed / "steps.csv").read_text().splitlines()[1:]]
    assert steps == list(range(150))  # the loss curve has no gap and no repeat
    assert losses(killed) == losses(plain)
    expected, got = weights(plain), weights(killed)
    assert all(torch.equal(expected[name], got[name]) for name in expected)

