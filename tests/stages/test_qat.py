import collections
import dataclasses
import json
import shutil

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from safetensors.torch import load_file

from stages import qat
from stages.common.compress.deployable import DeployLM
from stages.common.compress.int8_pairs import EXACT_EVERYWHERE, EXACT_VNNI_ONLY, exact_on, int8_weight_pairs
from stages.common.compress.onnx_runtime import (
    emulated_logits,
    export_onnx,
    int8_kernels,
    optimize_onnx,
    run_logits,
    session,
)
from stages.common.compress.quant import (
    ActQuant,
    QuantScheme,
    fake_quant_weight,
    freeze,
    load_quant_state,
    quantize_weight,
    read_scheme,
    set_mode,
)
from stages.common.lm.model import CHECKPOINT_NAME, Transformer, preset
from stages.common.training import checkpoint
from stages.common.training.checkpoint import CheckpointParams
from tests.conftest import skip_or_fail
from tests.fixtures.compress import make_inputs, tiny_qat_params
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
VOCAB = 97


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, one_torch_thread):
    return make_inputs(tmp_path_factory.mktemp("qat_inputs"))


def calibrated(scheme: QuantScheme, dim: int = 32) -> DeployLM:
    torch.manual_seed(0)
    model = DeployLM(Transformer(preset("debug", VOCAB, dim=dim)).eval(), scheme).eval()
    set_mode(model, "observe")
    with torch.no_grad():
        for _ in range(3):
            model(torch.randint(0, VOCAB, (4, 32)))
    freeze(model)
    return model


@pytest.mark.parametrize("bits,qmax", [(7, 63), (8, 127)])
def test_weights_are_int8_per_output_channel_symmetric(bits, qmax):
    assert QuantScheme(weight_bits=bits).weight_qmax == qmax
    w_t = torch.randn(32, 8) * torch.linspace(0.1, 3, 8)  # (in, out): a different range per output channel
    q, scale = quantize_weight(w_t, qmax)
    assert q.dtype == torch.int8 and int(q.min()) >= -qmax and int(q.max()) <= qmax
    assert scale.shape == (8,) and (q.abs().amax(0) == qmax).all()  # each channel uses its full range
    torch.testing.assert_close(fake_quant_weight(w_t, qmax), q.float() * scale)


def test_the_default_scheme_is_exact_on_cpus_without_vnni():
    assert QuantScheme().weight_bits == 7  # 255 x 63 x 2 fits the int16 pair sums of AVX2 kernels
    with pytest.raises(ValueError, match="weight_bits"):
        QuantScheme(weight_bits=4)


@pytest.mark.parametrize("symmetric", [False, True])
def test_activation_quantizer_calibrates_then_freezes(symmetric):
    aq = ActQuant(QuantScheme(activation_symmetric=symmetric))
    aq.mode = "observe"
    x = torch.linspace(-1.0, 3.0, 1000)
    assert aq(x) is x  # observing passes through
    aq.freeze()
    if symmetric:
        assert aq.zero_point.item() == 0 and aq.scale.item() == pytest.approx(3 / 127)
    else:
        assert 0 < aq.zero_point.item() < 255 and aq.scale.item() == pytest.approx(4 / 255)
    y = aq(x)
    assert len(torch.unique(y)) <= 256 and (y - x).abs().max() <= aq.scale.item() / 2 + 1e-6
    aq(torch.full((10,), 100.0))
    assert aq.hi.item() == pytest.approx(3.0)  # frozen: no longer observing


def int8_onnx(tmp_path, scheme: QuantScheme, dim: int) -> tuple[object, torch.Tensor, np.ndarray]:
    """(optimised INT8 ONNX path, ids, the fake-quant torch logits it must reproduce)."""
    model = calibrated(scheme, dim)  # head size 8: plain ops; 16: fused
    ids = torch.randint(0, VOCAB, (3, 40))
    with torch.no_grad():
        expected = model(ids).numpy()
    model.use_int8_tables()
    with torch.no_grad():
        np.testing.assert_array_equal(model(ids).numpy(), expected)  # the int8 tables are the same numbers
    raw = export_onnx(model, tmp_path / "qdq.onnx", VOCAB)
    return optimize_onnx(raw, tmp_path / "int8.onnx", 1), ids, expected


def assert_matches_fake_quant(got: np.ndarray, expected: np.ndarray) -> None:
    assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()  # rounding at a few boundaries at most
    assert (got.argmax(-1) == expected.argmax(-1)).mean() > 0.95


@pytest.mark.parametrize("symmetric,dim", [(False, 32), (True, 32), (False, 64)])
def test_qat_model_exports_to_an_integer_onnx_graph_that_runs_in_onnxruntime(tmp_path, symmetric, dim,
                                                                            record_property):
    record_property("int8_kernels", int8_kernels())  # which integer kernels this CPU ran (junit report)
    path, ids, expected = int8_onnx(tmp_path, QuantScheme(activation_symmetric=symmetric), dim)
    graph = onnx.load(str(path)).graph
    ops = collections.Counter(n.op_type for n in graph.node)
    assert ops["MatMulIntegerToFloat"] == 2 * 4  # per layer: qkv, wo, w1|w3, w2
    assert ops["GroupQueryAttention"] == (2 if dim == 64 else 0)
    assert ops["SkipSimplifiedLayerNormalization"] == 2 * 2  # residual add + RMSNorm: one node
    assert (ops["Add"] == 0) == (dim == 64)  # with fused attention, no Add is left
    assert ops["QGemm"] == 1  # the output projection, on the int8 embedding table itself
    int8_bytes = sum(numpy_helper.to_array(i).nbytes for i in graph.initializer if i.data_type == onnx.TensorProto.INT8)
    float_bytes = sum(numpy_helper.to_array(i).nbytes for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT)
    assert int8_bytes > float_bytes  # weights and the embedding table are stored as int8
    got = run_logits(session(path, 1), ids)
    assert got.shape == (3, 40, VOCAB)
    assert_matches_fake_quant(got, expected)
    assert run_logits(session(path, 1), ids[:1, :7]).shape == (1, 7, VOCAB)  # dynamic batch and sequence


@pytest.fixture(scope="module")
def qemu():
    """AVX2 without VNNI, whatever this machine has: onnxruntime under qemu-user's `-cpu Haswell`."""
    if shutil.which("qemu-x86_64") is None:
        skip_or_fail("qemu-x86_64 is not installed (.ci/run installs Debian's qemu-user)")


@pytest.mark.parametrize("symmetric,dim", [(False, 32), (True, 32), (False, 64)])
def test_the_int8_model_computes_the_same_on_an_avx2_cpu_without_vnni(tmp_path, qemu, symmetric, dim,
                                                                      record_property):
    path, ids, expected = int8_onnx(tmp_path, QuantScheme(activation_symmetric=symmetric), dim)
    native, avx2 = run_logits(session(path, 1), ids), emulated_logits(path, ids, "Haswell")
    record_property("int8_kernels", f"{int8_kernels()} here; AVX2 (int16 pair sums) emulated")
    assert_matches_fake_quant(avx2, expected)
    # integer sums are exact on both kernel families; only the float kernels around them (attention, norms)
    # may round differently by instruction set: far below the 10-25% that saturated sums cost
    np.testing.assert_allclose(avx2, native, rtol=0, atol=1e-3 * np.abs(expected).max())


def test_8_bit_weights_saturate_the_avx2_kernels(tmp_path, qemu):
    """Why the default is 7-bit: the emulated AVX2 CPU really runs the saturating kernels (so the test above
    checks something), and with full-range 8-bit weights its results drift from the fake-quant model."""
    path, ids, expected = int8_onnx(tmp_path, QuantScheme(weight_bits=8), 32)
    drift = np.abs(emulated_logits(path, ids, "Haswell") - expected).max() / np.abs(expected).max()
    assert drift > 0.05


@pytest.mark.parametrize("bits", [7, 8])
def test_the_pair_check_reads_every_integer_matmul_of_an_exported_file(tmp_path, bits):
    """The optimised file's weights as the kernels see them: 7-bit weights fit the int16 pair sums of
    kernels without VNNI (at most 63 + 63), full-range 8-bit ones do not."""
    path, _, _ = int8_onnx(tmp_path, QuantScheme(weight_bits=bits), 32)
    pairs = int8_weight_pairs(path)
    assert collections.Counter(p.op_type for p in pairs) == {"MatMulIntegerToFloat": 2 * 4, "QGemm": 1}
    assert all(p.max_pair_sum <= 126 for p in pairs) if bits == 7 else all(p.max_pair_sum > 128 for p in pairs)
    assert exact_on(pairs) == (EXACT_EVERYWHERE if bits == 7 else EXACT_VNNI_ONLY)


def test_run_writes_ptq_and_qat_and_qat_is_no_worse(inputs, tmp_path):
    params = tiny_qat_params(inputs["teacher"], inputs, tmp_path)
    metrics = qat.run(params)
    assert json.loads((tmp_path / "qat.detail.json").read_text()) == metrics
    for name in ("ptq", "qat"):
        quant_path = tmp_path / "qat" / name / "quant.safetensors"
        assert read_scheme(quant_path) == params.scheme
        loaded = DeployLM(Transformer(preset("debug", 320, max_seq_len=32)), params.scheme)
        load_quant_state(loaded, quant_path)
        assert all(m.mode == "quant" for m in loaded.modules() if isinstance(m, ActQuant))
        assert metrics[f"{name}.val_ppl_ratio"] < 1.1, name  # int8 costs little even on a tiny model
    assert metrics["qat.val_ppl.all"] <= metrics["ptq.val_ppl.all"] * 1.01


def test_an_interrupted_qat_fine_tune_resumes_to_the_same_weights(inputs, tmp_path):
    params = dataclasses.replace(tiny_qat_params(inputs["teacher"], inputs, tmp_path),
                                 checkpoint=CheckpointParams(every=2, keep=3))
    reference = qat.run(params)
    assert reference["qat.resumed_from_step"] == -1
    expected = load_file(str(tmp_path / "qat" / "qat" / CHECKPOINT_NAME))
    newest = checkpoint.list_checkpoints(tmp_path / "qat_checkpoints")[-1]
    assert newest.name == "step_00000004"
    (newest / "_SUCCESS").unlink()  # killed while writing the last checkpoint
    shutil.rmtree(tmp_path / "qat")

    resumed = qat.run(params)
    assert resumed["qat.resumed_from_step"] == 2
    got = load_file(str(tmp_path / "qat" / "qat" / CHECKPOINT_NAME))
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert resumed["qat.val_ppl.all"] == reference["qat.val_ppl.all"]
