"""Structured pruning of the Llama-style model: MLP channels and attention heads, scored then removed.

A *unit* is one SwiGLU hidden channel (row j of w1 and w3, column j of w2) or one attention head group
(one key/value head with the query heads that share it: rows of wq/wk/wv, columns of wo). Every layer
keeps the same number of units (each layer picks its own), so the result is again a plain
`ModelConfig` (smaller `ffn_dim`, fewer heads at the same `head_size`): the same code, ONNX graph and
Hugging Face `LlamaForCausalLM` serve it, which per-layer sizes would not allow.

Importance of a unit (`method`):
- `magnitude`: L1 norm of all its weights;
- `activation` (Wanda-style): L1 norm of the unit's output weights (w2 column, wo columns) times the
  mean absolute activation that feeds them on the calibration batches: the size of what the unit adds
  to the residual stream;
- `gradient` (first-order Taylor): |sum over the unit's weights of w * dL/dw| on the calibration
  batches, the loss change if the unit were zeroed, which weighs magnitude by sensitivity.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from stages.common.lm.model import Transformer

METHODS = ("magnitude", "activation", "gradient")


@dataclass
class Importance:
    mlp: list[torch.Tensor]  # per layer: (hidden_dim,)
    heads: list[torch.Tensor]  # per layer: (kv_heads,) one score per key/value head group


def _group_rows(weight: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Sum |w| over the rows of each head group: (groups * rows_per_group, in) -> (groups,)."""
    return weight.abs().reshape(num_groups, -1).sum(1)


def _group_cols(weight: torch.Tensor, num_groups: int) -> torch.Tensor:
    return weight.abs().t().reshape(num_groups, -1).sum(1)


def magnitude_importance(model: Transformer) -> Importance:
    kv = model.config.kv_heads
    mlp, heads = [], []
    for layer in model.layers:
        ff, at = layer.feed_forward, layer.attention
        mlp.append(ff.w1.weight.abs().sum(1) + ff.w3.weight.abs().sum(1) + ff.w2.weight.abs().sum(0))
        heads.append(_group_rows(at.wq.weight, kv) + _group_rows(at.wk.weight, kv) + _group_rows(at.wv.weight, kv)
                     + _group_cols(at.wo.weight, kv))
    return Importance([m.detach() for m in mlp], [h.detach() for h in heads])


def activation_importance(model: Transformer, batches: Iterable[torch.Tensor]) -> Importance:
    """|output weights| x mean |input activation| of w2 (per channel) and wo (per head group)."""
    kv = model.config.kv_heads
    sums: dict[nn.Module, torch.Tensor] = {}
    counts = {"n": 0}

    def hook(module: nn.Module, args: tuple[torch.Tensor]) -> None:
        x = args[0].detach().float().abs().flatten(0, -2).sum(0)  # (in_features,)
        sums[module] = sums.get(module, 0) + x

    handles = [m.register_forward_pre_hook(hook) for layer in model.layers
               for m in (layer.feed_forward.w2, layer.attention.wo)]
    with torch.inference_mode():
        for window in batches:
            model(window[:, :-1])
            counts["n"] += window[:, :-1].numel()
    for h in handles:
        h.remove()
    mlp, heads = [], []
    for layer in model.layers:
        w2, wo = layer.feed_forward.w2, layer.attention.wo
        mlp.append(w2.weight.detach().abs().sum(0) * sums[w2] / counts["n"])
        per_input = wo.weight.detach().abs().sum(0) * sums[wo] / counts["n"]  # (heads * head_dim,)
        heads.append(per_input.reshape(kv, -1).sum(1))
    return Importance(mlp, heads)


def gradient_importance(model: Transformer, batches: Iterable[torch.Tensor]) -> Importance:
    """|sum(w * grad)| per unit, the gradient summed over the calibration batches (first-order Taylor)."""
    kv = model.config.kv_heads
    was_training = model.training
    model.eval()  # no dropout here anyway; eval keeps it deterministic
    model.zero_grad(set_to_none=True)
    for window in batches:
        model(window[:, :-1], window[:, 1:]).backward()
    mlp, heads = [], []
    for layer in model.layers:
        ff, at = layer.feed_forward, layer.attention
        wg = lambda lin: (lin.weight * lin.weight.grad).detach()  # noqa: E731
        mlp.append((wg(ff.w1).sum(1) + wg(ff.w3).sum(1) + wg(ff.w2).sum(0)).abs())
        rows = sum(wg(lin).reshape(kv, -1).sum(1) for lin in (at.wq, at.wk, at.wv))
        heads.append((rows + wg(at.wo).t().reshape(kv, -1).sum(1)).abs())
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return Importance(mlp, heads)


def importance(model: Transformer, method: str, batches: Iterable[torch.Tensor]) -> Importance:
    if method == "magnitude":
        return magnitude_importance(model)
    if method == "activation":
        return activation_importance(model, batches)
    if method == "gradient":
        return gradient_importance(model, batches)
    raise ValueError(f"pruning method must be one of {METHODS}, got {method!r}")


@dataclass
class Keep:
    """Indices of the units each layer keeps, sorted (so kept units stay in their original order)."""
    mlp: list[torch.Tensor]
    groups: list[torch.Tensor]


def units_to_keep(total: int, fraction_pruned: float, multiple: int) -> int:
    """How many of `total` units survive pruning `fraction_pruned`, rounded to a multiple of `multiple`
    (matrix kernels like widths in multiples of 8-16), at least one multiple (or all when fewer)."""
    keep = total * (1 - fraction_pruned)
    keep = max(multiple, int(round(keep / multiple)) * multiple)
    return min(total, keep)


def select(scores: Importance, num_mlp: int, num_groups: int) -> Keep:
    top = lambda s, k: torch.sort(torch.topk(s, k).indices).values  # noqa: E731
    return Keep([top(s, num_mlp) for s in scores.mlp], [top(s, num_groups) for s in scores.heads])


def _head_rows(groups: torch.Tensor, rows_per_group: int) -> torch.Tensor:
    """Row indices of whole head groups in a (groups * rows_per_group, in) projection."""
    return (groups[:, None] * rows_per_group + torch.arange(rows_per_group)).reshape(-1)


def prune(model: Transformer, keep: Keep) -> Transformer:
    """A new, physically smaller model holding only the kept units (weights copied, no masks)."""
    cfg = model.config
    num_mlp, num_groups = len(keep.mlp[0]), len(keep.groups[0])
    if any(len(k) != num_mlp for k in keep.mlp) or any(len(k) != num_groups for k in keep.groups):
        raise ValueError("every layer must keep the same number of units")
    repeat = cfg.num_heads // cfg.kv_heads
    new_cfg = dataclasses.replace(
        cfg, ffn_dim=num_mlp, num_heads=num_groups * repeat, head_size=cfg.head_dim,
        num_kv_heads=num_groups if cfg.num_kv_heads else 0)
    pruned = Transformer(new_cfg).to(model.tok_embeddings.weight.device)
    state = model.state_dict()
    for i, (mlp, groups) in enumerate(zip(keep.mlp, keep.groups)):
        p = f"layers.{i}."
        q_rows = _head_rows(groups, repeat * cfg.head_dim)
        kv_rows = _head_rows(groups, cfg.head_dim)
        state[p + "feed_forward.w1.weight"] = state[p + "feed_forward.w1.weight"][mlp]
        state[p + "feed_forward.w3.weight"] = state[p + "feed_forward.w3.weight"][mlp]
        state[p + "feed_forward.w2.weight"] = state[p + "feed_forward.w2.weight"][:, mlp]
        state[p + "attention.wq.weight"] = state[p + "attention.wq.weight"][q_rows]
        state[p + "attention.wk.weight"] = state[p + "attention.wk.weight"][kv_rows]
        state[p + "attention.wv.weight"] = state[p + "attention.wv.weight"][kv_rows]
        state[p + "attention.wo.weight"] = state[p + "attention.wo.weight"][:, q_rows]
    pruned.load_state_dict({k: v.clone() for k, v in state.items()})
    return pruned


def mask(model: Transformer, keep: Keep) -> Transformer:
    """The same model with the dropped units' weights zeroed in place (what `prune` must equal)."""
    cfg = model.config
    repeat = cfg.num_heads // cfg.kv_heads
    with torch.no_grad():
        for layer, mlp, groups in zip(model.layers, keep.mlp, keep.groups):
            ff, at = layer.feed_forward, layer.attention
            drop = torch.ones(cfg.hidden_dim, dtype=torch.bool)
            drop[mlp] = False
            ff.w1.weight[drop] = 0
            ff.w3.weight[drop] = 0
            ff.w2.weight[:, drop] = 0
            drop_q = torch.ones(at.wq.weight.shape[0], dtype=torch.bool)
            drop_q[_head_rows(groups, repeat * cfg.head_dim)] = False
            drop_kv = torch.ones(at.wk.weight.shape[0], dtype=torch.bool)
            drop_kv[_head_rows(groups, cfg.head_dim)] = False
            at.wq.weight[drop_q] = 0
            at.wk.weight[drop_kv] = 0
            at.wv.weight[drop_kv] = 0
            at.wo.weight[:, drop_q] = 0
    return model
