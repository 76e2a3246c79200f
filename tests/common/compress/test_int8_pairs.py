import collections
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from stages.common.compress.int8_pairs import (
    EXACT_EVERYWHERE,
    EXACT_VNNI_ONLY,
    PAIR_SUM_LIMIT,
    exact_on,
    int8_weight_pairs,
    max_pair_sum,
)
from stages.common.compress.quant import QuantScheme
from tests.conftest import skip_or_fail
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.onnx_models import int8_onnx

MS = "com.microsoft"
MICROSOFT_OPS = ("MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QGemm")


def one_matmul(tmp_path, op_type: str, weight: np.ndarray, zero_point: int = 0, **attributes) -> str:
    """An ONNX file with one integer matmul on the initializer `weight` ("w"), as onnxruntime's optimiser
    writes them (only the file is read, never run)."""
    k = weight.shape[1] if attributes.get("transB") else weight.shape[0]
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array(1.0, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "a_zp"),
             numpy_helper.from_array(np.array(zero_point, weight.dtype), "w_zp")]
    inputs = {"MatMulInteger": ["a", "w", "a_zp", "w_zp"],
              "MatMulIntegerToFloat": ["a", "w", "s", "s", "a_zp", "w_zp"],
              "QLinearMatMul": ["a", "s", "a_zp", "w", "s", "w_zp", "s", "a_zp"],
              "DynamicQuantizeMatMul": ["x", "w", "s", "w_zp"],
              "QGemm": ["a", "s", "a_zp", "w", "s", "w_zp"]}[op_type]
    node = helper.make_node(op_type, inputs, ["y"], name="mm", domain=MS if op_type in MICROSOFT_OPS else "",
                            **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, k]),
                                            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = str(tmp_path / f"{op_type}.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]),
              path)
    return path


def int8(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.int8)


# (K, N): column 0 holds the largest pair; the other columns are small
SAFE = int8([[100, 1, -5], [28, 2, 7], [-60, 3, -1], [-68, 4, 0]])  # pairs 128, 128 (negative): on the limit
OVER = int8([[100, 1, -5], [29, 2, 7], [-60, 3, -1], [-68, 4, 0]])  # 100 + 29 = 129


@pytest.mark.parametrize("op_type", ["MatMulInteger", "QLinearMatMul", *MICROSOFT_OPS])
def test_a_weight_whose_pairs_reach_128_is_exact_everywhere_and_129_is_not(tmp_path, op_type):
    safe = int8_weight_pairs(one_matmul(tmp_path, op_type, SAFE))
    assert [(p.initializer, p.node, p.op_type, p.max_pair_sum, p.fits_int16) for p in safe] == [
        ("w", "mm", op_type, PAIR_SUM_LIMIT, True)]
    assert exact_on(safe) == EXACT_EVERYWHERE
    over = int8_weight_pairs(one_matmul(tmp_path, op_type, OVER))
    assert over[0].max_pair_sum == 129 and not over[0].fits_int16
    assert exact_on(over) == EXACT_VNNI_ONLY


def test_pairs_run_along_k_in_both_layouts(tmp_path):
    """B is (K, N) for MatMul-style ops and for QGemm without transB; QGemm with transB=1 stores (N, K)."""
    weight = int8([[100, 100], [0, 0]])  # along K: (100, 0) twice; along N it would be 100 + 100
    assert int8_weight_pairs(one_matmul(tmp_path, "MatMulIntegerToFloat", weight))[0].max_pair_sum == 100
    assert int8_weight_pairs(one_matmul(tmp_path, "QGemm", weight, transB=0))[0].max_pair_sum == 100
    transposed = np.ascontiguousarray(weight.T)  # (N, K)
    assert int8_weight_pairs(one_matmul(tmp_path, "QGemm", transposed, transB=1))[0].max_pair_sum == 100
    assert int8_weight_pairs(one_matmul(tmp_path, "QGemm", OVER.T.copy(), transB=1))[0].max_pair_sum == 129


def test_an_odd_k_pairs_its_last_weight_with_zero():
    # K = 3: pairs (0, 64) and (65, 0); pairs starting at k = 1 would give 64 + 65 = 129
    assert max_pair_sum(int8([[0], [64], [65]]), 0) == 65
    assert max_pair_sum(int8([[1], [2], [-128]]), 0) == 128
    assert max_pair_sum(int8([[-128]]), 0) == 128  # K = 1


def test_a_pair_of_opposite_signs_cannot_saturate():
    """255 x 127 - 0 x 127 is the most a (127, -127) pair reaches: it fits, whatever the activations."""
    assert max_pair_sum(int8([[127, -127], [-127, 127]]), 0) == 127
    assert max_pair_sum(int8([[-100], [-29]]), 0) == 129


def test_the_kernels_multiply_the_stored_values_so_a_zero_point_does_not_count(tmp_path):
    """onnxruntime applies zero points through row and column sums, after the pair sums: the stored int8
    values decide (100 + 28 fits even if the zero point is -10)."""
    path = one_matmul(tmp_path, "MatMulIntegerToFloat", SAFE, zero_point=-10)
    assert int8_weight_pairs(path)[0].max_pair_sum == PAIR_SUM_LIMIT


def test_uint8_weights_are_left_out_and_a_weight_that_is_not_an_initializer_fails(tmp_path):
    assert int8_weight_pairs(one_matmul(tmp_path, "MatMulInteger", SAFE.astype(np.uint8) + 100)) == []
    model = onnx.load(one_matmul(tmp_path, "MatMulInteger", SAFE))
    model.graph.node[0].input[1] = "a"  # activations x activations
    onnx.save(model, str(tmp_path / "dynamic.onnx"))
    with pytest.raises(ValueError, match="'mm' multiplies by 'a', which is not an initializer"):
        int8_weight_pairs(tmp_path / "dynamic.onnx")


def test_no_integer_matmul_is_exact_everywhere():
    assert exact_on([]) == EXACT_EVERYWHERE


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("bits", [7, 8])
def test_the_pair_check_reads_every_integer_matmul_of_an_exported_file(tmp_path, bits):
    """The optimised file's weights as the kernels see them: 7-bit weights fit the int16 pair sums of
    kernels without VNNI (at most 63 + 63), full-range 8-bit ones do not."""
    path, _, _ = int8_onnx(tmp_path, QuantScheme(weight_bits=bits), 32)
    pairs = int8_weight_pairs(path)
    assert collections.Counter(p.op_type for p in pairs) == {"MatMulIntegerToFloat": 2 * 4, "QGemm": 1}
    assert all(p.max_pair_sum <= 126 for p in pairs) if bits == 7 else all(p.max_pair_sum > 128 for p in pairs)
    assert exact_on(pairs) == (EXACT_EVERYWHERE if bits == 7 else EXACT_VNNI_ONLY)


_RUN_MATMULS = """
import sys, numpy as np, onnxruntime as ort
options = ort.SessionOptions(); options.intra_op_num_threads = 1; options.log_severity_level = 3
inputs, outputs = np.load(sys.argv[1]), {}
for i, path in enumerate(sys.argv[3:]):
    sess = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    outputs[str(i)] = sess.run(None, {"a": inputs[str(i)]})[0]
np.savez(sys.argv[2], **outputs)
"""


def test_the_check_says_exactly_which_weights_an_avx2_cpu_computes_right(tmp_path):
    """MatMulInteger on one weight column, run by onnxruntime under `qemu-x86_64 -cpu Haswell` (AVX2, no
    VNNI: the int16 pair-sum kernels) with the activations that push each pair furthest (255 on the weights
    of one sign, 0 on the others): its results are the exact integer products where the check says a weight
    fits, and not where it says it does not. This pins the rule: same-sign pairs, the limit 128 for both
    signs, pairs aligned at even k, the stored values (not w - zero point)."""
    if shutil.which("qemu-x86_64") is None:
        skip_or_fail("qemu-x86_64 is not installed (.ci/run installs Debian's qemu-user)")
    cases = {"on_limit": ([100, 28], 0), "over": ([100, 29], 0), "over_negative": ([-100, -29], 0),
             "opposite_signs": ([127, -127], 0), "odd_k": ([0, 64, 65], 0), "zero_point": ([100, 28], -10),
             "zero_point_over": ([100, 29], -10)}
    paths, inputs, exact = [], {}, []
    for i, (name, (column, zero_point)) in enumerate(cases.items()):
        weight = np.array(column, np.int8)[:, None]
        node = helper.make_node("MatMulInteger", ["a", "w", "a_zp", "w_zp"], ["y"], name=name)
        inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array(0, np.uint8), "a_zp"),
                 numpy_helper.from_array(np.array(zero_point, np.int8), "w_zp")]
        graph = helper.make_graph([node], name, [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, None])],
                                  [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
        paths.append(str(tmp_path / f"{name}.onnx"))
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), paths[-1])
        # 8 rows (more than one: not the GEMV path): all 255, 255 on positive weights only, on negative ones only
        a = np.stack([np.full(len(column), 255), 255 * (weight[:, 0] > 0), 255 * (weight[:, 0] < 0)] * 3)[:8]
        inputs[str(i)] = a.astype(np.uint8)
        exact.append(a.astype(np.int64) @ (weight.astype(np.int64) - zero_point))
    np.savez(tmp_path / "inputs.npz", **inputs)
    done = subprocess.run(["qemu-x86_64", "-cpu", "Haswell", sys.executable, "-c", _RUN_MATMULS,
                           str(tmp_path / "inputs.npz"), str(tmp_path / "outputs.npz"), *paths],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    outputs = np.load(tmp_path / "outputs.npz")
    computed_right = {name: bool((outputs[str(i)] == exact[i]).all()) for i, name in enumerate(cases)}
    fits = {name: int8_weight_pairs(path)[0].fits_int16 for name, path in zip(cases, paths)}
    assert computed_right == fits == {"on_limit": True, "over": False, "over_negative": False,
                                      "opposite_signs": True, "odd_k": True, "zero_point": True,
                                      "zero_point_over": False}
