"""INT8 quantization pieces: the scheme, per-tensor activation observers / fake quantizers, per-channel
weight fake quantization, and an int8 x float Gemm that exports on the int8 initializer itself.

Why fake quantization rather than `torch.ao.quantization` (deprecated) or pt2e (moved to torchao, not
installed): a fake-quantized model is plain torch, trains with straight-through gradients, and
`torch.onnx.export(..., dynamo=False)` writes its fake quantizers (`FakeQuantize`) as QuantizeLinear /
DequantizeLinear pairs. onnxruntime's graph optimiser then folds the weights' QuantizeLinear into int8
initializers and fuses activation-Q/DQ + weight-DQ + MatMul into `MatMulIntegerToFloat` (and + Gemm into
`QGemm`): integer kernels, VNNI on x86. So the INT8 graph carries exactly the scales the QAT run learned and
calibrated, and the fake quantizers round as QuantizeLinear does (x / scale, half to even): on the same input
both give the same integer levels.

Even so the INT8 model and its fake-quant source differ by a few percent of the largest logit, not by float
rounding: the float ops between the quantizers (norms, attention, the float sums of the fake-quant matmuls)
round differently in torch and onnxruntime, by an ulp or so, and a value that lands that close to a
rounding boundary takes the next integer level in one of them. Each such step (one scale) feeds the next
layers, where it moves more values across boundaries; at the logits the two differ about as much as the
torch model differs from itself after a 1-ulp change of its embeddings (docs/compress.md: The parity check).

Default scheme: weights int8 symmetric per output channel with 7-bit magnitudes (zero point 0, values in
-63..63), activations uint8 asymmetric per tensor (onnxruntime's U8S8 path). Why 7-bit weights: on x86
CPUs without VNNI (AVX2, and AVX-512 without VNNI), onnxruntime's integer kernels multiply uint8 x int8
pairs with `vpmaddubsw`, which adds two products into a saturating int16: 255 x 127 x 2 overflows it and
the INT8 model silently computes something else than its fake-quant source (the same graph is exact on a
VNNI CPU). With |w| <= 63, 255 x 63 x 2 = 32,130 fits, so the graph gives the same numbers on every x86
CPU; this is onnxruntime's `reduce_range` remedy. `weight_bits: 8` (-127..127) is a little more accurate
but is right only where the INT8 model will run on VNNI / AMX CPUs (or ARM); `activation_symmetric:
true` gives int8 activations with zero point 0 (S8S8) instead. bench/int8_schemes.py measures them.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from stages.common.runtime.atomic import atomic_path
from stages.common.runtime.params import param

OBSERVERS = ("minmax", "percentile")
WEIGHT_BITS = (7, 8)
SCHEME_METADATA_KEY = "refinery.quant_scheme"
QUANT_NAME = "quant.safetensors"


@dataclass(frozen=True)
class QuantScheme:
    # 7: |q| <= 63, exact on every x86 CPU | 8: |q| <= 127, exact only on VNNI/AMX CPUs
    weight_bits: int = param(7, choices=WEIGHT_BITS)
    activation_symmetric: bool = False  # false: uint8 + zero point (U8S8 kernels); true: int8, zero point 0
    # minmax: running min/max | percentile: mean per-batch percentiles (clips outliers)
    observer: str = param("minmax", choices=OBSERVERS)
    # percentile observer: the upper percentile kept (lower one = 100 - it)
    percentile: float = param(99.99, gt=50.0, max=100.0)
    embeddings: bool = True  # int8 embedding table (per-row scales)
    output: bool = True  # int8 output projection (the vocab x dim matrix: a large share of a small model)

    def __post_init__(self) -> None:
        if self.observer not in OBSERVERS:
            raise ValueError(f"quant scheme observer must be one of {OBSERVERS}, got {self.observer!r}")
        if self.weight_bits not in WEIGHT_BITS:
            raise ValueError(f"quant scheme weight_bits must be one of {WEIGHT_BITS}, got {self.weight_bits!r}")
        if not 50 < self.percentile <= 100:
            raise ValueError(f"quant scheme percentile must be in (50, 100], got {self.percentile}")

    @property
    def activation_range(self) -> tuple[int, int]:
        return (-128, 127) if self.activation_symmetric else (0, 255)

    @property
    def weight_qmax(self) -> int:
        """Largest |int8 weight|: 63 for 7-bit weights, 127 for 8-bit (symmetric: -qmax..qmax)."""
        return (1 << (self.weight_bits - 1)) - 1


class FakeQuantize(torch.autograd.Function):
    """Quantize to integers and back with ONNX QuantizeLinear's arithmetic: q = clamp(round_half_even(x / scale)
    + zero_point, qmin, qmax), then (q - zero_point) * scale; per tensor (`axis` None) or per channel along
    `axis` (scale and zero point broadcast against x). Exported as a QuantizeLinear/DequantizeLinear pair.
    Why not torch.fake_quantize_*: its CPU kernels multiply by the float reciprocal of the scale, which takes
    some values within an ulp of a half-integer to the other level than QuantizeLinear's division does
    (tests/common/compress/test_quant.py): the torch model would not be quite the graph it exports. Gradients
    pass straight through where x is inside the range, as torch's do."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, axis: int | None, qmin: int,
                qmax: int) -> torch.Tensor:
        q = torch.round(x / scale) + zero_point
        inside = (q >= qmin) & (q <= qmax)
        ctx.save_for_backward(inside)
        return (q.clamp(qmin, qmax) - zero_point) * scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (inside,) = ctx.saved_tensors
        return grad * inside, None, None, None, None, None

    @staticmethod
    def symbolic(g, x, scale, zero_point, axis, qmin, qmax):
        # ONNX zero points are uint8 (activations 0..255) or int8 (-128..127), and so is QuantizeLinear's range
        if (qmin, qmax) not in ((0, 255), (-128, 127)):
            raise ValueError(f"QuantizeLinear takes the range 0..255 or -128..127, got {qmin}..{qmax}")
        zero_point = g.op("Cast", zero_point, to_i=onnx_dtype(qmin))
        axis_attr = {} if axis is None else {"axis_i": axis}
        q = g.op("QuantizeLinear", x, scale, zero_point, **axis_attr)
        return g.op("DequantizeLinear", q, scale, zero_point, **axis_attr)


def onnx_dtype(qmin: int) -> int:
    """The ONNX element type of integers from `qmin` up: UINT8 (2) for 0..255, INT8 (3) for -128..127."""
    return 2 if qmin == 0 else 3


def weight_scale(weight_t: torch.Tensor, qmax: int) -> torch.Tensor:
    """Symmetric per-output-channel scale of a transposed weight (in, out): max |w| / qmax per column."""
    return (weight_t.detach().abs().amax(0) / qmax).clamp_min(1e-12)


def fake_quant_weight(weight_t: torch.Tensor, qmax: int) -> torch.Tensor:
    """int8 symmetric per-output-channel fake quantization (values -qmax..qmax) of a transposed weight (in, out);
    gradients pass straight through. The scale follows the weights (a min/max observer that is never stale), so
    |w| / scale <= qmax: the quantizer's range stays -128..127, the only signed one the ONNX exporter takes."""
    scale = weight_scale(weight_t, qmax)
    return FakeQuantize.apply(weight_t, scale, torch.zeros_like(scale, dtype=torch.int32), 1, -128, 127)


def quantize_weight(weight_t: torch.Tensor, qmax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 values, per-column scale) of a transposed weight (in, out), as `fake_quant_weight` rounds it."""
    scale = weight_scale(weight_t, qmax)
    return torch.clamp(torch.round(weight_t.detach() / scale), -qmax, qmax).to(torch.int8), scale


class QuantLinearTransB(torch.autograd.Function):
    """x (N, in) @ dequantize(q (out, in) int8, per-row scale).T, exported as DequantizeLinear(axis=0) + Gemm(transB=1)
    on the int8 initializer itself, which onnxruntime fuses (with the activation's Q/DQ) into a QGemm. The
    tied embedding table keeps its (vocab, dim) layout, so the embedding lookup gathers contiguous int8 rows
    from the same initializer."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
        return x @ (q.float() * scale[:, None]).t()

    @staticmethod
    def symbolic(g, x, q, scale, zero_point):
        return g.op("Gemm", x, g.op("DequantizeLinear", q, scale, zero_point, axis_i=0), transB_i=1)


class ActQuant(nn.Module):
    """Per-tensor activation fake quantizer with its observer. Modes: `off` (identity), `observe`
    (calibration: records the range, passes x through), `quant` (frozen scale and zero point)."""

    def __init__(self, scheme: QuantScheme) -> None:
        super().__init__()
        self.scheme = scheme
        self.mode = "off"
        self.register_buffer("lo", torch.tensor(0.0))
        self.register_buffer("hi", torch.tensor(0.0))
        self.register_buffer("num_batches", torch.tensor(0))
        self.register_buffer("scale", torch.tensor(1.0))
        self.register_buffer("zero_point", torch.tensor(0, dtype=torch.int32))

    def observe(self, x: torch.Tensor) -> None:
        x = x.detach().float().flatten()
        if self.scheme.observer == "minmax":
            lo, hi = x.min(), x.max()
            if self.num_batches:
                lo, hi = torch.minimum(lo, self.lo), torch.maximum(hi, self.hi)
        else:  # mean of per-batch percentiles over a fixed-size strided sample (torch.quantile caps its input)
            sample = x[:: max(1, x.numel() // (1 << 20))]
            q = torch.tensor([(100 - self.scheme.percentile) / 100, self.scheme.percentile / 100])
            lo, hi = torch.quantile(sample, q)
            n = self.num_batches.item()
            lo, hi = (self.lo * n + lo) / (n + 1), (self.hi * n + hi) / (n + 1)
        self.lo.copy_(lo)
        self.hi.copy_(hi)
        self.num_batches += 1

    def freeze(self) -> None:
        """Fix scale and zero point from the observed range (which always includes 0: exact zero padding)."""
        if not self.num_batches:
            raise RuntimeError("activation quantizer frozen before any calibration batch")
        lo, hi = min(self.lo.item(), 0.0), max(self.hi.item(), 0.0)
        qmin, qmax = self.scheme.activation_range
        if self.scheme.activation_symmetric:
            self.scale.fill_(max(abs(lo), hi, 1e-8) / 127)
            self.zero_point.fill_(0)
        else:
            scale = max(hi - lo, 1e-8) / (qmax - qmin)
            self.scale.fill_(scale)
            self.zero_point.fill_(int(min(qmax, max(qmin, round(qmin - lo / scale)))))
        self.mode = "quant"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "observe":
            self.observe(x)
            return x
        if self.mode == "quant":
            qmin, qmax = self.scheme.activation_range
            return FakeQuantize.apply(x, self.scale, self.zero_point, None, qmin, qmax)
        return x


def set_mode(module: nn.Module, mode: str) -> None:
    for m in module.modules():
        if isinstance(m, ActQuant):
            m.mode = mode


def freeze(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, ActQuant):
            m.freeze()


def save_quant_state(module: nn.Module, scheme: QuantScheme, path: str | Path) -> Path:
    """The frozen activation quantizers' buffers, the scheme in the metadata (weights are saved apart,
    as a normal checkpoint: per-channel weight scales follow from them)."""
    state = {name: buf.contiguous() for name, buf in module.state_dict().items()
             if name.rsplit(".", 1)[-1] in ("lo", "hi", "num_batches", "scale", "zero_point")}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp), metadata={SCHEME_METADATA_KEY: json.dumps(asdict(scheme), sort_keys=True)})
    return Path(path)


def read_scheme(path: str | Path) -> QuantScheme:
    """The scheme a quant state was calibrated with (states written before `weight_bits` existed used 8)."""
    with safe_open(str(path), framework="pt") as f:
        return QuantScheme(**{"weight_bits": 8, **json.loads((f.metadata() or {})[SCHEME_METADATA_KEY])})


def load_quant_state(module: nn.Module, path: str | Path) -> None:
    """Load frozen quantizer buffers saved by `save_quant_state` into `module` and switch them on."""
    missing, unexpected = module.load_state_dict(load_file(str(path)), strict=False)
    expected = {n for n, _ in module.named_buffers() if n.rsplit(".", 1)[-1] in ("lo", "hi", "num_batches", "scale",
                                                                                   "zero_point")}
    if unexpected or expected & set(missing):
        raise ValueError(f"{path}: quantizer state does not match the model (unexpected {unexpected})")
    set_mode(module, "quant")
