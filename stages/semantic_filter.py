"""`semantic_filter` stage: drop ads, boilerplate and off-topic text from the clean documents.

Picks a threshold per language on the head's validation scores (maximum F1 of the drop decision, or
the highest-recall threshold reaching `target_precision`), then scores every clean document with its
language's head (stages/common/semantic/head.py) and drops those whose probability of `keep` is below it.
Scoring runs on shards of `batch_size` documents in workers (a local process pool or Ray tasks:
stages/common/runtime/executor.py), each shard's scores kept in `work_dir` with a completion marker until the
stage succeeds, so a rerun redoes only unfinished shards; the heads go to the workers once.

    <out_dir>/docs/part-*.parquet        kept documents, the clean columns plus `quality_score` (p_keep)
    <out_dir>/quarantine/part-*.parquet  dropped documents, reason `semantic:<category>` and the score
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.common.runtime.atomic import atomic_dir, check_owned_paths, write_json
from stages.common.runtime.cli import stage_main
from stages.common.runtime.executor import WorkDir, check_executor, fingerprint, map_shards, resolve_workers
from stages.common.runtime.params import param, validate
from stages.common.runtime.parquet import DOC_SCHEMA, QUARANTINE_SCHEMA, ShardWriter, iter_rows
from stages.common.semantic.features import Features, NgramParams
from stages.common.semantic.head import KEEP, binary_report, choose_threshold, load_heads, predict

log = logging.getLogger("refinery.semantic_filter")
STAGE = "semantic_filter"
SCORED_SCHEMA = DOC_SCHEMA.append(pa.field("quality_score", pa.float32()))


@dataclass(frozen=True)
class Params:
    docs_dir: str = "data/clean/docs"
    embeddings_dir: str = "data/semantic/embeddings"
    head_dir: str = "models/semantic_head"
    out_dir: str = "data/semantic_filter"
    metrics_path: str = "metrics/semantic_filter.json"
    target_precision: float | None = param(None, gt=0.0, max=1.0)  # None: threshold of maximum F1 per language
    batch_size: int = param(512, min=1)  # documents per task: one work shard
    rows_per_shard: int = param(100_000, min=1)
    num_workers: int = param(0, min=0)  # 0 = all cores (executor ray: CPUs of the local cluster it starts)
    executor: str = "local"  # local (process pool) | ray
    address: str = ""  # ray only: "auto" joins a running cluster, "" starts a local one
    work_dir: str = "data/work/semantic_filter"  # per-shard scores and completion markers, until the stage succeeds

    def __post_init__(self) -> None:
        validate(self, STAGE)
        check_executor(STAGE, self.executor, self.address)


def thresholds(validation: dict[str, list], target_precision: float | None) -> dict[str, float]:
    """Per language of the validation set, plus `*` over all of it for languages without their own."""
    langs = np.array(validation["lang"])
    p_keep = np.array(validation["p_keep"])
    is_drop = np.array([label != KEEP for label in validation["label"]])
    out = {"*": choose_threshold(p_keep, is_drop, target_precision)}
    for lang in sorted(set(langs)):
        rows = langs == lang
        out[lang] = choose_threshold(p_keep[rows], is_drop[rows], target_precision)
    return out


_scorer: tuple | None = None  # (heads, pooled, classes, ngrams, cutoffs), once per worker process
SCORES_FILE = "scores.parquet"
SCORES_SCHEMA = pa.schema([("score", pa.float64()), ("reason", pa.string())])  # reason null: kept


def _init_worker(scorer: tuple) -> None:
    global _scorer
    _scorer = scorer


def _score_shard(batch: tuple[list[str], list[str], np.ndarray], folder: Path) -> dict[str, Any]:
    """P(keep) of each document of the shard and, below its language's cutoff, the drop reason."""
    assert _scorer is not None, "worker not initialised"
    heads, pooled, classes, ngrams, cutoffs = _scorer
    texts, langs, emb = batch
    probs = predict(heads, pooled, Features.build(texts, langs, emb, ngrams), langs)
    scores = [float(p[0]) for p in probs]
    reasons = [None if score >= cutoffs.get(lang, cutoffs["*"]) else f"semantic:{classes[int(np.argmax(p[1:])) + 1]}"
               for score, lang, p in zip(scores, langs, probs)]
    pq.write_table(pa.table({"score": scores, "reason": reasons}, schema=SCORES_SCHEMA), folder / SCORES_FILE)
    return {"num_docs": len(texts)}


def run(params: Params) -> dict[str, Any]:
    check_owned_paths(STAGE, {k: getattr(params, k) for k in ("docs_dir", "embeddings_dir", "head_dir")},
                      {"out_dir": params.out_dir}, {"work_dir": params.work_dir})
    start = time.perf_counter()
    config, heads = load_heads(params.head_dir)
    classes, pooled = config["classes"], config["pooled"]
    ngrams = NgramParams(**{k: tuple(v) if isinstance(v, list) else v for k, v in config["ngrams"].items()})
    validation = pq.read_table(f"{params.head_dir}/validation.parquet").to_pydict()
    cutoffs = thresholds(validation, params.target_precision)
    embeddings = pq.read_table(f"{params.embeddings_dir}/docs.parquet")
    emb_ids = embeddings.column("id").to_pylist()
    emb = embeddings.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(emb_ids), -1)
    inputs = sorted(Path(params.docs_dir).glob("part-*.parquet")) + sorted(Path(params.head_dir).iterdir())
    work = WorkDir(params.work_dir, fingerprint(params, [*inputs, f"{params.embeddings_dir}/docs.parquet"]))
    reasons: Counter[str] = Counter()
    kept_langs: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    in_flight: deque[list[dict[str, Any]]] = deque()  # the rows of the shards handed out, in order

    def shards():
        batch: list[dict[str, Any]] = []
        for row in iter_rows(params.docs_dir):
            batch.append(row)
            counts["num_read"] += 1
            if len(batch) >= params.batch_size:
                yield payload(batch)
                batch = []
        if batch:
            yield payload(batch)

    def payload(batch: list[dict[str, Any]]) -> tuple[list[str], list[str], np.ndarray]:
        lo, hi = counts["num_read"] - len(batch), counts["num_read"]
        if [row["id"] for row in batch] != emb_ids[lo:hi]:
            raise RuntimeError("embeddings are out of step with the clean docs: rerun semantic_embed")
        in_flight.append(batch)
        return [row["text"] for row in batch], [row["lang"] for row in batch], emb[lo:hi]

    with atomic_dir(params.out_dir) as tmp:
        docs = ShardWriter(tmp / "docs", SCORED_SCHEMA, params.rows_per_shard)
        quarantine = ShardWriter(tmp / "quarantine", QUARANTINE_SCHEMA, params.rows_per_shard)
        for shard in map_shards(_score_shard, shards(), work, params.executor, params.address,
                                resolve_workers(params.num_workers), _init_worker,
                                ((heads, pooled, classes, ngrams, cutoffs),)):
            counts["num_shards"] += 1
            counts["num_shards_resumed"] += shard.resumed
            scored = pq.read_table(shard.folder / SCORES_FILE).to_pydict()
            for row, score, reason in zip(in_flight.popleft(), scored["score"], scored["reason"], strict=True):
                if reason is None:
                    docs.write({**row, "quality_score": score})
                    kept_langs[row["lang"]] += 1
                    continue
                reasons[reason] += 1
                quarantine.write({"id": row["id"], "stage": STAGE, "reason": reason, "lang": row["lang"],
                                  "lang_prob": row["lang_prob"], "source": row["source"], "index": None,
                                  "dup_of": None, "score": score, "record": json.dumps(row, ensure_ascii=False)})
        docs.close()
        quarantine.close()
        num_read = counts["num_read"]
        if docs.num_rows + quarantine.num_rows != num_read:
            raise RuntimeError(f"accounting broken: {docs.num_rows} + {quarantine.num_rows} != {num_read}")
    work.remove()  # only once the outputs are in place: a failed run leaves its finished shards
    seconds = time.perf_counter() - start
    metrics: dict[str, Any] = {
        "num_read": num_read, "num_kept": docs.num_rows, "num_quarantined": quarantine.num_rows,
        "pass_rate": docs.num_rows / max(1, num_read), "seconds": seconds, "docs_per_s": num_read / seconds,
        "num_shards": counts["num_shards"], "num_shards_resumed": counts["num_shards_resumed"],
        **{f"dropped.{r}": n for r, n in sorted(reasons.items())},
        **{f"kept.{lang}": n for lang, n in sorted(kept_langs.items())},
        **{f"threshold.{lang}": t for lang, t in cutoffs.items()},
    }
    langs = np.array(validation["lang"])
    p_keep = np.array(validation["p_keep"])
    is_drop = np.array([label != KEEP for label in validation["label"]])
    for lang in sorted(set(langs)):
        rows = langs == lang
        for key, value in binary_report(p_keep[rows], is_drop[rows], cutoffs[lang]).items():
            metrics[f"val.{lang}.{key}"] = value
    write_json(params.metrics_path, metrics)
    log.info("semantic_filter: read %d, kept %d (%.1f%%) in %.1fs", num_read, docs.num_rows,
             100 * metrics["pass_rate"], seconds)
    return metrics


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
