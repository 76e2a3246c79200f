"""Parquet IO shared by the stages (datasets written as part-*.parquet files): streaming writers with bounded buffers, and readers."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DOC_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("text", pa.large_string()),
    ("lang", pa.string()),
    ("lang_prob", pa.float32()),
    ("source", pa.string()),  # the input source (clean.sources) it came from
    ("file", pa.string()),  # the input file it came from
    ("meta", pa.string()),  # the record's other fields, as JSON
])

QUARANTINE_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("stage", pa.string()),
    ("reason", pa.string()),
    ("lang", pa.string()),
    ("lang_prob", pa.float32()),
    ("source", pa.string()),
    ("file", pa.string()),
    ("index", pa.int64()),
    ("dup_of", pa.string()),
    ("score", pa.float32()),  # the deciding value: a model's score (semantic_filter), what a rule measured (clean)
    ("judged_text", pa.large_string()),  # the text as judged (clean: after normalisation), where it got that far
    ("record", pa.large_string()),  # the original record
])


_NUMPY_TYPES = {pa.float64(): np.float64, pa.float32(): np.float32, pa.int64(): np.int64, pa.int32(): np.int32}


def table_from_rows(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """`pa.Table.from_pylist(rows, schema)` (a missing key is a null), with string and numeric columns
    assembled from buffers: pyarrow's conversion of Python objects imports pandas the first time it runs,
    a third of a second of every writing process's life."""
    return pa.Table.from_arrays([_column([row.get(field.name) for row in rows], field.type) for field in schema],
                                schema=schema)


def _column(values: list[Any], type_: pa.DataType) -> pa.Array:
    nulls = [value is None for value in values]
    null_count = sum(nulls)
    validity = pa.py_buffer(np.packbits(np.logical_not(nulls), bitorder="little")) if null_count else None
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        encoded = [b"" if value is None else value.encode() for value in values]
        offsets = np.zeros(len(values) + 1, dtype=np.int64 if pa.types.is_large_string(type_) else np.int32)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    elif type_ in _NUMPY_TYPES:
        buffers = [validity, pa.py_buffer(np.array([0 if value is None else value for value in values],
                                                   dtype=_NUMPY_TYPES[type_]))]
    else:
        return pa.array(values, type=type_)
    return pa.Array.from_buffers(type_, len(values), buffers, null_count=null_count)


class PartWriter:
    """Writes rows to `<folder>/part-00000.parquet`, ... rolling to a new file every `rows_per_part`.
    Rows are buffered up to `rows_per_group` rows or about `chars_per_group` characters of strings,
    whichever comes first, so a run of megabyte-sized rows does not hold gigabytes."""

    def __init__(self, folder: Path, schema: pa.Schema, rows_per_part: int, rows_per_group: int = 2000,
                 chars_per_group: int = 64 << 20) -> None:
        self.folder = folder
        self.schema = schema
        self.rows_per_part = rows_per_part
        self.rows_per_group = rows_per_group
        self.chars_per_group = chars_per_group
        self.num_rows = 0
        self.num_parts = 0
        self._buffer: list[dict[str, Any]] = []
        self._buffered_chars = 0
        self._writer: pq.ParquetWriter | None = None
        self._rows_in_part = 0
        folder.mkdir(parents=True, exist_ok=True)

    def write(self, row: dict[str, Any]) -> None:
        self._buffer.append(row)
        self.num_rows += 1
        self._buffered_chars += sum(len(v) for v in row.values() if isinstance(v, (str, bytes)))
        if len(self._buffer) >= self.rows_per_group or self._buffered_chars >= self.chars_per_group:
            self._flush()

    def _flush(self) -> None:
        self._buffered_chars = 0
        while self._buffer:
            if self._writer is None:
                path = self.folder / f"part-{self.num_parts:05d}.parquet"
                self._writer = pq.ParquetWriter(path, self.schema, compression="zstd")
                self.num_parts += 1
                self._rows_in_part = 0
            take = min(len(self._buffer), self.rows_per_part - self._rows_in_part)
            chunk, self._buffer = self._buffer[:take], self._buffer[take:]
            self._writer.write_table(table_from_rows(chunk, self.schema))
            self._rows_in_part += take
            if self._rows_in_part >= self.rows_per_part:
                self._writer.close()
                self._writer = None

    def close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.num_parts == 0:  # an empty output is still a readable, typed dataset
            pq.write_table(self.schema.empty_table(), self.folder / "part-00000.parquet")
            self.num_parts = 1


def iter_rows(folder: str | Path, columns: list[str] | None = None, batch_size: int = 1024) -> Iterator[dict[str, Any]]:
    for path in sorted(Path(folder).glob("part-*.parquet")):
        # without pre-buffering, which reads every row group of the file ahead: a part holds many of them
        for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=batch_size, columns=columns):
            yield from batch.to_pylist()


def read_table(folder: str | Path, columns: list[str] | None = None) -> pa.Table:
    paths = sorted(Path(folder).glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(p, columns=columns) for p in paths])
