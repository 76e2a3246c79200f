"""The dataset card (README.md) beside a published document dataset, in the Hugging Face dataset-card format.

A stage that publishes `<out_dir>/docs/part-*.parquet` (and, for a filter stage, `<out_dir>/quarantine/`)
calls `write_dataset_card(<the folder being published>, ...)` once its Parquet files are closed. The card's
YAML front matter names the part files (`configs`: `docs/` is the default config, `quarantine/` a second one),
so `datasets.load_dataset("<out_dir>")` loads the documents and nothing else of the folder (token shards,
CSV files); its `dataset_info` lists the features and row counts. The body says what the dataset is, its
size per language (and per tier and split where those columns exist), each field (from the written
Parquet schema: a column this module does not know is listed with its type), how it was made (the stage,
its params, a digest of its code) and why the quarantined records were dropped.

Everything is derived from the written files and the params, nothing from the clock or the machine, so
the same inputs give a byte-identical card. Params are shown as given, less credentials and query strings
of URLs; an absolute local path shows its last component only.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from stages.common.runtime.digest import code_digest, settings
from stages.common.runtime.urls import is_url, redact

CARD_NAME = "README.md"
DOCS, QUARANTINE = "docs", "quarantine"
GROUP_COLUMNS = ("lang", "tier", "split")  # sizes are given per value of each of these the documents have

# What the pipeline's standard columns mean; any other column is listed with its type only.
MEANINGS = {
    "id": "the record's id (from the input, else derived from its source and position)",
    "text": "the cleaned document text",
    "lang": "language detected by the clean stage (ISO 639-1)",
    "lang_prob": "the language identifier's probability for `lang`",
    "source": "the input source (`clean.sources`) the record came from",
    "file": "the input file the record came from",
    "meta": "the input record's other fields, as a JSON object (a string: `json.loads` it)",
    "quality_score": "the semantic filter's probability that the document is worth keeping",
    "perplexity": "the reference LM's perplexity of the document (exp of the mean token NLL)",
    "tier": "easy / medium / hard: the document's third of its language by perplexity",
    "split": "train / val: the pipeline's own split, by a hash of the id",
    "num_tokens": "tokens of the document under the pipeline's tokenizer",
    "stage": "the stage that dropped the record",
    "reason": "why it was dropped (`family:detail`)",
    "index": "the record's position in its input file",
    "dup_of": "the id of the kept document it duplicates (dedup drops)",
    "score": "the deciding score, where a model decided",
    "record": "the original record as JSON, or the cleaned text for rule and dedup drops",
}

# The Hugging Face size categories (dataset cards' `size_categories`), by upper bound.
SIZE_CATEGORIES = [(10**3, "n<1K"), (10**4, "1K<n<10K"), (10**5, "10K<n<100K"), (10**6, "100K<n<1M"),
                   (10**7, "1M<n<10M"), (10**8, "10M<n<100M"), (10**9, "100M<n<1B"), (10**10, "1B<n<10B"),
                   (10**11, "10B<n<100B"), (10**12, "100B<n<1T")]
BATCH_ROWS = 1024  # rows read at a time: memory does not grow with the dataset


def public(value: str) -> str:
    """A param value fit to print: a URL without user, password, query or fragment; an absolute local path
    as its last component (`…/name`); anything else as it is."""
    if is_url(value):
        return redact(value)
    if os.path.isabs(value):
        return f"…/{Path(value).name}"
    return value


def size_category(num_rows: int) -> str:
    return next((name for bound, name in SIZE_CATEGORIES if num_rows < bound), "n>1T")


def hf_dtype(type_: pa.DataType) -> str | None:
    """The `datasets` Value dtype a column of this Arrow type loads as, or None for a nested or exotic type."""
    if pa.types.is_floating(type_):
        return f"float{type_.bit_width}"
    if pa.types.is_date(type_):
        return f"date{type_.bit_width}"
    if (pa.types.is_integer(type_) or pa.types.is_boolean(type_) or pa.types.is_string(type_)
            or pa.types.is_large_string(type_) or pa.types.is_binary(type_) or pa.types.is_large_binary(type_)
            or pa.types.is_timestamp(type_)):
        return str(type_)
    return None


class Dataset:
    """One folder of part files: schema, rows, bytes, and rows and text bytes per value of each group column
    (and per language and tier together). Counted with numpy over dictionary indices: pyarrow's group_by, and
    compute functions given Python scalars, import pandas, which the stages keep out of their processes."""

    def __init__(self, folder: Path) -> None:
        self.files = sorted(folder.glob("part-*.parquet"))
        self.schema = pq.read_schema(self.files[0]).remove_metadata()
        self.num_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in self.files)
        self.num_bytes = sum(f.stat().st_size for f in self.files)
        self.arrow_bytes = 0  # in memory, as `datasets` counts a split's `num_bytes`
        self.groups = [c for c in GROUP_COLUMNS if c in self.schema.names]
        self.has_text = "text" in self.schema.names
        keys = [(c,) for c in self.groups] + [("lang", "tier")] * ("lang" in self.groups and "tier" in self.groups)
        self.rows: dict[tuple[str, ...], Counter] = {k: Counter() for k in keys}
        self.text_bytes: dict[tuple[str, ...], Counter] = {k: Counter() for k in keys}
        for path in self.files:  # in small batches: a batch of long documents is megabytes
            for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=BATCH_ROWS):
                self.arrow_bytes += batch.nbytes
                lengths = (_integers(pc.binary_length(batch.column("text"))) if self.has_text
                           else np.zeros(batch.num_rows, dtype=np.int64))
                encoded = {c: _encode(batch.column(c)) for c in self.groups}
                for key in keys:
                    values, index = [encoded[c][0] for c in key], np.zeros(batch.num_rows, dtype=np.int64)
                    for c in key:
                        index = index * len(encoded[c][0]) + encoded[c][1]
                    num = int(np.prod([len(v) for v in values]))
                    rows = np.bincount(index, minlength=num)
                    text_bytes = np.bincount(index, lengths.astype(np.float64), minlength=num)
                    for i in np.flatnonzero(rows):
                        combo = np.unravel_index(i, [len(v) for v in values])
                        value = tuple(v[j] for v, j in zip(values, combo))
                        self.rows[key][value] += int(rows[i])
                        self.text_bytes[key][value] += int(text_bytes[i])
        self.text_bytes_total = int(sum(self.text_bytes[keys[0]].values())) if keys and self.has_text else None

    def value_counts(self, name: str) -> Counter:
        counts: Counter = Counter()
        for path in self.files:
            for batch in pq.ParquetFile(path, pre_buffer=False).iter_batches(BATCH_ROWS, columns=[name]):
                counts.update(batch.column(name).to_pylist())
        return counts


def _encode(column: pa.Array) -> tuple[list[Any], np.ndarray]:
    """(distinct values, null included; each row's index into them)."""
    encoded = column.dictionary_encode(null_encoding="encode")
    return encoded.dictionary.to_pylist(), _integers(encoded.indices)


def _integers(array: pa.Array) -> np.ndarray:
    """An integer array's values as int64, nulls as 0, read from its buffers (`to_numpy` imports pandas)."""
    if not len(array):
        return np.zeros(0, dtype=np.int64)
    validity, data = array.buffers()
    values = np.frombuffer(data, dtype=f"i{array.type.bit_width // 8}")[array.offset:array.offset + len(array)]
    if array.null_count:
        valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        values = np.where(valid[array.offset:array.offset + len(array)].astype(bool), values, 0)
    return values.astype(np.int64)


def _yaml(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON scalar is a YAML flow scalar


def _table(header: Sequence[str], align: str, rows: Sequence[Sequence[Any]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |",
            *["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows]]


ORDER = {"easy": 0, "medium": 1, "hard": 2, "train": 0, "val": 1}  # tiers and splits in their own order


def _key(value: tuple) -> tuple:
    return tuple((v is None, ORDER.get(v, len(ORDER)), "" if v is None else str(v)) for v in value)


def _name(value: Any) -> str:
    return "(none)" if value in (None, "") else f"`{value}`"


def _bytes(num_bytes: int) -> str:
    return f"{num_bytes:,} bytes" + (f" ({num_bytes / 1e6:,.1f} MB)" if num_bytes >= 10**6 else "")


def front_matter(name: str, datasets: dict[str, Dataset]) -> list[str]:
    docs = datasets[DOCS]
    langs = sorted(value for (value,) in docs.rows.get(("lang",), {}) if value)
    lines = ["---", f"pretty_name: {_yaml(name)}"]
    if langs:
        lines += ["language:", *[f"- {_yaml(lang)}" for lang in langs]]
    lines += ["size_categories:", f"- {_yaml(size_category(docs.num_rows))}", "task_categories:",
              "- text-generation", "configs:"]
    for config, folder in (("default", DOCS), (QUARANTINE, QUARANTINE)):
        if folder in datasets:
            lines += [f"- config_name: {config}", *["  default: true"] * (config == "default"), "  data_files:",
                      "  - split: train", f"    path: {_yaml(f'{folder}/part-*.parquet')}"]
    lines.append("dataset_info:")
    for config, folder in (("default", DOCS), (QUARANTINE, QUARANTINE)):
        if folder in datasets:
            data = datasets[folder]
            dtypes = [hf_dtype(f.type) for f in data.schema]
            lines.append(f"- config_name: {config}")
            if all(dtypes):  # a nested column: datasets infers the features from the files instead
                lines += ["  features:", *[f"  - name: {_yaml(f.name)}\n    dtype: {d}"
                                           for f, d in zip(data.schema, dtypes)]]
            lines += ["  splits:", "  - name: train", f"    num_bytes: {data.arrow_bytes}",
                      f"    num_examples: {data.num_rows}", f"  download_size: {data.num_bytes}",
                      f"  dataset_size: {data.arrow_bytes}"]
    return lines + ["---"]


def _fields(schema: pa.Schema) -> list[str]:
    return _table(["field", "type", "meaning"], "lll",
                  [[f"`{f.name}`", f"`{hf_dtype(f.type) or f.type}`", MEANINGS.get(f.name, "")] for f in schema])


def _sizes(data: Dataset) -> list[str]:
    text = f", {_bytes(data.text_bytes_total)} of text (UTF-8)" if data.text_bytes_total is not None else ""
    lines = [f"{data.num_rows:,} documents{text}; {_bytes(data.num_bytes)} of Parquet (zstd) in {len(data.files)} "
             f"part file(s)."]
    for key, rows in data.rows.items():
        text_bytes = data.text_bytes[key]
        lines += ["", *_table([" / ".join(key), "documents", "text bytes"][:2 + data.has_text], "lrr",
                              [[" / ".join(_name(v) for v in value), f"{rows[value]:,}", f"{text_bytes[value]:,}"]
                               [:2 + data.has_text] for value in sorted(rows, key=_key)])]
    if not data.num_rows:
        lines += ["", "The dataset is empty: `datasets` refuses to load an empty split (pyarrow reads it)."]
    return lines


def _params(params: Any) -> list[list[str]]:
    """The params that say what was computed, flattened: placement fields and the stage's own output paths
    (`out_dir`, `model_dir`, `work_dir`, `*_path`) left out."""
    rows: list[list[str]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
            return
        leaf = prefix.rpartition(".")[2]
        if leaf in ("out_dir", "model_dir", "work_dir") or leaf.endswith("_path"):
            return
        shown = public(value) if isinstance(value, str) else value
        rows.append([f"`{prefix}`", f"`{json.dumps(shown, ensure_ascii=False, default=str)}`"])

    walk("", settings(params))
    return rows


def dataset_card(folder: Path, stage_name: str, stage: ModuleType, params: Any, notes: Sequence[str] = ()) -> str:
    """The card of the dataset in `folder` (its `docs/` and, when present, `quarantine/`), made by `stage`
    (the stage's module) under `params`; `notes`: the stage's own paragraphs (other files in the folder)."""
    datasets = {name: Dataset(folder / name) for name in (DOCS, QUARANTINE) if (folder / name).is_dir()}
    docs = datasets[DOCS]
    first_paragraph = " ".join((stage.__doc__ or "").strip().split("\n\n")[0].split())
    summary = first_paragraph.partition("stage: ")[2]  # "`clean` stage: raw records -> ..."
    name = f"Refinery {stage_name} documents"
    digest, num_files = code_digest(stage)
    lines = [*front_matter(name, datasets), "", f"# {name}", "",
             f"The documents the Refinery pipeline's `{stage_name}` stage published"
             + (f" ({summary.rstrip('.')})" if summary else "") + ": Parquet part files in `docs/`"
             + (", and every record it dropped, with the reason, in `quarantine/`." if QUARANTINE in datasets
                else "."), "",
             "## Use", "", "```python", "from datasets import load_dataset", "",
             'docs = load_dataset("path/to/this/folder", split="train")  # docs/ (the default config)',
             *([f'dropped = load_dataset("path/to/this/folder", "{QUARANTINE}", split="train")']
               * (QUARANTINE in datasets)),
             'docs = load_dataset("parquet", data_files="path/to/this/folder/docs/*.parquet", split="train")  # same',
             "```", "",
             "The `configs` in this card's header point `load_dataset` at the part files, so nothing else in the "
             "folder is read. pyarrow, pandas, polars or DuckDB read `docs/*.parquet` directly.",
             *[line for note in notes for line in ("", note)], "",
             "## Size", "", *_sizes(docs), "",
             "## Fields", "", *_fields(docs.schema), "",
             "## How it was made", "",
             f"By the `{stage_name}` stage (`python -m stages.{stage_name}`, params in the `{stage_name}` section of "
             f"`params.yaml`); code digest `{digest}` (blake2b-128 of the source of the stage and the "
             f"{num_files - 1} `stages` modules it imports). The params that shape the output:", "",
             *_table(["param", "value"], "ll", _params(params))]
    if QUARANTINE in datasets:
        quarantine = datasets[QUARANTINE]
        reasons = quarantine.value_counts("reason") if "reason" in quarantine.schema.names else Counter()
        lines += ["", "## Quarantine", "",
                  f"`{QUARANTINE}/`: {quarantine.num_rows:,} dropped records ({_bytes(quarantine.num_bytes)} of "
                  f"Parquet); documents kept + dropped = records read.", ""]
        if reasons:
            lines += [*_table(["reason", "records"], "lr",
                              [[f"`{r}`", f"{n:,}"] for r, n in sorted(reasons.items(), key=lambda rn: (-rn[1],
                                                                                                        rn[0]))]), ""]
        lines += _fields(quarantine.schema)
    return "\n".join(lines) + "\n"


def write_dataset_card(folder: Path, stage_name: str, stage: ModuleType, params: Any,
                       notes: Sequence[str] = ()) -> None:
    """Write `dataset_card(...)` to `folder/README.md` (the folder being published: call it inside
    `atomic_dir`, once the part files are closed)."""
    (folder / CARD_NAME).write_text(dataset_card(folder, stage_name, stage, params, notes), encoding="utf-8")
