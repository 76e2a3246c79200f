"""Which x86 CPUs an INT8 ONNX file computes exactly on, read from its int8 weights.

onnxruntime's x86 integer GEMM kernels without VNNI or AMX (AVX2, AVX-512BW) multiply uint8 activations by
int8 weights with `vpmaddubsw`, which adds the two products of each pair of weights adjacent along the
reduction dimension K (k = 0|1, 2|3, ...; an odd K's last weight pairs with a zero) into a saturating
int16. With activations up to 255 a pair can reach 255 x (|w_a| + |w_b|) when both weights have the same
sign (a pair of opposite signs reaches at most 255 x max(|w_a|, |w_b|), which always fits), so the sums are
exact only if 255 x (|w_a| + |w_b|) <= 32,767 for every same-sign pair: |w_a| + |w_b| <= 128. VNNI and AMX
kernels sum in 32 bits and are exact for any int8 weights.

The kernels multiply the stored int8 values: zero points are applied afterwards through row and column
sums (onnxruntime's mlas/lib/qgemm.h), so a weight zero point does not change which pairs saturate.

Pure: an ONNX file in, numbers out (the `onnx` package only, no onnxruntime session).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

PAIR_SUM_LIMIT = 128  # 255 x 128 = 32,640 <= 32,767 < 255 x 129
RULE = "255 x (|w_a| + |w_b|) <= 32,767 for weights adjacent along K"
EXACT_EVERYWHERE = "every x86 CPU with AVX2 or later"
EXACT_VNNI_ONLY = "x86 CPUs with VNNI or AMX only"

# integer matmul op type -> the index of its weight input B (ai.onnx: MatMulInteger, QLinearMatMul; the others
# com.microsoft, which onnxruntime's graph optimiser fuses QDQ matmuls into)
INTEGER_MATMULS = {"MatMulInteger": 1, "QLinearMatMul": 3, "MatMulIntegerToFloat": 1,
                   "DynamicQuantizeMatMul": 1, "QGemm": 3}


@dataclass(frozen=True)
class WeightPairs:
    initializer: str  # the int8 weight's name
    node: str  # the integer matmul node that reads it
    op_type: str
    max_pair_sum: int  # largest |w_a| + |w_b| over same-sign pairs adjacent along K

    @property
    def fits_int16(self) -> bool:
        return self.max_pair_sum <= PAIR_SUM_LIMIT


def max_pair_sum(weight: np.ndarray, k_axis: int) -> int:
    """Largest |w_a| + |w_b| over pairs of same-sign weights adjacent along `k_axis` (k = 2i, 2i + 1)."""
    w = np.moveaxis(weight.astype(np.int32), k_axis, 0)
    if w.shape[0] % 2:
        w = np.concatenate([w, np.zeros_like(w[:1])])
    pairs = w.reshape(w.shape[0] // 2, 2, *w.shape[1:])
    positive, negative = np.clip(pairs, 0, None).sum(1), np.clip(-pairs, 0, None).sum(1)
    return int(max(positive.max(initial=0), negative.max(initial=0)))


def weight_k_axis(node: onnx.NodeProto, weight: np.ndarray) -> int:
    """The axis of B that runs along K: (K, N) for MatMul-style ops (the last two axes), QGemm with transB=1
    stores (N, K)."""
    if node.op_type == "QGemm" and any(a.name == "transB" and a.i for a in node.attribute):
        return weight.ndim - 1
    return weight.ndim - 2


def int8_weight_pairs(path: str | Path) -> list[WeightPairs]:
    """Every int8 weight of every integer matmul in the ONNX file at `path` (one entry per use), with its
    largest adjacent pair sum. Weights stored as uint8 run on kernels that widen to 16 bits before
    multiplying: they cannot saturate and are left out."""
    graph = onnx.load(str(path)).graph
    initializers = {i.name: i for i in graph.initializer}
    found = []
    for node in graph.node:
        if node.op_type not in INTEGER_MATMULS:
            continue
        name = node.input[INTEGER_MATMULS[node.op_type]]
        if name not in initializers:
            raise ValueError(f"{path}: {node.op_type} node {node.name!r} multiplies by {name!r}, which is not an "
                             "initializer: its pair sums cannot be read from the file")
        weight = numpy_helper.to_array(initializers[name])
        if weight.dtype == np.int8:
            found.append(WeightPairs(name, node.name, node.op_type, max_pair_sum(weight, weight_k_axis(node, weight))))
    return found


def exact_on(pairs: list[WeightPairs]) -> str:
    """The x86 CPUs whose onnxruntime integer kernels compute these weights' products exactly."""
    return EXACT_EVERYWHERE if all(p.fits_int16 for p in pairs) else EXACT_VNNI_ONLY
