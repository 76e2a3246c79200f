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

One module per concern, each importing only those before it: `records` (the record types, `parse_raw`, ids,
size limits), `files` (listing inputs, `save_to_disk` folders, formats by suffix), `lines` (compressed
streams, JSONL and text files), `tabular` (Parquet, Arrow, CSV/TSV, `check_headers`), `warc` (WARC/WET and
HTTP), `dispatch` (`iter_raw`). This file only re-exports them, so it holds no code of its own: the stages
import the modules that hold what they use, which `dvc.yaml` lists. Imports `stages.common.runtime` only.
"""
from stages.common.runtime.urls import InputError
from stages.common.text.readers.dispatch import iter_raw
from stages.common.text.readers.files import (
    ARROW_SUFFIXES,
    CSV_SUFFIXES,
    FORMATS,
    JSONL_SUFFIXES,
    PARQUET_SUFFIXES,
    SAVE_TO_DISK_STATE,
    SUPPORTED_SUFFIXES,
    TEXT_SUFFIXES,
    TSV_SUFFIXES,
    WARC_SUFFIXES,
    WET_SUFFIXES,
    file_format,
    list_input_files,
    save_to_disk_order,
)
from stages.common.text.readers.lines import check_zstd_frames
from stages.common.text.readers.records import (
    DEFAULT_FIELDS,
    DEFAULT_MAX_RECORD_BYTES,
    MAX_JSON_DEPTH,
    OVERSIZED_KEEP_BYTES,
    ROW_KINDS,
    FieldMap,
    RawRecord,
    Record,
    Rejection,
    derive_id,
    field_names,
    get_field,
    parse_raw,
)
from stages.common.text.readers.tabular import check_headers
from stages.common.text.readers.warc import HTML_TYPES, WarcBlock, warc_blocks, warc_record

__all__ = [
    "ARROW_SUFFIXES", "CSV_SUFFIXES", "DEFAULT_FIELDS", "DEFAULT_MAX_RECORD_BYTES", "FORMATS", "HTML_TYPES",
    "JSONL_SUFFIXES", "MAX_JSON_DEPTH", "OVERSIZED_KEEP_BYTES", "PARQUET_SUFFIXES", "ROW_KINDS",
    "SAVE_TO_DISK_STATE", "SUPPORTED_SUFFIXES", "TEXT_SUFFIXES", "TSV_SUFFIXES", "WARC_SUFFIXES", "WET_SUFFIXES",
    "FieldMap", "InputError", "RawRecord", "Record", "Rejection", "WarcBlock",
    "check_headers", "check_zstd_frames", "derive_id", "field_names", "file_format", "get_field", "iter_raw",
    "list_input_files", "parse_raw", "save_to_disk_order", "warc_blocks", "warc_record",
]
