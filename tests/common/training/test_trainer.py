"""`Trainer` in one process without a process group (`in_process`, the perplexity stage's reference LM):
it learns, it is seeded, and it reports a curve. The train stage's guards, clipping, loss scaling and
resume are tested through the stage in tests/stages/test_train.py."""
import logging
import math

import pytest
import torch

from stages.common.lm.model import Transformer, preset
from stages.common.training.optim import OptimParams
from stages.common.training.trainer import DynamicClip, TrainConfig, Trainer, in_process
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.training import StepBatches

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DEVICE = torch.device("cpu")
STEPS, BATCH, SEQ_LEN = 60, 8, 32


def counting_batches(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable stream: each sequence counts up by one modulo 50 from a random start."""
    g = torch.Generator().manual_seed(step)
    seq = (torch.randint(0, 50, (BATCH, 1), generator=g) + torch.arange(SEQ_LEN + 1)) % 50
    return seq[:, :-1], seq[:, 1:]


def train(precision: str, **fit_kwargs) -> tuple[Transformer, Trainer, int]:
    torch.manual_seed(0)
    model = Transformer(preset("debug", 50))
    cfg = TrainConfig(max_steps=STEPS, micro_batch_size=BATCH, gradient_accumulation_steps=1, seq_len=SEQ_LEN,
                      precision=precision, optim=OptimParams(lr=1e-2, warmup_steps=5),
                      dynamic_clip=DynamicClip(enabled=False), eval_windows=0)
    trainer = in_process(model, StepBatches(counting_batches), cfg, DEVICE)
    checkpoints = []
    trainer.fit({}, 0, 0, lambda: checkpoints.append(trainer.step), **{"progress_bar": False, **fit_kwargs})
    return model, trainer, len(checkpoints)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_in_process_trainer_learns_and_is_seeded(precision):
    model, trainer, num_checkpoints = train(precision)
    rows = trainer.history
    assert trainer.step == len(rows) == STEPS and trainer.tokens_seen == STEPS * BATCH * SEQ_LEN
    assert num_checkpoints == 1  # only the end-of-run call, and the caller decides what it saves
    assert rows[0]["loss"] > 3.5 and rows[-1]["loss"] < 1.0
    assert [r["lr"] for r in rows[:3]] == pytest.approx([1e-2 / 5, 2e-2 / 5, 3e-2 / 5])
    assert all(math.isfinite(r["grad_norm"]) and not r["skipped"] for r in rows)
    assert not any(key.startswith("ratio_") for key in rows[0])  # an untiered sampler has no tier ratios
    again, _, _ = train(precision)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    with torch.no_grad():
        held_out = [model(*counting_batches(step)).item() for step in range(1000, 1003)]
    assert max(held_out) < 1.0


def test_log_lines_can_come_with_the_progress_bar(caplog):
    with caplog.at_level(logging.INFO, logger="refinery.trainer"):
        train("fp32", progress_bar=True, log_lines=True, log_every=20, desc="reference LM")
    lines = [r.getMessage() for r in caplog.records if r.name == "refinery.trainer"]
    assert [line.split()[3] for line in lines] == ["1/60", "21/60", "41/60", "60/60"]
    assert all(line.startswith("reference LM step") for line in lines)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="refinery.trainer"):
        train("fp32", progress_bar=True, log_every=20)
    assert not [r for r in caplog.records if r.name == "refinery.trainer"]  # a bar alone: no lines


def test_the_trainer_resumes_its_own_run_from_its_checkpoints(tmp_path):
    """`resume` names the run; `save_checkpoint` then saves under it; a trainer of the same run continues from
    the saved step with the same state, one of another run starts afresh."""
    def fresh() -> Trainer:
        torch.manual_seed(0)
        cfg = TrainConfig(max_steps=STEPS, micro_batch_size=BATCH, gradient_accumulation_steps=1,
                          seq_len=SEQ_LEN, precision="fp32", optim=OptimParams(lr=1e-2, warmup_steps=5),
                          dynamic_clip=DynamicClip(enabled=False), eval_windows=0)
        return in_process(Transformer(preset("debug", 50)), StepBatches(counting_batches), cfg, DEVICE)

    first = fresh()
    with pytest.raises(RuntimeError, match="save_checkpoint before resume"):
        first.save_checkpoint()
    assert first.resume(tmp_path, "run-a", keep=2, is_main=True) is None
    first.cfg.max_steps = 10
    first.fit({}, 0, 5, first.save_checkpoint, progress_bar=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000005", "step_00000010"]
    again = fresh()
    assert again.resume(tmp_path, "run-a", keep=2, is_main=True) == 10
    assert again.history == first.history and again.tokens_seen == first.tokens_seen
    assert all(torch.equal(a, b) for a, b in zip(first.parts.module.state_dict().values(),
                                                 again.parts.module.state_dict().values()))
    other = fresh()
    assert other.resume(tmp_path, "run-b", keep=2, is_main=True) is None and other.step == 0
    assert list(tmp_path.iterdir()) == []  # another run's checkpoints are cleared
