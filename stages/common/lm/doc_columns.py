"""Per-document columns on disk: one flat file of a fixed-width numpy dtype per column in a scratch folder,
appended a batch at a time while the documents stream past (or created whole, zeroed), and read back as
np.memmap one chunk of `SCAN_DOCS` documents at a time. Per-document state then costs disk, not memory,
however many documents there are."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import xxhash

SCAN_DOCS = 1 << 20  # documents per chunk of a pass over the columns: a few tens of MB of memory


def id_hash(doc_id: str) -> int:
    """A 64-bit hash of a document id: what is kept of it to check that a second read gives the same documents."""
    return xxhash.xxh3_64_intdigest(doc_id.encode())


class DocColumns:
    """Columns of `num_docs` values each, in document order, under `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.num_docs = 0
        self._dtypes: dict[str, np.dtype] = {}
        self._appending: dict[str, BinaryIO] = {}
        self._maps: dict[str, np.memmap] = {}

    def append(self, **batches: np.ndarray) -> None:
        """The next documents' values, one array per column, all of the same length; the first call names the
        columns (and their dtypes) written this way until `close`."""
        lengths = {len(values) for values in batches.values()}
        if len(lengths) != 1 or (self._appending and set(batches) != set(self._appending)):
            raise ValueError(f"append needs the same columns {sorted(self._appending)} at the same length each time")
        for name, values in batches.items():
            if name not in self._appending:
                self._dtypes[name] = np.asarray(values).dtype
                self._appending[name] = open(self.folder / f"{name}.bin", "wb")
            self._appending[name].write(np.ascontiguousarray(values, dtype=self._dtypes[name]).tobytes())
        self.num_docs += lengths.pop()

    def close(self) -> None:
        """End the appending: the columns become readable."""
        for f in self._appending.values():
            f.close()
        self._appending = {}

    def create(self, name: str, dtype: np.dtype | type) -> np.memmap:
        """A new column of zeros (one per document), to be filled a chunk at a time."""
        if name in self._dtypes:
            raise ValueError(f"column {name!r} exists")
        self._dtypes[name] = np.dtype(dtype)
        with open(self.folder / f"{name}.bin", "wb") as f:
            f.truncate(self.num_docs * self._dtypes[name].itemsize)
        return self[name]

    def __contains__(self, name: str) -> bool:
        return name in self._dtypes

    def __getitem__(self, name: str) -> np.memmap:
        """The column, memory-mapped (nothing is read until a slice of it is)."""
        if name not in self._maps:
            if self._appending:
                raise RuntimeError("columns are read once appending is closed")
            self._maps[name] = np.memmap(self.folder / f"{name}.bin", dtype=self._dtypes[name], mode="r+",
                                         shape=(self.num_docs,))
        return self._maps[name]

    def slices(self, chunk: int | None = None) -> Iterator[slice]:
        """Consecutive chunks of `chunk` (default SCAN_DOCS) documents, covering them all."""
        chunk = chunk or SCAN_DOCS
        for start in range(0, self.num_docs, chunk):
            yield slice(start, min(self.num_docs, start + chunk))
