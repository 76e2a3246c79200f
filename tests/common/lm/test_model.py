import dataclasses
import math

import pytest
import torch

from stages.common.lm.model import (
    CONFIG_METADATA_KEY,
    PRESETS,
    ModelConfig,
    Transformer,
    load_checkpoint,
    preset,
    read_metadata,
    save_checkpoint,
)
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 97


@pytest.fixture
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(preset("debug", VOCAB)).eval()


def test_shapes_and_loss(model):
    idx = torch.randint(0, VOCAB, (3, 17))
    assert model(idx).shape == (3, 17, VOCAB)
    assert model.hidden_states(idx).shape == (3, 17, model.config.dim)
    loss = model(idx, torch.randint(0, VOCAB, (3, 17)))
    assert loss.shape == () and abs(loss.item() - math.log(VOCAB)) < 0.3  # ~uniform at init (small init_std)


def test_loss_matches_plain_cross_entropy_and_ignores_minus_100(model):
    idx = torch.randint(0, VOCAB, (2, 40))
    targets = torch.randint(0, VOCAB, (2, 40))
    targets[0, 30:] = -100
    expected = torch.nn.functional.cross_entropy(model(idx).view(-1, VOCAB), targets.view(-1), ignore_index=-100)
    torch.testing.assert_close(model(idx, targets), expected)


def test_causal_a_future_token_does_not_change_earlier_logits(model):
    idx = torch.randint(0, VOCAB, (1, 32))
    changed = idx.clone()
    changed[0, 20] = (idx[0, 20] + 1) % VOCAB
    before, after = model(idx), model(changed)
    torch.testing.assert_close(before[:, :20], after[:, :20])
    assert not torch.allclose(before[:, 20:], after[:, 20:])


def test_right_padding_does_not_change_real_positions(model):
    """Scoring pads batches on the right; causality makes that exact."""
    idx = torch.randint(0, VOCAB, (1, 10))
    padded = torch.cat([idx, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(idx), model(padded)[:, :10])


def test_rotary_positions_matter(model):
    # Without position information a permutation of the prefix would give the same last logits.
    idx = torch.arange(8)[None] + 3
    swapped = idx[:, [1, 0, 2, 3, 4, 5, 6, 7]]
    assert not torch.allclose(model(idx)[:, -1], model(swapped)[:, -1])


def test_too_long_sequence_is_an_error(model):
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, model.config.max_seq_len + 1, dtype=torch.long))


def test_backward_reaches_every_parameter(model):
    model.train()
    idx = torch.randint(0, VOCAB, (2, 16))
    model(idx, idx).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_tied_embeddings_and_param_count(model):
    assert model.output.weight is model.tok_embeddings.weight
    untied = Transformer(dataclasses.replace(model.config, tie_embeddings=False))
    assert untied.num_params() == model.num_params() + VOCAB * model.config.dim
    assert model.num_params(embeddings=False) == model.num_params() - VOCAB * model.config.dim


def test_presets_sizes():
    with torch.device("meta"):  # no memory, no init cost
        big = Transformer(preset("gpu_125m", 32_000))
    assert 80e6 < big.num_params(embeddings=False) < 90e6 and 100e6 < big.num_params() < 130e6
    assert set(PRESETS) >= {"debug", "cpu_small", "gpu_125m"}
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("huge", 10)


@pytest.mark.parametrize("kwargs, match", [
    ({"dim": 30, "num_heads": 4}, "divisible"),
    ({"dim": 24, "num_heads": 8}, "even"),
    ({"num_heads": 4, "num_kv_heads": 3}, "num_kv_heads"),
    ({"num_layers": 0}, "num_layers"),
])
def test_invalid_config_is_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{"dim": 32, **kwargs})


def test_checkpoint_round_trip_carries_the_config(model, tmp_path):
    path = save_checkpoint(model, tmp_path / "m" / "model.safetensors")
    metadata = read_metadata(path)
    assert ModelConfig.from_json(metadata[CONFIG_METADATA_KEY]) == model.config
    loaded = load_checkpoint(path)
    assert loaded.config == model.config and loaded.output.weight is loaded.tok_embeddings.weight
    idx = torch.randint(0, VOCAB, (2, 12))
    torch.testing.assert_close(loaded.eval()(idx), model(idx), rtol=0, atol=0)
    assert [p.name for p in tmp_path.joinpath("m").iterdir()] == ["model.safetensors"]  # atomic: no temp left
    # Same model, same bytes (the tied weight is stored once, under a fixed name).
    assert save_checkpoint(loaded, tmp_path / "again.safetensors").read_bytes() == path.read_bytes()
    untied = Transformer(dataclasses.replace(model.config, tie_embeddings=False))
    reloaded = load_checkpoint(save_checkpoint(untied, tmp_path / "untied.safetensors"))
    torch.testing.assert_close(reloaded.output.weight, untied.output.weight, rtol=0, atol=0)


def test_foreign_safetensors_is_rejected(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "x.safetensors"))
    with pytest.raises(ValueError, match="not a refinery checkpoint"):
        load_checkpoint(tmp_path / "x.safetensors")


def test_bf16_autocast_is_close_to_fp32(model):
    idx = torch.randint(0, VOCAB, (2, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(idx, idx).item()
    assert abs(low - model(idx, idx).item()) < 0.05
