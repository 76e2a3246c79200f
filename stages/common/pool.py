"""Ordered, bounded parallel map over batches: results come back in input order, and at most
`window` batches are in flight, so memory stays bounded whatever the input size."""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def resolve_workers(num_workers: int) -> int:
    """0 means every core this process may use."""
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if num_workers:
        return num_workers
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def ordered_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    num_workers: int,
    initializer: Callable[..., None],
    initargs: tuple[Any, ...],
    window_per_worker: int = 2,
) -> Iterator[R]:
    """`map(fn, items)` across `num_workers` processes (inline when 1), in order, bounded."""
    if num_workers == 1:
        initializer(*initargs)
        yield from map(fn, items)
        return
    with ProcessPoolExecutor(num_workers, initializer=initializer, initargs=initargs) as pool:
        pending: deque[Future[R]] = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= num_workers * window_per_worker:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
