"""Which files are input: each format's suffixes (`file_format`: the reader a file's extension names), a
folder or glob listed without entering symlinked folders, a URL listed by its file system, and a Hugging Face
`save_to_disk` folder read as a dataset, in its state.json's order. Imports `records`.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any

from stages.common.runtime.storage import list_remote, match_parts, open_input
from stages.common.runtime.urls import InputError, is_url, redact, url_path
from stages.common.text.readers.records import _SURROGATE_RE


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
