"""Streaming readers for raw corpora: JSONL (plain, .gz, .zst), Parquet, and plain-text files.

Reading is split in two so that a bad record never stops a stage and parsing runs in the workers:
`iter_raw` streams `RawRecord`s (raw bytes of a JSONL line, a Parquet row, or a text file's bytes)
in a deterministic order; `parse_raw` turns one into a `Record` or a `Rejection` with a reason.
"""
from __future__ import annotations

import glob
import gzip
import hashlib
import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq
import zstandard

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz", ".jsonl.zst", ".ndjson.zst",
                  ".json.zst")
PARQUET_SUFFIXES = (".parquet",)
TEXT_SUFFIXES = (".txt", ".txt.gz", ".txt.zst")
SUPPORTED_SUFFIXES = JSONL_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES

# Control characters other than tab, newline, carriage return and escape (ANSI colours are text).
_BINARY_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f]")


@dataclass(frozen=True)
class RawRecord:
    source: str  # file path as given (relative paths stay relative, so ids do not depend on the checkout)
    index: int  # 1-based line (JSONL), row (Parquet) or 1 (text file)
    kind: str  # "json" | "row" | "text"
    payload: Any  # bytes for json/text, dict for row
    num_bytes: int


@dataclass(frozen=True)
class Record:
    id: str
    text: str
    source: str
    index: int
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Rejection:
    id: str
    reason: str
    source: str
    index: int
    original: str  # the record as read (JSON or the raw line with bad bytes escaped), so nothing is lost


def _has_suffix(path: str, suffixes: tuple[str, ...]) -> bool:
    return path.lower().endswith(suffixes)


def list_input_files(path: str, pattern: str = "*") -> list[str]:
    """Files under `path` (a file, a folder searched recursively with `pattern`, or a glob), sorted."""
    if any(ch in path for ch in "*?["):
        files = glob.glob(path, recursive=True)
    elif os.path.isdir(path):
        files = glob.glob(os.path.join(path, "**", pattern), recursive=True)
    elif os.path.isfile(path):
        files = [path]
    else:
        raise ValueError(f"input {path!r} does not exist")
    files = sorted(f for f in files if os.path.isfile(f) and _has_suffix(f, SUPPORTED_SUFFIXES))
    if not files:
        raise ValueError(f"input {path!r} (pattern {pattern!r}) matches no {'/'.join(SUPPORTED_SUFFIXES)} file")
    return files


def _open_binary(path: str) -> io.BufferedIOBase:
    lower = path.lower()
    if lower.endswith(".gz"):
        return gzip.open(path, "rb")
    if lower.endswith(".zst"):
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def iter_raw(files: list[str]) -> Iterator[RawRecord]:
    for path in files:
        if _has_suffix(path, PARQUET_SUFFIXES):
            yield from _iter_parquet(path)
        elif _has_suffix(path, TEXT_SUFFIXES):
            with _open_binary(path) as f:
                data = f.read()
            yield RawRecord(path, 1, "text", data, len(data))
        else:
            with _open_binary(path) as f:
                for index, line in enumerate(f, start=1):
                    if line.strip():
                        yield RawRecord(path, index, "json", line, len(line))


def _iter_parquet(path: str) -> Iterator[RawRecord]:
    index = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            index += 1
            yield RawRecord(path, index, "row", row, len(str(row.get("text", ""))))


def derive_id(source: str, index: int, content: bytes) -> str:
    """A stable id from where the record came from and what it holds."""
    digest = hashlib.blake2b(content, digest_size=10, key=f"{os.path.basename(source)}:{index}".encode()[:64])
    return f"h-{digest.hexdigest()}"


def _is_binary(text: str) -> bool:
    sample = text[:4096]
    return len(_BINARY_CONTROL_RE.findall(sample)) > max(8, len(sample) // 20)


def parse_raw(raw: RawRecord, max_record_bytes: int) -> Record | Rejection:
    """Validate one raw record; every failure becomes a `Rejection` with a reason, never an exception."""
    if raw.kind == "row":
        obj: Any = raw.payload
        original = json.dumps(obj, ensure_ascii=False, default=str)
        fallback_id = derive_id(raw.source, raw.index, original.encode())
    else:
        data: bytes = raw.payload
        fallback_id = derive_id(raw.source, raw.index, data)
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            return Rejection(fallback_id, "invalid:bad_utf8", raw.source, raw.index,
                             data.decode("utf-8", errors="backslashreplace"))
        original = decoded.rstrip("\n") if raw.kind == "json" else decoded
        if raw.num_bytes > max_record_bytes:
            return Rejection(fallback_id, "invalid:oversized", raw.source, raw.index, original)
        if raw.kind == "text":
            obj = {"text": decoded}
        else:
            try:
                obj = json.loads(decoded)
            except ValueError:
                return Rejection(fallback_id, "invalid:bad_json", raw.source, raw.index, original)
            if not isinstance(obj, dict):
                return Rejection(fallback_id, "invalid:not_object", raw.source, raw.index, original)
    given_id = obj.get("id")
    record_id = str(given_id) if isinstance(given_id, (str, int)) and str(given_id) else fallback_id
    text = obj.get("text")
    if "text" not in obj:
        return Rejection(record_id, "invalid:missing_text", raw.source, raw.index, original)
    if not isinstance(text, str):
        return Rejection(record_id, "invalid:non_string_text", raw.source, raw.index, original)
    if raw.kind == "row" and len(text.encode("utf-8", errors="surrogatepass")) > max_record_bytes:
        return Rejection(record_id, "invalid:oversized", raw.source, raw.index, original)
    if not text.strip():
        return Rejection(record_id, "invalid:empty", raw.source, raw.index, original)
    if _is_binary(text):
        return Rejection(record_id, "invalid:binary", raw.source, raw.index, original)
    meta = {k: v for k, v in obj.items() if k not in ("id", "text")}
    return Record(record_id, text, raw.source, raw.index, meta)
