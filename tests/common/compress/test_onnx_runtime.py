"""The onnxruntime side of an exported model: logits through a preallocated (IOBinding) forward, and the INT8
graph on an emulated AVX2 CPU without VNNI (qemu-user), whose integer kernels saturate full-range 8-bit weights."""
import shutil

import numpy as np
import pytest

from stages.common.compress.deployable import DeployLM
from stages.common.compress.onnx_runtime import (
    bound_forward,
    emulated_logits,
    export_onnx,
    int8_kernels,
    run_logits,
    session,
)
from stages.common.compress.quant import QuantScheme
from tests.conftest import skip_or_fail
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.onnx_models import VOCAB, assert_matches_fake_quant, int8_onnx, models

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_bound_forward_writes_the_logits_that_run_returns(tmp_path):
    """Latency is timed on an IOBinding forward into a preallocated buffer: the same logits as sess.run."""
    sess = session(export_onnx(DeployLM(models()["gqa_fused"]), tmp_path / "m.onnx", VOCAB), 1)
    ids = np.random.default_rng(0).integers(0, VOCAB, (2, 9))
    forward = bound_forward(sess, ids, VOCAB)
    forward()
    np.testing.assert_array_equal(forward.buffers[1], run_logits(sess, ids))


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
