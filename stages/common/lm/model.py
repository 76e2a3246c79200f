"""A Llama-style decoder-only language model, in one file.

RMSNorm (pre-norm), rotary position embeddings, grouped-query causal attention through
`F.scaled_dot_product_attention`, SwiGLU MLP, optionally tied input/output embeddings. No
distributed code lives here: data/tensor/pipeline parallelism is applied from outside (the `train`
stage's `parallelize` step), which is why the blocks are a plain `nn.ModuleList` of identical layers
with plain `nn.Linear` projections.

Checkpoints are one safetensors file whose metadata carries the `ModelConfig` as JSON, so a
checkpoint is self-describing and loading it never unpickles anything.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from stages.common.runtime.atomic import atomic_path

CHECKPOINT_NAME = "model.safetensors"
CONFIG_METADATA_KEY = "refinery.model_config"
LOSS_CHUNK_ROWS = 512
TIED_OUTPUT = "output.weight"  # the same tensor as tok_embeddings.weight when embeddings are tied


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 8192
    dim: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 0  # 0 = num_heads (plain multi-head attention); fewer = grouped-query attention
    ffn_dim: int = 0  # SwiGLU hidden size; 0 = Llama's rule: 2/3 * 4 * dim rounded up to a multiple of 64
    head_size: int = 0  # per-head dim; 0 = dim // num_heads (set when heads are pruned: fewer heads, same size)
    max_seq_len: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "num_layers", "num_heads", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"model config {name!r} must be >= 1, got {getattr(self, name)}")
        if self.head_size < 0 or (not self.head_size and self.dim % self.num_heads):
            raise ValueError(f"model config: dim {self.dim} is not divisible by num_heads {self.num_heads}")
        if self.head_dim % 2:
            raise ValueError(f"model config: head dim {self.head_dim} must be even (rotary pairs)")
        if self.num_kv_heads < 0 or self.num_heads % self.kv_heads:
            raise ValueError(f"model config: num_heads {self.num_heads} is not a multiple of "
                             f"num_kv_heads {self.num_kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.head_size or self.dim // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def hidden_dim(self) -> int:
        return self.ffn_dim or 64 * math.ceil(8 * self.dim / 3 / 64)

    def to_json(self) -> str:
        fields = dataclasses.asdict(self)
        if not self.head_size:  # unpruned models keep the JSON (and checkpoint bytes) older readers know
            del fields["head_size"]
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ModelConfig:
        return cls(**json.loads(text))


# Named sizes. `vocab_size` always comes from the tokenizer (`preset(name, vocab_size)`).
PRESETS: dict[str, ModelConfig] = {
    # every test uses this one: a forward+backward takes milliseconds
    "debug": ModelConfig(dim=32, num_layers=2, num_heads=4, num_kv_heads=2, ffn_dim=64, max_seq_len=64),
    # the demo's default, sized so that scoring the demo corpus on 2 CPU cores fits the time budget
    # (bench/perplexity.py measures it)
    "cpu_small": ModelConfig(dim=128, num_layers=4, num_heads=4, max_seq_len=256),
    # where the deployment chain starts to pay on a 2-core CPU: int8 matmuls outweigh attention and per-node
    # costs; ~12.6M parameters besides the embeddings, ~0.4 s per 8 x 256-token training step on 2 cores in bf16
    "cpu_base": ModelConfig(dim=512, num_layers=4, num_heads=8, max_seq_len=256),
    # the smallest size where INT8 reaches 0.4x the FP32 latency of the pruned model on a 2-core CPU (at
    # cpu_base pruning leaves attention and per-node costs at ~30% of the FP32 matmul time, and INT8 stays
    # near 0.55x); ~28M parameters besides the embeddings (bench/export.py --preset cpu_wide)
    "cpu_wide": ModelConfig(dim=768, num_layers=4, num_heads=12, max_seq_len=256),
    # a bigger CPU/GPU model: ~13M parameters besides the embeddings
    "small_16m": ModelConfig(dim=384, num_layers=8, num_heads=6, max_seq_len=512),
    # GPT-2-small-sized: ~85M parameters besides the embeddings, ~110M with a 32k tied vocabulary
    "gpu_125m": ModelConfig(dim=768, num_layers=12, num_heads=12, ffn_dim=2048, max_seq_len=1024),
}


def preset(name: str, vocab_size: int, **overrides: object) -> ModelConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r} (known: {', '.join(PRESETS)})")
    return dataclasses.replace(PRESETS[name], vocab_size=vocab_size, **overrides)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                     ) -> torch.Tensor:
    """Causal softmax attention (B, H, T, D) of q (B, H, T, D) over k, v (B, KV, T, D), q and k rotated first;
    each key/value head serves H / KV query heads (grouped-query attention)."""
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    if k.shape[1] != q.shape[1]:
        repeat = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 even under bf16 autocast: the mean of squares loses too much in 8 mantissa bits.
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotary_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables (T, head_dim), each angle repeated for both halves of the head. Real-valued rather
    than complex, so ONNX export works."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (i, i + D/2) of x (B, H, T, D) by position-dependent angles.

    In x's dtype, as Hugging Face's Llama does: upcasting q and k to fp32 under bf16 autocast costs more
    than the attention itself on CPU for small models, and the rounding is that of q and k already."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.num_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # Head counts come from the projections' output widths (-1), not the config: under tensor
        # parallelism each rank holds only its share of the heads.
        q = self.wq(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.wk(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # (B, KV, T, D)
        v = self.wv(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        y = causal_attention(q, k, v, cos, sin)  # (B, H, T, D)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rotary_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        # Derived from the config, so not saved in checkpoints (persistent=False).
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        std = self.config.init_std
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue  # norm gains stay 1
            # GPT-2's scaled init: each block adds two residual branches, so shrink their output projections.
            scale = 1 / math.sqrt(2 * self.config.num_layers) if name.endswith(("wo.weight", "w2.weight")) else 1.0
            nn.init.normal_(p, mean=0.0, std=std * scale)

    def hidden_states(self, idx: torch.Tensor) -> torch.Tensor:
        """Final-normed hidden states (B, T, dim) for token ids (B, T)."""
        T = idx.shape[1]
        if T > self.config.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len {self.config.max_seq_len}")
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        h = self.tok_embeddings(idx)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.norm(h)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab) for `idx` (B, T); with `targets` (B, T), the mean cross-entropy instead
        (positions whose target is -100 are ignored)."""
        hidden = self.hidden_states(idx)
        if targets is None:
            return self.output(hidden)
        targets = targets.reshape(-1)
        return self.token_nll(hidden.flatten(0, 1), targets).sum() / (targets != -100).sum()

    def token_nll(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-position negative log-likelihood (N,) of `targets` (N,) given final hidden states (N, dim);
        0 where the target is -100.

        Computed LOSS_CHUNK_ROWS positions at a time: a chunk's (rows, vocab) logits stay in cache, which
        makes the projection + log-softmax several times faster on CPU than one (N, vocab) pass (and
        bounds the logits' memory on any device)."""
        return torch.cat([F.cross_entropy(self.output(h).float(), t, reduction="none", ignore_index=-100)
                          for h, t in zip(hidden.split(LOSS_CHUNK_ROWS), targets.split(LOSS_CHUNK_ROWS))])

    def num_params(self, embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())  # parameters() counts a tied weight once
        return n if embeddings else n - self.tok_embeddings.weight.numel()

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward): 6N for the matmuls plus attention scores
        (PaLM appendix B). N counts the output projection but not the embedding lookup."""
        cfg = self.config
        n = self.num_params(embeddings=False) + (cfg.vocab_size * cfg.dim if cfg.tie_embeddings else 0)
        return 6 * n + 12 * cfg.num_layers * cfg.dim * seq_len


def save_checkpoint(model: Transformer, path: str | Path) -> Path:
    """Write `model` to one safetensors file (atomically), its config in the metadata.

    The metadata has that one key on purpose: safetensors writes metadata from a hash map, so with
    several keys their order (and the file's bytes) would change from run to run."""
    path = Path(path)
    metadata = {CONFIG_METADATA_KEY: model.config.to_json()}
    state = {name: t.contiguous() for name, t in model.state_dict().items()}
    if model.config.tie_embeddings:
        # Stored once, under the embedding's name. (safetensors' save_model picks the name to keep from
        # a set, so the file's bytes would vary from run to run.)
        del state[TIED_OUTPUT]
    with atomic_path(path) as tmp:
        save_file(state, str(tmp), metadata=metadata)
    return path


def read_metadata(path: str | Path) -> dict[str, str]:
    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def read_config(path: str | Path) -> ModelConfig:
    """The config in a checkpoint's metadata, without reading its weights."""
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such checkpoint")
    metadata = read_metadata(path)
    if CONFIG_METADATA_KEY not in metadata:
        raise ValueError(f"{path}: not a refinery checkpoint (no {CONFIG_METADATA_KEY} in its metadata)")
    return ModelConfig.from_json(metadata[CONFIG_METADATA_KEY])


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Transformer:
    """Rebuild the model from the config in the checkpoint, then load its weights (no pickle)."""
    model = Transformer(read_config(path))
    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    expected_missing = [TIED_OUTPUT] if model.config.tie_embeddings else []
    if missing != expected_missing or unexpected:
        raise ValueError(f"{path}: weights do not match the config (missing {missing}, unexpected {unexpected})")
    return model.to(device)
