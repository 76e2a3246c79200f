"""`semantic_filter` stage: drop ads, boilerplate and off-topic text from the clean documents.

Picks a threshold per language on the head's validation scores (maximum F1 of the drop decision, or
the highest-recall threshold reaching `target_precision`), then scores every clean document with its
language's head (stages/common/semantic.py) and drops those whose probability of `keep` is below it.

    <out_dir>/docs/part-*.parquet        kept documents, the clean columns plus `quality_score` (p_keep)
    <out_dir>/quarantine/part-*.parquet  dropped documents, reason `semantic:<category>` and the score
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stages.common.atomic import atomic_dir, write_json
from stages.common.io import DOC_SCHEMA, QUARANTINE_SCHEMA, ShardWriter, iter_rows
from stages.common.cli import stage_main
from stages.common.semantic import KEEP, Features, NgramParams, binary_report, choose_threshold, load_heads, predict

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
    target_precision: float | None = None  # None: threshold of maximum F1 per language
    batch_size: int = 512
    rows_per_shard: int = 100_000

    def __post_init__(self) -> None:
        if self.target_precision is not None and not 0.0 < self.target_precision <= 1.0:
            raise ValueError(f"param 'semantic_filter.target_precision' must be in (0, 1], got {self.target_precision}")


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


def run(params: Params) -> dict[str, Any]:
    start = time.perf_counter()
    config, heads = load_heads(params.head_dir)
    classes, pooled = config["classes"], config["pooled"]
    ngrams = NgramParams(**{k: tuple(v) if isinstance(v, list) else v for k, v in config["ngrams"].items()})
    validation = pq.read_table(f"{params.head_dir}/validation.parquet").to_pydict()
    cutoffs = thresholds(validation, params.target_precision)
    embeddings = pq.read_table(f"{params.embeddings_dir}/docs.parquet")
    emb_ids = embeddings.column("id").to_pylist()
    emb = embeddings.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(emb_ids), -1)
    reasons: Counter[str] = Counter()
    kept_langs: Counter[str] = Counter()
    num_read = 0
    with atomic_dir(params.out_dir) as tmp:
        docs = ShardWriter(tmp / "docs", SCORED_SCHEMA, params.rows_per_shard)
        quarantine = ShardWriter(tmp / "quarantine", QUARANTINE_SCHEMA, params.rows_per_shard)
        batch: list[dict[str, Any]] = []

        def flush() -> None:
            ids = [row["id"] for row in batch]
            if ids != emb_ids[num_read - len(batch) : num_read]:
                raise RuntimeError("embeddings are out of step with the clean docs: rerun semantic_embed")
            langs = [row["lang"] for row in batch]
            features = Features.build([row["text"] for row in batch], langs, emb[num_read - len(batch) : num_read],
                                      ngrams)
            probs = predict(heads, pooled, features, langs)
            for row, p in zip(batch, probs):
                score = float(p[0])
                if score >= cutoffs.get(row["lang"], cutoffs["*"]):
                    docs.write({**row, "quality_score": score})
                    kept_langs[row["lang"]] += 1
                    continue
                reason = f"semantic:{classes[int(np.argmax(p[1:])) + 1]}"
                reasons[reason] += 1
                quarantine.write({"id": row["id"], "stage": STAGE, "reason": reason, "lang": row["lang"],
                                  "lang_prob": row["lang_prob"], "source": row["source"], "index": None,
                                  "dup_of": None, "score": score, "record": json.dumps(row, ensure_ascii=False)})
            batch.clear()

        for row in iter_rows(params.docs_dir):
            batch.append(row)
            num_read += 1
            if len(batch) >= params.batch_size:
                flush()
        if batch:
            flush()
        docs.close()
        quarantine.close()
        if docs.num_rows + quarantine.num_rows != num_read:
            raise RuntimeError(f"accounting broken: {docs.num_rows} + {quarantine.num_rows} != {num_read}")
    seconds = time.perf_counter() - start
    metrics: dict[str, Any] = {
        "num_read": num_read, "num_kept": docs.num_rows, "num_quarantined": quarantine.num_rows,
        "pass_rate": docs.num_rows / max(1, num_read), "seconds": seconds, "docs_per_s": num_read / seconds,
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
