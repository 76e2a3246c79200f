"""The deployment form of the model: one forward for ONNX export (FP32 or INT8) and for quantization-aware
training, plus the onnxruntime helpers (export, optimise, time, score).

`DeployLM` computes exactly what `Transformer` computes (parity is tested to 1e-4 in onnxruntime) from the
same parameters, rearranged for a small, fast graph; on CPU, at these sizes, the number of graph nodes
matters as much as the matmuls (each node costs a few microseconds of dispatch and thread sync):
- q, k and v come from ONE matmul, and w1 / w3 are one matmul too;
- in the exported graph, rotary embedding, causal softmax attention and grouped-query heads are ONE
  onnxruntime `GroupQueryAttention` node (com.microsoft contrib op, packed QKV input, `do_rotary`), in
  place of ~25 Reshape/Transpose/Mul/Softmax nodes per layer (head sizes that are a multiple of 16, as
  onnxruntime's CPU kernel requires; others export as plain ops); in torch (QAT training) the same maths
  runs as plain ops;
- each residual add and the RMSNorm after it are ONE `SkipSimplifiedLayerNormalization` node (contrib op;
  it also outputs the sum, which the residual stream carries on);
- the tied output projection runs as Gemm(transB) on the embedding table, so FP32 stores it once.
With a `QuantScheme`, every matmul input gets a per-tensor activation quantizer (one per distinct input
tensor, so fused matmuls share it) and every weight a per-channel int8 fake quantizer; the embedding
table is int8 per row (`QuantScheme.weight_bits` sets the weights' range). `use_int8_tables()` swaps the fake-quantized table for a real int8 buffer before
export: the graph gathers int8 rows (and scales only those), and the output projection is a QGemm on the
same int8 initializer, so the table is stored once, as int8."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.onnx.symbolic_helper import _get_tensor_sizes, _optional_input_placeholder_tensor

from stages.common.compress.quant import ActQuant, QuantLinearTransB, QuantScheme, fake_quant_weight, quantize_weight
from stages.common.lm.model import Transformer, causal_attention

CONTRIB = "com.microsoft"  # onnxruntime's contrib ops (GroupQueryAttention, SkipSimplifiedLayerNormalization)


def packed_attention(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int, kv_heads: int
                     ) -> torch.Tensor:
    """Causal self-attention with rotary q/k from packed projections qkv (B, T, (H + 2 KV) * D) -> (B, T, H * D):
    what onnxruntime's GroupQueryAttention computes. cos/sin: the model's (max_seq_len, D) tables."""
    B, T, width = qkv.shape
    D = width // (num_heads + 2 * kv_heads)
    q, k, v = (t.reshape(B, T, -1, D).transpose(1, 2)
               for t in qkv.split((num_heads * D, kv_heads * D, kv_heads * D), dim=-1))
    y = causal_attention(q, k, v, cos[:T], sin[:T])
    return y.transpose(1, 2).reshape(B, T, num_heads * D)


class _SequenceInfo(torch.autograd.Function):
    """GroupQueryAttention's length inputs for ids (B, T) without padding: seqlens_k (B,) int32 = T - 1 (the
    index of each row's last token) and total_sequence_length () int32 = T; built once per graph."""

    @staticmethod
    def forward(ctx, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, T = idx.shape
        return torch.full((B,), T - 1, dtype=torch.int32), torch.full((), T, dtype=torch.int32)

    @staticmethod
    def symbolic(g, idx):
        shape = g.op("Shape", idx)
        total = g.op("Cast", g.op("Gather", shape, g.op("Constant", value_t=torch.tensor(1))), to_i=6)  # int32
        batch = g.op("Gather", shape, g.op("Constant", value_t=torch.tensor([0])))
        last = g.op("Sub", total, g.op("Constant", value_t=torch.tensor(1, dtype=torch.int32)))
        return g.op("Expand", last, batch), total


class _GroupQueryAttention(torch.autograd.Function):
    """`packed_attention` in torch; one com.microsoft GroupQueryAttention node in ONNX. cos/sin are
    GroupQueryAttention's half-width tables (max_seq_len, D / 2); only traced at export."""

    @staticmethod
    def forward(ctx, qkv, seqlens, total, cos, sin, num_heads: int, kv_heads: int) -> torch.Tensor:
        return packed_attention(qkv, torch.cat((cos, cos), -1), torch.cat((sin, sin), -1), num_heads, kv_heads)

    @staticmethod
    def symbolic(g, qkv, seqlens, total, cos, sin, num_heads, kv_heads):
        head_dim = cos.type().sizes()[-1] * 2
        none = _optional_input_placeholder_tensor(g)
        out, _, _ = g.op(f"{CONTRIB}::GroupQueryAttention", qkv, none, none, none, none, seqlens, total, cos, sin,
                         num_heads_i=num_heads, kv_num_heads_i=kv_heads, do_rotary_i=1, rotary_interleaved_i=0,
                         scale_f=1 / math.sqrt(head_dim), outputs=3)
        sizes = _get_tensor_sizes(qkv) or [None, None]  # declare the contrib op's output type for the exporter
        out.setType(qkv.type().with_sizes([sizes[0], sizes[1], num_heads * head_dim]))
        return out


class _SkipRMSNorm(torch.autograd.Function):
    """(rmsnorm(x + skip) * weight, x + skip): the residual add and the next RMSNorm, as one onnxruntime
    SkipSimplifiedLayerNormalization node (com.microsoft) in ONNX; only traced at export (the model's
    RMSNorm modules compute it everywhere else)."""

    @staticmethod
    def forward(ctx, x, skip, weight, eps: float):
        total = x + skip
        return F.rms_norm(total, weight.shape, weight, eps), total

    @staticmethod
    def symbolic(g, x, skip, weight, eps):
        out, _, _, total = g.op(f"{CONTRIB}::SkipSimplifiedLayerNormalization", x, skip, weight, epsilon_f=eps,
                                outputs=4)
        out.setType(x.type())  # contrib ops: declare the output types for the exporter's shape inference
        total.setType(x.type())
        return out, total


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
        self.num_heads, self.num_kv_heads = cfg.num_heads, cfg.kv_heads
        # onnxruntime's CPU kernel needs head_size % 16 == 0; other sizes export as plain ops (same maths)
        self.fused_attention = cfg.head_dim % 16 == 0
        half = cfg.head_dim // 2  # GroupQueryAttention's tables: (max_seq_len, D / 2); the model's repeat each half
        self.register_buffer("gqa_cos", model.rope_cos[:, :half].contiguous(), persistent=False)
        self.register_buffer("gqa_sin", model.rope_sin[:, :half].contiguous(), persistent=False)
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
        q, scale = quantize_weight(self.model.tok_embeddings.weight.t(), self.scheme.weight_qmax)
        self.register_buffer("emb_q", q.t().contiguous(), persistent=False)  # (V, D): rows gather contiguously
        self.register_buffer("emb_scale", scale, persistent=False)
        self.register_buffer("emb_zero", torch.zeros_like(q[0]), persistent=False)  # (V,) int8
        self.int8_tables = True

    def _linear(self, x: torch.Tensor, weight: torch.Tensor, act: ActQuant | None) -> torch.Tensor:
        if act is None:
            return x @ weight.t()
        return act(x) @ fake_quant_weight(weight.t(), self.scheme.weight_qmax)

    def _embed(self, idx: torch.Tensor) -> torch.Tensor:
        table = self.model.tok_embeddings.weight
        if not (self.quantized and self.scheme.embeddings):
            return F.embedding(idx, table)
        if self.int8_tables:  # gather int8 rows, then scale them
            return self.emb_q[idx].float() * self.emb_scale[idx].unsqueeze(-1)
        return F.embedding(idx, fake_quant_weight(table.t(), self.scheme.weight_qmax).t())

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
        H, KV = self.num_heads, self.num_kv_heads
        exporting = torch.onnx.is_in_onnx_export()
        fused = self.fused_attention and exporting
        if fused:
            seqlens, total = _SequenceInfo.apply(idx)

        def add_norm(x: torch.Tensor, residual: torch.Tensor, norm: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
            """(norm(residual + x), residual + x); one SkipSimplifiedLayerNormalization node in ONNX."""
            if exporting:
                return _SkipRMSNorm.apply(x, residual, norm.weight, norm.eps)
            residual = residual + x
            return norm(residual), residual

        h = self._embed(idx)
        normed = self.model.layers[0].attention_norm(h)
        for i, layer in enumerate(self.model.layers):
            quant = self.layer_quant[i] if self.quantized else None
            at, ff = layer.attention, layer.feed_forward
            wqkv = torch.cat((at.wq.weight, at.wk.weight, at.wv.weight))
            qkv = self._linear(normed, wqkv, quant.attn_in if quant else None)
            if fused:
                y = _GroupQueryAttention.apply(qkv, seqlens, total, self.gqa_cos, self.gqa_sin, H, KV)
            else:
                y = packed_attention(qkv, self.model.rope_cos, self.model.rope_sin, H, KV)
            normed, h = add_norm(self._linear(y, at.wo.weight, quant.attn_out if quant else None), h, layer.ffn_norm)
            w13 = torch.cat((ff.w1.weight, ff.w3.weight))
            gate_up = self._linear(normed, w13, quant.ffn_in if quant else None)
            hidden = ff.w1.weight.shape[0]  # static sizes: one Split node (chunk would trace Shape/Div/Slice)
            gate, up = gate_up.split((hidden, hidden), dim=-1)
            following = self.model.layers[i + 1].attention_norm if i + 1 < len(self.model.layers) else self.model.norm
            normed, h = add_norm(self._linear(F.silu(gate) * up, ff.w2.weight, quant.ffn_mid if quant else None), h,
                                 following)
        return self._project(normed)
