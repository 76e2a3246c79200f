"""The distillation fine-tune that follows each pruning step (and QAT): its loss, and one step of the train
loop on a pruned student against its teacher."""
import pytest
import torch

from stages.common.compress.distill import DistillOptim, DistillParams, distill_loss, finetune, kl_span
from stages.common.compress.pruning import magnitude_importance, select
from stages.common.compress.pruning import prune as prune_model
from stages.common.lm.model import Transformer, preset
from stages.common.lm.token_shards import TierMix, TierSampler, open_tiers
from stages.common.training import checkpoint
from stages.common.training.checkpoint import CheckpointParams
from stages.common.training.parallel import DistEnv
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.train_inputs import write_token_shards

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


def test_kl_span_is_the_mean_of_the_first_and_last_steps():
    history = [{"kl": float(k)} for k in range(10)]
    assert kl_span(history) == (2.0, 7.0)  # steps 0-4 and 5-9
    assert kl_span(history[:3], steps=2) == (0.5, 1.5)
    assert kl_span([]) is None
