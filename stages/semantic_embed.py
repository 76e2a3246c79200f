"""`semantic_embed` stage: sentence embeddings for the labelled examples and for every clean document.

The expensive half of the semantic filter, kept in its own DVC stage so that retraining the head or
moving its threshold never re-embeds anything. Only languages in `embed_languages` go through the
encoder (all-MiniLM-L6-v2 reads English; it maps most Chinese characters to [UNK]); other rows get a
zero vector and are judged by the head's n-gram and layout features alone. Each distinct text is
encoded once (most of the demo's labelled examples are also clean documents). With the ONNX backend the
exported encoder is kept in `onnx_cache_dir` and reused by later runs.

    <out_dir>/labels.parquet   id, text (normalised like `clean`), lang, label, category, embedding
    <out_dir>/docs.parquet     id, lang, embedding   (same order as the clean docs)
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.common.runtime.atomic import atomic_dir, check_owned_paths
from stages.common.runtime.cli import stage_main
from stages.common.runtime.executor import resolve_workers
from stages.common.runtime.metrics import write_metrics
from stages.common.runtime.params import param, validate
from stages.common.runtime.parquet import read_table
from stages.common.semantic.encoder import DEFAULT_ENCODER, Encoder
from stages.common.semantic.head import KEEP
from stages.common.text.langid import LANGUAGES, LanguageIdentifier
from stages.common.text.normalize import NormalizeOptions, normalize

log = logging.getLogger("refinery.semantic_embed")
STAGE = "semantic_embed"


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


def embed(encoder: Encoder, texts: list[str], langs: list[str], languages: tuple[str, ...]) -> tuple[np.ndarray, int]:
    """Embeddings of `texts` (zero vectors outside `languages`), each distinct text encoded once: most of
    the demo's labelled examples are also clean documents. Returns (embeddings, texts encoded)."""
    out = np.zeros((len(texts), encoder.dim), dtype=np.float32)
    slot: dict[str, int] = {}
    rows, slots = [], []
    for i, (text, lang) in enumerate(zip(texts, langs)):
        if lang in languages:
            rows.append(i)
            slots.append(slot.setdefault(text, len(slot)))
    if rows:
        out[rows] = encoder.encode(list(slot))[slots]
    return out, len(slot)


def _embedding_column(embeddings: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(embeddings.reshape(-1), pa.float32()), embeddings.shape[1])


def write_doc_embeddings(path: Path, ids: list[str], langs: list[str], embeddings: np.ndarray) -> None:
    pq.write_table(pa.table({"id": ids, "lang": langs, "embedding": _embedding_column(embeddings)}), path)


def run(params: Params) -> dict[str, Any]:
    check_owned_paths(STAGE, {"labels_path": params.labels_path, "docs_dir": params.docs_dir},
                      {"out_dir": params.out_dir})
    start = time.perf_counter()
    labels = read_labels(params.labels_path, params.seed)
    docs = read_table(params.docs_dir, ["id", "text", "lang"]).to_pydict()
    t_load = time.perf_counter()
    encoder = Encoder(params.encoder, params.max_length, params.batch_size, resolve_workers(params.num_threads),
                      params.backend, params.quantize, params.onnx_cache_dir or None)
    load_seconds = time.perf_counter() - t_load
    t0 = time.perf_counter()
    texts = [r["text"] for r in labels] + docs["text"]
    langs = [r["lang"] for r in labels] + docs["lang"]
    embeddings, num_encoded = embed(encoder, texts, langs, params.embed_languages)
    label_emb, doc_emb = embeddings[:len(labels)], embeddings[len(labels):]
    encode_seconds = time.perf_counter() - t0
    with atomic_dir(params.out_dir) as tmp:
        table = pa.Table.from_pylist(labels)
        pq.write_table(table.append_column("embedding", _embedding_column(label_emb)), tmp / "labels.parquet")
        write_doc_embeddings(tmp / "docs.parquet", docs["id"], docs["lang"], doc_emb)
    metrics = {
        "num_labels": len(labels),
        "num_docs": len(docs["id"]),
        "num_embedded": sum(lang in params.embed_languages for lang in langs),  # rows with an embedding
        "num_encoded": num_encoded,  # distinct texts through the encoder
        "encoder_load_seconds": load_seconds,  # model load (+ ONNX export on a cache miss)
        "onnx_cache_hit": encoder.onnx_cache_hit,
        "encode_seconds": encode_seconds,
        "encoded_per_s": num_encoded / max(encode_seconds, 1e-9),
        "seconds": time.perf_counter() - start,
        "embedding_dim": encoder.dim,
    }
    write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
    log.info("semantic_embed: %d labels + %d docs, %d encoded at %.0f/s", len(labels), len(docs["id"]),
             num_encoded, metrics["encoded_per_s"])
    return metrics


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: documents with an embedding, and the encoder's throughput."""
    return {"num_docs": metrics["num_embedded"], "docs_per_s": metrics["encoded_per_s"]}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
