"""Atomic outputs: write to a temporary sibling, then rename into place.

A reader (or DVC) never sees a half-written file or folder. A folder output gets a `_SUCCESS`
marker as its last file; consumers treat a folder without it as incomplete. A stage's marker names it,
`{"stage": "clean"}`; the executor's shards (and training checkpoints) leave it empty.

A stage replaces or deletes only folders it made: an output folder whose marker names it, a work folder
with its fingerprint (stages.common.runtime.executor), or an empty folder. A folder whose marker names
another stage is refused (a params mistake such as `clean.out_dir: data/raw/demo` would otherwise replace
the raw corpus). An empty marker names no stage: written by a version before markers named their stage, it
stays replaceable by any stage, or every existing output would have to be deleted by hand after an
upgrade; the next run of its stage names it (a DVC pipeline reruns every stage after an upgrade, since
each lists this file as a dependency). Which folders a stage may write is checked before it starts, by
stages.common.runtime.ownership. The temporary siblings a
killed run leaves (`.<name>.*.tmp`, `.<name>.old`) are removed when the next run publishes that folder.
"""
from __future__ import annotations

import contextlib
import csv
import fcntl
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stages.common.runtime.params import ConfigError, shown

SUCCESS_MARKER = "_SUCCESS"  # an output folder's, written last: {"stage": the stage that wrote it}
WORK_MARKER = "_FINGERPRINT"  # a work folder's: the digest of what its shards were computed from
WORK_LOCK = "_LOCK"  # a work folder's: held (flock) by the run using it, which it names




def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _publishable(path: Path, mode: int) -> None:
    """mkstemp/mkdtemp create private (0600/0700) entries; give the output normal permissions."""
    os.chmod(path, mode & ~_umask())


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        _publishable(tmp_path, 0o666)
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_marker(folder: Path, stage: str | None) -> None:
    """`folder`'s `_SUCCESS` marker, naming `stage` (None: no stage, an empty marker)."""
    (folder / SUCCESS_MARKER).write_text(json.dumps({"stage": stage}) + "\n" if stage else "", encoding="utf-8")


def marker_stage(folder: str | Path) -> str | None:
    """The stage that `folder`'s `_SUCCESS` marker names; None for an empty marker. ValueError for content
    no version of this code writes."""
    with open(Path(folder) / SUCCESS_MARKER, "rb") as f:
        data = f.read(4096)  # a marker is a few bytes: more is not one of ours
    if not data.strip():
        return None
    try:
        content = json.loads(data)
    except ValueError:
        content = None
    stage = content.get("stage") if isinstance(content, dict) else None
    if not isinstance(stage, str) or not stage:
        raise ValueError(f"its {SUCCESS_MARKER} is not a completion marker this code writes")
    return stage


def check_replaceable(path: str | Path, marker: str, key: str, ignore: frozenset[str] = frozenset(),
                      stage: str | None = None) -> None:
    """ConfigError unless `path` is absent, an empty folder, or a folder holding `marker` (entries named in
    `ignore` do not count as content) that, for `_SUCCESS`, names no stage or `stage` itself."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if not (path.is_dir() and ((path / marker).is_file() or all(e.name in ignore for e in path.iterdir()))):
        raise ConfigError(f"refusing to replace {path}: it exists and was not created by this stage; "
                          f"remove it or pick another {key}")
    if marker != SUCCESS_MARKER or not (path / marker).is_file():
        return
    try:
        owner = marker_stage(path)
    except ValueError as e:
        raise ConfigError(f"refusing to replace {path}: {e}; remove it or pick another {key}") from None
    if owner is not None and owner != stage:
        raise ConfigError(f"refusing to replace {path}: it is the output of stage {shown(owner)}"
                          + (f", not of {stage!r}" if stage else "") + f"; pick another {key}")


def _remove_leftovers(path: Path) -> None:
    """Delete the temporary siblings of `path` that killed runs left; skip those a live run holds."""
    pattern = glob.escape(f".{path.name}.")
    for tmp in path.parent.glob(f"{pattern}*.tmp"):
        if tmp.is_symlink() or not tmp.is_dir():  # atomic_path's files, or not ours
            continue
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:  # published by its run meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held by the run filling it
            continue
        else:
            shutil.rmtree(tmp, ignore_errors=True)
        finally:
            os.close(fd)
    shutil.rmtree(path.with_name(f".{path.name}.old"), ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(path: str | Path, key: str = "output folder", stage: str | None = None) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success write the marker naming `stage` (a stage's output; None: a
    shard or other folder of no stage) and swap it in for `path`. An existing `path` is replaced only if it
    is empty or has a marker naming no stage or `stage` (ConfigError naming `key` otherwise)."""
    path = Path(path)
    check_replaceable(path, SUCCESS_MARKER, key, stage=stage)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    lock = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when this process ends, however it ends
    try:
        yield tmp
        write_marker(tmp, stage)
        _publishable(tmp, 0o777)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(lock)


def write_json(path: str | Path, data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def write_csv(path: str | Path, header: list[str], rows: list[tuple[Any, ...]] | list[list[Any]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def is_complete(path: str | Path) -> bool:
    return (Path(path) / SUCCESS_MARKER).is_file()
