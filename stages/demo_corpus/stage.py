"""Build the bundled demo corpus: raw JSONL shards and a small WARC file that the `clean` stage runs on.

`python -m stages.demo_corpus [--params params.yaml]` reads the `demo_corpus` section, writes the shards,
the WARC, the labels, the semantic-filter labels and the metrics file, each atomically.
"""
from __future__ import annotations

import gzip
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from stages.common.runtime.atomic import atomic_dir, atomic_path
from stages.common.runtime.cli import stage_main
from stages.common.runtime.metrics import write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import param, validate
from stages.demo_corpus.builder import Builder
from stages.demo_corpus.records import Doc, _dumps, record_counts, semantic_labels
from stages.demo_corpus.warc import WARC_NAME
from stages.demo_corpus.warc import build as build_warc

STAGE = "demo_corpus"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Params:
    # paths have no default: they come from params.yaml or the caller, so a test never writes the repo's data
    out_dir: str = param(nonempty=True)
    labels_path: str = param(nonempty=True)
    semantic_labels_path: str = param(nonempty=True)
    metrics_path: str = param(nonempty=True)  # headline figures (DVC metrics)
    detail_path: str = param(nonempty=True)  # every figure
    seed: int = param(1234, min=0)
    num_docs: int = param(24000, min=1)
    num_shards: int = param(8, min=1)
    warc_docs: int = param(60, min=0)  # html documents served from a WARC file instead of the shards

    def __post_init__(self) -> None:
        validate(self, STAGE)
        record_counts(self.num_docs)  # too few records for the mix: fail before any work


def write(docs: list[Doc], params: Params) -> tuple[list[Doc], int, int]:
    """Write the WARC, the shards, the labels and the semantic-filter labels atomically; return (the
    records as labelled, in stream order; uncompressed and compressed shard bytes)."""
    warc, docs, warc_docs = build_warc(docs, params.seed, params.warc_docs)
    n, k = len(docs), params.num_shards
    labels: list[dict[str, Any]] = [d.label(WARC_NAME, i + 1) for i, d in enumerate(warc_docs)]
    raw_size = gz_size = 0
    with atomic_dir(params.out_dir, stage=STAGE) as tmp:
        if warc_docs:
            (tmp / WARC_NAME).write_bytes(warc)  # sorts before the shards: the stream starts with it
        for s in range(k):
            name = f"part-{s:05d}.jsonl.gz"
            chunk = docs[s * n // k:(s + 1) * n // k]
            payload = b"".join(d.line() + b"\n" for d in chunk)
            with open(tmp / name, "wb") as fh, gzip.GzipFile("", "wb", 6, fh, mtime=0) as gz:
                gz.write(payload)
            raw_size += len(payload)
            gz_size += (tmp / name).stat().st_size
            labels.extend(d.label(name, i + 1) for i, d in enumerate(chunk))
    with atomic_path(params.labels_path) as tmp_labels:
        tmp_labels.write_text("".join(json.dumps(lab, ensure_ascii=False) + "\n" for lab in labels),
                              encoding="utf-8")
    with atomic_path(params.semantic_labels_path) as tmp_semantic:
        rows = semantic_labels(warc_docs + docs, params.seed)
        tmp_semantic.write_text("".join(_dumps(row) + "\n" for row in rows),
                                encoding="utf-8")  # _dumps: noisy text holds U+0085 and U+2028
    return warc_docs + docs, raw_size, gz_size


def run(params: Params) -> dict[str, int | float]:
    """Build and write the corpus; write and return the metrics: records by kind, language, duplicate
    type and malformation, records without an id, shard bytes."""
    check_owned_paths(STAGE, {}, {"out_dir": params.out_dir})
    log.info("building %d demo records (seed %d)", params.num_docs, params.seed)
    docs = Builder(params.seed).build(params.num_docs)
    docs, raw_size, gz_size = write(docs, params)
    counts: Counter[str] = Counter(records=len(docs), no_id=sum(d.id is None for d in docs))
    for d in docs:
        lab = d.label("", 0)
        counts.update(f"{key}.{lab[key] or 'none'}" for key in ("kind", "lang", "dup_type", "malformed"))
    metrics: dict[str, int | float] = dict(sorted(counts.items()))
    metrics.update(bytes_uncompressed=raw_size, bytes_compressed=gz_size)
    write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
    log.info("demo corpus: %s", ", ".join(f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v:,}"
                                          for k, v in headline(metrics).items()))
    return metrics


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: records, duplicates planted, malformed records, uncompressed MB."""
    return {"num_docs": metrics["records"],
            "num_duplicates": metrics.get("dup_type.exact", 0) + metrics.get("dup_type.near", 0),
            "num_malformed": metrics["records"] - metrics.get("malformed.none", 0),
            "input_mb": metrics["bytes_uncompressed"] / 1e6}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)
