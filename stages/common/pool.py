"""How many worker processes a stage uses (the pools themselves live in stages.common.executor)."""
from __future__ import annotations

import os


def resolve_workers(num_workers: int) -> int:
    """0 means every core this process may use."""
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if num_workers:
        return num_workers
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
