"""`clean` stage: raw records -> normalised, language-filtered, quality-filtered, deduplicated docs.

Per record, cheapest first: parse/validate -> normalise (HTML, control chars, mojibake, NFKC, regex
removals, whitespace) -> minimum length -> language ID -> quality rules -> exact key + MinHash signature.
Workers (a local process pool or Ray tasks: stages/common/executor.py) run all of that on shards of
`batch_size` records and leave each shard's results in `work_dir` with a completion marker, so a rerun
redoes only unfinished shards. The parent process streams the input, owns the global dedup index (exact
keys, LSH bands of the signatures; first occurrence wins, in input order) and writes two Parquet datasets:

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
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from stages.common.atomic import atomic_dir, write_csv, write_json
from stages.common.dedup import DedupIndex, DedupParams, Signer, exact_key
from stages.common.executor import WorkDir, check_executor, fingerprint, map_shards
from stages.common.io import DOC_SCHEMA, QUARANTINE_SCHEMA, ShardWriter
from stages.common.langid import LanguageIdentifier
from stages.common.normalize import NormalizeOptions, normalize
from stages.common.cli import stage_main
from stages.common.pool import resolve_workers
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
    num_workers: int = 0  # 0 = all cores (executor ray: CPUs of the local cluster it starts)
    batch_size: int = 1000  # records per task: one work shard
    executor: str = "local"  # local (process pool) | ray
    address: str = ""  # ray only: "auto" joins a running cluster, "" starts a local one
    work_dir: str = "data/work/clean"  # per-shard results and completion markers, until the stage succeeds
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
        check_executor(STAGE, self.executor, self.address)


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


def _process_shard(batch: list[RawRecord], folder: Path) -> dict[str, Any]:
    assert _cleaner is not None, "worker not initialised"
    timings: Counter[str] = Counter()
    write_shard(folder / SHARD_FILE, [_cleaner.process(raw, timings) for raw in batch])
    return {"num_records": len(batch), "timings": dict(timings)}


# A shard's results in input order: quarantined records (reason set) and kept ones with their dedup keys.
SHARD_FILE = "results.parquet"
SHARD_SCHEMA = pa.schema([("id", pa.string()), ("reason", pa.string()), ("lang", pa.string()),
                          ("lang_prob", pa.float64()), ("source", pa.string()), ("index", pa.int64()),
                          ("record", pa.large_string()), ("text", pa.large_string()), ("meta", pa.string()),
                          ("key", pa.binary()), ("signature", pa.binary())])


def write_shard(path: Path, results: list[Kept | dict[str, Any]]) -> None:
    rows = []
    for r in results:
        if isinstance(r, Kept):
            row = r.row
            rows.append({"id": row["id"], "reason": None, "lang": row["lang"], "lang_prob": row["lang_prob"],
                         "source": row["source"], "index": row["_index"], "record": row["_original"],
                         "text": row["text"], "meta": row["meta"], "key": r.key,
                         "signature": None if r.signature is None else r.signature.tobytes()})
        else:
            rows.append({k: r[k] for k in ("id", "reason", "lang", "lang_prob", "source", "index", "record")})
    pq.write_table(pa.Table.from_pylist(rows, schema=SHARD_SCHEMA), path)


def read_shard(path: Path, num_perm: int) -> list[Kept | dict[str, Any]]:
    results: list[Kept | dict[str, Any]] = []
    for r in pq.read_table(path).to_pylist():
        if r["reason"] is not None:
            results.append(quarantine_row(r["id"], r["reason"], r["source"], r["index"], r["record"], r["lang"],
                                          r["lang_prob"]))
            continue
        sig = r["signature"]  # uint32 or uint64 values, by the MinHash scheme
        signature = None if sig is None else np.frombuffer(sig, dtype=f"u{len(sig) // num_perm}")
        row = {"id": r["id"], "text": r["text"], "lang": r["lang"], "lang_prob": r["lang_prob"], "source": r["source"],
               "meta": r["meta"], "_index": r["index"], "_original": r["record"]}
        results.append(Kept(row, r["key"], signature))
    return results


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
    log.info("clean: %d input file(s), executor %s, %d worker(s)", len(files), params.executor, num_workers)
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    kept_langs: Counter[str] = Counter()
    timings: Counter[str] = Counter()
    index = DedupIndex(params.dedup, params.seed)
    work = WorkDir(params.work_dir, fingerprint(params, files))
    with atomic_dir(params.out_dir) as tmp:
        docs = ShardWriter(tmp / "docs", DOC_SCHEMA, params.rows_per_shard)
        quarantine = ShardWriter(tmp / "quarantine", QUARANTINE_SCHEMA, params.rows_per_shard)
        shards = map_shards(_process_shard, _batches(iter_raw(files), params.batch_size, counts), work,
                            params.executor, params.address, num_workers, _init_worker, (params,))
        with tqdm(desc="clean", unit="doc", mininterval=2.0) as bar:
            for shard in shards:
                counts["num_shards"] += 1
                counts["num_shards_resumed"] += shard.resumed
                timings.update(shard.summary["timings"])
                t0 = time.perf_counter()
                batch_results = read_shard(shard.folder / SHARD_FILE, params.dedup.num_perm)
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
    work.remove()  # only once the outputs are in place: a failed run leaves its finished shards
    seconds = time.perf_counter() - start
    metrics: dict[str, Any] = {
        "num_read": counts["num_read"],
        "num_kept": num_kept,
        "num_quarantined": num_quarantined,
        "pass_rate": num_kept / max(1, counts["num_read"]),
        "num_input_files": len(files),
        "num_workers": num_workers,
        "num_shards": counts["num_shards"],
        "num_shards_resumed": counts["num_shards_resumed"],  # finished by an earlier, failed run
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
