"""Tables: Parquet, Arrow IPC and CSV/TSV files as rows of fields (`RawRecord`s of kind `row`), each cell
measured in the Arrow buffers before it is converted, and `check_headers`, which reads every header and
schema before any work starts. Imports `records`, `files` and `lines`.
"""
from __future__ import annotations

import csv
import functools
import io
import itertools
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.common.runtime.storage import open_input
from stages.common.runtime.urls import InputError, is_url, redact
from stages.common.text.readers.files import file_format
from stages.common.text.readers.lines import _CHUNK_BYTES, _STREAM_ERRORS, _open_stream
from stages.common.text.readers.records import (
    DEFAULT_MAX_RECORD_BYTES,
    OVERSIZED_KEEP_BYTES,
    RawRecord,
    _SURROGATE_RE,
    _oversized_original,
)


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
