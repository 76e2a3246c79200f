"""`clean` stage: raw records -> normalised, language-filtered, quality-filtered, deduplicated docs.

Per record, cheapest first: parse/validate -> normalise (HTML, control chars, mojibake, NFKC, regex
removals, whitespace) -> minimum length -> language ID -> quality rules -> exact + near-dup keys.
Workers run all of that on batches; the parent process streams the input, owns the global dedup
index (first occurrence wins, in input order) and writes two Parquet datasets:

    <out_dir>/docs/part-*.parquet        kept documents (id, text, lang, lang_prob, source, meta)
    <out_dir>/quarantine/part-*.parquet  every dropped or invalid record, with its reason

Invariant, checked before anything is published: kept + quarantined == records read.
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from stages.common.atomic import atomic_dir, write_csv, write_json
from stages.common.dedup import DedupIndex, DedupParams, Signer, exact_key
from stages.common.io import DOC_SCHEMA, QUARANTINE_SCHEMA, ShardWriter
from stages.common.langid import LanguageIdentifier
from stages.common.normalize import NormalizeOptions, normalize
from stages.common.cli import stage_main
from stages.common.pool import ordered_map, resolve_workers  # noqa: F401 (resolve_workers used by bench)
from stages.common.quality import QualityParams, QualityRules
from stages.common.readers import RawRecord, Rejection, iter_raw, list_input_files, parse_raw

log = logging.getLogger("refinery.clean")
STAGE = "clean"
PHASES = ("parse", "normalize", "langid", "rules", "signature")


@dataclass(frozen=True)
class Params:
    input: str = "data/raw/demo"  # a file, a folder (searched recursively with `pattern`) or a glob
    pattern: str = "*"
    out_dir: str = "data/clean"
    metrics_path: str = "metrics/clean.json"
    reasons_plot_path: str = "metrics/clean_reasons.csv"  # reason,count: `dvc plots show` draws it
    seed: int = 0
    num_workers: int = 0  # 0 = all cores
    batch_size: int = 256
    rows_per_shard: int = 100_000
    max_record_bytes: int = 1_000_000
    languages: tuple[str, ...] = ("zh", "en")
    min_lang_prob: float = 0.8
    langid_max_chars: int = 400
    langid_trials: int = 3
    normalize: NormalizeOptions = field(default_factory=NormalizeOptions)
    quality: QualityParams = field(default_factory=QualityParams)
    dedup: DedupParams = field(default_factory=DedupParams)

    def __post_init__(self) -> None:
        if not self.languages:
            raise ValueError("param 'clean.languages' must name at least one language")
        if not 0.0 <= self.min_lang_prob <= 1.0:
            raise ValueError(f"param 'clean.min_lang_prob' must be in [0, 1], got {self.min_lang_prob}")
        if self.batch_size < 1 or self.rows_per_shard < 1:
            raise ValueError("params 'clean.batch_size' and 'clean.rows_per_shard' must be >= 1")


@dataclass
class Kept:
    row: dict[str, Any]
    key: bytes
    signature: np.ndarray | None


class Cleaner:
    """Everything a worker needs, built once per process."""

    def __init__(self, params: Params) -> None:
        self.p = params
        self.languages = frozenset(params.languages)
        self.langid = LanguageIdentifier(params.seed, params.langid_max_chars, params.langid_trials,
                                         keep=params.languages)
        self.rules = QualityRules(params.quality)
        self.signer = Signer(params.dedup, params.seed) if params.dedup.near else None

    def process(self, raw: RawRecord, timings: Counter[str]) -> Kept | dict[str, Any]:
        t0 = time.perf_counter()
        parsed = parse_raw(raw, self.p.max_record_bytes)
        t1 = time.perf_counter()
        timings["parse"] += t1 - t0
        if isinstance(parsed, Rejection):
            return quarantine_row(parsed.id, parsed.reason, parsed.source, parsed.index, parsed.original)
        text, _ = normalize(parsed.text, self.p.normalize)
        t2 = time.perf_counter()
        timings["normalize"] += t2 - t1
        meta = json.dumps(parsed.meta, ensure_ascii=False, default=str)
        original = json.dumps({"id": parsed.id, "text": parsed.text, **parsed.meta}, ensure_ascii=False, default=str)
        if len(text) < self.rules.min_any_chars:  # before language ID: the detector is the costly step
            return quarantine_row(parsed.id, "quality:too_short", parsed.source, parsed.index, original)
        lang = self.langid(text)
        t3 = time.perf_counter()
        timings["langid"] += t3 - t2
        if lang.lang not in self.languages:
            return quarantine_row(parsed.id, f"lang:{lang.lang}", parsed.source, parsed.index, original,
                                  lang.lang, lang.prob)
        if lang.prob < self.p.min_lang_prob:
            return quarantine_row(parsed.id, f"lang_low_prob:{lang.lang}", parsed.source, parsed.index, original,
                                  lang.lang, lang.prob)
        reason = self.rules.check(text, lang.lang)
        t4 = time.perf_counter()
        timings["rules"] += t4 - t3
        if reason:
            return quarantine_row(parsed.id, reason, parsed.source, parsed.index, original, lang.lang, lang.prob)
        signature = self.signer(text, lang.lang) if self.signer else None
        timings["signature"] += time.perf_counter() - t4
        row = {"id": parsed.id, "text": text, "lang": lang.lang, "lang_prob": lang.prob, "source": parsed.source,
               "meta": meta, "_index": parsed.index, "_original": original}
        return Kept(row, exact_key(text), signature)


def quarantine_row(doc_id: str, reason: str, source: str, index: int, record: str,
                   lang: str | None = None, lang_prob: float | None = None, dup_of: str | None = None) -> dict[str, Any]:
    return {"id": doc_id, "stage": STAGE, "reason": reason, "lang": lang, "lang_prob": lang_prob, "source": source,
            "index": index, "dup_of": dup_of, "score": None, "record": record}


_cleaner: Cleaner | None = None


def _init_worker(params: Params) -> None:
    global _cleaner
    _cleaner = Cleaner(params)


def _process_batch(batch: list[RawRecord]) -> tuple[list[Kept | dict[str, Any]], Counter[str]]:
    assert _cleaner is not None, "worker not initialised"
    timings: Counter[str] = Counter()
    return [_cleaner.process(raw, timings) for raw in batch], timings


def _batches(raws, batch_size: int, counters: Counter[str]):
    batch: list[RawRecord] = []
    for raw in raws:
        counters["num_bytes"] += raw.num_bytes
        batch.append(raw)
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def run(params: Params) -> dict[str, Any]:
    """Clean `params.input` into `params.out_dir`; return the metrics (also written to `metrics_path`)."""
    start = time.perf_counter()
    files = list_input_files(params.input, params.pattern)
    num_workers = resolve_workers(params.num_workers)
    log.info("clean: %d input file(s), %d worker(s)", len(files), num_workers)
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    kept_langs: Counter[str] = Counter()
    timings: Counter[str] = Counter()
    index = DedupIndex(params.dedup, params.seed)
    with atomic_dir(params.out_dir) as tmp:
        docs = ShardWriter(tmp / "docs", DOC_SCHEMA, params.rows_per_shard)
        quarantine = ShardWriter(tmp / "quarantine", QUARANTINE_SCHEMA, params.rows_per_shard)
        results = ordered_map(_process_batch, _batches(iter_raw(files), params.batch_size, counts), num_workers,
                              _init_worker, (params,))
        with tqdm(desc="clean", unit="doc", mininterval=2.0) as bar:
            for batch_results, batch_timings in results:
                timings.update(batch_timings)
                t0 = time.perf_counter()
                for result in batch_results:
                    counts["num_read"] += 1
                    if isinstance(result, Kept):
                        row = result.row
                        original, doc_index = row.pop("_original"), row.pop("_index")
                        dup = index.check(row["id"], result.key, result.signature)
                        if dup is None:
                            docs.write(row)
                            kept_langs[row["lang"]] += 1
                            continue
                        result = quarantine_row(row["id"], dup[0], row["source"], doc_index, original,
                                                row["lang"], row["lang_prob"], dup_of=dup[1])
                    reasons[result["reason"]] += 1
                    quarantine.write(result)
                timings["dedup_and_write"] += time.perf_counter() - t0
                bar.update(len(batch_results))
        docs.close()
        quarantine.close()
        num_kept, num_quarantined = docs.num_rows, quarantine.num_rows
        if num_kept + num_quarantined != counts["num_read"]:  # a bug, never a data problem: publish nothing
            raise RuntimeError(f"accounting broken: kept {num_kept} + quarantined {num_quarantined} "
                               f"!= read {counts['num_read']}")
    seconds = time.perf_counter() - start
    metrics: dict[str, Any] = {
        "num_read": counts["num_read"],
        "num_kept": num_kept,
        "num_quarantined": num_quarantined,
        "pass_rate": num_kept / max(1, counts["num_read"]),
        "num_input_files": len(files),
        "num_workers": num_workers,
        "input_mb": counts["num_bytes"] / 1e6,
        "seconds": seconds,
        "docs_per_s": counts["num_read"] / seconds,
        "mb_per_s": counts["num_bytes"] / 1e6 / seconds,
        **{f"dropped.{reason}": n for reason, n in sorted(reasons.items())},
        **{f"kept.{lang}": n for lang, n in sorted(kept_langs.items())},
        # CPU seconds summed over workers, so they show where the time goes, not wall time.
        **{f"cpu_seconds.{phase}": round(timings[phase], 3) for phase in (*PHASES, "dedup_and_write")},
    }
    write_json(params.metrics_path, metrics)
    write_csv(params.reasons_plot_path, ["reason", "count"],
              sorted(([("kept", num_kept)] + list(reasons.items())), key=lambda rc: -rc[1]))
    log.info("clean: read %d, kept %d (%.1f%%), quarantined %d in %.1fs (%.0f docs/s)", counts["num_read"],
             num_kept, 100 * metrics["pass_rate"], num_quarantined, seconds, metrics["docs_per_s"])
    return metrics


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
