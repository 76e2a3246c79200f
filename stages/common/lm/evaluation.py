"""Validation perplexity per tier (easy / medium / hard token shards), for any scorer: a torch model or an
onnxruntime session (stages.common.deploy.ort_token_nll). Token-weighted, on non-overlapping windows."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from stages.common.lm.model import Transformer
from stages.common.lm.token_shards import open_tiers

Scorer = Callable[[Iterable[torch.Tensor]], tuple[float, int]]  # windows (B, T + 1) -> (sum of NLL, tokens)


def torch_token_nll(model: nn.Module, windows: Iterable[torch.Tensor], device: torch.device | str = "cpu"
                    ) -> tuple[float, int]:
    """(sum of next-token NLL, token count) in fp32; `model` maps ids to logits (a `Transformer` uses its
    chunked loss path instead of materialising the logits)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.inference_mode():
        for window in windows:
            window = window.to(device)
            inputs, targets = window[:, :-1], window[:, 1:]
            if isinstance(model, Transformer):
                nll = model(inputs, targets) * targets.numel()
            else:
                logits = model(inputs).float()
                nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")
            total += nll.item()
            count += targets.numel()
    model.train(was_training)
    return total, count


def tier_perplexity(score: Scorer, tokens_dir: str, seq_len: int, batch_size: int, max_batches: int = 0
                    ) -> dict[str, float]:
    """Validation perplexity per tier and over all tiers; `max_batches` 0 = every window."""
    out, total, count = {}, 0.0, 0
    for tier, shard in open_tiers(tokens_dir, "val").items():
        nll, n = score(shard.sequential_windows(seq_len, batch_size, max_batches))
        out[tier] = round(math.exp(nll / n), 4) if n else float("nan")
        total, count = total + nll, count + n
    out["all"] = round(math.exp(total / count), 4) if count else float("nan")
    return out
