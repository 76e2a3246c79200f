import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from stages import prune
from stages.common.compress.distill import DistillOptim, DistillParams, distill_loss, finetune
from stages.common.compress.pruning import importance, magnitude_importance, mask, select, units_to_keep
from stages.common.compress.pruning import prune as prune_model
from stages.common.lm.model import CHECKPOINT_NAME, Transformer, load_checkpoint, preset
from stages.common.lm.token_shards import TierMix, TierSampler, open_tiers
from stages.common.training import checkpoint
from stages.common.training.checkpoint import CheckpointParams
from stages.common.training.parallel import DistEnv
from tests.fixtures.compress import make_inputs
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.stages.test_train import write_token_shards

pytestmark = pytest.mark.usefixtures("one_torch_thread")
VOCAB = 97


@pytest.fixture
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(preset("debug", VOCAB)).eval()  # 4 heads in 2 kv groups, ffn 64


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, one_torch_thread):
    return make_inputs(tmp_path_factory.mktemp("prune_inputs"))


def windows(n: int = 2, seq: int = 24) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (4, seq + 1), generator=g) for _ in range(n)]


@pytest.mark.parametrize("method", ["magnitude", "activation", "gradient"])
def test_pruned_model_is_smaller_and_equals_the_masked_model(model, method):
    scores = importance(model, method, windows())
    assert [s.shape for s in scores.mlp] == [(64,)] * 2 and [s.shape for s in scores.heads] == [(2,)] * 2
    keep = select(scores, num_mlp=32, num_groups=1)
    pruned = prune_model(model, keep).eval()
    cfg = pruned.config
    assert (cfg.ffn_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (32, 2, 1, 8)
    layer = pruned.layers[0]
    assert layer.feed_forward.w1.weight.shape == (32, 32) and layer.feed_forward.w2.weight.shape == (32, 32)
    assert layer.attention.wq.weight.shape == (16, 32) and layer.attention.wk.weight.shape == (8, 32)
    assert layer.attention.wo.weight.shape == (32, 16)
    assert pruned.num_params() < model.num_params()
    assert not any("orig" in name or "mask" in name for name in pruned.state_dict())
    idx = torch.randint(0, VOCAB, (3, 40))
    with torch.no_grad():
        expected = mask(model, keep)(idx)
        torch.testing.assert_close(pruned(idx), expected, atol=1e-5, rtol=1e-5)


def test_magnitude_scores_are_l1_norms_and_selection_keeps_the_largest(model):
    with torch.no_grad():
        model.layers[0].feed_forward.w2.weight[:, 5] *= 50  # channel 5 becomes the most important of layer 0
    scores = magnitude_importance(model)
    ff = model.layers[0].feed_forward
    j = 7
    expected = ff.w1.weight[j].abs().sum() + ff.w3.weight[j].abs().sum() + ff.w2.weight[:, j].abs().sum()
    torch.testing.assert_close(scores.mlp[0][j], expected)
    keep = select(scores, num_mlp=1, num_groups=2)
    assert keep.mlp[0].tolist() == [5] and keep.groups[0].tolist() == [0, 1]


def test_pruned_checkpoint_round_trips(model, tmp_path):
    from stages.common.lm.model import save_checkpoint
    pruned = prune_model(model, select(magnitude_importance(model), 16, 1))
    path = save_checkpoint(pruned, tmp_path / CHECKPOINT_NAME)
    loaded = load_checkpoint(path).eval()
    assert loaded.config == pruned.config and loaded.config.head_size == 8
    idx = torch.randint(0, VOCAB, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(loaded(idx), pruned.eval()(idx))


def test_units_to_keep_rounds_to_the_multiple():
    assert units_to_keep(384, 0.5, 16) == 192
    assert units_to_keep(384, 0.25, 16) == 288
    assert units_to_keep(64, 0.99, 16) == 16  # never below one multiple
    assert units_to_keep(8, 0.0, 16) == 8  # never above the original


def test_a_distillation_step_of_the_train_loop_lowers_the_kl(tmp_path):
    tokens = write_token_shards(tmp_path / "tokens")  # vocabulary 256
    torch.manual_seed(0)
    teacher = Transformer(preset("debug", 256, init_std=0.2)).eval()  # peaked logits: a KL worth lowering
    student = prune_model(teacher, select(magnitude_importance(teacher), 16, 1))
    p = DistillParams(steps=1, batch_size=4, kd_weight=1.0, lm_weight=0.0, optim=DistillOptim(lr=1e-3, warmup_steps=0))
    sampler = TierSampler(open_tiers(tokens, "train"), TierMix(), 32, p.batch_size, p.steps, seed=0)
    batch = sampler.batch(0)

    def kl() -> float:
        with torch.no_grad():
            logits = student(batch.inputs), teacher(batch.inputs)
            return distill_loss(*logits, batch.targets, p.temperature, 1, 0)[1].item()

    before = kl()
    history, resumed = finetune(student, teacher, sampler, p, DistEnv(0, 1, 0, 1, torch.device("cpu")), "fp32",
                                tmp_path / "ckpt", "run", CheckpointParams(every=0), 0.0, progress_bar=False)
    assert resumed is None and len(history) == 1
    assert history[0]["kl"] == pytest.approx(before, rel=1e-4)  # the trainer logs the KL it stepped on
    assert history[0]["ce"] > 0 and history[0]["loss"] == pytest.approx(p.temperature ** 2 * before, rel=1e-4)
    assert kl() < before
    assert checkpoint.verify(tmp_path / "ckpt" / "step_00000001") is None  # the train stage's checkpoint format


def test_distill_loss_is_zero_kl_for_identical_logits():
    logits = torch.randn(2, 5, 11)
    targets = torch.randint(0, 11, (2, 5))
    loss, kl, ce = distill_loss(logits, logits.clone(), targets, 2.0, 0.7, 0.3)
    assert kl.item() == pytest.approx(0.0, abs=1e-6)
    assert loss.item() == pytest.approx(0.3 * ce.item(), rel=1e-5)


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
