import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from stages import prune
from stages.common.compress.distill import DistillParams
from stages.common.lm.model import CHECKPOINT_NAME, load_checkpoint
from stages.common.training import checkpoint
from stages.common.training.checkpoint import CheckpointParams
from tests.fixtures.compress import make_inputs
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, one_torch_thread):
    return make_inputs(tmp_path_factory.mktemp("prune_inputs"))


def stage_params(inputs, tmp_path, **overrides) -> prune.Params:
    settings = dict(teacher_dir=str(inputs["teacher"]), tokens_dir=str(inputs["tokens"]),
                    out_dir=str(tmp_path / "pruned"), metrics_path=str(tmp_path / "prune.json"),
                    detail_path=str(tmp_path / "prune.detail.json"),
                    checkpoint_dir=str(tmp_path / "ckpt"), num_threads=1, progress_bar=False,
                    precision="fp32", calibration_batches=2, mlp_schedule=(0.25, 0.5), head_schedule=(0.0, 0.5),
                    channel_multiple=8, distill=DistillParams(steps=4, batch_size=4))
    return prune.Params(**{**settings, **overrides})


def test_run_writes_every_step_and_the_final_model(inputs, tmp_path):
    params = stage_params(inputs, tmp_path)
    metrics = prune.run(params)
    assert json.loads((tmp_path / "prune.detail.json").read_text()) == metrics
    step1 = load_checkpoint(tmp_path / "pruned" / "step_1" / CHECKPOINT_NAME).config
    final = load_checkpoint(tmp_path / "pruned" / CHECKPOINT_NAME).config
    assert (step1.ffn_dim, step1.num_heads) == (48, 4)
    assert (final.ffn_dim, final.num_heads, final.num_kv_heads) == (32, 2, 1)
    assert (tmp_path / "pruned" / "_SUCCESS").is_file()
    assert metrics["step_2.num_params"] < metrics["step_1.num_params"] < metrics["teacher.num_params"]
    for key in ("teacher.val_ppl.all", "step_1.val_ppl.easy", "step_2.val_ppl.hard", "step_2.val_ppl_pruned.all"):
        assert 1 < metrics[key] < 1e4, key
    assert metrics["step_2.kl_first"] > 0
    assert metrics["num_processes"] == 1


def test_a_killed_run_resumes_mid_step_and_ends_with_the_same_model(inputs, tmp_path):
    params = stage_params(inputs, tmp_path, distill=DistillParams(steps=6, batch_size=4),
                          checkpoint=CheckpointParams(every=2, keep=3))
    reference = prune.run(params)
    assert reference["step_1.resumed_from_step"] == reference["step_2.resumed_from_step"] == -1
    expected = load_file(str(tmp_path / "pruned" / CHECKPOINT_NAME))
    # As if killed during step 2's fine-tune after its step-4 checkpoint: later checkpoints and outputs gone.
    step2 = tmp_path / "ckpt" / "step_2"
    assert [p.name for p in checkpoint.list_checkpoints(step2)] == ["step_00000002", "step_00000004", "step_00000006"]
    for late in checkpoint.list_checkpoints(step2)[2:]:
        (late / "_SUCCESS").unlink()  # an interrupted write: incomplete, skipped
    shutil.rmtree(tmp_path / "pruned")

    resumed = prune.run(params)
    assert resumed["step_1.resumed_from_step"] == 6  # finished: nothing retrained
    assert resumed["step_2.resumed_from_step"] == 4
    got = load_file(str(tmp_path / "pruned" / CHECKPOINT_NAME))
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got)
    assert resumed["step_2.val_ppl.all"] == reference["step_2.val_ppl.all"]
    assert resumed["step_2.kl_first"] == reference["step_2.kl_first"]  # the step history is in the checkpoint


def test_checkpoints_of_another_configuration_are_not_resumed(inputs, tmp_path):
    prune.run(stage_params(inputs, tmp_path))
    metrics = prune.run(stage_params(inputs, tmp_path, seed=1))
    assert metrics["step_1.resumed_from_step"] == metrics["step_2.resumed_from_step"] == -1
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path / "ckpt" / "step_1")] == ["step_00000004"]


@pytest.mark.parametrize("overrides, message", [
    ({"method": "random"}, "prune.method"),
    ({"mlp_schedule": (0.5, 0.25), "head_schedule": (0.0, 0.0)}, "non-decreasing"),
    ({"mlp_schedule": (0.5,), "head_schedule": (0.0, 0.0)}, "same"),
])
def test_invalid_params_name_the_key(overrides, message):
    with pytest.raises(ValueError, match=message):
        prune.Params(teacher_dir="teacher", tokens_dir="tokens", out_dir="pruned", metrics_path="prune.json",
                     detail_path="prune.detail.json",
                     checkpoint_dir="ckpt", **overrides)
