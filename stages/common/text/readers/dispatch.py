"""`iter_raw`: the records of a list of files in order, each file read by the reader of its format.
Imports the other modules of the package.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack

from stages.common.runtime.urls import redact
from stages.common.text.readers.files import file_format
from stages.common.text.readers.lines import _STREAM_ERRORS, _LineReader, _open_stream, _read_text, _stream_error
from stages.common.text.readers.records import DEFAULT_MAX_RECORD_BYTES, OVERSIZED_KEEP_BYTES, RawRecord
from stages.common.text.readers.tabular import _iter_arrow, _iter_csv, _iter_parquet
from stages.common.text.readers.warc import _iter_warc


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
