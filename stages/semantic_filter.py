"""`semantic_filter` stage: drop ads, boilerplate and off-topic text from the clean documents.

Picks a threshold per language on the head's validation scores (maximum F1 of the drop decision, or
the highest-recall threshold reaching `target_precision`, never above `max_threshold`; one picked from fewer
than MIN_VAL_PER_CLASS keep or drop examples is logged and flagged `val.<lang>.low_confidence` in the
metrics), then scores every clean
document with its language's head (stages/common/semantic/head.py) and drops those whose probability of
`keep` is below it. `Scorer` scores shards of `batch_size` documents in workers and
`SemanticFilter.verdict` applies the threshold; the filter-stage base (stages/common/text/filters.py) runs
them over the executor (a local process pool or Ray tasks), each shard's scores kept in `work_dir` with a
completion marker until the stage succeeds, so a rerun redoes only unfinished shards; the heads go to the
workers once.

    <out_dir>/docs/part-*.parquet        kept documents, the clean columns plus `quality_score` (p_keep)
    <out_dir>/quarantine/part-*.parquet  dropped documents, reason `semantic:<category>` and the score
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.common.runtime.cli import stage_main
from stages.common.runtime.executor import check_executor
from stages.common.runtime.metrics import semantic_val, threshold
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import param, validate
from stages.common.runtime.parquet import DOC_SCHEMA, iter_rows
from stages.common.semantic.features import Features, NgramParams
from stages.common.semantic.head import (
    KEEP,
    MIN_VAL_PER_CLASS,
    Head,
    binary_report,
    choose_threshold,
    class_counts,
    load_heads,
    low_confidence,
    predict,
)
from stages.common.text.filters import Dropped, FilterStage, Kept, Verdict

STAGE = "semantic_filter"
log = logging.getLogger(f"refinery.{STAGE}")
SCORED_SCHEMA = DOC_SCHEMA.append(pa.field("quality_score", pa.float32()))


def scored_schema(docs_dir: str) -> pa.Schema:
    """The input docs' schema (clean's columns, its `keep_fields` among them) plus `quality_score`."""
    parts = sorted(Path(docs_dir).glob("part-*.parquet"))
    schema = pq.read_schema(parts[0]).remove_metadata() if parts else DOC_SCHEMA
    return schema.append(pa.field("quality_score", pa.float32()))


@dataclass(frozen=True, kw_only=True)  # keyword-only: the path fields have no default, wherever they sit
class Params:
    docs_dir: str
    embeddings_dir: str
    head_dir: str
    out_dir: str
    metrics_path: str  # headline figures (DVC metrics)
    detail_path: str  # every figure: counts per reason, thresholds and validation scores per language
    target_precision: float | None = param(0.98, gt=0.0, max=1.0)  # None: threshold of maximum F1 per language
    # No threshold above this: a document the head finds likelier keep than drop (its classes are weighted
    # to balance, so 0.5 is where it finds them equally likely) is kept whatever the validation examples say.
    # Validation examples from the labels' own genres score keep high, so a threshold chosen on them alone
    # can sit above 0.5 (0.73 for the demo's zh), where documents unlike the labels fall.
    max_threshold: float = param(0.5, gt=0.0, max=1.0)
    batch_size: int = param(512, min=1)  # documents per task: one work shard
    rows_per_part: int = param(100_000, min=1)
    # placement=True: where the work runs, not what it computes (a rerun keeps finished work shards)
    # 0 = all cores (executor ray: CPUs of the local cluster it starts)
    num_workers: int = param(0, min=0, placement=True)
    executor: str = param("local", placement=True)  # local (process pool) | ray
    address: str = param("", placement=True)  # ray only: "auto" joins a running cluster, "" starts a local one
    work_dir: str  # per-shard scores and completion markers, until the stage succeeds

    def __post_init__(self) -> None:
        validate(self, STAGE)
        check_executor(STAGE, self.executor, self.address)


def thresholds(validation: dict[str, list], target_precision: float | None,
               max_threshold: float = 1.0) -> dict[str, float]:
    """Per language of the validation set, plus `*` over all of it for languages without their own; none
    above `max_threshold`."""
    langs = np.array(validation["lang"])
    p_keep = np.array(validation["p_keep"])
    is_drop = np.array([label != KEEP for label in validation["label"]])
    out = {"*": choose_threshold(p_keep, is_drop, target_precision)}
    for lang in sorted(set(langs)):
        rows = langs == lang
        out[lang] = choose_threshold(p_keep[rows], is_drop[rows], target_precision)
    return {lang: min(t, max_threshold) for lang, t in out.items()}


class Scorer:
    """P(keep) of each document with its language's head, and its likeliest drop class; built once per
    worker process, so the heads go to each worker once."""


    def __init__(self, heads: dict[str, Head], pooled: str, classes: list[str], ngrams: NgramParams) -> None:
        self.heads, self.pooled, self.classes, self.ngrams = heads, pooled, classes, ngrams

    def __call__(self, batch: tuple[list[str], list[str], np.ndarray], timings: Counter[str]) -> list[dict[str, Any]]:
        texts, langs, emb = batch
        probs = predict(self.heads, self.pooled, Features.build(texts, langs, emb, self.ngrams), langs)
        return [{"score": float(p[0]), "category": self.classes[int(np.argmax(p[1:])) + 1]} for p in probs]


class EmbeddingReader:
    """semantic_embed's docs.parquet (id, lang, embedding), read in step with the clean docs: the shards ask for
    consecutive rows, so only the rows of the current Parquet batch are held, not every id and embedding."""

    def __init__(self, path: str, batch_size: int) -> None:
        self._batches = pq.ParquetFile(path, pre_buffer=False).iter_batches(batch_size=batch_size,
                                                                            columns=["id", "embedding"])
        self._ids: list[str] = []
        self._emb = np.zeros((0, 0), dtype=np.float32)
        self._start = 0  # in the current batch
        self.position = 0  # rows read so far

    def read(self, offset: int, num_rows: int) -> tuple[list[str], np.ndarray]:
        """Rows [offset, offset + num_rows) (fewer at the end of the file): their ids and embeddings."""
        assert offset == self.position, f"rows are read in order: {offset} asked, {self.position} next"
        ids, parts = [], []
        while len(ids) < num_rows:
            if self._start == len(self._ids):
                batch = next(self._batches, None)
                if batch is None:
                    break
                self._ids, self._start = batch.column("id").to_pylist(), 0
                self._emb = batch.column("embedding").flatten().to_numpy().reshape(len(self._ids), -1)
            take = min(num_rows - len(ids), len(self._ids) - self._start)
            ids += self._ids[self._start:self._start + take]
            parts.append(self._emb[self._start:self._start + take])
            self._start += take
        self.position += len(ids)
        return ids, (np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32))


class SemanticFilter(FilterStage):
    name = STAGE
    decider = Scorer
    doc_schema = SCORED_SCHEMA

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        self.doc_schema = scored_schema(params.docs_dir)  # clean's kept fields carried through
        config, self.heads = load_heads(params.head_dir)
        self.classes, self.pooled = config["classes"], config["pooled"]
        self.ngrams = NgramParams(**{k: tuple(v) if isinstance(v, list) else v for k, v in config["ngrams"].items()})
        self.validation = pq.read_table(f"{params.head_dir}/validation.parquet").to_pydict()
        self.cutoffs = thresholds(self.validation, params.target_precision, params.max_threshold)
        for lang, (num_keep, num_drop) in self.support().items():
            if low_confidence(num_keep, num_drop):
                log.warning("semantic_filter: the %r threshold %.3f comes from %d keep and %d drop validation "
                            "examples, fewer than %d of either: low confidence (label more examples)", lang,
                            self.cutoffs[lang], num_keep, num_drop, MIN_VAL_PER_CLASS)
        self.embeddings = EmbeddingReader(f"{params.embeddings_dir}/docs.parquet", params.batch_size)

    def documents(self) -> Iterator[dict[str, Any]]:
        return iter_rows(self.params.docs_dir)

    def payload(self, batch: list[dict[str, Any]], offset: int) -> tuple[list[str], list[str], np.ndarray]:
        ids, emb = self.embeddings.read(offset, len(batch))
        if [row["id"] for row in batch] != ids:
            raise RuntimeError("embeddings are out of step with the clean docs: rerun semantic_embed")
        return [row["text"] for row in batch], [row["lang"] for row in batch], emb

    def decider_args(self) -> tuple:
        return (self.heads, self.pooled, self.classes, self.ngrams)

    def verdict(self, result: dict[str, Any], row: dict[str, Any]) -> Verdict:
        """Kept at or above its language's threshold, else dropped as `semantic:<likeliest drop class>`."""
        score = result["score"]
        if score >= self.cutoffs.get(row["lang"], self.cutoffs["*"]):
            return Kept({**row, "quality_score": score})
        return Dropped(row["id"], f"semantic:{result['category']}", row["source"], json.dumps(row, ensure_ascii=False),
                       row["lang"], row["lang_prob"], score=score, file=row.get("file"))

    def support(self) -> dict[str, tuple[int, int]]:
        """(keep, drop) validation examples behind each threshold: per language, and `*` over all of them."""
        langs = np.array(self.validation["lang"])
        is_drop = np.array([label != KEEP for label in self.validation["label"]], dtype=bool)
        return {lang: class_counts(is_drop if lang == "*" else is_drop[langs == lang]) for lang in self.cutoffs}

    def stage_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        out = {threshold(lang): t for lang, t in self.cutoffs.items()}
        for lang, (num_keep, num_drop) in self.support().items():
            out.update({semantic_val(lang, "num_keep"): num_keep, semantic_val(lang, "num_drop"): num_drop,
                        semantic_val(lang, "low_confidence"): int(low_confidence(num_keep, num_drop))})
        langs = np.array(self.validation["lang"])
        p_keep = np.array(self.validation["p_keep"])
        is_drop = np.array([label != KEEP for label in self.validation["label"]])
        for lang in sorted(set(langs)):
            rows = langs == lang
            for key, value in binary_report(p_keep[rows], is_drop[rows], self.cutoffs[lang]).items():
                out[semantic_val(lang, key)] = value
        return out


def run(params: Params) -> dict[str, Any]:
    check_owned_paths(STAGE, {k: getattr(params, k) for k in ("docs_dir", "embeddings_dir", "head_dir")},
                      {"out_dir": params.out_dir}, {"work_dir": params.work_dir})
    stage = SemanticFilter(params)
    inputs = sorted(Path(params.docs_dir).glob("part-*.parquet")) + sorted(Path(params.head_dir).iterdir())
    return stage.run([*inputs, f"{params.embeddings_dir}/docs.parquet"])


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
