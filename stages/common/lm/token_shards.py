"""Token shards: flat binary token files, a zero-copy reader, and the samplers the trainer draws from.

A shard is two files next to each other:

    <name>.bin      64-byte header, then every document's token ids back to back (uint16 when the
                    vocabulary fits, else uint32), each document followed by the end-of-document id
    <name>.idx.npy  int64 document start offsets (num_docs + 1, the last one = num_tokens)

The header is little-endian: magic `RFNYTOK1`, format version, bytes per token, num_tokens,
num_docs, vocab_size, eos_id. `TokenShard` maps the tokens with `np.memmap` (nothing is read until a
window is taken) and serves fixed-length windows `(B, T + 1)`: inputs are `[:, :-1]`, targets `[:, 1:]`.

`TierSampler` draws training batches across the easy/medium/hard shards with ratios that move from
`TierMix.start` to `TierMix.end` over training, or (schedule `uniform`) in proportion to each tier's
windows: uniformly over all training tokens, as if there were no tiers. The global batch of a step is a pure function of
(seed, step): resuming at step k needs only k, and a data-parallel rank reads only its own rows of it,
so the data seen per step is the same whatever the number of ranks. `WindowSampler` draws uniformly
from one shard, a pure function of (seed, step) too: the perplexity stage's reference LM trains on it.

`check_tier_tokens` is what the stages reading the shards (train, prune, qat) check before torchrun starts
their workers: every tier of a split holds the tokens they need (`window_tokens`: one micro batch of
training windows, one validation window), read from the shards' headers and file sizes alone.
"""
from __future__ import annotations

import json
import math
import shutil
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stages.common.lm.tiers import TIERS
from stages.common.runtime.digest import hash_unit
from stages.common.runtime.params import ConfigError, param

MAGIC = b"RFNYTOK1"
FORMAT_VERSION = 1
HEADER_BYTES = 64  # a multiple of 4, so the tokens after it are aligned for uint32 too
_HEADER = struct.Struct("<8sIIQQII")  # magic, version, itemsize, num_tokens, num_docs, vocab_size, eos_id
SPLITS = ("train", "val")
MANIFEST = "manifest.json"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


def is_validation(doc_id: str, seed: int, val_fraction: float) -> bool:
    """Deterministic split by a hash of the document id: a document stays on its side however the
    rest of the corpus changes."""
    return hash_unit(f"val:{doc_id}", seed, "little") < val_fraction


def shard_paths(base: str | Path) -> tuple[Path, Path]:
    base = Path(base)
    return base.with_name(base.name + ".bin"), base.with_name(base.name + ".idx.npy")


class TokenShardWriter:
    """Streams documents into `<base>.bin`; the header and `<base>.idx.npy` are written by `close()`. The document
    offsets go to a side file every `OFFSETS_BUFFER` documents, so a writer's memory does not grow with them."""

    OFFSETS_BUFFER = 1 << 16

    def __init__(self, base: str | Path, vocab_size: int, eos_id: int) -> None:
        self.bin_path, self.idx_path = shard_paths(base)
        self.bin_path.parent.mkdir(parents=True, exist_ok=True)
        self.vocab_size, self.eos_id = vocab_size, eos_id
        self.dtype = token_dtype(vocab_size)
        self._eos = np.array([eos_id], dtype=self.dtype)
        self.num_tokens = self.num_docs = 0
        self._offsets = [0]  # not yet in the side file
        self._offsets_path = self.idx_path.with_name(self.idx_path.name + ".part")
        self._offsets_file = open(self._offsets_path, "wb")
        self._file = open(self.bin_path, "wb")
        self._file.write(b"\0" * HEADER_BYTES)

    def add(self, ids: np.ndarray) -> None:
        """Append one document's ids (without the end-of-document token, which is added here)."""
        self._file.write(np.asarray(ids, dtype=self.dtype).tobytes())
        self._file.write(self._eos.tobytes())
        self.num_tokens += len(ids) + 1
        self.num_docs += 1
        self._offsets.append(self.num_tokens)
        if len(self._offsets) >= self.OFFSETS_BUFFER:
            self._flush_offsets()

    def _flush_offsets(self) -> None:
        self._offsets_file.write(np.asarray(self._offsets, dtype=np.int64).tobytes())
        self._offsets = []

    def close(self) -> None:
        self._file.seek(0)
        header = _HEADER.pack(MAGIC, FORMAT_VERSION, self.dtype.itemsize, self.num_tokens, self.num_docs,
                              self.vocab_size, self.eos_id)
        self._file.write(header.ljust(HEADER_BYTES, b"\0"))
        self._file.close()
        self._flush_offsets()
        self._offsets_file.close()
        # The bytes np.save writes for the whole int64 array: its header, then the offsets as they are on disk.
        with open(self.idx_path, "wb") as f, open(self._offsets_path, "rb") as offsets:
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int64)),
                                                     "fortran_order": False, "shape": (self.num_docs + 1,)})
            shutil.copyfileobj(offsets, f)
        self._offsets_path.unlink()


def read_header(bin_path: Path) -> tuple[int, int, int, int, int]:
    """(bytes per token, num_tokens, num_docs, vocab_size, eos_id) of a shard's `.bin`, checked against the
    file's size; reads the 64-byte header only."""
    with open(bin_path, "rb") as f:
        header = f.read(HEADER_BYTES)
    if len(header) < _HEADER.size or header[:8] != MAGIC:
        raise ValueError(f"{bin_path}: not a token shard (bad magic)")
    _, version, itemsize, num_tokens, num_docs, vocab_size, eos_id = _HEADER.unpack_from(header)
    if version != FORMAT_VERSION:
        raise ValueError(f"{bin_path}: format version {version}, this reader knows {FORMAT_VERSION}")
    expected = HEADER_BYTES + num_tokens * itemsize
    if bin_path.stat().st_size != expected:
        raise ValueError(f"{bin_path}: {bin_path.stat().st_size} bytes, header says {expected}")
    return itemsize, num_tokens, num_docs, vocab_size, eos_id


class TokenShard:
    """Read-only, memory-mapped view of a shard written by `TokenShardWriter`."""

    def __init__(self, base: str | Path) -> None:
        self.bin_path, self.idx_path = shard_paths(base)
        itemsize, self.num_tokens, self.num_docs, self.vocab_size, self.eos_id = read_header(self.bin_path)
        self.dtype = np.dtype(np.uint16) if itemsize == 2 else np.dtype(np.uint32)
        # np.memmap cannot map zero bytes; an empty shard (e.g. a tiny validation split) is still valid.
        self.tokens = (np.memmap(self.bin_path, dtype=self.dtype, mode="r", offset=HEADER_BYTES,
                                 shape=(self.num_tokens,)) if self.num_tokens else np.empty(0, self.dtype))
        self.doc_offsets = np.load(self.idx_path, mmap_mode="r")
        if len(self.doc_offsets) != self.num_docs + 1 or self.doc_offsets[-1] != self.num_tokens:
            raise ValueError(f"{self.idx_path}: document index does not match {self.bin_path}")

    def __len__(self) -> int:
        return self.num_tokens

    def doc(self, i: int) -> np.ndarray:
        """Document i's ids, its end-of-document token included (a view, no copy)."""
        return self.tokens[self.doc_offsets[i]:self.doc_offsets[i + 1]]

    def num_windows(self, seq_len: int) -> int:
        """Distinct start positions of a (seq_len + 1)-token window."""
        return max(0, self.num_tokens - seq_len)

    def windows(self, starts: np.ndarray, seq_len: int) -> torch.Tensor:
        """Windows `tokens[s : s + seq_len + 1]` for each start, as int64 (B, seq_len + 1)."""
        index = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(seq_len + 1)
        return torch.from_numpy(self.tokens[index].astype(np.int64))

    def sequential_windows(self, seq_len: int, batch_size: int, max_batches: int = 0) -> Iterator[torch.Tensor]:
        """Non-overlapping windows from the start, in order (for validation); `max_batches` 0 = all."""
        starts = np.arange(0, self.num_windows(seq_len), seq_len)
        for num_batches, i in enumerate(range(0, len(starts), batch_size)):
            if max_batches and num_batches >= max_batches:
                return
            yield self.windows(starts[i:i + batch_size], seq_len)


def open_tiers(tokens_dir: str | Path, split: str) -> dict[str, TokenShard]:
    """The easy/medium/hard shards of one split (`train` or `val`) written by the perplexity stage."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return {tier: TokenShard(Path(tokens_dir) / split / tier) for tier in TIERS}


def window_tokens(seq_len: int, num_windows: int = 1) -> int:
    """Tokens (end-of-document tokens included) a shard needs for `num_windows` non-overlapping
    (seq_len + 1)-token windows, as validation reads them (`TokenShard.sequential_windows`)."""
    return num_windows * seq_len + 1


def tier_tokens(tokens_dir: str | Path, split: str) -> dict[str, int]:
    """Tokens per tier of one split, from the shards' headers and file sizes (no token is read)."""
    sizes = {}
    for tier in TIERS:
        bin_path, _ = shard_paths(Path(tokens_dir) / split / tier)
        if not bin_path.is_file():
            raise ValueError(f"{bin_path}: no such token shard; the perplexity stage writes it: rerun it")
        sizes[tier] = read_header(bin_path)[1]
    return sizes


def format_tiers(sizes: Mapping[str, int]) -> str:
    """`easy 0, medium 1,204, hard 3,000`: tokens per tier, for messages."""
    return ", ".join(f"{tier} {n:,}" for tier, n in sizes.items())


@dataclass(frozen=True)
class TierNeed:
    """What a stage needs of every tier of one split: `min_tokens` each (`window_tokens`), what for (`why`,
    in words) and `fix`, the params that change it."""
    split: str
    min_tokens: int
    why: str
    fix: str


def check_tier_tokens(tokens_dir: str | Path, needs: Sequence[TierNeed]) -> None:
    """ConfigError, in one line, when a tier of a split holds fewer tokens than the stage needs: a tiny corpus
    or validation split found before any worker starts, not as an empty batch inside one."""
    problems = []
    for need in needs:
        sizes = tier_tokens(tokens_dir, need.split)
        if min(sizes.values()) < need.min_tokens:
            problems.append(f"the {need.split} tiers hold {format_tiers(sizes)} tokens, {need.min_tokens:,} needed "
                            f"in each for {need.why}: {need.fix}")
    if problems:
        raise ConfigError(f"{tokens_dir}: too few tokens: {'; '.join(problems)}")


def read_manifest(tokens_dir: str | Path) -> dict[str, Any]:
    """The perplexity stage's `manifest.json` next to the shards: vocabulary size, end-of-document id and
    documents and tokens per shard. It is the data's identity for resuming a run, so an empty or partial one
    is an error, not something to guess around."""
    path = Path(tokens_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e}); the perplexity stage writes it: rerun it") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"{path}: must be a JSON object, got {type(manifest).__name__}; "
                         "the perplexity stage writes it: rerun it")
    for key, minimum in (("vocab_size", 1), ("eos_id", 0)):
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{path}: {key!r} must be an integer >= {minimum}, got "
                             f"{'nothing' if value is None else repr(value)}; the perplexity stage writes it: rerun it")
    if not isinstance(manifest.get("shards"), dict):
        raise ValueError(f"{path}: 'shards' (docs and tokens per shard) must be a mapping, got "
                         f"{manifest.get('shards')!r}; the perplexity stage writes it: rerun it")
    return manifest


@dataclass(frozen=True)
class TierRatios:
    easy: float = param(1.0, min=0.0)
    medium: float = param(1.0, min=0.0)
    hard: float = param(1.0, min=0.0)

    def __post_init__(self) -> None:
        values = self.as_array()
        if (values < 0).any() or values.sum() <= 0:
            raise ValueError(f"tier ratios must be >= 0 with a positive sum, got {self}")

    def as_array(self) -> np.ndarray:
        return np.array([self.easy, self.medium, self.hard], dtype=np.float64)


SCHEDULES = ("constant", "linear", "cosine", "uniform")


@dataclass(frozen=True)
class TierMix:
    """Sampling ratios of the tiers, moving from `start` to `end` over training (normalised to sum 1)."""
    start: TierRatios = field(default_factory=lambda: TierRatios(0.5, 0.3, 0.2))
    end: TierRatios = field(default_factory=lambda: TierRatios(0.2, 0.4, 0.4))
    # constant (start throughout) | linear | cosine (slow start and end) | uniform (each tier's share of the
    # training windows, start and end unused: no curriculum)
    schedule: str = param("linear", choices=SCHEDULES)

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"tier mix schedule must be one of {SCHEDULES}, got {self.schedule!r}")

    def ratios(self, progress: float, sizes: np.ndarray | None = None) -> np.ndarray:
        """Normalised (easy, medium, hard) ratios at `progress` in [0, 1] of training. The `uniform`
        schedule needs `sizes`, the tiers' window counts, and returns their shares."""
        if self.schedule == "uniform":
            if sizes is None:
                raise ValueError("the uniform tier mix draws in proportion to the tiers' sizes: pass sizes")
            sizes = np.asarray(sizes, dtype=np.float64)
            return sizes / sizes.sum()
        progress = min(1.0, max(0.0, progress))
        if self.schedule == "constant":
            weight = 0.0
        elif self.schedule == "linear":
            weight = progress
        else:
            weight = 0.5 * (1 - math.cos(math.pi * progress))
        start = self.start.as_array() / self.start.as_array().sum()
        end = self.end.as_array() / self.end.as_array().sum()
        return (1 - weight) * start + weight * end


@dataclass
class Batch:
    inputs: torch.Tensor  # (B, T) int64
    targets: torch.Tensor  # (B, T) int64
    tiers: np.ndarray  # (B,) index into TIERS of each row; empty from an untiered sampler
    ratios: np.ndarray  # (3,) the ratios this batch was drawn with; empty from an untiered sampler


class WindowSampler:
    """Random (seq_len + 1)-token windows of one shard, start positions uniform, drawn from a generator
    seeded with (seed, step); `batch_size` is the global batch and `batch(step, rows)` reads its rows
    `rows`, like `TierSampler`."""

    def __init__(self, shard: TokenShard, seq_len: int, batch_size: int, seed: int) -> None:
        if shard.num_windows(seq_len) < 1:
            raise ValueError(f"shard holds {shard.num_tokens} tokens, fewer than one {seq_len + 1}-token window")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.shard, self.seq_len, self.batch_size, self.seed = shard, seq_len, batch_size, seed

    def batch(self, step: int, rows: slice = slice(None)) -> Batch:
        rng = np.random.default_rng([self.seed, step])
        starts = rng.integers(0, self.shard.num_windows(self.seq_len), size=self.batch_size)[rows]
        window = self.shard.windows(starts, self.seq_len)
        return Batch(window[:, :-1], window[:, 1:], np.empty(0, dtype=np.int64), np.empty(0))


class TierSampler:
    """Random (seq_len + 1)-token windows, each row's tier drawn with the schedule's ratios at `step`.

    `batch_size` is the global batch (all ranks, all micro-batches). The tiers and start positions of
    all its rows are drawn at once from a generator seeded with (seed, step) - a few numbers per row,
    cheap - and `batch(step, rows)` reads only the windows of the rows asked for."""

    def __init__(self, shards: Mapping[str, TokenShard], mix: TierMix, seq_len: int, batch_size: int,
                 total_steps: int, seed: int) -> None:
        if set(shards) != set(TIERS):
            raise ValueError(f"need one shard per tier {TIERS}, got {sorted(shards)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.shards = [shards[t] for t in TIERS]
        self.mix, self.seq_len, self.batch_size = mix, seq_len, batch_size
        self.total_steps, self.seed = total_steps, seed
        self.num_windows = np.array([s.num_windows(seq_len) for s in self.shards])
        # A tier too small for one window (possible on a tiny corpus) gets no draws; the others share its ratio.
        self.available = self.num_windows > 0
        if not self.available.any():
            raise ValueError(f"no tier holds more than seq_len={seq_len} tokens")

    def ratios(self, step: int) -> np.ndarray:
        ratios = self.mix.ratios(step / max(1, self.total_steps - 1), self.num_windows) * self.available
        if ratios.sum() == 0:  # the schedule only wants tiers that are empty here: sample what exists
            ratios = self.available.astype(np.float64)
        return ratios / ratios.sum()

    def batch(self, step: int, rows: slice = slice(None)) -> Batch:
        """Rows `rows` of step `step`'s global batch (all of it by default)."""
        rng = np.random.default_rng([self.seed, step])
        ratios = self.ratios(step)
        tiers = rng.choice(len(TIERS), size=self.batch_size, p=ratios)
        # One uniform draw per row scaled to its tier's window count: a row's start does not depend on
        # which rows are read.
        starts = (rng.random(self.batch_size) * self.num_windows[tiers]).astype(np.int64)
        tiers, starts = tiers[rows], starts[rows]
        out = torch.empty(len(tiers), self.seq_len + 1, dtype=torch.int64)
        for t, shard in enumerate(self.shards):
            picked = np.flatnonzero(tiers == t)
            if len(picked):
                out[torch.from_numpy(picked)] = shard.windows(starts[picked], self.seq_len)
        return Batch(out[:, :-1], out[:, 1:], tiers, ratios)
