"""Exact and near-duplicate detection, in phases whose memory does not grow with the corpus.

Exact: a hash of the text case-folded with everything but letters and digits removed, so whitespace,
punctuation and case edits collapse. Near: MinHash signatures over word shingles, or character shingles
for CJK text, grouped by LSH bands. Both are datasketch's (its MinHash, its MinHashLSH's choice of bands),
computed here with numpy: importing datasketch imports scipy, 0.7 s in every process that does, a fifth
of a small run (tests check both against datasketch).

The rule: two documents that share their exact key or the values of any LSH band are linked; of each
connected group, the first document in input order is kept and every other one dropped, naming it as
`dup_of` (datatrove's and NeMo Curator's MinHash dedup keep one document per connected component too).
No phase holds every document:

1. `candidate_table`, in the workers, per shard: one row per key of each candidate (its exact key, one
   64-bit hash per LSH band), with its position in the shard, sorted by hash into the shard's
   `dedup.parquet` in row groups of `ROW_GROUP` rows, so that a range of hashes reads without the rest;
2. `find_pairs`, per partition (a range of the hash space sized to hold about `partition_rows` rows),
   over the executor like the shards and resumable like them: the partition's rows from every shard;
   each group of equal (band, hash) links its later documents to its first -> `pairs.parquet`;
3. `Duplicates.from_pairs`, in the driver: the connected components of those pairs (vectorised
   union-find). Its memory grows with the documents that have a duplicate, not with the corpus.
The outputs depend on neither the worker count, the shard size, the partition count nor the executor.
"""
from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from stages.common.runtime.executor import map_shards
from stages.common.runtime.params import param
from stages.common.text.quality import UNSPACED_LANGS

_WORD_RE = re.compile(r"[^\W_]+")  # runs of letters and digits


@dataclass(frozen=True)
class DedupParams:
    exact: bool = True
    near: bool = True
    num_perm: int = param(128, min=1)
    # estimated Jaccard similarity above which two documents are near duplicates
    threshold: float = param(0.7, min=0.0, max=1.0)
    word_ngram: int = param(3, min=1)
    char_ngram: int = param(5, min=1)
    # keys per partition of the dedup phase (one row each: a document has its exact key and one per LSH
    # band): what one process holds at a time while it sorts them
    partition_rows: int = param(4_000_000, min=1, placement=True)


def exact_key(text: str) -> bytes:
    """Hash of the text case-folded, with everything but letters and digits removed."""
    return hashlib.blake2b("".join(_WORD_RE.findall(text.casefold())).encode(), digest_size=16).digest()


def shingles(text: str, lang: str, word_ngram: int, char_ngram: int) -> set[str]:
    """Character n-grams of the letters and digits (languages written without spaces), else word n-grams of
    the case-folded text."""
    if lang in UNSPACED_LANGS:
        chars = "".join(_WORD_RE.findall(text))
        n = char_ngram
        return {chars[i : i + n] for i in range(max(1, len(chars) - n + 1))}
    words = _WORD_RE.findall(text.casefold())
    if len(words) <= word_ngram:
        return {" ".join(words)}
    return set(map(" ".join, zip(*(words[i:] for i in range(word_ngram)))))


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser (wrapping uint32 arithmetic)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


class Signer:
    """MinHash signatures (uint32) of a text's shingles, exactly as datasketch's `MinHash` makes them in its
    default scheme ("affine32") with xxh32 as the hash function (10x cheaper per shingle than its SHA-1,
    as well mixed): each shingle's hash, pre-mixed by MurmurHash3's finaliser, goes through `num_perm`
    permutations h -> a*h + b mod 2^32 (odd a), drawn from numpy's RandomState(seed) as datasketch draws
    them, and each permutation keeps its minimum."""

    def __init__(self, params: DedupParams, seed: int) -> None:
        self.params = params
        gen = np.random.RandomState(seed)
        self._a = gen.randint(0, 1 << 31, params.num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
        self._b = gen.randint(0, 1 << 32, params.num_perm, dtype=np.uint32)

    def __call__(self, text: str, lang: str) -> np.ndarray:
        grams = shingles(text, lang, self.params.word_ngram, self.params.char_ngram)
        hashes = np.fromiter(map(xxhash.xxh32_intdigest, map(str.encode, grams)), dtype=np.uint32, count=len(grams))
        permuted = np.multiply.outer(_fmix32(hashes), self._a)
        permuted += self._b
        return np.minimum.reduce(permuted, axis=0)


def lsh_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows per band) as datasketch's MinHashLSH picks them (equal weights): among b * r <= num_perm,
    the first (b, then r, ascending) with the least false-positive plus false-negative probability mass
    around `threshold`. The integrands are polynomials of degree b * r, so Gauss-Legendre quadrature with
    num_perm // 2 + 1 nodes is exact; datasketch integrates them adaptively with scipy, whose import alone
    takes 0.7 s. A test checks the choice against datasketch's."""
    if num_perm < 2:
        raise ValueError("Too few permutation functions")
    nodes, weights = np.polynomial.legendre.leggauss(num_perm // 2 + 1)

    def integral(f, lo: float, hi: float) -> float:
        return (hi - lo) / 2 * float(weights @ f((hi - lo) / 2 * nodes + (hi + lo) / 2))

    best, choice = math.inf, (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            false_positive = integral(lambda s: 1 - (1 - s**r) ** b, 0.0, threshold)
            false_negative = integral(lambda s: (1 - s**r) ** b, threshold, 1.0)
            error = 0.5 * false_positive + 0.5 * false_negative
            if error < best:
                best, choice = error, (b, r)
    if choice[0] < 2:
        raise ValueError("The number of bands are too small (b < 2)")
    return choice




EXACT_BAND = -1  # the `band` of the row holding a document's exact key
ROW_GROUP = 8192  # rows per row group of a shard's candidate file
CANDIDATES_FILE = "dedup.parquet"
PAIRS_FILE = "pairs.parquet"
CANDIDATE_SCHEMA = pa.schema([("hash", pa.uint64()), ("band", pa.int16()), ("pos", pa.uint32())])
PAIR_SCHEMA = pa.schema([("first", pa.uint64()), ("later", pa.uint64()), ("exact", pa.bool_())])


def candidate_table(positions: Sequence[int], keys: Sequence[bytes], signatures: Sequence[np.ndarray | None],
                    params: DedupParams) -> pa.Table:
    """Phase 1, for one shard's candidates (their positions in the shard, exact keys and signatures): one
    row per key, sorted by hash. A band's hash is xxh3-64 of its values, seeded with the band's number."""
    hashes, bands, places = [], [], []
    if params.exact and keys:
        hashes.append(np.frombuffer(b"".join(key[:8] for key in keys), dtype="<u8"))
        bands.append(np.full(len(keys), EXACT_BAND, dtype=np.int16))
        places.append(np.array(positions, dtype=np.uint32))
    signed = [i for i, signature in enumerate(signatures) if signature is not None]
    if params.near and signed:
        num_bands, rows = lsh_bands(params.threshold, params.num_perm)
        matrix = np.stack([signatures[i] for i in signed])  # (documents, num_perm)
        for band in range(num_bands):
            values = np.ascontiguousarray(matrix[:, band * rows:(band + 1) * rows])
            hashes.append(np.fromiter((xxhash.xxh3_64_intdigest(v.tobytes(), seed=band) for v in values),
                                      dtype=np.uint64, count=len(values)))
            bands.append(np.full(len(values), band, dtype=np.int16))
            places.append(np.array([positions[i] for i in signed], dtype=np.uint32))
    if not hashes:
        return CANDIDATE_SCHEMA.empty_table()
    hash_ = np.concatenate(hashes)
    order = np.argsort(hash_, kind="stable")
    return _table([hash_[order], np.concatenate(bands)[order], np.concatenate(places)[order]], CANDIDATE_SCHEMA)


def _numpy(column: pa.ChunkedArray) -> np.ndarray:
    """A column without nulls as numpy, from its buffers (pyarrow's `to_numpy` imports pandas)."""
    parts = []
    for chunk in column.chunks:
        data = chunk.buffers()[1]
        if chunk.type == pa.bool_():
            bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
            parts.append(bits[chunk.offset:chunk.offset + len(chunk)].astype(bool))
        else:
            dtype = np.dtype(chunk.type.to_pandas_dtype())
            parts.append(np.frombuffer(data, dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.dtype(column.type.to_pandas_dtype()))


def _table(columns: list[np.ndarray], schema: pa.Schema) -> pa.Table:
    """A table of numpy columns, assembled from their buffers: pyarrow's own conversion imports pandas,
    a third of a second of every worker's life."""
    arrays = []
    for values, field in zip(columns, schema):
        data = np.packbits(values, bitorder="little") if field.type == pa.bool_() else np.ascontiguousarray(values)
        arrays.append(pa.Array.from_buffers(field.type, len(values), [None, pa.py_buffer(data)]))
    return pa.Table.from_arrays(arrays, schema=schema)


def write_candidates(table: pa.Table, folder: Path) -> int:
    pq.write_table(table, folder / CANDIDATES_FILE, row_group_size=ROW_GROUP, compression="zstd")
    return table.num_rows


def read_range(path: str | Path, lo: int, hi: int) -> pa.Table:
    """The rows of a candidate file with lo <= hash <= hi, reading only the row groups that may hold some."""
    file = pq.ParquetFile(path)
    groups = []
    for i in range(file.metadata.num_row_groups):
        stats = file.metadata.row_group(i).column(0).statistics
        if stats is None or not stats.has_min_max or (stats.max >= lo and stats.min <= hi):
            groups.append(i)
    if not groups:
        return CANDIDATE_SCHEMA.empty_table()
    table = file.read_row_groups(groups)
    hash_ = _numpy(table.column("hash"))
    start, stop = np.searchsorted(hash_, np.uint64(lo), "left"), np.searchsorted(hash_, np.uint64(hi), "right")
    return table.slice(start, stop - start)


def find_pairs(payload: tuple[int, int, list[tuple[str, int]]], folder: Path) -> dict[str, Any]:
    """Phase 2, one partition: payload = (lo, hi, [(candidate file, position of its shard's first
    document)]). Writes (first, later, exact) for each document that shares a key with an earlier one:
    `first` is the earliest document with that key, `exact` whether the key is the exact one."""
    lo, hi, shards = payload
    hashes, bands, positions = [], [], []
    for path, offset in shards:
        table = read_range(path, lo, hi)
        hashes.append(_numpy(table.column("hash")))
        bands.append(_numpy(table.column("band")))
        positions.append(_numpy(table.column("pos")).astype(np.uint64) + np.uint64(offset))
    hash_, band, position = (np.concatenate(a) if a else np.zeros(0, np.uint64) for a in (hashes, bands, positions))
    del hashes, bands, positions
    order = np.lexsort((position, hash_, band))  # by band, then hash, then position
    hash_, band, position = hash_[order], band[order], position[order]
    del order
    same = np.zeros(len(hash_), dtype=bool)  # a row with the key of the row before it
    same[1:] = (hash_[1:] == hash_[:-1]) & (band[1:] == band[:-1])
    del hash_
    first = position[np.flatnonzero(~same)][np.cumsum(~same) - 1]
    first, later, exact = first[same], position[same], band[same] == EXACT_BAND
    # one pair per (first, later), exact if any of its keys is the exact one
    order = np.lexsort((~exact, first, later))
    first, later, exact = first[order], later[order], exact[order]
    new = np.ones(len(later), dtype=bool)
    new[1:] = (later[1:] != later[:-1]) | (first[1:] != first[:-1])
    table = _table([first[new], later[new], exact[new]], PAIR_SCHEMA)
    pq.write_table(table, folder / PAIRS_FILE, compression="zstd")
    return {"num_rows": int(len(position)), "num_pairs": table.num_rows}


@dataclass
class Duplicates:
    """Phase 3: the documents dedup drops, by position (sorted), with the first document of their group
    (the one kept) and whether an earlier document has their exact key."""
    later: np.ndarray  # uint64
    first: np.ndarray  # uint64
    exact: np.ndarray  # bool

    @classmethod
    def from_pairs(cls, paths: Sequence[Path]) -> "Duplicates":
        tables = [pq.ParquetFile(path).read() for path in paths]
        table = pa.concat_tables(tables) if tables else PAIR_SCHEMA.empty_table()
        first, later = _numpy(table.column("first")), _numpy(table.column("later"))
        exact_later = np.unique(later[_numpy(table.column("exact"))])
        del table, tables
        nodes, index = np.unique(np.concatenate([first, later]), return_inverse=True)
        u, v = index[:len(first)], index[len(first):]
        del first, later, index
        # Union-find, vectorised: hook the larger root of each pair onto the smaller, then compress every
        # path, until each pair has one root. Roots only ever move to smaller nodes: the root of a group is
        # its smallest node, which is its first document (nodes are sorted positions).
        parent = np.arange(len(nodes))
        while True:
            ru, rv = parent[u], parent[v]
            moving = ru != rv
            if not moving.any():
                break
            np.minimum.at(parent, np.maximum(ru, rv)[moving], np.minimum(ru, rv)[moving])
            while True:
                grand = parent[parent]
                if np.array_equal(grand, parent):
                    break
                parent = grand
        members = np.flatnonzero(parent != np.arange(len(nodes)))
        later = nodes[members]
        return cls(later, nodes[parent[members]], np.isin(later, exact_later))

    def __len__(self) -> int:
        return len(self.later)


class DuplicateLookup:
    """Walks the input in order beside a `Duplicates`: `check(position, id)` for every candidate, in
    increasing position, gives (reason, id of the kept document) for a dropped one, else None. Holds the
    ids of kept documents only while a later member of their group is still to come."""

    def __init__(self, duplicates: Duplicates) -> None:
        self.d = duplicates
        self.firsts, counts = np.unique(duplicates.first, return_counts=True)
        self.counts = counts
        self.next_drop = self.next_first = 0
        self.open: dict[int, list] = {}  # position of a kept first document -> [its id, members still to come]

    def check(self, position: int, doc_id: str) -> tuple[str, str] | None:
        d = self.d
        if self.next_first < len(self.firsts) and self.firsts[self.next_first] == position:
            self.open[position] = [doc_id, int(self.counts[self.next_first])]
            self.next_first += 1
            return None
        if self.next_drop < len(d.later) and d.later[self.next_drop] == position:
            i = self.next_drop
            self.next_drop += 1
            first = int(d.first[i])
            entry = self.open[first]
            entry[1] -= 1
            if not entry[1]:
                del self.open[first]
            return ("dedup:exact" if d.exact[i] else "dedup:near"), entry[0]
        return None

    def finish(self) -> None:
        """A RuntimeError if some duplicate or kept first document was never reached: the walk missed it."""
        if self.next_drop != len(self.d.later) or self.next_first != len(self.firsts):
            raise RuntimeError(f"accounting broken: dedup reached {self.next_drop} of {len(self.d.later)} duplicates "
                               f"and {self.next_first} of {len(self.firsts)} kept documents with duplicates")


class _Partitions:
    """Where `map_shards` puts each partition's result: `<work>/dedup-<count>/partition-<i>/`."""

    def __init__(self, work: Path, count: int) -> None:
        self.path = work / f"dedup-{count}"

    def shard(self, index: int) -> Path:
        return self.path / f"partition-{index:05d}"


def _no_setup() -> None:
    pass


def deduplicate(shards: Sequence[tuple[Path, int, int]], work: Path, params: DedupParams, executor: str,
                address: str, num_workers: int, progress=None) -> Duplicates:
    """Phases 2 and 3 over the shards' candidate files: `shards` lists (shard folder, position of its first
    document, candidate rows in it). Each partition's pairs stay in `work` with a completion marker, so a
    rerun redoes only unfinished partitions."""
    num_rows = sum(rows for _, _, rows in shards)
    if not num_rows:
        return Duplicates(np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, bool))
    count = max(1, math.ceil(num_rows / params.partition_rows))
    bounds = [p * (1 << 64) // count for p in range(count + 1)]
    files = [(str(folder / CANDIDATES_FILE), offset) for folder, offset, rows in shards if rows]
    payloads = ((bounds[p], bounds[p + 1] - 1, files) for p in range(count))
    paths = []
    if count == 1:  # one partition runs in this process: a pool (or a Ray cluster to start) would only add
        executor = "local"
    for result in map_shards(find_pairs, payloads, _Partitions(work, count), executor, address, num_workers,
                             _no_setup, ()):
        paths.append(result.folder / PAIRS_FILE)
        if progress is not None:
            progress(result)
    return Duplicates.from_pairs(paths)
