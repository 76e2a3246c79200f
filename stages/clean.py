"""`clean` stage: raw records -> normalised, language-filtered, quality-filtered, deduplicated docs.

Per record, cheapest first: parse/validate -> normalise (HTML, control chars, mojibake, NFKC, regex
removals, whitespace) -> minimum length -> language ID -> quality rules -> exact key + MinHash signature.
Workers (a local process pool or Ray tasks: stages/common/runtime/executor.py) run all of that on shards of
`batch_size` records and leave each shard's results in `work_dir` with a completion marker, so a rerun
redoes only unfinished shards. The parent process streams the input, owns the global dedup index (exact
keys, LSH bands of the signatures; first occurrence wins, in input order) and writes two Parquet datasets:

    <out_dir>/docs/part-*.parquet        kept documents (id, text, lang, lang_prob, source, meta)
    <out_dir>/quarantine/part-*.parquet  every dropped or invalid record, with its reason

Invariant, checked before anything is published: kept + quarantined == records read.
"""
from __future__ import annotations

import itertools
import json
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from stages.common.runtime.atomic import atomic_dir, check_owned_paths, write_csv, write_json
from stages.common.runtime.cli import stage_main
from stages.common.runtime.executor import WorkDir, check_executor, fingerprint, map_shards, resolve_workers
from stages.common.runtime.params import param, validate
from stages.common.runtime.parquet import DOC_SCHEMA, QUARANTINE_SCHEMA, ShardWriter
from stages.common.text.dedup import DedupIndex, DedupParams, Signer, exact_key
from stages.common.text.langid import LANGUAGES, LanguageIdentifier
from stages.common.text.normalize import NormalizeOptions, normalize
from stages.common.text.quality import QualityParams, QualityRules
from stages.common.text.readers import (
    DEFAULT_MAX_RECORD_BYTES,
    RawRecord,
    Record,
    Rejection,
    iter_raw,
    list_input_files,
    parse_raw,
)

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
    seed: int = param(0, min=0)
    num_workers: int = param(0, min=0)  # 0 = all cores (executor ray: CPUs of the local cluster it starts)
    batch_size: int = param(1000, min=1)  # records per task: one work shard
    executor: str = "local"  # local (process pool) | ray
    address: str = ""  # ray only: "auto" joins a running cluster, "" starts a local one
    work_dir: str = "data/work/clean"  # per-shard results and completion markers, until the stage succeeds
    rows_per_shard: int = param(100_000, min=1)
    max_record_bytes: int = param(DEFAULT_MAX_RECORD_BYTES, min=1)
    allow_empty_input: bool = False  # an input without a single record is an error unless this is true
    languages: tuple[str, ...] = param(("zh", "en"), choices=LANGUAGES, nonempty=True)  # as the detector names them
    min_lang_prob: float = param(0.8, min=0.0, max=1.0)
    langid_max_chars: int = param(400, min=1)
    langid_trials: int = param(3, min=1)
    record_time_budget_s: float = param(5.0, min=0.0)  # per record after parsing; 0 = unlimited
    normalize: NormalizeOptions = field(default_factory=NormalizeOptions)
    quality: QualityParams = field(default_factory=QualityParams)
    dedup: DedupParams = field(default_factory=DedupParams)

    def __post_init__(self) -> None:
        validate(self, STAGE)
        if self.quality.min_mean_word_length > self.quality.max_mean_word_length:
            raise ValueError("param 'clean.quality.min_mean_word_length': must be <= "
                             f"'clean.quality.max_mean_word_length', got {self.quality.min_mean_word_length} > "
                             f"{self.quality.max_mean_word_length}")
        check_executor(STAGE, self.executor, self.address)


@dataclass
class Kept:
    row: dict[str, Any]
    key: bytes
    signature: np.ndarray | None


class RecordTooSlow(Exception):
    """A record's processing ran past `record_time_budget_s`."""


def _raise_too_slow(signum: int, frame: Any) -> None:
    raise RecordTooSlow


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise RecordTooSlow inside the block once `seconds` of wall time have passed (0: no limit).

    It uses SIGALRM, so it works only in a process's main thread, which is where the local pool's workers,
    the inline path (one worker) and Ray tasks run records; in another thread the block runs unlimited.
    The signal interrupts Python code and regular expressions, but one long call into C code (the HTML
    parser, Unicode normalisation) finishes before the exception is raised.
    """
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _raise_too_slow)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def original_record(parsed: Record) -> str:
    """The record as read, for the quarantine."""
    return json.dumps({"id": parsed.id, "text": parsed.text, **parsed.meta}, ensure_ascii=False, default=str)


class Cleaner:
    """Everything a worker needs, built once per process."""

    def __init__(self, params: Params) -> None:
        self.p = params
        self.languages = frozenset(params.languages)
        self.langid = LanguageIdentifier(params.seed, params.langid_max_chars, params.langid_trials,
                                         keep=params.languages)
        self.rules = QualityRules(params.quality)
        self.signer = Signer(params.dedup, params.seed) if params.dedup.near else None
        if params.record_time_budget_s and threading.current_thread() is not threading.main_thread():
            log.warning("clean: records are processed outside a main thread, so 'clean.record_time_budget_s' "
                        "cannot interrupt them")

    def process(self, raw: RawRecord, timings: Counter[str]) -> Kept | dict[str, Any]:
        t0 = time.perf_counter()
        parsed = parse_raw(raw, self.p.max_record_bytes)
        t1 = time.perf_counter()
        timings["parse"] += t1 - t0
        if isinstance(parsed, Rejection):
            return quarantine_row(parsed.id, parsed.reason, parsed.source, parsed.index, parsed.original)
        try:
            with time_budget(self.p.record_time_budget_s):
                return self._process_text(parsed, timings, t1)
        except RecordTooSlow:
            return quarantine_row(parsed.id, "invalid:too_slow", parsed.source, parsed.index, original_record(parsed))

    def _process_text(self, parsed: Record, timings: Counter[str], t1: float) -> Kept | dict[str, Any]:
        """Normalise, identify the language, apply the quality rules, compute the dedup keys."""
        text, _ = normalize(parsed.text, self.p.normalize)
        t2 = time.perf_counter()
        timings["normalize"] += t2 - t1
        meta = json.dumps(parsed.meta, ensure_ascii=False, default=str)
        original = original_record(parsed)
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
    check_owned_paths(STAGE, {"input": params.input}, {"out_dir": params.out_dir}, {"work_dir": params.work_dir})
    start = time.perf_counter()
    files = list_input_files(params.input, params.pattern)
    num_workers = resolve_workers(params.num_workers)
    log.info("clean: %d input file(s), executor %s, %d worker(s)", len(files), params.executor, num_workers)
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    kept_langs: Counter[str] = Counter()
    timings: Counter[str] = Counter()
    raws = iter_raw(files, params.max_record_bytes)
    first = next(raws, None)  # before the work folder or any output is touched
    if first is None and not params.allow_empty_input:
        raise ValueError(f"param 'clean.input': {params.input!r} holds no records ({len(files)} file(s), empty or "
                         "blank lines only); set 'clean.allow_empty_input: true' to publish an empty dataset")
    raws = itertools.chain([first] if first else [], raws)
    index = DedupIndex(params.dedup, params.seed)
    work = WorkDir(params.work_dir, fingerprint(params, files))
    with atomic_dir(params.out_dir) as tmp:
        docs = ShardWriter(tmp / "docs", DOC_SCHEMA, params.rows_per_shard)
        quarantine = ShardWriter(tmp / "quarantine", QUARANTINE_SCHEMA, params.rows_per_shard)
        shards = map_shards(_process_shard, _batches(raws, params.batch_size, counts), work,
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
