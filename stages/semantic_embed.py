"""`semantic_embed` stage: sentence embeddings for the labelled examples and for every clean document.

The expensive half of the semantic filter, kept in its own DVC stage so that retraining the head or
moving its threshold never re-embeds anything. Only languages in `embed_languages` go through the
encoder (all-MiniLM-L6-v2 reads English; it maps most Chinese characters to [UNK]); other rows get a
zero vector and are judged by the head's n-gram and layout features alone. The docs are read and embedded
`chunk_docs` at a time, the labelled examples with the first chunk: within a chunk each distinct text is
encoded once (most of the demo's labelled examples are also clean documents) and the encoder's batches are
sorted by length; only what the encoder reads of each text (`Encoder.clip`) is held, so memory is bounded by
the chunk, not the corpus. With the ONNX backend the exported encoder is kept in `onnx_cache_dir` and reused
by later runs.

    <out_dir>/labels.parquet   id, text (normalised like `clean`), lang, label, category, embedding
    <out_dir>/docs.parquet     id, lang, embedding   (same order as the clean docs)
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from stages.common.runtime.atomic import atomic_dir
from stages.common.runtime.cli import stage_main
from stages.common.runtime.executor import resolve_workers
from stages.common.runtime.metrics import write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import param, validate
from stages.common.runtime.parquet import iter_rows
from stages.common.semantic.encoder import DEFAULT_ENCODER, Encoder
from stages.common.semantic.head import KEEP
from stages.common.text.langid import LANGUAGES, LanguageIdentifier
from stages.common.text.normalize import NormalizeOptions, normalize

log = logging.getLogger("refinery.semantic_embed")
STAGE = "semantic_embed"
# Rows per Parquet row group of docs.parquet (384 float32 a row: ~6 MB). A reader decodes a whole row group
# to read any row of it, so semantic_filter's driver holds one group, not one chunk_docs chunk (~100 MB).
EMBEDDING_ROWS_PER_GROUP = 4096


@dataclass(frozen=True, kw_only=True)  # keyword-only: the path fields have no default, wherever they sit
class Params:
    labels_path: str  # JSONL: text, label (keep|drop), optional category, lang, id
    docs_dir: str
    out_dir: str
    metrics_path: str  # headline figures (DVC metrics)
    detail_path: str  # every figure
    encoder: str = DEFAULT_ENCODER  # or a local BERT-family model folder / cached hub id
    backend: str = param("onnx", choices=("torch", "onnx"))  # onnx: exported at start; `quantize` makes it int8
    quantize: bool = True
    onnx_cache_dir: str  # the exported encoder, reused across runs; "" = export every run
    max_length: int = param(64, min=8)  # tokens per document seen by the encoder
    batch_size: int = param(64, min=1)
    num_threads: int = param(0, min=0)  # 0 = all cores
    embed_languages: tuple[str, ...] = param(("en",), choices=LANGUAGES)
    # documents embedded together (distinct texts encoded once, batches sorted by length); bounds memory
    chunk_docs: int = param(65_536, min=1)
    seed: int = param(0, min=0)  # language ID of labels without a `lang`

    def __post_init__(self) -> None:
        validate(self, STAGE)


def read_labels(path: str, seed: int) -> list[dict[str, Any]]:
    """Labelled examples, normalised like `clean` does; a malformed line is an error naming it."""
    langid = None
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{number}: not JSON ({e})") from None
            text, label = obj.get("text"), obj.get("label")
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{path}:{number}: 'text' must be a non-empty string")
            if label not in (KEEP, "drop"):
                raise ValueError(f"{path}:{number}: 'label' must be 'keep' or 'drop', got {label!r}")
            clean_text, _ = normalize(text, NormalizeOptions())
            lang = obj.get("lang")
            if not isinstance(lang, str):
                langid = langid or LanguageIdentifier(seed)
                lang = langid(clean_text).lang
            category = obj.get("category") if label == "drop" else None
            rows.append({"id": str(obj.get("id") or f"label-{number}"), "text": clean_text, "lang": lang,
                         "label": label, "category": category if isinstance(category, str) else None})
    if not rows:
        raise ValueError(f"{path}: no labelled examples")
    return rows


def embed(encoder: Encoder, texts: list[str], langs: list[str], languages: tuple[str, ...],
          keys: list[Any] | None = None) -> tuple[np.ndarray, int]:
    """Embeddings of `texts` (zero vectors outside `languages`), each distinct text (or distinct `keys[i]`, e.g.
    a digest of the whole text where `texts` are clipped) encoded once: most of the demo's labelled examples
    are also clean documents. Returns (embeddings, texts encoded)."""
    out = np.zeros((len(texts), encoder.dim), dtype=np.float32)
    slot: dict[Any, int] = {}
    distinct: list[str] = []
    rows, slots = [], []
    for i, (text, lang) in enumerate(zip(texts, langs)):
        if lang in languages:
            rows.append(i)
            key = text if keys is None else keys[i]
            if key not in slot:
                slot[key] = len(distinct)
                distinct.append(text)
            slots.append(slot[key])
    if rows:
        out[rows] = encoder.encode(distinct)[slots]
    return out, len(distinct)


def _embedding_column(embeddings: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(embeddings.reshape(-1), pa.float32()), embeddings.shape[1])


def doc_embeddings_table(ids: list[str], langs: list[str], embeddings: np.ndarray) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.string()), "lang": pa.array(langs, pa.string()),
                     "embedding": _embedding_column(embeddings)})


def write_doc_embeddings(path: Path, ids: list[str], langs: list[str], embeddings: np.ndarray) -> None:
    pq.write_table(doc_embeddings_table(ids, langs, embeddings), path)


def read_chunks(docs_dir: str, chunk_docs: int, clip: Callable[[str], str]) -> Iterator[dict[str, list]]:
    """The docs `chunk_docs` at a time: id, lang, the clipped text and a digest of the whole text."""
    chunk: dict[str, list] = {"id": [], "lang": [], "text": [], "key": []}
    for row in iter_rows(docs_dir, ["id", "text", "lang"]):
        chunk["id"].append(row["id"])
        chunk["lang"].append(row["lang"])
        chunk["text"].append(clip(row["text"]))
        chunk["key"].append(xxhash.xxh3_128_digest(row["text"].encode()))
        if len(chunk["id"]) >= chunk_docs:
            yield chunk
            chunk = {name: [] for name in chunk}
    if chunk["id"]:
        yield chunk


def run(params: Params) -> dict[str, Any]:
    check_owned_paths(STAGE, {"labels_path": params.labels_path, "docs_dir": params.docs_dir},
                      {"out_dir": params.out_dir})
    start = time.perf_counter()
    labels = read_labels(params.labels_path, params.seed)
    t_load = time.perf_counter()
    encoder = Encoder(params.encoder, params.max_length, params.batch_size, resolve_workers(params.num_threads),
                      params.backend, params.quantize, params.onnx_cache_dir or None)
    load_seconds = time.perf_counter() - t_load
    embedder = Embedder(encoder, params.embed_languages)
    with atomic_dir(params.out_dir, stage=STAGE) as tmp:
        num_docs = write_embeddings(tmp, embedder, labels, params.docs_dir, params.chunk_docs)
    metrics = {
        "num_labels": len(labels),
        "num_docs": num_docs,
        "num_embedded": embedder.num_embedded,
        "num_encoded": embedder.num_encoded,
        "encoder_load_seconds": load_seconds,  # model load (+ ONNX export on a cache miss)
        "onnx_cache_hit": encoder.onnx_cache_hit,
        "encode_seconds": embedder.seconds,
        "encoded_per_s": embedder.num_encoded / max(embedder.seconds, 1e-9),  # distinct texts through the encoder
        "seconds": time.perf_counter() - start,
        "embedding_dim": encoder.dim,
    }
    write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
    log.info("semantic_embed: %d labels + %d docs, %d encoded at %.0f/s", len(labels), num_docs,
             embedder.num_encoded, metrics["encoded_per_s"])
    return metrics


@dataclass
class Embedder:
    """`embed` with the run's counts: rows given an embedding, distinct texts encoded, seconds encoding."""
    encoder: Encoder
    languages: tuple[str, ...]
    num_embedded: int = 0
    num_encoded: int = 0
    seconds: float = 0.0

    def __call__(self, texts: list[str], langs: list[str], keys: list[Any]) -> np.ndarray:
        t0 = time.perf_counter()
        embeddings, num_encoded = embed(self.encoder, texts, langs, self.languages, keys)
        self.seconds += time.perf_counter() - t0
        self.num_encoded += num_encoded
        self.num_embedded += sum(lang in self.languages for lang in langs)
        return embeddings


def write_embeddings(out: Path, embedder: Embedder, labels: list[dict[str, Any]], docs_dir: str,
                     chunk_docs: int) -> int:
    """labels.parquet and docs.parquet under `out`, the docs a chunk at a time (the labels go with the first
    chunk, so short inputs fill the encoder's batches). Returns the number of documents."""
    clip = embedder.encoder.clip
    label_texts = [clip(r["text"]) for r in labels]
    label_langs = [r["lang"] for r in labels]
    label_keys = [xxhash.xxh3_128_digest(r["text"].encode()) for r in labels]
    writer, num_docs = None, 0
    for chunk in read_chunks(docs_dir, chunk_docs, clip):
        num_labels = len(labels) if writer is None else 0
        embeddings = embedder(label_texts[:num_labels] + chunk["text"], label_langs[:num_labels] + chunk["lang"],
                              label_keys[:num_labels] + chunk["key"])
        if num_labels:
            write_labels(out / "labels.parquet", labels, embeddings[:num_labels])
        table = doc_embeddings_table(chunk["id"], chunk["lang"], embeddings[num_labels:])
        writer = writer or pq.ParquetWriter(out / "docs.parquet", table.schema)
        writer.write_table(table, row_group_size=EMBEDDING_ROWS_PER_GROUP)
        num_docs += len(chunk["id"])
    if writer is None:  # no documents: the labels alone, and an empty (typed) docs file
        write_labels(out / "labels.parquet", labels, embedder(label_texts, label_langs, label_keys))
        write_doc_embeddings(out / "docs.parquet", [], [], np.zeros((0, embedder.encoder.dim), np.float32))
    else:
        writer.close()
    return num_docs


def write_labels(path: Path, labels: list[dict[str, Any]], embeddings: np.ndarray) -> None:
    pq.write_table(pa.Table.from_pylist(labels).append_column("embedding", _embedding_column(embeddings)), path)


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: documents with an embedding, and the encoder's throughput."""
    return {"num_docs": metrics["num_embedded"], "docs_per_s": metrics["encoded_per_s"]}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
