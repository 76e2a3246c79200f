"""Structured pruning of MLP channels and attention head groups: importance scores, the units kept, and the
smaller model, which computes what the masked original does."""
import pytest
import torch

from stages.common.compress.pruning import importance, magnitude_importance, mask, select, units_to_keep
from stages.common.compress.pruning import prune as prune_model
from stages.common.lm.model import CHECKPOINT_NAME, Transformer, load_checkpoint, preset
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
VOCAB = 97


@pytest.fixture
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(preset("debug", VOCAB)).eval()  # 4 heads in 2 kv groups, ffn 64


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
