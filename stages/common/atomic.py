"""Atomic outputs: write to a temporary sibling, then rename into place.

A reader (or DVC) never sees a half-written file or folder. A folder output gets a `_SUCCESS`
marker as its last file; consumers treat a folder without it as incomplete. `file_digest` is the content
digest that manifests and cache keys record.
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import xxhash

SUCCESS_MARKER = "_SUCCESS"


def file_digest(path: Path) -> str:
    """xxh3-128 of a file's bytes (hex), read in 4 MiB chunks."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


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


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success write the marker and swap it in for `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        (tmp / SUCCESS_MARKER).write_text("")
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
