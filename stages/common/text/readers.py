"""Streaming readers for raw corpora: JSONL (plain, .gz, .zst), Parquet, and plain-text files.

Reading is split in two so that a bad record never stops a stage and parsing runs in the workers:
`iter_raw` streams `RawRecord`s (raw bytes of a JSONL line, a Parquet row, or a text file's bytes)
in a deterministic order; `parse_raw` turns one into a `Record` or a `Rejection` with a reason.

What a reader holds per record is bounded: a line or text file longer than `max_record_bytes` is kept
only as its first bytes (enough for the quarantine row) and the rest is read past in chunks. A file
that is corrupt or ends early (a cut `.gz` or `.zst`) stops the run with an `InputError` naming the
file and where, rather than passing on part of it as if it were whole.
"""
from __future__ import annotations

import glob
import gzip
import hashlib
import io
import json
import os
import re
import zlib
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from stages.common.runtime.storage import (
    InputError,
    input_size,
    is_url,
    list_remote,
    match_parts,
    open_input,
    redact,
    url_path,
)

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz", ".jsonl.zst", ".ndjson.zst",
                  ".json.zst")
PARQUET_SUFFIXES = (".parquet",)
TEXT_SUFFIXES = (".txt", ".txt.gz", ".txt.zst")
SUPPORTED_SUFFIXES = JSONL_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES

DEFAULT_MAX_RECORD_BYTES = 1_000_000  # the `clean.max_record_bytes` default
OVERSIZED_KEEP_BYTES = 64 * 1024  # of a record over the size limit, what its quarantine row keeps
MAX_JSON_DEPTH = 100  # nesting deeper than this is quarantined (Python's JSON recursion gives out near 1000)

_CHUNK_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"
_BLANK_RE = re.compile(rb"[ \t\n\r\x0b\x0c]*")  # the bytes `bytes.strip()` removes: a blank line is only these
# Control characters other than tab, newline, carriage return and escape (ANSI colours are text).
_BINARY_CONTROL_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")  # only JSON escapes make these; UTF-8 cannot encode them
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")
# What decompressors raise on damaged or cut input (gzip: EOFError, BadGzipFile for CRC/length, zlib.error).
_STREAM_ERRORS = (EOFError, OSError, zlib.error, zstandard.ZstdError)


@dataclass(frozen=True)
class RawRecord:
    source: str  # path as given (relative stays relative: ids do not depend on the checkout); a URL redacted
    index: int  # 1-based line (JSONL), row (Parquet) or 1 (text file)
    kind: str  # "json" | "row" | "text"
    payload: Any  # bytes for json/text (only the first bytes when over the size limit), dict for row
    num_bytes: int  # the record's full size as read
    error: str = ""  # a reason the reader already found (a Parquet value that cannot be converted)
    derived_id: str = ""  # `derive_id` of the whole record, set where `payload` holds only its start


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
    return url_path(path).lower().endswith(suffixes)


def _glob_no_symlinked_folders(pattern: str) -> list[str]:
    """What `glob.glob(pattern, recursive=True)` lists, except that a wildcard never enters a symlinked
    folder: a link back up the tree would list the same files again and again."""
    parts = pattern.split(os.sep)
    literal = next((i for i, p in enumerate(parts) if glob.has_magic(p)), len(parts))
    root, wild = os.sep.join(parts[:literal]) or (os.sep if pattern.startswith(os.sep) else ""), parts[literal:]
    files = []
    for folder, subfolders, names in os.walk(root or os.curdir):  # followlinks=False
        rel = os.path.relpath(folder, root or os.curdir)
        rel_parts = [] if rel == os.curdir else rel.split(os.sep)
        if "**" not in wild and len(rel_parts) + 1 >= len(wild):
            subfolders.clear()  # no deeper folder can match
        files += [os.path.join(folder, n) if root else os.path.join(*rel_parts, n)
                  for n in names if match_parts(rel_parts + [n], wild)]
    return files


def list_input_files(path: str, pattern: str = "*") -> list[str]:
    """Files under `path` (a file, a folder searched recursively with `pattern`, or a glob), sorted.
    A wildcard or folder search does not enter symlinked folders; symlinked files are read. A URL
    (s3://, gs://, hf://, https://, ...) is listed by its file system (`storage.list_remote`)."""
    if is_url(path):
        files = list_remote(path, pattern)
    elif glob.has_magic(path):
        files = _glob_no_symlinked_folders(path)
    elif os.path.isdir(path):
        files = _glob_no_symlinked_folders(os.path.join(path, "**", pattern))
    elif os.path.isfile(path):
        files = [path]
    else:
        raise ValueError(f"input {path!r} does not exist")
    files = sorted(f for f in files if (is_url(f) or os.path.isfile(f)) and _has_suffix(f, SUPPORTED_SUFFIXES))
    if not files:
        raise ValueError(f"input {redact(path)!r} (pattern {pattern!r}) matches no {'/'.join(SUPPORTED_SUFFIXES)} "
                         "file")
    for f in files:
        if _SURROGATE_RE.search(f):  # bytes the file system could not decode: no UTF-8 name for outputs
            raise ValueError(f"input file {f.encode('utf-8', 'surrogateescape')!r} has a name that is not "
                             "valid UTF-8: rename it")
    return files


def check_zstd_frames(path: str) -> None:
    """Raise `InputError` unless every zstd frame in `path` is complete. zstandard's stream reader ends
    quietly where a cut file ends, so this walks the frame and block headers (a few bytes each)."""
    name = redact(path)
    with open_input(path) as f:
        size = input_size(path)

        def read_at(offset: int, n: int, what: str) -> bytes:
            if offset + n > size:
                raise InputError(f"{name}: truncated zstd stream: the file ends at byte {size}, inside the "
                                 f"{what} at byte {offset}")
            f.seek(offset)
            return f.read(n)

        pos = 0
        while pos < size:
            frame = pos
            magic = int.from_bytes(read_at(pos, 4, "frame header"), "little")
            if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: its size, then that many bytes
                skip = int.from_bytes(read_at(pos + 4, 4, "frame header"), "little")
                if skip:
                    read_at(pos + 8 + skip - 1, 1, "skippable frame")
                pos += 8 + skip
                continue
            if magic != 0xFD2FB528:
                raise InputError(f"{name}: corrupt zstd stream: no frame starts at byte {frame}")
            descriptor = read_at(pos + 4, 1, "frame header")[0]
            single_segment, has_checksum = descriptor >> 5 & 1, descriptor >> 2 & 1
            content_size_bytes = (single_segment, 2, 4, 8)[descriptor >> 6]
            pos += 5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 3] + content_size_bytes
            last = False
            while not last:
                header = int.from_bytes(read_at(pos, 3, f"frame starting at byte {frame}"), "little")
                last, block_type, block_size = bool(header & 1), header >> 1 & 3, header >> 3
                if block_type == 3:
                    raise InputError(f"{name}: corrupt zstd stream: invalid block type at byte {pos}")
                stored = 1 if block_type == 1 else block_size  # an RLE block stores its one byte
                if stored:
                    read_at(pos + 3 + stored - 1, 1, f"frame starting at byte {frame}")
                pos += 3 + stored
            if has_checksum:
                read_at(pos, 4, f"frame starting at byte {frame}")
                pos += 4


class _LineReader:
    """Non-blank lines of a binary stream as (line number, bytes, length, derived id). A line longer than
    `hold` bytes comes as its first `hold` bytes, and its id derived from all of it, while the rest is read
    past in chunks; runs of blank lines are skipped a chunk at a time. A UTF-8 byte-order mark at the start
    is dropped."""

    def __init__(self, f: BinaryIO, hold: int, source: str) -> None:
        self.f = f
        self.hold = hold
        self.source = source
        self.line_number = 0  # lines finished so far
        self.offset = 0  # decompressed bytes read so far

    def _read(self) -> bytes:
        chunk = self.f.read(_CHUNK_BYTES)
        self.offset += len(chunk)
        return chunk

    def __iter__(self) -> Iterator[tuple[int, bytes, int, str]]:
        buf = self._read()
        while 0 < len(buf) < len(_BOM):
            more = self._read()
            if not more:
                break
            buf += more
        pos = len(_BOM) if buf.startswith(_BOM) else 0
        while True:
            if pos >= len(buf):
                buf, pos = self._read(), 0
                if not buf:
                    return
            blank_end = _BLANK_RE.match(buf, pos).end()
            newline = buf.rfind(b"\n", pos, blank_end)
            if newline >= 0:  # whole blank lines, in one step however many
                self.line_number += buf.count(b"\n", pos, newline + 1)
                pos = newline + 1
                continue
            newline = buf.find(b"\n", pos)
            if newline >= 0:
                line, pos = buf[pos:newline + 1], newline + 1
                self.line_number += 1
                derived = derive_id(self.source, self.line_number, line) if len(line) > self.hold else ""
                yield self.line_number, line[:self.hold], len(line), derived
                continue
            # The line runs past this chunk: keep at most `hold` bytes of it.
            held = [buf[pos:pos + self.hold]]
            num_held, length, blank = len(held[0]), len(buf) - pos, blank_end == len(buf)
            digest = _id_hash(self.source, self.line_number + 1)
            digest.update(buf[pos:])
            while True:
                buf, pos = self._read(), 0
                if not buf:
                    break
                newline = buf.find(b"\n")
                piece = buf if newline < 0 else buf[:newline + 1]
                length += len(piece)
                digest.update(piece)
                blank = blank and _BLANK_RE.match(piece).end() == len(piece)
                if num_held < self.hold:
                    held.append(piece[:self.hold - num_held])
                    num_held += len(held[-1])
                if newline >= 0:
                    pos = newline + 1
                    break
            self.line_number += 1
            if not blank:
                derived = f"h-{digest.hexdigest()}" if length > self.hold else ""
                yield self.line_number, b"".join(held), length, derived


def _open_stream(path: str, stack: ExitStack) -> tuple[BinaryIO, BinaryIO]:
    """(decompressed stream, the file under it): the file's position says how far a damaged stream got."""
    raw = stack.enter_context(open_input(path))
    lower = url_path(path).lower()
    if lower.endswith(".gz"):
        return stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")), raw
    if lower.endswith(".zst"):
        check_zstd_frames(path)
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)
        return stack.enter_context(io.BufferedReader(reader, _CHUNK_BYTES)), raw  # reads return full chunks
    return raw, raw


def _stream_error(path: str, raw: BinaryIO, lines: _LineReader, error: Exception) -> InputError:
    return InputError(f"{path}: corrupt or truncated data after line {lines.line_number} (decompressed byte "
                      f"{lines.offset}, file byte {raw.tell()}): {error}")


def iter_raw(files: list[str], max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[RawRecord]:
    """Every record of `files` in order; each holds at most max(max_record_bytes + 1, 64 KiB) bytes."""
    hold = max(max_record_bytes + 1, OVERSIZED_KEEP_BYTES)
    for path in files:
        source = redact(path)  # a URL without its secrets: what records, errors and logs show
        if _has_suffix(path, PARQUET_SUFFIXES):
            yield from _iter_parquet(path)
            continue
        with ExitStack() as stack:
            f, raw = _open_stream(path, stack)
            lines = _LineReader(f, hold, source)
            if _has_suffix(path, TEXT_SUFFIXES):
                try:
                    data, length, derived = _read_text(f, hold, source)
                except _STREAM_ERRORS as e:
                    raise _stream_error(source, raw, lines, e) from e
                yield RawRecord(source, 1, "text", data, length, derived_id=derived)
                continue
            try:
                for index, line, length, derived in lines:
                    yield RawRecord(source, index, "json", line, length, derived_id=derived)
            except _STREAM_ERRORS as e:
                raise _stream_error(source, raw, lines, e) from e


def _read_text(f: BinaryIO, hold: int, source: str) -> tuple[bytes, int, str]:
    """A whole text file, without a leading byte-order mark, as (its first `hold` bytes, its length, and
    its derived id if it is longer)."""
    data = f.read(hold + len(_BOM))
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    if len(data) <= hold:
        return data, len(data), ""
    digest = _id_hash(source, 1)
    digest.update(data)
    length = len(data)
    while chunk := f.read(_CHUNK_BYTES):
        length += len(chunk)
        digest.update(chunk)
    return data[:hold], length, f"h-{digest.hexdigest()}"


def _column_values(column: pa.Array) -> tuple[list[Any], list[str]]:
    """A column's Python values and, per value, why it could not be converted ("" when it could)."""
    try:
        return column.to_pylist(), [""] * len(column)
    except (ValueError, OverflowError):  # invalid UTF-8 in a string, a date out of Python's range, ...
        converted = [_value(column, i) for i in range(len(column))]
        return [v for v, _ in converted], [e for _, e in converted]


def _value(column: pa.Array, i: int) -> tuple[Any, str]:
    try:
        return column[i].as_py(), ""
    except UnicodeDecodeError:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            data = column.slice(i, 1).cast(pa.large_binary())[0].as_py()
            return data.decode("utf-8", errors="backslashreplace"), "invalid:bad_utf8"
        return f"<{column.type} value with invalid UTF-8>", "invalid:bad_utf8"
    except (ValueError, OverflowError) as e:
        return f"<{column.type} value that does not convert: {e}>", "invalid:bad_value"


def _iter_parquet(path: str) -> Iterator[RawRecord]:
    index, source = 0, redact(path)
    try:
        with open_input(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=1024):
                columns = [_column_values(column) for column in batch.columns]
                for i in range(batch.num_rows):
                    index += 1
                    row = {name: values[i] for name, (values, _) in zip(batch.schema.names, columns)}
                    error = next((errors[i] for _, errors in columns if errors[i]), "")
                    yield RawRecord(source, index, "row", row, len(str(row.get("text", ""))), error)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{source}: unreadable Parquet data after row {index}: {e}") from e


def _id_hash(source: str, index: int) -> Any:
    return hashlib.blake2b(digest_size=10, key=f"{os.path.basename(source)}:{index}".encode()[:64])


def derive_id(source: str, index: int, content: bytes) -> str:
    """A stable id from where the record came from and what it holds."""
    digest = _id_hash(source, index)
    digest.update(content)
    return f"h-{digest.hexdigest()}"


def _is_binary(text: str) -> bool:
    sample = text[:4096]
    return len(_BINARY_CONTROL_RE.findall(sample)) > max(8, len(sample) // 20)


def _too_deep(obj: Any) -> bool:
    """Whether lists/objects nest deeper than MAX_JSON_DEPTH (walked without recursion)."""
    stack = [(v, 2) for v in obj.values() if isinstance(v, (dict, list))]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack += [(v, depth + 1) for v in children if isinstance(v, (dict, list))]
    return False


def _oversized_original(data: bytes, num_bytes: int, kind: str) -> str:
    kept = data[:OVERSIZED_KEEP_BYTES]
    text = kept.decode("utf-8", errors="backslashreplace")
    text = text.rstrip("\n") if kind == "json" else text
    if len(kept) < num_bytes:
        text += f"\n[truncated: the first {len(kept)} of {num_bytes} bytes are kept]"
    return text


def parse_raw(raw: RawRecord, max_record_bytes: int) -> Record | Rejection:
    """Validate one raw record; every failure becomes a `Rejection` with a reason, never an exception."""
    if raw.kind == "row":
        obj: Any = raw.payload
        original = json.dumps(obj, ensure_ascii=False, default=str)
        fallback_id = derive_id(raw.source, raw.index, original.encode())
        if raw.error:
            return Rejection(fallback_id, raw.error, raw.source, raw.index, original)
    else:
        data: bytes = raw.payload
        fallback_id = raw.derived_id or derive_id(raw.source, raw.index, data)
        if raw.num_bytes > max_record_bytes:  # before decoding: `data` may be only the start of the record
            return Rejection(fallback_id, "invalid:oversized", raw.source, raw.index,
                             _oversized_original(data, raw.num_bytes, raw.kind))
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            return Rejection(fallback_id, "invalid:bad_utf8", raw.source, raw.index,
                             data.decode("utf-8", errors="backslashreplace"))
        original = decoded.rstrip("\n") if raw.kind == "json" else decoded
        if raw.kind == "text":
            obj = {"text": decoded}
        else:
            try:
                obj = json.loads(decoded)
            except RecursionError:
                return Rejection(fallback_id, "invalid:too_deep", raw.source, raw.index, original)
            except ValueError:
                return Rejection(fallback_id, "invalid:bad_json", raw.source, raw.index, original)
            if not isinstance(obj, dict):
                return Rejection(fallback_id, "invalid:not_object", raw.source, raw.index, original)
    given_id = obj.get("id")
    record_id = str(given_id) if isinstance(given_id, (str, int)) and str(given_id) else fallback_id
    if raw.kind == "json":
        # A lone surrogate escape ("\ud800") decodes, but no UTF-8 output can hold it.
        if _SURROGATE_ESCAPE_RE.search(decoded) and _SURROGATE_RE.search(json.dumps(obj, ensure_ascii=False)):
            record_id = fallback_id if _SURROGATE_RE.search(record_id) else record_id
            return Rejection(record_id, "invalid:surrogate", raw.source, raw.index, original)
        if _too_deep(obj):
            return Rejection(record_id, "invalid:too_deep", raw.source, raw.index, original)
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
