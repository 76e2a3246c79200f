"""The semantic filter's classification head (multinomial logistic regression over the embedding, n-gram and layout features), its training, threshold selection and reports, and loading trained heads."""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from stages.common.semantic.features import Features

KEEP = "keep"
# Validation examples of keep and of drop below which a threshold chosen on them is low confidence: with a
# handful, F1 1.000 says little (at 30 per class one misjudged example moves recall by 0.03).
MIN_VAL_PER_CLASS = 30


class _SparseMatmul(torch.autograd.Function):
    """x @ w for a fixed sparse x, with the gradient for w computed as x.T @ grad: several times faster
    on CPU than the generic sparse or EmbeddingBag backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, x_t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.x_t = x_t
        return x @ w

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, None, ctx.x_t @ grad


def _csr(f: Features, num_buckets: int, transpose: bool = False) -> torch.Tensor:
    rows = torch.repeat_interleave(torch.arange(len(f.bag_offsets)),
                                   torch.diff(torch.cat([f.bag_offsets, torch.tensor([len(f.bag_ids)])])))
    indices = torch.stack([f.bag_ids, rows] if transpose else [rows, f.bag_ids])
    size = (num_buckets, len(f.bag_offsets)) if transpose else (len(f.bag_offsets), num_buckets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_coo_tensor(indices, f.bag_weights, size).coalesce().to_sparse_csr()


class Head(nn.Module):
    """Multinomial logistic regression over hashed n-grams (a sparse matmul) and dense features."""

    def __init__(self, num_classes: int, num_buckets: int, num_dense: int) -> None:
        super().__init__()
        self.ngram_weight = nn.Parameter(torch.zeros(num_buckets, num_classes))
        self.dense = nn.Linear(num_dense, num_classes)
        nn.init.zeros_(self.dense.weight)
        nn.init.zeros_(self.dense.bias)
        self.register_buffer("dense_mean", torch.zeros(num_dense))
        self.register_buffer("dense_std", torch.ones(num_dense))

    def forward(self, f: Features, x: torch.Tensor | None = None, x_t: torch.Tensor | None = None) -> torch.Tensor:
        dense = (f.dense - self.dense_mean) / self.dense_std
        if x is None:
            x = _csr(f, self.ngram_weight.shape[0])
        if x_t is None:
            ngrams = x @ self.ngram_weight
        else:
            ngrams = _SparseMatmul.apply(x, x_t, self.ngram_weight)
        return ngrams + self.dense(dense)


def train_head(features: Features, targets: np.ndarray, num_classes: int, num_buckets: int, l2: float,
               max_iter: int, seed: int) -> Head:
    """Full-batch L-BFGS on cross-entropy + L2: deterministic and a few seconds for ~10k examples."""
    torch.manual_seed(seed)
    head = Head(num_classes, num_buckets, features.dense.shape[1])
    head.dense_mean.copy_(features.dense.mean(0))
    head.dense_std.copy_(features.dense.std(0).clamp_min(1e-4))
    x, x_t = _csr(features, num_buckets), _csr(features, num_buckets, transpose=True)
    y = torch.from_numpy(targets.astype(np.int64))
    # Balanced class weights: the labels hold more keep than drop examples.
    counts = torch.bincount(y, minlength=num_classes).float().clamp_min(1)
    class_weight = counts.sum() / (num_classes * counts)
    optimizer = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(head(features, x, x_t), y, weight=class_weight)
        loss = loss + l2 * sum((p ** 2).sum() for n, p in head.named_parameters() if "bias" not in n)
        loss.backward()
        return loss

    optimizer.step(closure)
    return head.eval()


def choose_threshold(p_keep: np.ndarray, is_drop: np.ndarray, target_precision: float | None) -> float:
    """Drop when p_keep < threshold. Maximise F1 of the drop class, or, with `target_precision`, the
    recall of drops at least that precise. Thresholds that tie are an interval of scores; its midpoint
    leaves the widest margin on both sides (on separable validation data the lowest one would keep
    everything the head is even slightly unsure about)."""
    if len(p_keep) == 0 or not is_drop.any():
        return 0.0
    scores = np.unique(np.concatenate([p_keep, [0.0, 1.0]]))
    candidates = np.nextafter(scores, 2.0)  # just above each score, so that score is dropped
    keys = []
    for threshold in candidates:
        dropped = p_keep < threshold
        tp = int((dropped & is_drop).sum())
        precision = tp / max(1, int(dropped.sum()))
        recall = tp / int(is_drop.sum())
        if target_precision is not None:
            keys.append(recall if precision >= target_precision else -1.0)
        else:
            keys.append(2 * precision * recall / max(1e-12, precision + recall))
    keys = np.array(keys)
    best = np.flatnonzero(keys == keys.max())
    # the best run of consecutive candidates containing the first maximum
    run_end = best[0]
    while run_end + 1 < len(keys) and keys[run_end + 1] == keys.max():
        run_end += 1
    low = scores[best[0]]  # the highest score dropped by the first best threshold
    high = scores[run_end + 1] if run_end + 1 < len(scores) else 1.0  # the lowest score kept by the last
    return float((low + high) / 2)


def class_counts(is_drop: np.ndarray) -> tuple[int, int]:
    """(keep, drop) examples."""
    return int((~is_drop).sum()), int(is_drop.sum())


def low_confidence(num_keep: int, num_drop: int) -> bool:
    """A threshold (or a head's validation score) from fewer than MIN_VAL_PER_CLASS examples of a class."""
    return min(num_keep, num_drop) < MIN_VAL_PER_CLASS


def binary_report(p_keep: np.ndarray, is_drop: np.ndarray, threshold: float) -> dict[str, float]:
    dropped = p_keep < threshold
    tp = int((dropped & is_drop).sum())
    precision = tp / max(1, int(dropped.sum()))
    recall = tp / max(1, int(is_drop.sum()))
    return {
        "num": int(len(p_keep)),
        "accuracy": float((dropped == is_drop).mean()) if len(p_keep) else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / max(1e-12, precision + recall),
    }


def load_heads(folder: str) -> tuple[dict, dict[str, Head]]:
    """The trained heads of `semantic_head` (safetensors: no pickle) and their config."""
    import json

    from safetensors.torch import load_file

    config = json.loads((Path(folder) / "head.json").read_text())
    tensors = load_file(str(Path(folder) / "head.safetensors"))
    num_buckets = config["ngrams"]["num_buckets"]
    heads = {}
    for name in config["heads"]:
        state = {k[len(name) + 1:]: v for k, v in tensors.items() if k.startswith(f"{name}.")}
        head = Head(len(config["classes"]), num_buckets, state["dense.weight"].shape[1])
        head.load_state_dict(state)
        heads[name] = head.eval()
    return config, heads


def predict(heads: dict[str, Head], pooled: str, features: Features, langs: Sequence[str]) -> np.ndarray:
    """Class probabilities, each row scored by its language's head (or the pooled one)."""
    langs = np.asarray(langs)
    probs = np.zeros((len(langs), heads[pooled].dense.out_features), dtype=np.float32)
    names = np.array([lang if lang in heads else pooled for lang in langs])
    with torch.inference_mode():
        for name in np.unique(names):
            rows = np.flatnonzero(names == name)
            probs[rows] = torch.softmax(heads[str(name)](features.subset(rows)), dim=-1).numpy()
    return probs
