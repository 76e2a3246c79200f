"""Streaming readers for raw corpora: JSONL (plain, .gz, .zst), Parquet, plain-text files, WARC/WET web
archives, CSV/TSV and Arrow IPC files (the `data-*.arrow` of a Hugging Face `save_to_disk` folder).

Reading is split in two so that a bad record never stops a stage and parsing runs in the workers:
`iter_raw` streams `RawRecord`s (raw bytes of a JSONL line, a Parquet row, or a text file's bytes)
in a deterministic order; `parse_raw` turns one into a `Record` or a `Rejection` with a reason, taking
the text, the id and the kept fields from where `FieldMap` says (dotted paths reach into nested objects).

What a reader holds per record is bounded: a line, text file or WARC record longer than `max_record_bytes`
is kept only as its first bytes (enough for the quarantine row) and the rest is read past in chunks; a
Parquet or Arrow row over it is converted only as far as that, its cells measured in the Arrow buffers. A file
that is corrupt or ends early (a cut `.gz` or `.zst`) stops the run with an `InputError` naming the
file and where, rather than passing on part of it as if it were whole.
"""
from __future__ import annotations

import codecs
import csv
import functools
import glob
import gzip
import hashlib
import io
import itertools
import json
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
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
WET_SUFFIXES = (".wet", ".wet.gz")  # Common Crawl's .warc.wet.gz included
WARC_SUFFIXES = (".warc", ".warc.gz")
CSV_SUFFIXES = (".csv", ".csv.gz")
TSV_SUFFIXES = (".tsv", ".tsv.gz")
ARROW_SUFFIXES = (".arrow",)
SUPPORTED_SUFFIXES = (JSONL_SUFFIXES + PARQUET_SUFFIXES + TEXT_SUFFIXES + WET_SUFFIXES + WARC_SUFFIXES
                      + CSV_SUFFIXES + TSV_SUFFIXES + ARROW_SUFFIXES)
# `clean.format` values; `auto` picks by extension (`file_format`). warc and wet are one reader: it reads
# `response` and `conversion` records, whichever the file holds.
FORMATS = ("auto", "jsonl", "parquet", "text", "warc", "wet", "csv", "tsv", "arrow")
_FORMAT_SUFFIXES = (("wet", WET_SUFFIXES), ("warc", WARC_SUFFIXES), ("csv", CSV_SUFFIXES), ("tsv", TSV_SUFFIXES),
                    ("arrow", ARROW_SUFFIXES), ("parquet", PARQUET_SUFFIXES), ("text", TEXT_SUFFIXES),
                    ("jsonl", JSONL_SUFFIXES))
# Files of a `datasets` save_to_disk folder that describe it rather than hold records.
SAVE_TO_DISK_STATE = "state.json"
_SAVE_TO_DISK_META = frozenset({SAVE_TO_DISK_STATE, "dataset_info.json", "dataset_dict.json"})

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
    kind: str  # "json" | "row" | "warc" (a row whose text and id are the record's own) | "text"
    payload: Any  # bytes for json/text (only the first bytes when over the size limit), dict for row/warc
    num_bytes: int  # the record's full size as read
    error: str = ""  # a reason the reader already found (a Parquet value that cannot be converted)
    derived_id: str = ""  # `derive_id` of the whole record, set where `payload` holds only its start
    origin: int = 0  # which input source it came from (clean.sources), for the reader's caller


ROW_KINDS = ("row", "warc")  # records whose payload is already a dict of fields


@dataclass(frozen=True)
class FieldMap:
    """Where a record's text, id and kept fields are: field names, or dotted paths into nested objects
    (`payload.content`; a field whose own name has a dot is found first), looked up after `rename`
    ((old, new) pairs of top-level field names). A WARC/WET record's text and id are always its own
    (`text`, `id`), whatever `text` and `id` say."""
    text: str = "text"
    id: str = "id"
    keep: tuple[str, ...] = ()
    rename: tuple[tuple[str, str], ...] = ()

    def renamed(self, obj: dict[str, Any]) -> dict[str, Any]:
        if not self.rename:
            return obj
        names = dict(self.rename)
        return {names.get(key, key): value for key, value in obj.items()}


DEFAULT_FIELDS = FieldMap()


@dataclass(frozen=True)
class Record:
    id: str
    text: str
    source: str
    index: int
    meta: dict[str, Any] = field(default_factory=dict)  # the record's other fields
    kept: dict[str, Any] = field(default_factory=dict)  # FieldMap.keep: path -> value (None where absent)


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
    files = save_to_disk_order(sorted(f for f in files if (is_url(f) or os.path.isfile(f))
                                      and _has_suffix(f, SUPPORTED_SUFFIXES)))
    if not files:
        raise ValueError(f"input {redact(path)!r} (pattern {pattern!r}) matches no {'/'.join(SUPPORTED_SUFFIXES)} "
                         "file")
    for f in files:
        if _SURROGATE_RE.search(f):  # bytes the file system could not decode: no UTF-8 name for outputs
            raise ValueError(f"input file {f.encode('utf-8', 'surrogateescape')!r} has a name that is not "
                             "valid UTF-8: rename it")
    return files


def save_to_disk_order(files: list[str]) -> list[str]:
    """`files` (sorted) with each Hugging Face `save_to_disk` folder (one holding state.json) read as a
    dataset: its .arrow files in state.json's order, and neither its JSON descriptions (state.json,
    dataset_info.json) nor a DatasetDict's dataset_dict.json beside its split folders taken as records."""
    folders = {os.path.dirname(f) for f in files if os.path.basename(f) == SAVE_TO_DISK_STATE}
    if not folders:
        return files
    parents = {os.path.dirname(folder) for folder in folders}
    listed, done = set(files), set()
    ordered = {folder: _save_to_disk_data(folder, listed) for folder in folders}
    for f in files:
        if os.path.basename(f) == "dataset_dict.json" and os.path.dirname(f) in parents:
            _check_splits(f, folders)
    out: list[str] = []
    for f in files:
        folder, name = os.path.split(f)
        if folder in folders:
            if folder not in done:  # the folder's data, once, where its first file sorts, in its own order
                done.add(folder)
                out += [g for g in ordered[folder] if g in listed]
            continue
        if name in _SAVE_TO_DISK_META and folder in parents:
            continue
        out.append(f)
    return out


def _save_json(path: str, key: str) -> list[Any]:
    """The list under `key` in one of the JSON files that describe a save_to_disk folder."""
    with open_input(path) as f:
        try:
            value = json.load(f)[key]
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{redact(path)}: not a `datasets` save_to_disk description: {e!r}") from None
    if not isinstance(value, list):
        raise InputError(f"{redact(path)}: not a `datasets` save_to_disk description: {key!r} is not a list")
    return value


def _save_to_disk_data(folder: str, listed: set[str]) -> list[str]:
    """The data files a save_to_disk folder's state.json lists, in its order; an `InputError` naming those
    that are missing (a copy cut short would be read in part), before anything is read. A file that is
    there but that `clean.pattern` leaves out is left out."""
    state = os.path.join(folder, SAVE_TO_DISK_STATE)
    entries = _save_json(state, "_data_files")
    if not all(isinstance(entry, dict) and isinstance(entry.get("filename"), str) for entry in entries):
        raise InputError(f"{redact(state)}: not a `datasets` save_to_disk description: an entry of '_data_files' "
                         "has no 'filename'")
    names = [entry["filename"] for entry in entries]
    missing = [name for name in names if os.path.join(folder, name) not in listed
               and (is_url(folder) or not os.path.isfile(os.path.join(folder, name)))]
    if missing:
        raise InputError(f"{redact(state)} lists {len(missing)} data file(s) that are missing: "
                         f"{', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}; the folder must be a "
                         "whole save_to_disk output")
    return [os.path.join(folder, name) for name in names]


def _check_splits(path: str, folders: set[str]) -> None:
    """An `InputError` naming the splits a DatasetDict's dataset_dict.json lists that have no state.json."""
    parent = os.path.dirname(path)
    missing = [str(split) for split in _save_json(path, "splits") if os.path.join(parent, str(split)) not in folders]
    if missing:
        raise InputError(f"{redact(path)} lists split(s) with no state.json: {', '.join(missing)}; the folder must "
                         "be a whole save_to_disk output")


def file_format(path: str, fmt: str = "auto") -> str:
    """The reader for `path`: `fmt` unless it is `auto`, else the one its extension names."""
    if fmt != "auto":
        return fmt
    return next(name for name, suffixes in _FORMAT_SUFFIXES if _has_suffix(path, suffixes))


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


def iter_raw(files: list[str], max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, fmt: str = "auto",
             skipped: Counter[str] | None = None) -> Iterator[RawRecord]:
    """Every record of `files` in order; each holds at most max(max_record_bytes + 1, 64 KiB) bytes
    (a Parquet or Arrow row over the limit: about its first 64 KiB). `fmt` names the reader (`auto`: by
    extension); what a file holds that is not a record (WARC request, metadata, warcinfo... records) is
    counted in `skipped`."""
    hold = max(max_record_bytes + 1, OVERSIZED_KEEP_BYTES)
    skipped = Counter() if skipped is None else skipped
    for path in files:
        source = redact(path)  # a URL without its secrets: what records, errors and logs show
        kind = file_format(path, fmt)
        if kind == "parquet":
            yield from _iter_parquet(path, max_record_bytes)
            continue
        if kind == "arrow":
            yield from _iter_arrow(path, max_record_bytes)
            continue
        if kind in ("warc", "wet"):
            yield from _iter_warc(path, skipped, max_record_bytes)
            continue
        with ExitStack() as stack:
            f, raw = _open_stream(path, stack)
            lines = _LineReader(f, hold, source)
            if kind in ("csv", "tsv"):
                yield from _iter_csv(source, f, raw, "\t" if kind == "tsv" else ",", max_record_bytes)
                continue
            if kind == "text":
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


_ROW_BATCH_BYTES = 16 << 20  # about what the rows converted together hold (Parquet: by each row group's size)
_MAX_BATCH_ROWS = 1024


def _is_binary_like(type_: pa.DataType) -> bool:
    return (pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_binary(type_)
            or pa.types.is_large_binary(type_))


def _without_views(column: pa.Array) -> pa.Array:
    """A string or binary view column as a plain one, which pyarrow's length and slice kernels take."""
    if pa.types.is_string_view(column.type):
        return column.cast(pa.large_string())
    return column.cast(pa.large_binary()) if pa.types.is_binary_view(column.type) else column


def _cell_bytes(column: pa.Array, limit: int) -> list[int]:
    """Each cell's size in bytes, from the Arrow buffers without converting a value: string and binary
    cells exactly (0 for a null); other cells by their slice of the buffers where the column is over
    `limit`, else as an even share of the column (none of them can be over it)."""
    type_ = column.type
    if pa.types.is_dictionary(type_) and _is_binary_like(type_.value_type):
        lengths = pc.take(pc.binary_length(column.dictionary), column.indices)
    elif _is_binary_like(type_):
        lengths = pc.binary_length(column)
    elif column.nbytes <= limit:
        return [column.nbytes // max(1, len(column))] * len(column)
    else:
        return [column.slice(i, 1).nbytes for i in range(len(column))]
    return [n or 0 for n in lengths.to_pylist()]


def _cell_prefix(column: pa.Array, i: int) -> Any:
    """The first OVERSIZED_KEEP_BYTES of cell `i`, read without converting the rest: text (bad UTF-8
    escaped) or bytes; a cell of another type (a list, a struct) only as a note of its type and size."""
    cell, type_ = column.slice(i, 1), column.type
    if pa.types.is_dictionary(type_):
        cell, type_ = column.dictionary.slice(column.indices[i].as_py(), 1), type_.value_type
    if not _is_binary_like(type_):
        return f"<{type_} value of {cell.nbytes} bytes>"
    binary = (pa.large_binary() if pa.types.is_large_string(type_) else pa.binary() if pa.types.is_string(type_)
              else type_)
    prefix = pc.binary_slice(cell.cast(binary), 0, OVERSIZED_KEEP_BYTES)[0].as_py()
    return prefix.decode("utf-8", errors="backslashreplace") if binary != type_ else prefix


def _column_values(column: pa.Array, cut: set[int]) -> tuple[list[Any], list[str]]:
    """A column's Python values and, per value, why it could not be converted ("" when it could). The
    cells in `cut` are converted only as their start (`_cell_prefix`)."""
    values: list[Any] = []
    errors: list[str] = []
    start = 0
    for stop in [*sorted(cut), len(column)]:
        part_values, part_errors = _convert(column.slice(start, stop - start))
        values += part_values
        errors += part_errors
        if stop < len(column):
            values.append(_cell_prefix(column, stop))
            errors.append("")
        start = stop + 1
    return values, errors


def _convert(column: pa.Array) -> tuple[list[Any], list[str]]:
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


@dataclass(frozen=True)
class _RowSpan:
    """Consecutive rows of a Parquet or Arrow file, field by field: per field, its cells in one or more
    pieces, read (a Parquet field: from the file) only when the field before has been converted."""
    names: list[str]
    num_rows: int
    columns: Iterator[Iterator[pa.Array]]


def _span_rows(span: _RowSpan, limit: int) -> Iterator[tuple[dict[str, Any], int, str]]:
    """Each row as (fields, size in bytes, reason or ""). A row over `limit` is `invalid:oversized`, and
    each of its cells over OVERSIZED_KEEP_BYTES from where it went over is converted only as its start."""
    converted = []
    totals = [0] * span.num_rows
    for pieces in span.columns:
        values: list[Any] = []
        errors: list[str] = []
        for piece in map(_without_views, pieces):
            first = len(values)
            if first + len(piece) > span.num_rows:
                raise pa.ArrowInvalid(f"a field has more than the {span.num_rows} rows of the others")
            cut = set()
            for i, size in enumerate(_cell_bytes(piece, limit)):
                totals[first + i] += size
                if size > OVERSIZED_KEEP_BYTES and totals[first + i] > limit:
                    cut.add(i)
            piece_values, piece_errors = _column_values(piece, cut)
            values += piece_values
            errors += piece_errors
        if len(values) != span.num_rows:
            raise pa.ArrowInvalid(f"a field has {len(values)} rows, not the {span.num_rows} of the others")
        converted.append((values, errors))
    for i, total in enumerate(totals):
        row = {name: values[i] for name, (values, _) in zip(span.names, converted)}
        error = next((errors[i] for _, errors in converted if errors[i]), "")
        yield row, total, "invalid:oversized" if total > limit else error


def _unique_names(path: str, names: list[str]) -> list[str]:
    repeated = [name for name, n in Counter(names).items() if n > 1]
    if repeated:  # a row as a dict would keep one of them
        raise InputError(f"{path}: column {repeated[0]!r} appears {names.count(repeated[0])} times; each column "
                         "needs a name of its own")
    return names


def _rows(path: str, spans: Iterator[_RowSpan], what: str, max_record_bytes: int) -> Iterator[RawRecord]:
    index = 0
    try:
        for span in spans:
            for row, num_bytes, error in _span_rows(span, max_record_bytes):
                index += 1
                yield RawRecord(path, index, "row", row, num_bytes, error)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: unreadable {what} data after row {index}: {e}") from e


def _iter_parquet(path: str, max_record_bytes: int) -> Iterator[RawRecord]:
    with open_input(path) as f:
        yield from _rows(redact(path), _parquet_spans(f, redact(path)), "Parquet", max_record_bytes)


def _num_leaves(type_: pa.DataType) -> int:
    """How many Parquet columns hold a field of this type (a struct or map: one per leaf)."""
    type_ = type_.value_type if pa.types.is_dictionary(type_) else type_
    return sum(_num_leaves(type_.field(i).type) for i in range(type_.num_fields)) if type_.num_fields else 1


def _parquet_spans(f: BinaryIO, path: str) -> Iterator[_RowSpan]:
    """A row group at a time, in spans of about _ROW_BATCH_BYTES by the group's (uncompressed) size, each
    field read by a reader of its own. A reader holds about three times its largest value, so a group
    whose rows are that large on average is read field after field, each reader let go before the next:
    one row of eight 50 MB strings costs one string's worth, not eight."""
    parquet = pq.ParquetFile(f, pre_buffer=False, buffer_size=_CHUNK_BYTES)
    names = _unique_names(path, parquet.schema_arrow.names)
    leaves, first = [], 0
    for field_ in parquet.schema_arrow:
        leaves.append(list(range(first, first + _num_leaves(field_.type))))
        first += len(leaves[-1])
    assert first == parquet.metadata.num_columns, "a field's Parquet columns are miscounted"

    def batches(group: int, columns: list[int], rows: int) -> Iterator[pa.Array]:
        return (b.column(0) for b in parquet.reader.iter_batches(rows, row_groups=[group], column_indices=columns,
                                                                   use_threads=False))

    for group in range(parquet.num_row_groups):
        meta = parquet.metadata.row_group(group)
        rows = max(1, min(_MAX_BATCH_ROWS, _ROW_BATCH_BYTES * meta.num_rows // max(1, meta.total_byte_size)))
        if rows == 1 or rows >= meta.num_rows:
            yield _RowSpan(names, meta.num_rows, (batches(group, columns, rows) for columns in leaves))
            continue
        readers = [batches(group, columns, rows) for columns in leaves]
        for start in range(0, meta.num_rows, rows):
            yield _RowSpan(names, min(rows, meta.num_rows - start), (itertools.islice(r, 1) for r in readers))


def _iter_arrow(path: str, max_record_bytes: int) -> Iterator[RawRecord]:
    """An Arrow IPC file: the stream format `datasets` writes (data-*.arrow), or the random-access format.
    A local file is memory-mapped: a batch's cells are read from disk only as far as they are converted."""
    with pa.memory_map(path) if not is_url(path) else open_input(path) as f:
        yield from _rows(redact(path), _arrow_spans(f, redact(path), max_record_bytes), "Arrow", max_record_bytes)


def _arrow_spans(f: BinaryIO, path: str, limit: int) -> Iterator[_RowSpan]:
    """Each record batch in spans of rows that hold about _ROW_BATCH_BYTES (a row over `limit`: as its
    first OVERSIZED_KEEP_BYTES)."""
    for batch in _arrow_batches(f):
        names = _unique_names(path, batch.schema.names)
        totals = [0] * batch.num_rows
        for column in batch.columns:
            totals = [t + n for t, n in zip(totals, _cell_bytes(column, limit))]
        start = size = 0
        for row, total in enumerate(totals):
            held = min(total, OVERSIZED_KEEP_BYTES * batch.num_columns) if total > limit else total
            if row > start and size + held > _ROW_BATCH_BYTES:
                yield _arrow_span(names, batch, start, row)
                start, size = row, 0
            size += held
        if start < batch.num_rows or not batch.num_rows:
            yield _arrow_span(names, batch, start, batch.num_rows)


def _arrow_span(names: list[str], batch: pa.RecordBatch, start: int, stop: int) -> _RowSpan:
    return _RowSpan(names, stop - start, (iter([column.slice(start, stop - start)]) for column in batch.columns))


def _arrow_batches(f: BinaryIO) -> Iterator[pa.RecordBatch]:
    head = f.read(6)
    f.seek(0)
    reader = pa.ipc.open_file(f) if head == b"ARROW1" else pa.ipc.open_stream(f)
    if head == b"ARROW1":
        yield from (reader.get_batch(i) for i in range(reader.num_record_batches))
    else:
        yield from reader


class _CsvSource:
    """The lines of a CSV/TSV text for `csv.reader`, read at C speed, at most `hold` characters at a time
    (a longer line comes in pieces), with a second iterator over the same lines (`seen`) that gives each
    record's lines once the reader has read it. A broken record's lines can be put back to be read again
    (`replay`), each line at most once."""

    def __init__(self, text: io.TextIOWrapper, hold: int, delimiter: str) -> None:
        self.text = text
        self.hold = hold
        self.delimiter = delimiter
        self.lines = iter(functools.partial(text.readline, hold), "")
        self.num_lines = 0  # the lines of the file read into records so far
        self.replayed_until = 0  # the last line that was read a second time
        self._read_from(self.lines)

    def _read_from(self, lines: Iterator[str]) -> None:
        lines, self.seen = itertools.tee(lines)  # neither reads ahead of the other: `seen` holds one record
        self.reader = csv.reader(lines, delimiter=self.delimiter, strict=True)
        self.num_read = 0  # by this reader

    def next_record(self) -> tuple[list[str] | None, str, list[str]]:
        """(the next record's fields, or None where csv raised an error; the error or ""; its lines), or
        (None, "", []) at the end."""
        values, problem = None, ""
        try:
            values = next(self.reader)
        except StopIteration:
            return None, "", []
        except csv.Error as e:
            problem = str(e)
        num_lines, self.num_read = self.reader.line_num - self.num_read, self.reader.line_num
        self.num_lines += num_lines
        return values, problem, list(itertools.islice(self.seen, num_lines))

    def has_piece(self, lines: list[str]) -> bool:
        """Whether a line of `lines` is only the start of a line longer than `hold` characters."""
        return self.hold in map(len, lines) and any(len(s) == self.hold and s[-1] not in "\r\n" for s in lines)

    def skip_rest_of_line(self) -> int:
        """Read past the rest of a line that was read as far as `hold` characters; its length in bytes."""
        num_bytes = 0
        while rest := self.text.readline(_CHUNK_BYTES):
            num_bytes += len(rest.encode("utf-8", "surrogateescape"))
            if rest[-1] in "\r\n":
                break
        return num_bytes

    def replay(self, lines: list[str]) -> list[str]:
        """Of the record just read (`lines`), broken, the lines not to read again: its first, and those that
        were read a second time already; the others are put back, to be read before the rest of the file."""
        first = self.num_lines - len(lines) + 1  # the record's first line in the file
        num_bad = max(1, min(len(lines), self.replayed_until - first + 1))
        if num_bad < len(lines):  # then the lines put back before are all read: none is left waiting
            self.replayed_until, self.num_lines = self.num_lines, first + num_bad - 1
            self._read_from(itertools.chain(lines[num_bad:], self.lines))
        return lines[:num_bad]


def _raw_lines(lines: list[str]) -> tuple[str, int]:
    """Lines as read, as the quarantine keeps them (their first OVERSIZED_KEEP_BYTES, bytes that are not
    UTF-8 escaped), and their length in bytes."""
    data = "".join(lines).encode("utf-8", "surrogateescape")
    return _oversized_original(data, len(data), "row"), len(data)


def _oversized_csv_row(path: str, index: int, first: int, lines: list[str], num_more_bytes: int) -> RawRecord:
    """A CSV record over the size limit: its first OVERSIZED_KEEP_BYTES, bytes that are not UTF-8 escaped
    (parse_raw notes how much is left out)."""
    data = "".join(lines).encode("utf-8", "surrogateescape")
    start = data[:OVERSIZED_KEEP_BYTES].decode("utf-8", "backslashreplace")
    return RawRecord(path, index, "row", {"line": first, "raw": start}, len(data) + num_more_bytes,
                     "invalid:oversized")


def _csv_header(path: str, source: _CsvSource) -> list[str] | None:
    """The header row, None for an empty file; an `InputError` if it does not parse, is longer than a line
    is held, or names a column twice (a row as a dict would keep only one of them)."""
    header, problem, lines = source.next_record()
    if not lines:
        return None
    if problem:
        raise InputError(f"{path}: the header row is not valid CSV: {problem}")
    if source.has_piece(lines):
        raise InputError(f"{path}: the header row is longer than {source.hold - 1:,} characters "
                         "('clean.max_record_bytes')")
    repeated = [name for name, n in Counter(header).items() if n > 1]
    if repeated:
        raise InputError(f"{path}: the header row names column {repeated[0]!r} {header.count(repeated[0])} times; "
                         "each column needs a name of its own")
    return header


def _csv_record(path: str, index: int, header: list[str], record: tuple[list[str] | None, str, list[str]],
                source: _CsvSource, max_record_bytes: int) -> RawRecord | None:
    """A record as `_CsvSource.next_record` read it; None for a blank line. A record of several lines that
    does not parse or has the wrong number of fields was most likely begun by a quote left open, which took
    the lines after it in: its first line is quarantined (`invalid:csv_syntax`) and the others read again."""
    values, problem, lines = record
    first = source.num_lines - len(lines) + 1
    num_chars = sum(map(len, lines))
    if num_chars >= source.hold and source.has_piece(lines):  # a line over the size limit: read past the rest
        rest = source.skip_rest_of_line() if source.has_piece(lines[-1:]) else 0
        return _oversized_csv_row(path, index, first, lines, rest)
    if values is not None and len(lines) > 1 and len(values) != len(header):
        problem = (f"a quote left open across {len(lines)} lines made a record of {len(values)} fields, "
                   f"not {len(header)}")
    if problem:
        raw, num_bytes = _raw_lines(source.replay(lines) if len(lines) > 1 else lines)
        return RawRecord(path, index, "row", {"line": first, "csv_error": problem, "raw": raw}, num_bytes,
                         "invalid:csv_syntax")
    if num_chars > max_record_bytes:
        return _oversized_csv_row(path, index, first, lines, 0)
    if not values or values == [""]:  # a blank line is not a record
        return None
    error = "" if len(values) == len(header) else "invalid:csv_fields"
    if any(_SURROGATE_RE.search(v) for v in values):
        values = [v.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") for v in values]
        error = "invalid:bad_utf8"
    row = dict(zip(header, values)) if not error else {"header": header, "values": values}
    return RawRecord(path, index, "row", row, num_chars, error)


def _iter_csv(path: str, f: BinaryIO, raw: BinaryIO, delimiter: str, max_record_bytes: int) -> Iterator[RawRecord]:
    """Rows of a CSV/TSV file with a header row, as {column: string}. The csv module reads quoted fields
    across lines, as far as 'clean.max_record_bytes' characters a field; a row with more or fewer fields than
    the header, or one csv cannot parse, is a record with a reason (`invalid:csv_fields`, `invalid:csv_syntax`
    with its raw lines), not the end of the file, and a quote left open costs only the line it is on
    (`_csv_record`). A row over the size limit is `invalid:oversized`; bytes that are not UTF-8 make the
    row `invalid:bad_utf8`. A header row that names a column twice is an `InputError`."""
    hold = max(max_record_bytes + 1, OVERSIZED_KEEP_BYTES)
    text = io.TextIOWrapper(f, encoding="utf-8-sig", errors="surrogateescape", newline="")
    csv.field_size_limit(hold)
    source = _CsvSource(text, hold, delimiter)
    index = 0
    try:
        header = _csv_header(path, source)
        while header is not None and (record := source.next_record())[2]:
            row = _csv_record(path, index + 1, header, record, source, max_record_bytes)
            if row is not None:
                index += 1
                yield row
    except _STREAM_ERRORS as e:
        raise InputError(f"{path}: corrupt or truncated data after row {index} (file byte {raw.tell()}): {e}") from e


def check_headers(files: list[str], max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, fmt: str = "auto") -> int:
    """Read the header of every CSV/TSV file and the schema of every Parquet/Arrow file in `files`, and
    nothing else: a header that does not parse or names a column twice is an `InputError` naming the file
    before any work starts, not after hours of it. The number of files checked."""
    num_checked = 0
    for path in files:
        kind = file_format(path, fmt)
        source = redact(path)
        if kind in ("csv", "tsv"):
            hold = max(max_record_bytes + 1, OVERSIZED_KEEP_BYTES)
            csv.field_size_limit(hold)
            with ExitStack() as stack:
                f, raw = _open_stream(path, stack)
                text = io.TextIOWrapper(f, encoding="utf-8-sig", errors="surrogateescape", newline="")
                try:
                    _csv_header(source, _CsvSource(text, hold, "\t" if kind == "tsv" else ","))
                except _STREAM_ERRORS as e:
                    raise InputError(f"{source}: corrupt or truncated data in the header row: {e}") from e
        elif kind == "parquet":
            with open_input(path) as f:
                try:
                    names = pq.ParquetFile(f).schema_arrow.names
                except (pa.ArrowException, OSError) as e:
                    raise InputError(f"{source}: not a readable Parquet file: {e}") from e
            _unique_names(source, names)
        elif kind == "arrow":
            with pa.memory_map(path) if not is_url(path) else open_input(path) as f:
                head = f.read(6)
                f.seek(0)
                try:
                    schema = (pa.ipc.open_file(f) if head == b"ARROW1" else pa.ipc.open_stream(f)).schema
                except (pa.ArrowException, OSError) as e:
                    raise InputError(f"{source}: not a readable Arrow file: {e}") from e
            _unique_names(source, schema.names)
        else:
            continue
        num_checked += 1
    return num_checked


# --- WARC / WET ---------------------------------------------------------------------------------------

HTML_TYPES = ("text/html", "application/xhtml+xml")
_DOCUMENT_RECORD_TYPES = ("response", "conversion")
_META_CHARSET_RE = re.compile(rb"""<meta[^>]{0,200}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)
_HEADER_CHARSET_RE = re.compile(r"charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]{1,40})", re.I)
# Codecs that call themselves text encodings but do not read a web page: they raise on most bytes (idna,
# punycode, undefined) or turn backslash escapes into characters (*-escape).
_NOT_PAGE_CODECS = frozenset({"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape"})
# The record types of the WARC standard: the skipped-record counters name only these (any other is `other`),
# so a file cannot add metric names.
_WARC_RECORD_TYPES = frozenset({"warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion",
                                "continuation"})
_STATUS_RE = re.compile(r"[0-9]{3}")  # ASCII digits: `str.isdigit` and `int` also take "²" and "٣"
_DIGITS_RE = re.compile(r"[0-9]+")
_CHUNK_SIZE_RE = re.compile(rb"0*[0-9A-Fa-f]{1,15}")  # `int(x, 16)` also takes "-6", "+6", "0x6" and "6_0"


@dataclass(frozen=True)
class WarcBlock:
    """One WARC record as a reader library gives it: its type, WARC headers and undecoded block."""
    record_type: str
    headers: dict[str, str]  # names lower-cased
    block: bytes  # the whole block, or only its first OVERSIZED_KEEP_BYTES where it is over the size limit
    offset: int  # where the record starts in the (compressed) file
    num_bytes: int  # the whole block's length


def warc_blocks(f: BinaryIO, path: str, max_bytes: int | None = None) -> Iterator[WarcBlock]:
    """Every record of a WARC file, through FastWARC (bench/warc.py compares it with warcio). A block over
    `max_bytes` is kept only as its first OVERSIZED_KEEP_BYTES and read past without holding it. FastWARC
    stops quietly where a cut file ends, so a block shorter than its Content-Length is an `InputError`."""
    from fastwarc.warc import ArchiveIterator  # a few ms to import: only for WARC inputs

    index = last = 0
    try:
        for record in ArchiveIterator(f, parse_http=False):
            index, last = index + 1, record.stream_pos
            size = record.content_length
            block = record.reader.read(size if max_bytes is None or size <= max_bytes else OVERSIZED_KEEP_BYTES)
            num_bytes = len(block) + record.reader.consume()  # the rest, streamed past
            headers = {k.lower(): v for k, v in record.headers.items()}
            if num_bytes < size:
                raise InputError(f"{path}: truncated WARC file: it ends inside record {index} (starting at byte "
                                 f"{last}), {num_bytes} of its {size} bytes read")
            yield WarcBlock(headers.get("warc-type", "unknown"), headers, block, last, num_bytes)
    except (OSError, ValueError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"{path}: corrupt WARC data after record {index} (file byte {f.tell()}): {e}") from e
    if index and path.lower().endswith(".gz"):
        # A cut inside the last gzip member's end (the record's closing CRLFs, the gzip trailer) leaves its
        # block whole: check that this member, one record, decompresses to its end and the file ends there.
        f.seek(last)
        try:
            complete = _gzip_member_ends(f)
        except zlib.error as e:
            raise InputError(f"{path}: corrupt WARC data in record {index} (starting at byte {last}): {e}") from e
        if not complete:
            raise InputError(f"{path}: truncated WARC file: it ends inside record {index} (starting at byte {last})")


def _gzip_member_ends(f: BinaryIO) -> bool:
    """Whether the gzip member at `f`'s position decompresses to its end, inflated a chunk at a time (one
    member can hold a block of any size)."""
    member = zlib.decompressobj(31)
    while not member.eof and (data := f.read(_CHUNK_BYTES)):
        while data and not member.eof:
            member.decompress(data, _CHUNK_BYTES)
            data = member.unconsumed_tail
    member.flush()  # what the last call held back: at most a few hundred bytes
    return member.eof


def _iter_warc(path: str, skipped: Counter[str], max_record_bytes: int) -> Iterator[RawRecord]:
    index, source = 0, redact(path)
    with open_input(path) as f:
        for rec in warc_blocks(f, source, max_record_bytes):
            if rec.record_type not in _DOCUMENT_RECORD_TYPES:
                kind = rec.record_type if rec.record_type in _WARC_RECORD_TYPES else "other"
                skipped[f"warc_skipped.{kind}"] += 1
                continue
            index += 1
            yield warc_record(source, index, rec, max_record_bytes)


def warc_record(path: str, index: int, rec: WarcBlock, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> RawRecord:
    """A WARC response (HTTP) or conversion (extracted text) record as a row, with a reason where it is
    not a document: `invalid:oversized` (a block over `max_record_bytes`: the row keeps its first 64 KiB as
    `block`; or a body that inflates past it), `invalid:warc_truncated` (WARC-Truncated, or an HTTP body
    shorter than its Content-Length), `invalid:warc_bad_http` (no HTTP status line of three digits, or no
    headers), `invalid:http_status_<class>` (anything but 200, by class: `http_status_3xx`, `_4xx`, ...; the
    code is in the row's `http_status`), `invalid:warc_not_html` (a response that is not text/html or XHTML),
    `invalid:warc_bad_encoding` (a gzip/deflate/chunked body that does not decode), `invalid:surrogate`
    (text that decodes to lone surrogates, as UTF-7 can: the row has them as `\\ud800` escapes)."""
    h = rec.headers
    row: dict[str, Any] = {"id": h.get("warc-record-id"), "url": h.get("warc-target-uri"),
                           "date": h.get("warc-date"), "warc_record_id": h.get("warc-record-id")}
    if rec.num_bytes > max_record_bytes:  # `rec.block` is only the block's start
        row["block"] = _oversized_original(rec.block, rec.num_bytes, "warc")
        return RawRecord(path, index, "warc", row, rec.num_bytes, "invalid:oversized")
    if rec.record_type == "conversion":
        row["text"] = rec.block.decode("utf-8", errors="replace")
        error = "invalid:warc_truncated" if "warc-truncated" in h else ""
        return RawRecord(path, index, "warc", row, rec.num_bytes, error)
    error, status, http_headers, body = _http_response(rec.block)
    content_type = http_headers.get("content-type", "")
    row.update(http_status=status, content_type=content_type or None)
    if not error and "warc-truncated" in h:
        error = "invalid:warc_truncated"
    if not error and status != 200:
        error = f"invalid:http_status_{status // 100}xx"  # a class: reasons are metric names, one per value
    if not error and content_type.split(";")[0].strip().lower() not in HTML_TYPES:
        error = "invalid:warc_not_html"
    if not error:
        error, body = _decoded_body(body, http_headers, max_record_bytes)
    if error in ("", "invalid:warc_truncated"):
        text = body.decode(_charset(content_type, body), errors="replace")
        if _SURROGATE_RE.search(text):  # UTF-7 can spell them; no UTF-8 output can hold them
            error, text = error or "invalid:surrogate", _escape_surrogates(text)
        row["text"] = text
    return RawRecord(path, index, "warc", row, rec.num_bytes, error)


def _escape_surrogates(text: str) -> str:
    """`text` with each lone surrogate written as its JSON escape (`\\ud800`), which UTF-8 can hold."""
    return _SURROGATE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _http_response(block: bytes) -> tuple[str, int | None, dict[str, str], bytes]:
    """(reason or "", status code, headers with lower-cased names, body) of an HTTP response block."""
    end = block.find(b"\r\n\r\n")
    sep = 4
    if end < 0:
        end, sep = block.find(b"\n\n"), 2
    if end < 0:
        return "invalid:warc_bad_http", None, {}, b""
    lines = block[:end].decode("latin-1").splitlines()
    status_line = lines[0].split(None, 2) if lines else []
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/") or not _STATUS_RE.fullmatch(status_line[1]):
        return "invalid:warc_bad_http", None, {}, b""
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return "", int(status_line[1]), headers, block[end + sep:]


def _decoded_body(body: bytes, headers: dict[str, str], max_bytes: int) -> tuple[str, bytes]:
    """The body without its transfer and content encodings (chunked; gzip, deflate), and a reason where
    it is cut short, does not decode or inflates past `max_bytes`."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, complete = _dechunk(body)
        if not complete:
            return "invalid:warc_truncated", body
    elif len(body) < _content_length(headers.get("content-length", "")):
        return "invalid:warc_truncated", body
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            body = _inflate(body, encoding == "deflate", max_bytes + 1)
        except zlib.error:
            return "invalid:warc_bad_encoding", b""
        if len(body) > max_bytes:
            return "invalid:oversized", b""
    elif encoding not in ("", "identity"):
        return "invalid:warc_bad_encoding", b""
    return "", body


def _content_length(value: str) -> int:
    """An HTTP Content-Length header's value, 0 where it is not a number of ASCII digits."""
    if not _DIGITS_RE.fullmatch(value.strip()):
        return 0
    digits = value.strip().lstrip("0")
    return int(digits[:19] or "0")  # 19 digits are more than any body: `int` refuses over 4300 digits


def _inflate(body: bytes, deflate: bool, limit: int) -> bytes:
    """At most `limit` bytes of the decompressed body (a few KB can inflate to gigabytes). gzip: wbits 47
    detects a gzip or zlib header; deflate: zlib, else raw deflate, as some servers send it."""
    if not deflate:
        return zlib.decompressobj(47).decompress(body, limit)
    try:
        return zlib.decompressobj().decompress(body, limit)
    except zlib.error:
        return zlib.decompressobj(-15).decompress(body, limit)


def _dechunk(body: bytes) -> tuple[bytes, bool]:
    parts, pos = [], 0
    while True:
        end = body.find(b"\r\n", pos)
        if end < 0:
            return b"".join(parts), False
        size_text = body[pos:end].split(b";")[0].strip()
        if not _CHUNK_SIZE_RE.fullmatch(size_text):  # a negative size would step back and loop forever
            return b"".join(parts), False
        size = int(size_text, 16)
        if size == 0:
            return b"".join(parts), True
        if end + 2 + size > len(body):
            parts.append(body[end + 2:])
            return b"".join(parts), False
        parts.append(body[end + 2:end + 2 + size])
        pos = end + 2 + size + 2


def _charset(content_type: str, body: bytes) -> str:
    """The body's character set: the Content-Type header's, else a <meta> tag's in the first 4 KB, else
    UTF-8 (decoded with replacement characters where the bytes disagree). A name that is no text encoding
    (unknown, or a codec such as zlib, base64 or idna) is passed over."""
    for match in (_HEADER_CHARSET_RE.search(content_type), _META_CHARSET_RE.search(body, 0, 4096)):
        if match:
            name = match.group(1)
            codec = _page_codec(name.decode("ascii") if isinstance(name, bytes) else name)
            if codec:
                return "cp1252" if codec in ("latin-1", "iso8859-1", "ascii") else codec  # as browsers read them
    return "utf-8"


def _page_codec(name: str) -> str | None:
    """The codec `name` stands for if it reads text, else None: unknown, bytes-to-bytes (zlib, base64, hex:
    `bytes.decode` refuses them) or one of _NOT_PAGE_CODECS."""
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    if not info._is_text_encoding or info.name in _NOT_PAGE_CODECS or info.name.endswith("-escape"):
        return None
    return info.name


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


_MISSING = object()
_JSON_GROWTH = 5  # json.dumps writes a parsed JSON line at most about 4.5 times as long (see _fields_over)
_UNREADABLE = frozenset({"invalid:bad_utf8", "invalid:bad_value", "invalid:csv_syntax"})


def get_field(obj: dict[str, Any], path: str) -> Any:
    """`obj[path]`, else the value at the dotted `path` through nested objects; `_MISSING` if neither."""
    if path in obj:
        return obj[path]
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _without(obj: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """`obj` less the fields at `paths` (copies along each path; `obj` itself is left as it was)."""
    out = dict(obj)
    for path in paths:
        if path in out:
            del out[path]
            continue
        parts, node, parents = path.split("."), out, []
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                break
            node[part] = dict(child)
            parents.append(node)
            node = node[part]
        else:
            node.pop(parts[-1], None)
    return out


def field_names(obj: dict[str, Any], prefix: str = "", depth: int = 2) -> list[str]:
    """The fields of `obj`, nested objects' fields as dotted paths (two levels), for error messages."""
    names = []
    for key, value in obj.items():
        names.append(prefix + str(key))
        if isinstance(value, dict) and depth > 1:
            names += field_names(value, f"{prefix}{key}.", depth - 1)
    return names


def _fields_over(raw: RawRecord, original: str, kept: dict[str, Any], meta: dict[str, Any], limit: int) -> bool:
    """Whether the record's other fields, as JSON as the `meta` and kept-field columns hold them, are over
    `limit` bytes. Measured only where they may be: in a row whose JSON is over it, or in a JSON line that
    `json.dumps` could write over it (up to _JSON_GROWTH times as long: "1e15" -> "1000000000000000.0")."""
    if raw.kind == "text" or not (_over(original, limit) if raw.kind in ROW_KINDS
                                  else _JSON_GROWTH * raw.num_bytes > limit):
        return False
    return _over(json.dumps({**kept, **meta}, ensure_ascii=False, default=str), limit)


def _capped(original: str) -> str:
    data = original.encode("utf-8", "surrogatepass")
    return _oversized_original(data, len(data), "row")


def _over(text: str, limit: int) -> bool:
    """Whether `text` is over `limit` bytes as UTF-8 (encoded only where its length leaves doubt)."""
    return len(text) > limit or (4 * len(text) > limit and len(text.encode("utf-8", "surrogatepass")) > limit)


def parse_raw(raw: RawRecord, max_record_bytes: int, fields: FieldMap = DEFAULT_FIELDS) -> Record | Rejection:
    """Validate one raw record; every failure becomes a `Rejection` with a reason, never an exception."""
    if raw.kind == "warc":
        fields = FieldMap("text", "id", fields.keep, fields.rename)
    if raw.kind in ROW_KINDS:
        obj: Any = fields.renamed(raw.payload)
        original = json.dumps(obj, ensure_ascii=False, default=str)
        fallback_id = derive_id(raw.source, raw.index, original.encode())
        if raw.error:  # the reader's reason; a record whose values did not decode keeps no id of its own
            given = None if raw.error in _UNREADABLE else get_field(obj, fields.id)
            given_id = str(given) if isinstance(given, (str, int)) and str(given) else fallback_id
            if raw.error == "invalid:oversized" and raw.kind == "row":  # the reader kept its first bytes only
                original = _oversized_original(original.encode("utf-8", "surrogatepass"), raw.num_bytes, "row")
            return Rejection(given_id, raw.error, raw.source, raw.index, original)
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
        if raw.kind == "text":  # the file is the text, whatever `fields.text` says
            obj = {fields.text: decoded}
        else:
            try:
                obj = json.loads(decoded)
            except RecursionError:
                return Rejection(fallback_id, "invalid:too_deep", raw.source, raw.index, original)
            except ValueError:
                return Rejection(fallback_id, "invalid:bad_json", raw.source, raw.index, original)
            if not isinstance(obj, dict):
                return Rejection(fallback_id, "invalid:not_object", raw.source, raw.index, original)
            obj = fields.renamed(obj)
    given_id = get_field(obj, fields.id)
    record_id = str(given_id) if isinstance(given_id, (str, int)) and str(given_id) else fallback_id
    if raw.kind == "json":
        # A lone surrogate escape ("\ud800") decodes, but no UTF-8 output can hold it.
        if _SURROGATE_ESCAPE_RE.search(decoded) and _SURROGATE_RE.search(json.dumps(obj, ensure_ascii=False)):
            record_id = fallback_id if _SURROGATE_RE.search(record_id) else record_id
            return Rejection(record_id, "invalid:surrogate", raw.source, raw.index, original)
        if _too_deep(obj):
            return Rejection(record_id, "invalid:too_deep", raw.source, raw.index, original)
    text = get_field(obj, fields.text)
    if text is _MISSING:
        return Rejection(record_id, "invalid:missing_text", raw.source, raw.index, original)
    if not isinstance(text, str):
        return Rejection(record_id, "invalid:non_string_text", raw.source, raw.index, original)
    if raw.kind in ROW_KINDS and _over(text, max_record_bytes):
        return Rejection(record_id, "invalid:oversized", raw.source, raw.index, _capped(original))
    if not text.strip():
        return Rejection(record_id, "invalid:empty", raw.source, raw.index, original)
    if _is_binary(text):
        return Rejection(record_id, "invalid:binary", raw.source, raw.index, original)
    kept = {}
    if fields is DEFAULT_FIELDS or fields == DEFAULT_FIELDS:
        meta = {k: v for k, v in obj.items() if k not in ("id", "text")}
    else:
        for path in fields.keep:
            value = get_field(obj, path)
            kept[path] = None if value is _MISSING else value
        meta = _without(obj, [fields.id, fields.text, *fields.keep])
    if _fields_over(raw, original, kept, meta, max_record_bytes):  # no published value may be over the limit
        return Rejection(record_id, "invalid:oversized", raw.source, raw.index,
                         original if raw.kind == "json" else _capped(original))
    return Record(record_id, text, raw.source, raw.index, meta, kept)
