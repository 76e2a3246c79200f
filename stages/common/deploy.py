"""The deployment form of the model: one forward for ONNX export (FP32 or INT8) and for quantization-aware
training, plus the onnxruntime helpers (export, optimise, time, score).

`DeployLM` computes exactly what `Transformer` computes (parity is tested to 1e-4 in onnxruntime) from the
same parameters, rearranged for a small, fast graph; what matters on CPU at this size is the number of
graph nodes as much as the matmuls:
- q, k, v and the rotary "rotate half" of q and k come from ONE matmul: rotate_half is a signed
  permutation of output channels, so its rows are a signed permutation of wq's / wk's rows (no
  Slice/Neg/Concat per layer), and w1 / w3 are one matmul too;
- the causal mask is built once, outside the layers;
- the tied output projection runs as Gemm(transB) on the embedding table, so FP32 stores it once.
With a `QuantScheme`, every matmul input gets a per-tensor activation quantizer (one per distinct input
tensor, so fused matmuls share it) and every weight a per-channel int8 fake quantizer; the embedding
table is int8 per row. `use_int8_tables()` swaps the fake-quantized table for a real int8 buffer before
export: the graph gathers int8 rows (and scales only those), and the output projection is a QGemm on the
same int8 initializer, so the table is stored once, as int8.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
import torch.nn.functional as F
from torch import nn

from stages.common.model import Transformer
from stages.common.quant import ActQuant, QuantLinearTransB, QuantScheme, fake_quant_weight, quantize_weight

log = logging.getLogger("refinery.deploy")
OPSET = 17
INPUT_NAME, OUTPUT_NAME = "input_ids", "logits"


def _rotation(num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row index, sign) such that rows[index] * sign produce rotate_half of the projection's output."""
    half = head_dim // 2
    index = torch.cat((torch.arange(half, head_dim), torch.arange(half)))
    sign = torch.cat((-torch.ones(half), torch.ones(half)))
    offsets = torch.arange(num_heads)[:, None] * head_dim
    return (offsets + index).reshape(-1), sign.repeat(num_heads)


class _LinearTransB(torch.autograd.Function):
    """x (N, in) @ w (out, in).T, exported as Gemm(transB=1) on `w` itself: torch's exporter would otherwise
    fold w.T into a second initializer, storing a tied embedding table twice."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return grad @ w, grad.t() @ x

    @staticmethod
    def symbolic(g, x, w):
        return g.op("Gemm", x, w, transB_i=1)


class LayerQuant(nn.Module):
    def __init__(self, scheme: QuantScheme) -> None:
        super().__init__()
        self.attn_in, self.attn_out = ActQuant(scheme), ActQuant(scheme)  # inputs of wqkv and of wo
        self.ffn_in, self.ffn_mid = ActQuant(scheme), ActQuant(scheme)  # inputs of w1|w3 and of w2


class DeployLM(nn.Module):
    def __init__(self, model: Transformer, scheme: QuantScheme | None = None) -> None:
        super().__init__()
        self.model, self.scheme = model, scheme
        cfg = model.config
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.kv_heads, cfg.head_dim
        # (T, 1, D): broadcast over heads; the model's own (derived, non-persistent) tables
        self.register_buffer("cos", model.rope_cos[:, None, :], persistent=False)
        self.register_buffer("sin", model.rope_sin[:, None, :], persistent=False)
        for name, heads in (("q", cfg.num_heads), ("k", cfg.kv_heads)):
            index, sign = _rotation(heads, cfg.head_dim)
            self.register_buffer(f"rot_{name}_index", index, persistent=False)
            self.register_buffer(f"rot_{name}_sign", sign[:, None], persistent=False)
        self.int8_tables = False
        if scheme is not None:
            self.layer_quant = nn.ModuleList(LayerQuant(scheme) for _ in range(cfg.num_layers))
            self.out_quant = ActQuant(scheme)

    @property
    def quantized(self) -> bool:
        return self.scheme is not None

    def use_int8_tables(self) -> None:
        """Replace the fake-quantized embedding table by int8 buffers (D, V) + per-token scales (for export;
        same values, so logits do not change)."""
        if not (self.quantized and self.scheme.embeddings):
            return
        q, scale = quantize_weight(self.model.tok_embeddings.weight.t())
        self.register_buffer("emb_q", q.t().contiguous(), persistent=False)  # (V, D): rows gather contiguously
        self.register_buffer("emb_scale", scale, persistent=False)
        self.register_buffer("emb_zero", torch.zeros_like(q[0]), persistent=False)  # (V,) int8
        self.int8_tables = True

    def _linear(self, x: torch.Tensor, weight: torch.Tensor, act: ActQuant | None) -> torch.Tensor:
        if act is None:
            return x @ weight.t()
        return act(x) @ fake_quant_weight(weight.t())

    def _embed(self, idx: torch.Tensor) -> torch.Tensor:
        table = self.model.tok_embeddings.weight
        if not (self.quantized and self.scheme.embeddings):
            return F.embedding(idx, table)
        if self.int8_tables:  # gather int8 rows, then scale them
            return self.emb_q[idx].float() * self.emb_scale[idx].unsqueeze(-1)
        return F.embedding(idx, fake_quant_weight(table.t()).t())

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model.output
        if not (self.quantized and self.scheme.output):
            flat = _LinearTransB.apply(x.reshape(-1, x.shape[-1]), out.weight)
            return flat.reshape(x.shape[0], x.shape[1], -1)
        if self.int8_tables and self.model.config.tie_embeddings:
            flat = QuantLinearTransB.apply(self.out_quant(x).reshape(-1, x.shape[-1]), self.emb_q, self.emb_scale,
                                           self.emb_zero)
            return flat.reshape(x.shape[0], x.shape[1], -1)
        return self._linear(x, out.weight, self.out_quant)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids (B, T)."""
        B, T = idx.shape
        H, KV, D = self.num_heads, self.num_kv_heads, self.head_dim
        cos, sin = self.cos[:T], self.sin[:T]
        # built per call (two small nodes) rather than stored: a (max_seq_len^2) float table would be a
        # sizeable share of a small INT8 file
        mask = torch.full((T, T), float("-inf"), device=idx.device).triu(1)
        h = self._embed(idx)
        for i, layer in enumerate(self.model.layers):
            quant = self.layer_quant[i] if self.quantized else None
            at, ff = layer.attention, layer.feed_forward
            wqkv = torch.cat((at.wq.weight, at.wk.weight, at.wv.weight,
                              at.wq.weight[self.rot_q_index] * self.rot_q_sign,
                              at.wk.weight[self.rot_k_index] * self.rot_k_sign))
            qkv = self._linear(layer.attention_norm(h), wqkv, quant.attn_in if quant else None)
            q, k, v, q_rot, k_rot = qkv.split((H * D, KV * D, KV * D, H * D, KV * D), dim=-1)
            q = (q.reshape(B, T, H, D) * cos + q_rot.reshape(B, T, H, D) * sin).transpose(1, 2)  # (B, H, T, D)
            k = (k.reshape(B, T, KV, D) * cos + k_rot.reshape(B, T, KV, D) * sin).transpose(1, 2)
            v = v.reshape(B, T, KV, D).transpose(1, 2)
            if KV != H:
                k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / math.sqrt(D))
            h = h + self._linear(y.transpose(1, 2).reshape(B, T, H * D), at.wo.weight, quant.attn_out if quant else None)
            gate_up = self._linear(layer.ffn_norm(h), torch.cat((ff.w1.weight, ff.w3.weight)), quant.ffn_in if quant else None)
            gate, up = gate_up.chunk(2, dim=-1)
            h = h + self._linear(F.silu(gate) * up, ff.w2.weight, quant.ffn_mid if quant else None)
        return self._project(self.model.norm(h))


def export_onnx(module: nn.Module, path: str | Path, vocab_size: int) -> Path:
    """Trace `module` (ids -> logits) to ONNX with dynamic batch and sequence axes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    example = torch.randint(0, vocab_size, (2, 16))
    module.eval()
    with torch.no_grad():
        torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=OPSET,
                          input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                          dynamic_axes={INPUT_NAME: {0: "batch", 1: "sequence"},
                                        OUTPUT_NAME: {0: "batch", 1: "sequence"}})
    return path


def session_options(num_threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    return options


def optimize_onnx(src: str | Path, dst: str | Path, num_threads: int) -> Path:
    """Save onnxruntime's optimised graph (ORT_ENABLE_EXTENDED: portable across CPUs). On a QDQ model
    this folds weight QuantizeLinear into int8 initializers and fuses the integer matmuls."""
    options = session_options(num_threads)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    return Path(dst)


def session(path: str | Path, num_threads: int) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), session_options(num_threads), providers=["CPUExecutionProvider"])


def run_logits(sess: ort.InferenceSession, ids: np.ndarray | torch.Tensor) -> np.ndarray:
    return sess.run([OUTPUT_NAME], {INPUT_NAME: np.asarray(ids, dtype=np.int64)})[0]


def latency(sess: ort.InferenceSession, batch_size: int, seq_len: int, vocab_size: int, num_runs: int,
            warmup: int = 3, seed: int = 0) -> list[float]:
    """Seconds of each of `num_runs` forwards on (batch_size, seq_len) random ids, after `warmup` runs."""
    ids = np.random.default_rng(seed).integers(0, vocab_size, (batch_size, seq_len), dtype=np.int64)
    for _ in range(warmup):
        run_logits(sess, ids)
    times = []
    for _ in range(num_runs):
        t0 = time.perf_counter()
        run_logits(sess, ids)
        times.append(time.perf_counter() - t0)
    return times


def ort_token_nll(sess: ort.InferenceSession, windows: Iterable[torch.Tensor]) -> tuple[float, int]:
    """(sum of next-token NLL, token count) of an onnxruntime LM over windows (B, T + 1)."""
    total, count = 0.0, 0
    for window in windows:
        logits = torch.from_numpy(run_logits(sess, window[:, :-1]))
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1), reduction="sum")
        total += nll.item()
        count += window[:, 1:].numel()
    return total, count
