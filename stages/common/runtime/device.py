"""Where and how compute runs: the device (`auto` picks CUDA when present), the precision (bf16 where the hardware has it), autocast, and seeding of every RNG."""
from __future__ import annotations

import contextlib
import random

import numpy as np
import torch

PRECISIONS = ("auto", "fp32", "bf16")


def resolve_device(device: str) -> torch.device:
    """`auto`: CUDA when available, else CPU; `cpu` / `cuda` as named."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else torch.device(device)


def resolve_precision(precision: str, device: torch.device) -> str:
    """`auto`: bf16 where the hardware computes it natively (CUDA with bf16, CPUs with AVX512-BF16 or
    AMX), else fp32 (emulated bf16 matmuls on other CPUs are slower than fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if _cpu_has_native_bf16() else "fp32"


def _cpu_has_native_bf16() -> bool:
    try:
        flags = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:  # not Linux: no cheap way to tell, stay with fp32
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision for the forward pass: weights and optimizer state stay fp32."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision == "fp16":  # needs loss scaling (the train stage's LossScaler)
        return torch.autocast(device.type, dtype=torch.float16)
    return contextlib.nullcontext()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
