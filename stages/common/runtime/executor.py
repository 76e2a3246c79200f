"""Where a data stage's shard work runs: `local` (a process pool on this machine) or `ray` (tasks on a
Ray cluster). Two implementations of one small interface, chosen by each stage's `executor` param.

A stage cuts its input into shards (contiguous runs of documents, in input order) and maps a worker
function over them with `map_shards`. The function writes the shard's result into a folder that becomes
`<work_dir>/shard-<i>/` with a `_SUCCESS` marker last (stages.common.runtime.atomic), so a rerun after a lost
worker, a killed stage or a failed node redoes only the shards without one, as datatrove does. Results
come back in shard order, so whatever is global (clean's dedup index, perplexity's tier cutoffs) still
sees documents in input order and the outputs do not depend on the executor or the worker count.

The work folder carries a fingerprint of what its shards were computed from (params, input files, the
stage's code: stages.common.runtime.digest.fingerprint, where the executor params count as placement only,
so a rerun on another executor or worker count keeps finished shards); another fingerprint clears it,
and a folder without one is refused (it is not the stage's).
The run using it holds a lock file in it, so a second run on the same folder stops at once, naming the
first. The stage deletes it once its outputs are published. Pool workers end when the stage process ends,
even when it is killed.
On a multi-node cluster `work_dir`, the stage's inputs and outputs and this checkout must be on a shared
filesystem at the same path on every node (the driver reads the shard results the workers write).
"""
from __future__ import annotations

import fcntl
import importlib
import itertools
import json
import logging
import multiprocessing
import os
import select
import shutil
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.common.runtime.atomic import WORK_LOCK, WORK_MARKER, atomic_dir, check_replaceable, is_complete, write_json

log = logging.getLogger("refinery.executor")
EXECUTORS = ("local", "ray")
SUMMARY = "summary.json"
FINGERPRINT = WORK_MARKER
ROOT = Path(__file__).resolve().parents[2]  # the checkout: Ray workers import `stages` from here


def check_executor(stage: str, executor: str, address: str) -> None:
    """For the stages' Params.__post_init__: a ValueError naming the key."""
    if executor not in EXECUTORS:
        raise ValueError(f"param '{stage}.executor' must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if address and executor != "ray":
        raise ValueError(f"param '{stage}.address' is for executor: ray (got executor: {executor})")


class WorkDir:
    """`<path>/shard-<i>/` per shard; computed from what `_FINGERPRINT` says, else cleared on open. Opening
    takes the folder's lock (held until `remove` or the end of the process); a folder that exists with
    content but no fingerprint is refused, as is one another process holds."""

    def __init__(self, path: str | Path, digest: str, key: str = "work_dir") -> None:
        self.path = Path(path).resolve()  # workers may run in another working directory
        check_replaceable(self.path, FINGERPRINT, key, frozenset({WORK_LOCK}))
        self.path.mkdir(parents=True, exist_ok=True)
        _lock(self.path)
        marker = self.path / FINGERPRINT
        if not (marker.is_file() and marker.read_text() == digest):
            entries = [e for e in self.path.iterdir() if e.name != WORK_LOCK]
            if entries:
                log.info("work folder %s holds shards of other settings: clearing it", self.path)
            for entry in entries:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            marker.write_text(digest)

    def shard(self, index: int) -> Path:
        return self.path / f"shard-{index:05d}"

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        _unlock(self.path)


# Work folders whose lock this process holds (lock file descriptors): opening one again in this process
# (a stage run again after a failure, in tests) is no conflict.
_held: dict[Path, int] = {}


def _lock(folder: Path) -> None:
    """flock the folder's lock file and write who holds it; RuntimeError naming the holder if another
    process does. The kernel releases the lock when the holder ends, however it ends."""
    lock_file = folder / WORK_LOCK
    held = _held.get(folder)
    if held is not None:
        if lock_file.exists() and os.path.samestat(os.fstat(held), lock_file.stat()):
            return
        _unlock(folder)  # the folder was deleted and made again since
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RuntimeError(f"work folder {folder} is in use by {holder}; wait for that run to end or stop it") from None
    command = " ".join(sys.orig_argv).replace("\n", " ")
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} ({command})\n".encode())
    _held[folder] = fd


def _unlock(folder: Path) -> None:
    fd = _held.pop(folder, None)
    if fd is not None:
        os.close(fd)


ShardFn = Callable[[Any, Path], dict[str, Any]]  # (payload, folder to fill) -> small JSON summary


def _run_shard(fn: ShardFn, payload: Any, folder: str) -> dict[str, Any]:
    with atomic_dir(folder) as tmp:
        summary = fn(payload, tmp)
        write_json(tmp / SUMMARY, summary)
    return summary


@dataclass
class ShardResult:
    index: int
    folder: Path
    summary: dict[str, Any]
    resumed: bool  # finished by an earlier run


def _die_with(driver_pid: int) -> None:
    """End this worker process when the driver ends. A pool worker would outlive a killed driver: its
    parent is the forkserver, not the driver, and it waits on a queue whose writing end it holds itself."""
    if hasattr(os, "pidfd_open"):  # Linux: a descriptor that turns readable when the driver exits
        pidfd = os.pidfd_open(driver_pid)  # ProcessLookupError (the worker fails to start) if already gone

        def wait() -> None:
            select.select([pidfd], [], [])
    else:
        def wait() -> None:
            while True:
                time.sleep(0.5)
                try:
                    os.kill(driver_pid, 0)
                except ProcessLookupError:
                    return

    def watch() -> None:
        wait()
        os._exit(1)  # mid-shard: the shard never gets its marker, and the next run redoes it

    threading.Thread(target=watch, name="driver-watch", daemon=True).start()


def _start_worker(driver_pid: int, initializer: Callable[..., None], initargs: tuple) -> None:
    _die_with(driver_pid)
    initializer(*initargs)


class _LocalPool:
    """A process pool (inline when one worker, so a stage can keep its own threads, e.g. torch's). Workers
    come from a forkserver, not a fork of this process: a fork of a process whose threads (OpenMP, Arrow)
    have run leaves locks held in the child, which then hangs in its first parallel region. Each worker
    watches this process and exits when it ends."""

    def __init__(self, num_workers: int, initializer: Callable[..., None], initargs: tuple) -> None:
        self.capacity = num_workers
        self._pool = None
        if num_workers == 1:
            initializer(*initargs)
        else:
            self._pool = ProcessPoolExecutor(num_workers, multiprocessing.get_context("forkserver"), _start_worker,
                                             (os.getpid(), _importable(initializer), initargs))

    def submit(self, fn: ShardFn, payload: Any, folder: str) -> Future | dict[str, Any]:
        if self._pool is None:
            return _run_shard(fn, payload, folder)
        return self._pool.submit(_run_shard, _importable(fn), payload, folder)

    def result(self, handle: Future | dict[str, Any]) -> dict[str, Any]:
        return handle.result() if isinstance(handle, Future) else handle

    def cancel(self, handles: list) -> None:
        for handle in handles:
            if isinstance(handle, Future):
                handle.cancel()  # a shard already running finishes (and keeps its result) in close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


# Per Ray worker process: the token of the map whose initializer last ran here (workers are reused).
_initialized_for: str | None = None


def _ray_task(token: str, initializer: Callable[..., None], initargs_box: list, fn: ShardFn, payload: Any,
              folder: str) -> dict[str, Any]:
    global _initialized_for
    if _initialized_for != token:
        import ray

        initializer(*ray.get(initargs_box[0]))  # boxed, so Ray fetches it only here, once per process
        _initialized_for = token
    return _run_shard(fn, payload, folder)


def _importable(fn: Callable) -> Callable:
    """`python -m stages.<name>` defines the stage's functions in __main__, which Ray would ship by value,
    each with its own globals (a task would not see what the initializer set), and which a forkserver's
    worker cannot import by that name: use the stage's module."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if fn.__module__ == "__main__" and spec is not None:
        return getattr(importlib.import_module(spec.name), fn.__qualname__)
    return fn


def init_ray(address: str, num_cpus: int = 0) -> bool:
    """Join the cluster at `address` ("auto": the one `ray start` runs on this node) or, for "", start a
    local one with `num_cpus` CPUs (0: all) whose servers all listen on 127.0.0.1, without dashboard or
    usage stats. Nothing when this process is already connected. True when this call connected."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not address:  # node IP 127.0.0.1, as Ray does on macOS: the processes it starts read this variable
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    if ray.is_initialized():
        return False
    if not address:
        # This process read the variable when it first imported ray, perhaps before this call. (ray.init's
        # `_node_ip_address="127.0.0.1"` does not help: Ray swaps a loopback address for the node's IP.)
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
    runtime_env = {"env_vars": {"PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}}
    if address:
        ray.init(address=address, runtime_env=runtime_env, configure_logging=False)
    else:
        ray.init(num_cpus=num_cpus or None, include_dashboard=False, runtime_env=runtime_env, configure_logging=False)
    return True


class _RayPool:
    """Ray tasks, one CPU each (see `init_ray`; a cluster this pool started stops with it). The
    initializer's arguments go into the object store once; each worker process runs the initializer once
    per map. Ray retries a task whose worker died (`max_retries`). Tasks are spread over the nodes: under
    Ray's default strategy a task goes where its arguments are, which for shards the driver put is the
    driver's node whenever a CPU frees up there."""

    def __init__(self, address: str, num_workers: int, initializer: Callable[..., None], initargs: tuple) -> None:
        self._started = init_ray(address, num_workers)
        import ray

        self._ray = ray
        self.capacity = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(num_cpus=1, max_retries=3, scheduling_strategy="SPREAD")(_ray_task)
        self._token = uuid.uuid4().hex
        self._initializer = _importable(initializer)
        self._initargs = [ray.put(initargs)]

    def submit(self, fn: ShardFn, payload: Any, folder: str):
        return self._remote.remote(self._token, self._initializer, self._initargs, _importable(fn), payload, folder)

    def result(self, handle) -> dict[str, Any]:
        return self._ray.get(handle)

    def cancel(self, handles: list) -> None:
        """Interrupt them (a shard interrupted never gets its marker) and wait until Ray reports them ended,
        so that a failed stage does not leave tasks running behind it."""
        for handle in handles:
            self._ray.cancel(handle)
        self._ray.wait(handles, num_returns=len(handles), timeout=60)

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()


def map_shards(fn: ShardFn, payloads: Iterable[Any], work: WorkDir, executor: str, address: str, num_workers: int,
               initializer: Callable[..., None], initargs: tuple, window_per_worker: int = 2) -> Iterator[ShardResult]:
    """Run `fn(payload, folder)` for each shard not finished in `work`, `initializer(*initargs)` once per
    worker process first; yield every shard's result in order. At most `window_per_worker` shards per
    worker are in flight (memory stays bounded); finished ones are skipped, their payloads unused.
    A local input of a single shard runs inline: a pool could run nothing of it in parallel, and its
    start-up (a forkserver importing the stage, then the worker's initializer) would be all it adds."""
    payloads = iter(payloads)
    head = list(itertools.islice(payloads, 2))
    if executor == "local" and len(head) < 2:
        num_workers = 1
    payloads = itertools.chain(head, payloads)
    pool = (_RayPool(address, num_workers, initializer, initargs) if executor == "ray"
            else _LocalPool(num_workers, initializer, initargs))
    pending: deque[tuple[int, Path, Any]] = deque()  # (index, folder, handle or None when resumed)
    in_flight = 0

    def pop() -> ShardResult:
        nonlocal in_flight
        index, folder, handle = pending.popleft()
        if handle is None:
            return ShardResult(index, folder, json.loads((folder / SUMMARY).read_text()), resumed=True)
        in_flight -= 1
        return ShardResult(index, folder, pool.result(handle), resumed=False)

    try:
        for index, payload in enumerate(payloads):
            folder = work.shard(index)
            if is_complete(folder):
                pending.append((index, folder, None))
            else:
                pending.append((index, folder, pool.submit(fn, payload, str(folder))))
                in_flight += 1
            while pending and (pending[0][2] is None or in_flight >= pool.capacity * window_per_worker):
                yield pop()
        while pending:
            yield pop()
    finally:  # on an error (or the caller stopping early), what is still queued does not run
        pool.cancel([handle for _, _, handle in pending if handle is not None])
        pool.close()


def resolve_workers(num_workers: int) -> int:
    """0 means every core this process may use."""
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if num_workers:
        return num_workers
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
