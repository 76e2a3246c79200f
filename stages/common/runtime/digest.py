"""Content digests: `file_digest` (xxh3-128 of a file's bytes) is what manifests and cache keys record."""
from __future__ import annotations

from pathlib import Path

import xxhash


def file_digest(path: Path) -> str:
    """xxh3-128 of a file's bytes (hex), read in 4 MiB chunks."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()
