"""Our checkpoints as a Hugging Face `LlamaForCausalLM` folder (config.json + model.safetensors).

The architectures are the same computation: RMSNorm (weight * x / rms, fp32 inside), rotary embeddings
on channel pairs (i, i + head_dim/2) with the angle table repeated for both halves (HF's `rotate_half`,
same inv_freq = theta^(-2i/d)), grouped-query attention with kv heads repeated in order
(`repeat_interleave` = HF's `repeat_kv`), SwiGLU down(silu(gate x) * up x) and tied embeddings. So
the weights map one to one, q and k included, with no permutation (the permutation HF's conversion
script applies is for Meta's interleaved-pair checkpoints); tests/stages/test_export.py checks logits.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from stages.common.lm.model import ModelConfig, Transformer

# our name -> Hugging Face name, per layer
LAYER_NAMES = {
    "attention_norm.weight": "input_layernorm.weight",
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
}


def hf_config(cfg: ModelConfig, eos_id: int, pad_id: int | None) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.hidden_dim,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "initializer_range": cfg.init_std,
        "bos_token_id": eos_id,  # documents are separated by the end-of-document token, which also starts one
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "torch_dtype": "float32",
        "use_cache": True,
    }


def pad_heads(model: Transformer) -> Transformer:
    """transformers requires hidden_size % num_attention_heads == 0, which a model with pruned heads can
    break (dim 128, 3 heads of 32). Add all-zero head groups up to the next count that divides dim: a zero
    head (zero q/k/v rows, zero wo columns) adds exactly nothing, so the logits do not change."""
    cfg = model.config
    repeat = cfg.num_heads // cfg.kv_heads
    num_heads = cfg.num_heads
    while cfg.dim % num_heads:
        num_heads += repeat
    if num_heads == cfg.num_heads:
        return model
    padded = Transformer(dataclasses.replace(cfg, num_heads=num_heads,
                                             num_kv_heads=num_heads // repeat if cfg.num_kv_heads else 0))
    state = model.state_dict()
    for i in range(cfg.num_layers):
        for name, axis in (("wq", 0), ("wk", 0), ("wv", 0), ("wo", 1)):
            key = f"layers.{i}.attention.{name}.weight"
            target = padded.state_dict()[key]
            pad = torch.zeros_like(target)
            pad[tuple(slice(0, n) for n in state[key].shape)] = state[key]
            state[key] = pad
    padded.load_state_dict(state)
    return padded.eval()


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    state = model.state_dict()
    out = {"model.embed_tokens.weight": state["tok_embeddings.weight"], "model.norm.weight": state["norm.weight"]}
    if not model.config.tie_embeddings:
        out["lm_head.weight"] = state["output.weight"]
    for i in range(model.config.num_layers):
        for ours, theirs in LAYER_NAMES.items():
            out[f"model.layers.{i}.{theirs}"] = state[f"layers.{i}.{ours}"]
    return {k: v.detach().contiguous().clone() for k, v in out.items()}


def write_hf_folder(model: Transformer, out: Path, eos_id: int, pad_id: int | None) -> None:
    """config.json + model.safetensors (tokenizer files and the model card are added by the caller)."""
    out.mkdir(parents=True, exist_ok=True)
    model = pad_heads(model)
    (out / "config.json").write_text(json.dumps(hf_config(model.config, eos_id, pad_id), indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": pad_id}, indent=2) + "\n")
    save_file(hf_state_dict(model), str(out / "model.safetensors"), metadata={"format": "pt"})
