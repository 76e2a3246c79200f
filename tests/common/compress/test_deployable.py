"""`DeployLM`, the model's deployment form, exported to ONNX: the same logits as `Transformer` in FP32, and an
INT8 graph of integer matmuls, fused attention and norms, with the embedding table stored once as int8."""
import collections

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from stages.common.compress.deployable import DeployLM
from stages.common.compress.onnx_runtime import export_onnx, int8_kernels, run_logits, session
from stages.common.compress.quant import QuantScheme
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.onnx_models import VOCAB, assert_matches_fake_quant, int8_onnx, models

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("name", ["gqa_tied", "mha_untied", "pruned_heads", "gqa_fused"])
def test_fp32_onnx_matches_torch(tmp_path, name):
    model = models()[name]
    path = export_onnx(DeployLM(model), tmp_path / "m.onnx", VOCAB)
    ops = [node.op_type for node in onnx.load(path).graph.node]
    assert ("GroupQueryAttention" in ops) == (model.config.head_dim % 16 == 0)
    # every residual add fused with the RMSNorm after it (2 per layer; the first norm has no residual)
    assert ops.count("SkipSimplifiedLayerNormalization") == 2 * model.config.num_layers
    sess = session(path, 1)
    for shape in ((1, 64), (3, 17), (2, 1)):  # dynamic batch and sequence axes
        ids = torch.randint(0, VOCAB, shape)
        with torch.no_grad():
            expected = model(ids).numpy()
        assert np.abs(run_logits(sess, ids) - expected).max() < 1e-4


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
