"""Weights quantize to int8 per output channel and activation quantizers calibrate then freeze; the fake
quantizers compute what the exported QuantizeLinear/DequantizeLinear nodes compute; every node of a
small INT8 file computes what its fake-quant torch model does; and a tiny INT8 export agrees with its
fake-quant model within the export stage's parity thresholds."""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import numpy_helper
from torch import nn

from stages import export
from stages.common.compress.deployable import DeployLM, packed_attention
from stages.common.compress.onnx_runtime import (
    INPUT_NAME,
    export_onnx,
    int8_kernels,
    optimize_onnx,
    run_logits,
    session,
    session_options,
)
from stages.common.compress.quant import (
    ActQuant,
    QuantScheme,
    fake_quant_weight,
    quantize_weight,
    weight_scale,
)
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.onnx_models import calibrated

pytestmark = pytest.mark.usefixtures("one_torch_thread")
VOCAB = 97


class Lookup(nn.Module):
    """ids (1, N) -> f(values[ids]): a float input for `f` through `export_onnx`, which traces token ids; the
    gather copies values exactly, so torch and onnxruntime quantize the very same floats."""

    def __init__(self, values: torch.Tensor, f: nn.Module) -> None:
        super().__init__()
        self.register_buffer("values", values)
        self.f = f

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.f(self.values[ids])


def near_halfway(scale: float, zero_point: int, qmin: int, qmax: int) -> torch.Tensor:
    """float32 values within an ulp of every halfway point between two levels of the quantizer, where a
    division by the scale and a multiplication by its reciprocal can round to different levels; plus
    values inside and outside the range."""
    halves = (torch.arange(qmin, qmax, dtype=torch.float64) + 0.5 - zero_point) * scale
    inside = torch.linspace((qmin - zero_point) * scale, (qmax - zero_point) * scale, 1001, dtype=torch.float64)
    outside = torch.tensor([(qmin - zero_point - 3) * scale, (qmax - zero_point + 3) * scale], dtype=torch.float64)
    return torch.cat((halves, inside, outside)).float()


@pytest.mark.parametrize("scale,zero_point,symmetric", [(0.0123, 101, False), (3 / 255, 77, False), (0.1, 7, False),
                                                        (0.0123, 0, True)])
def test_activation_fake_quant_rounds_as_the_exported_quantize_linear(tmp_path, scale, zero_point, symmetric):
    """Same input, same levels: the torch quantizer divides by the scale as QuantizeLinear does (torch's
    fake_quantize kernels multiply by the reciprocal and take some near-halfway values to the other level)."""
    quant = ActQuant(QuantScheme(activation_symmetric=symmetric))
    quant.scale.fill_(scale)
    quant.zero_point.fill_(zero_point)
    quant.mode = "quant"
    qmin, qmax = quant.scheme.activation_range
    values = near_halfway(scale, zero_point, qmin, qmax)
    model = Lookup(values, quant)
    ids = torch.arange(len(values))[None]
    with torch.no_grad():
        expected = model(ids).numpy()
    got = run_logits(session(export_onnx(model, tmp_path / "q.onnx", len(values)), 1), ids)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node]
    assert ops.count("QuantizeLinear") == ops.count("DequantizeLinear") == 1
    np.testing.assert_array_equal(got, expected)


def test_weight_fake_quant_rounds_as_the_exported_int8_weights(tmp_path):
    """The int8 weights onnxruntime folds out of the exported QuantizeLinear are the levels the fake-quant
    model trained and was checked with, near-halfway weights included (and `quantize_weight`'s, which the
    int8 embedding table uses)."""
    qmax = QuantScheme().weight_qmax
    w = torch.randn(64, 8, generator=torch.Generator().manual_seed(0)) * torch.linspace(0.01, 2, 8)
    w[0] = w.abs().amax(0) * 1.01  # every column's largest weight: the rows below stay inside its range
    scale = weight_scale(w, qmax)
    k = torch.randint(-qmax, qmax - 1, (63, 8), generator=torch.Generator().manual_seed(1))
    w[1:] = ((k.double() + 0.5) * scale.double()).float()  # within an ulp of halfway between two levels
    assert torch.equal(weight_scale(w, qmax), scale)
    q, q_scale = quantize_weight(w, qmax)
    fake = fake_quant_weight(w, qmax)
    torch.testing.assert_close(fake, q.float() * q_scale, rtol=0, atol=0)

    class QuantMatmul(nn.Module):  # as DeployLM's: a quantized input makes it an integer matmul
        def __init__(self) -> None:
            super().__init__()
            self.act = ActQuant(QuantScheme())
            self.act.mode = "quant"

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(x) @ fake_quant_weight(w, qmax)

    raw = export_onnx(Lookup(torch.randn(VOCAB, 64), QuantMatmul()), tmp_path / "w.qdq.onnx", VOCAB)
    folded = optimize_onnx(raw, tmp_path / "w.onnx", 1)
    int8 = [numpy_helper.to_array(i) for i in onnx.load(str(folded)).graph.initializer
            if i.data_type == onnx.TensorProto.INT8 and i.dims == [64, 8]]
    assert len(int8) == 1
    np.testing.assert_array_equal(int8[0], torch.round(fake / scale).numpy().astype(np.int8))


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


def test_fake_quant_passes_gradients_straight_through_inside_the_range():
    quant = ActQuant(QuantScheme())
    quant.scale.fill_(0.1)
    quant.zero_point.fill_(10)  # range -1.0 .. 24.5
    quant.mode = "quant"
    x = torch.tensor([-5.0, -0.96, 0.0, 3.33, 24.5, 30.0], requires_grad=True)
    quant(x).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize("dim", [32, 64])  # head size 8: attention as plain ops; 16: GroupQueryAttention
def test_a_tiny_int8_export_agrees_with_its_fake_quant_model_within_the_export_thresholds(tmp_path, dim):
    """The export stage's parity check on a tiny model, with this CPU's integer kernels (exact on every x86
    CPU with AVX2 or later for 7-bit weights). Within the thresholds, not to float rounding: the float ops
    between the quantizers round a little differently in torch and onnxruntime, and a value next to a
    rounding boundary takes the next level in one of them (docs/compress.md: The parity check)."""
    if int8_kernels() == "SSE / other":
        pytest.skip(f"onnxruntime's integer kernels on this CPU are not x86 AVX2 or later ({int8_kernels()})")
    model = calibrated(QuantScheme(), dim, seq_len=64)
    path = export.export_int8(model, tmp_path / "model.int8.onnx", tmp_path)
    ids = torch.randint(0, VOCAB, (8, 64), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = model(ids).numpy()
    got = run_logits(session(path, 1), ids)
    defaults = {f.name: f.default for f in dataclasses.fields(export.Params)}
    relative_diff = np.abs(got - expected).max() / np.abs(expected).max()
    assert relative_diff <= defaults["int8_max_relative_diff"]
    assert (got.argmax(-1) == expected.argmax(-1)).mean() >= defaults["int8_min_argmax_agreement"]


def every_node_output(path: Path, ids: torch.Tensor) -> dict[str, np.ndarray]:
    """Every tensor of an ONNX graph (node outputs and initializers) on `ids`, the graph run as it is."""
    proto = onnx.load(str(path))
    names = [o for n in proto.graph.node for o in n.output if o]
    del proto.graph.output[:]
    proto.graph.output.extend(onnx.helper.ValueInfoProto(name=name) for name in names)
    options = session_options(1)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    values = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    return values | dict(zip(names, sess.run(names, {INPUT_NAME: ids.numpy()})))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


CHECKED_OPS = ("QuantizeLinear", "MatMulIntegerToFloat", "QGemm", "GroupQueryAttention", "SimplifiedLayerNormalization",
               "SkipSimplifiedLayerNormalization", "QuickGelu")


def torch_counterpart(node: onnx.NodeProto, v: dict[str, np.ndarray], model: DeployLM) -> np.ndarray | None:
    """What the fake-quant torch model computes for `node`'s first output from the graph's own inputs to it
    (None for the ops around them: shapes, gathers, casts, splits, products)."""
    if node.op_type not in CHECKED_OPS:
        return None
    t = [torch.from_numpy(np.array(v[name])) if name else None for name in node.input]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "QuantizeLinear":  # the integer levels of the activation quantizer it was exported from
        quant = model.get_submodule(node.input[1].removesuffix(".scale"))
        return (torch.round(quant(t[0]) / quant.scale) + quant.zero_point).numpy()
    if node.op_type == "MatMulIntegerToFloat":  # (a, b, a_scale, b_scale, a_zero, b_zero)
        return ((t[0].float() - t[4].float()) * t[2] @ ((t[1].float() - t[5].float()) * t[3])).numpy()
    if node.op_type == "QGemm":  # (a, a_scale, a_zero, b, b_scale, b_zero), b transposed: the output projection
        assert attrs["transB"] == 1
        weight = (t[3].float() - t[5].float()[:, None]) * t[4][:, None]  # (vocab, dim), per-row scales
        return ((t[0].float() - t[2].float()) * t[1] @ weight.t()).numpy()
    if node.op_type == "GroupQueryAttention":
        return packed_attention(t[0], model.model.rope_cos, model.model.rope_sin, model.num_heads,
                                model.num_kv_heads).numpy()
    if node.op_type == "SimplifiedLayerNormalization":
        return rms_norm(t[0], t[1], attrs["epsilon"]).numpy()
    if node.op_type == "SkipSimplifiedLayerNormalization":
        return rms_norm(t[0] + t[1], t[2], attrs["epsilon"]).numpy()
    if node.op_type == "QuickGelu":  # SiLU
        assert attrs.get("alpha", 1.0) == 1.0
        return F.silu(t[0]).numpy()
    raise AssertionError(node.op_type)


def test_every_node_of_the_int8_file_computes_what_the_fake_quant_model_does(tmp_path):
    """The published (optimised) INT8 graph, node by node, each fed the graph's own inputs: the quantizers give
    the same integer levels, and the integer matmuls, attention, norms and SiLU agree with the fake-quant torch
    model to float rounding. The model as a whole agrees less closely (docs/compress.md: The parity check)."""
    model = calibrated(QuantScheme(), 64, seq_len=64)
    path = export.export_int8(model, tmp_path / "model.int8.onnx", tmp_path)
    values = every_node_output(path, torch.randint(0, VOCAB, (4, 64), generator=torch.Generator().manual_seed(2)))
    checked = collections.Counter()
    with torch.no_grad():
        for node in onnx.load(str(path)).graph.node:
            expected = torch_counterpart(node, values, model)
            if expected is None:
                continue
            got = values[node.output[0]]
            if node.op_type == "QuantizeLinear":
                np.testing.assert_array_equal(got, expected, err_msg=node.name)
            else:
                np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max(),
                                           err_msg=node.name)
            checked[node.op_type] += 1
    assert checked == {"QuantizeLinear": 2 * 4 + 1, "MatMulIntegerToFloat": 2 * 4, "QGemm": 1,
                       "GroupQueryAttention": 2, "SimplifiedLayerNormalization": 1,
                       "SkipSimplifiedLayerNormalization": 2 * 2, "QuickGelu": 2}
