"""One flow run at a time per workspace.

DVC locks the repository only for the length of one command, so between two stage tasks another run
could slip in; this lock covers a whole flow run. It is an advisory `flock` on a file in the workspace's
`.dvc/tmp` (released by the kernel if the process dies, so a crashed run never leaves it stuck), and it
is re-entrant within a process, so `retrain` can run `pipeline` as a subflow while holding it.
"""
from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

LOCK_FILE = Path(".dvc") / "tmp" / "refinery-flow.lock"
POLL_S = 0.5

_held: dict[Path, int] = {}  # lock path -> nesting depth in this process


class WorkspaceBusy(RuntimeError):
    """Another flow run holds the workspace."""


@contextmanager
def workspace_lock(workspace: Path, owner: str, wait_s: float, log: logging.Logger | logging.LoggerAdapter
                   ) -> Iterator[None]:
    """Hold the workspace for `owner` (written into the lock file for the message others get)."""
    path = (workspace / LOCK_FILE).resolve()
    if path in _held:
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        _acquire(f, path, wait_s, log)
        f.truncate(0)
        f.write(owner)
        f.flush()
        _held[path] = 1
        try:
            yield
        finally:
            del _held[path]
            f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)


def _acquire(f: IO[str], path: Path, wait_s: float, log: logging.Logger | logging.LoggerAdapter) -> None:
    deadline = time.monotonic() + wait_s
    logged = False
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = path.read_text(encoding="utf-8").strip() or "another process"
            if time.monotonic() >= deadline:
                raise WorkspaceBusy(
                    f"workspace {path.parents[2]} is busy: {holder} is running there (lock {path}); "
                    f"refused after waiting {wait_s:g} s. Start this run again when that one has finished, "
                    f"or raise lock_wait_s in flows/config.yaml to queue runs.") from None
            if not logged:
                log.info("waiting up to %g s for the workspace: %s holds it", wait_s, holder)
                logged = True
            time.sleep(POLL_S)
