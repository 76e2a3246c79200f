"""The prune and qat stages under real torchrun (gloo processes on CPU), launched as dvc.yaml does
(`python -m stages.<name> --params ...`): the train stage's launcher, loop and checkpoints.

Two data-parallel processes read the halves of the same global batches as one process, so they must end
with the one-process weights up to float summation order; a worker killed mid-fine-tune is restarted by
torchrun and resumes from the newest checkpoint to exactly the weights of an uninterrupted run."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from stages import prune, qat
from stages.common.compress.distill import DistillParams
from stages.common.lm.model import CHECKPOINT_NAME
from stages.common.training.checkpoint import CheckpointParams
from tests.conftest import ROOT
from tests.fixtures.compress import make_inputs, tiny_prune_params, tiny_qat_params
from tests.integration.test_train_torchrun import sigkill_a_worker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return make_inputs(tmp_path_factory.mktemp("compress_inputs"))
    finally:
        torch.set_num_threads(threads)


def as_yaml(params) -> dict:
    """A params dataclass as its params.yaml section (tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(params)))


def command(stage: str, params, tmp_path: Path) -> list[str]:
    path = tmp_path / f"{stage}.params.yaml"
    path.write_text(yaml.safe_dump({stage: as_yaml(params)}))
    return [sys.executable, "-m", f"stages.{stage}", "--params", str(path)]


def launch(stage: str, params, tmp_path: Path) -> dict:
    proc = subprocess.run(command(stage, params, tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(Path(params.detail_path).read_text())


def assert_close_weights(expected_file: Path, got_file: Path) -> None:
    expected, got = load_file(str(expected_file)), load_file(str(got_file))
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], atol=5e-5, rtol=1e-4, msg=name)


def test_two_processes_prune_and_quantize_like_one(inputs, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    threads = torch.get_num_threads()
    try:  # the reference, in this process
        prune.run(tiny_prune_params(inputs, one))
        qat.run(tiny_qat_params(one / "pruned", inputs, one))
    finally:
        torch.set_num_threads(threads)

    metrics = launch("prune", dataclasses.replace(tiny_prune_params(inputs, two), nproc_per_node=2), tmp_path)
    assert metrics["num_processes"] == 2
    reference = json.loads((one / "prune.detail.json").read_text())
    for step in (1, 2):
        assert metrics[f"step_{step}.ffn_dim"] == reference[f"step_{step}.ffn_dim"]
        assert metrics[f"step_{step}.kl_first"] == pytest.approx(reference[f"step_{step}.kl_first"], rel=1e-4)
    assert_close_weights(one / "pruned" / CHECKPOINT_NAME, two / "pruned" / CHECKPOINT_NAME)

    # QAT of the one-process pruned model, so that only the launch differs
    metrics = launch("qat", dataclasses.replace(tiny_qat_params(one / "pruned", inputs, two), nproc_per_node=2),
                     tmp_path)
    assert metrics["num_processes"] == 2
    reference = json.loads((one / "qat.detail.json").read_text())
    assert metrics["qat.val_ppl.all"] == pytest.approx(reference["qat.val_ppl.all"], rel=1e-3)
    assert_close_weights(one / "qat" / "qat" / CHECKPOINT_NAME, two / "qat" / "qat" / CHECKPOINT_NAME)
    assert (two / "qat" / "qat" / "quant.safetensors").is_file()


def test_a_killed_prune_worker_restarts_and_resumes_to_identical_weights(inputs, tmp_path):
    def params(run: Path) -> prune.Params:
        return dataclasses.replace(tiny_prune_params(inputs, run), nproc_per_node=2, max_restarts=2,
                                   distill=DistillParams(steps=60, batch_size=4),
                                   checkpoint=CheckpointParams(every=10, keep=2))

    plain, killed = tmp_path / "plain", tmp_path / "killed"
    launch("prune", params(plain), tmp_path)

    output = sigkill_a_worker(command("prune", params(killed), tmp_path),
                              killed / "prune_checkpoints" / "step_1" / "step_00000020", timeout=300)

    metrics = json.loads((killed / "prune.detail.json").read_text())
    # the restarted workers resumed step 1 (finished or not) from a checkpoint at or after step 20
    assert metrics["step_1.resumed_from_step"] >= 20, output[-3000:]
    assert "restart" in output.lower() or "resumed" in output.lower()
    expected = load_file(str(plain / "pruned" / CHECKPOINT_NAME))
    got = load_file(str(killed / "pruned" / CHECKPOINT_NAME))
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
