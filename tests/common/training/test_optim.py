import pytest
import torch

from stages.common.lm.model import Transformer, preset
from stages.common.runtime.device import resolve_precision
from stages.common.training.optim import OptimParams, configure_optimizer, lr_multiplier
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DEVICE = torch.device("cpu")


def test_warmup_then_cosine_to_the_floor():
    lrs = [lr_multiplier(s, warmup_steps=10, total_steps=110, min_lr_ratio=0.1) for s in range(110)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10]))  # linear warmup
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))  # then never increases
    assert lrs[-1] == pytest.approx(0.1) and lrs[60] == pytest.approx(0.55, abs=0.01)  # cosine midpoint
    assert lr_multiplier(500, 10, 110, 0.1) == pytest.approx(0.1)  # past the end: stays at the minimum


def test_decay_only_on_matrices_and_embeddings():
    model = Transformer(preset("debug", 50))
    optimizer = configure_optimizer(model, OptimParams(weight_decay=0.1), DEVICE)
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert any(p is model.tok_embeddings.weight for p in decay["params"])
    assert sum(p.numel() for g in optimizer.param_groups for p in g["params"]) == model.num_params()  # tied: once


def test_precision_choice():
    assert resolve_precision("fp32", DEVICE) == "fp32" and resolve_precision("bf16", DEVICE) == "bf16"
    assert resolve_precision("auto", DEVICE) in ("fp32", "bf16")
    with pytest.raises(ValueError, match="precision"):
        resolve_precision("fp8", DEVICE)
