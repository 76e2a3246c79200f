"""`clean` stage: raw records -> normalised, language-filtered, quality-filtered, deduplicated docs.

Per record, cheapest first: parse/validate -> normalise (HTML, control chars, mojibake, NFKC, regex
removals, whitespace) -> minimum length -> language ID -> quality rules -> exact key + MinHash signature.
`Cleaner` decides that in the workers, a shard at a time (language ID for the shard's texts together);
the filter-stage base (stages/common/text/filters.py) runs it on shards of `batch_size` records over the
executor (a local process pool or Ray tasks), each shard's results kept in `work_dir` with a completion
marker, so a rerun redoes only unfinished shards.
The parent process streams the input, owns the global dedup index (`CleanStage.review`: exact keys, LSH
bands of the signatures; first occurrence wins, in input order) and writes two Parquet datasets:

    <out_dir>/docs/part-*.parquet        kept documents (id, text, lang, lang_prob, source, meta, keep_fields...)
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
from typing import Any

import numpy as np

from stages.common.runtime.atomic import check_owned_paths, write_csv
from stages.common.runtime.cli import stage_main
from stages.common.runtime.executor import check_executor, resolve_workers  # noqa: F401 (bench/clean.py uses it)
from stages.common.runtime.params import ConfigError, param, validate
from stages.common.runtime.parquet import DOC_SCHEMA
from stages.common.runtime.storage import redact
from stages.common.text.dedup import DedupIndex, DedupParams, Signer, exact_key
from stages.common.text.fields import coerce, infer_kind, schema_with
from stages.common.text.filters import Dropped, FilterStage, Kept, Verdict
from stages.common.text.langid import LANGUAGES, LangResult, LanguageIdentifier
from stages.common.text.normalize import NormalizeOptions, normalize
from stages.common.text.quality import QualityParams, QualityRules, languages_without_stop_words
from stages.common.text.readers import (
    DEFAULT_MAX_RECORD_BYTES,
    FORMATS,
    FieldMap,
    RawRecord,
    Record,
    Rejection,
    field_names,
    iter_raw,
    list_input_files,
    parse_raw,
)

log = logging.getLogger("refinery.clean")
STAGE = "clean"
PHASES = ("parse", "normalize", "langid", "rules", "signature")
# Before any output is touched, the first records are read ahead (at most this many, and this many bytes)
# to check that the text field exists and to type the kept fields' columns.
LOOKAHEAD_RECORDS = 1000
LOOKAHEAD_BYTES = 64 << 20
# Column names a kept field may not take: the docs' own, and those semantic_filter and perplexity add.
RESERVED_COLUMNS = frozenset(DOC_SCHEMA.names) | {"quality_score", "perplexity", "tier", "split", "num_tokens"}
# Reasons that show a record has the text field (only its value is wrong).
_HAS_TEXT_REASONS = frozenset({"invalid:non_string_text", "invalid:empty", "invalid:binary"})


@dataclass(frozen=True, kw_only=True)  # keyword-only: the path fields have no default, wherever they sit
class Params:
    input: str  # a file, a folder (searched recursively with `pattern`) or a glob; local or a URL (s3://, gs://, ...)
    pattern: str = "*"
    out_dir: str
    metrics_path: str  # headline figures (DVC metrics)
    detail_path: str  # every figure: counts per reason, CPU seconds per phase, ...
    reasons_plot_path: str  # reason,family,count of the dropped documents, most frequent first (`dvc plots show`)
    seed: int = param(0, min=0)
    # placement=True: where the work runs, not what it computes (a rerun keeps finished work shards)
    # 0 = all cores (executor ray: CPUs of the local cluster it starts)
    num_workers: int = param(0, min=0, placement=True)
    batch_size: int = param(1000, min=1)  # records per task: one work shard
    executor: str = param("local", placement=True)  # local (process pool) | ray
    address: str = param("", placement=True)  # ray only: "auto" joins a running cluster, "" starts a local one
    work_dir: str  # per-shard results and completion markers, until the stage succeeds
    rows_per_part: int = param(100_000, min=1)
    max_record_bytes: int = param(DEFAULT_MAX_RECORD_BYTES, min=1)
    allow_empty_input: bool = False  # an input without a single record is an error unless this is true
    format: str = param("auto", choices=FORMATS)  # the reader for every input file; auto = by extension
    text_field: str = param("text", nonempty=True)  # a field name or a dotted path (payload.content)
    id_field: str = param("id", nonempty=True)
    keep_fields: tuple[str, ...] = ()  # fields (names or dotted paths) kept as typed docs columns
    languages: tuple[str, ...] = param(("zh", "en"), choices=LANGUAGES, nonempty=True)  # as the detector names them
    min_lang_prob: float = param(0.8, min=0.0, max=1.0)
    langid_max_chars: int = param(400, min=1)
    langid_trials: int = param(3, min=1)
    # CPU seconds per record after parsing, language ID aside; 0 = unlimited
    record_time_budget_s: float = param(30.0, min=0.0)
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
        for i, name in enumerate(self.keep_fields):
            if not name or name in RESERVED_COLUMNS or name in self.keep_fields[:i]:
                what = "is empty" if not name else "is listed twice" if name in self.keep_fields[:i] else \
                    f"is a column name the docs have or a later stage adds ({', '.join(sorted(RESERVED_COLUMNS))})"
                raise ValueError(f"param 'clean.keep_fields[{i}]': {name!r} {what}")

    @property
    def field_map(self) -> FieldMap:
        return FieldMap(self.text_field, self.id_field, self.keep_fields)


class RecordTooSlow(Exception):
    """A record's processing ran past `record_time_budget_s`."""


def _raise_too_slow(signum: int, frame: Any) -> None:
    raise RecordTooSlow


@contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise RecordTooSlow inside the block once it has used `seconds` of CPU time (0: no limit). CPU time,
    not wall time: a busy machine must not change which records are kept (a normal record takes well under
    a second, a 1 MB worst case about one).

    It uses SIGPROF, so it works only in a process's main thread, which is where the local pool's workers,
    the inline path (one worker) and Ray tasks run records; in another thread the block runs unlimited.
    The signal interrupts Python code and regular expressions, but one long call into C code (the HTML
    parser, Unicode normalisation) finishes before the exception is raised.
    """
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGPROF, _raise_too_slow)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def original_record(parsed: Record) -> str:
    """The record as read, for the quarantine (its kept fields under their paths)."""
    return json.dumps({"id": parsed.id, "text": parsed.text, **parsed.kept, **parsed.meta}, ensure_ascii=False,
                      default=str)


def dropped(doc_id: str, reason: str, source: str, index: int, record: str, lang: str | None = None,
            lang_prob: float | None = None) -> dict[str, Any]:
    """A dropped record's result row."""
    return {"id": doc_id, "reason": reason, "lang": lang, "lang_prob": lang_prob, "source": source, "index": index,
            "record": record}


@dataclass
class Normalized:
    """A record as far as language ID."""
    parsed: Record
    text: str
    original: str
    cpu_seconds: float  # of its time budget, spent normalising it


class Cleaner:
    """The per-record decision, built once per worker process: one result row per raw record, in order,
    with a reason where the record is dropped, else the cleaned text and its dedup keys."""

    def __init__(self, params: Params) -> None:
        self.p = params
        self.languages = frozenset(params.languages)
        self.langid = LanguageIdentifier(params.seed, params.langid_max_chars, params.langid_trials,
                                         keep=params.languages)
        self.rules = QualityRules(params.quality)
        self.signer = Signer(params.dedup, params.seed) if params.dedup.near else None
        self.fields = params.field_map
        if params.record_time_budget_s and threading.current_thread() is not threading.main_thread():
            log.warning("clean: records are processed outside a main thread, so 'clean.record_time_budget_s' "
                        "cannot interrupt them")

    def __call__(self, batch: list[RawRecord], timings: Counter[str]) -> list[dict[str, Any]]:
        """Each record as far as language ID, then language ID of all their texts at once (the detector's
        trials run in lockstep across them, the same answers as one by one), then each one's quality rules
        and dedup keys."""
        firsts = [self.normalized(raw, timings) for raw in batch]
        pending = [first for first in firsts if isinstance(first, Normalized)]
        t0 = time.thread_time()
        langs = iter(self.langid.identify([record.text for record in pending]))
        timings["langid"] += time.thread_time() - t0
        return [self.checked(first, next(langs), timings) if isinstance(first, Normalized) else first
                for first in firsts]

    def normalized(self, raw: RawRecord, timings: Counter[str]) -> Normalized | dict[str, Any]:
        """Parse and normalise: the record for language ID, or its result row if dropped already."""
        t0 = time.thread_time()
        parsed = parse_raw(raw, self.p.max_record_bytes, self.fields)
        t1 = time.thread_time()
        timings["parse"] += t1 - t0
        if isinstance(parsed, Rejection):
            return dropped(parsed.id, parsed.reason, parsed.source, parsed.index, parsed.original)
        try:
            with time_budget(self.p.record_time_budget_s):
                text, _ = normalize(parsed.text, self.p.normalize)
        except RecordTooSlow:
            return dropped(parsed.id, "invalid:too_slow", parsed.source, parsed.index, original_record(parsed))
        t2 = time.thread_time()
        timings["normalize"] += t2 - t1
        original = original_record(parsed)
        if len(text) < self.rules.min_any_chars:  # before language ID: the detector is the costly step
            return dropped(parsed.id, "quality:too_short", parsed.source, parsed.index, original)
        return Normalized(parsed, text, original, t2 - t1)

    def checked(self, record: Normalized, lang: LangResult, timings: Counter[str]) -> dict[str, Any]:
        """The language filter, the quality rules and the dedup keys, within what is left of the time budget."""
        parsed, text, original = record.parsed, record.text, record.original
        if lang.lang not in self.languages:
            return dropped(parsed.id, f"lang:{lang.lang}", parsed.source, parsed.index, original, lang.lang, lang.prob)
        if lang.kept_prob < self.p.min_lang_prob:  # in SOME kept language, be it ru or bg, es or pt, ...
            return dropped(parsed.id, f"lang_low_prob:{lang.lang}", parsed.source, parsed.index, original,
                           lang.lang, lang.prob)
        budget = self.p.record_time_budget_s
        try:
            if budget and record.cpu_seconds >= budget:
                raise RecordTooSlow
            with time_budget(budget - record.cpu_seconds if budget else 0):
                t0 = time.thread_time()
                reason = self.rules.check(text, lang.lang)
                t1 = time.thread_time()
                timings["rules"] += t1 - t0
                if reason:
                    return dropped(parsed.id, reason, parsed.source, parsed.index, original, lang.lang, lang.prob)
                signature = self.signer(text, lang.lang) if self.signer else None
                key = exact_key(text)
                timings["signature"] += time.thread_time() - t1
        except RecordTooSlow:
            return dropped(parsed.id, "invalid:too_slow", parsed.source, parsed.index, original)
        return {"id": parsed.id, "reason": None, "lang": lang.lang, "lang_prob": lang.prob, "source": parsed.source,
                "index": parsed.index, "record": original, "text": text,
                "meta": json.dumps(parsed.meta, ensure_ascii=False, default=str), "kept": parsed.kept, "key": key,
                "signature": None if signature is None else signature.tobytes()}


@dataclass
class Candidate(Kept):
    """A record its own checks keep; the dedup index, in input order, has the last word."""
    key: bytes
    signature: np.ndarray | None
    index: int
    original: str


class CleanStage(FilterStage):
    name = STAGE
    decider = Cleaner

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        try:
            self.files = list_input_files(params.input, params.pattern)
        except ValueError as e:  # no input file, or one it cannot name: the user's to fix, in one line
            raise ConfigError(f"param 'clean.input': {e}") from None
        log.info("clean: %d input file(s), executor %s, %d worker(s)", len(self.files), params.executor,
                 self.num_workers)
        if params.quality.min_stop_words:
            for lang in languages_without_stop_words(params.languages):
                log.info("clean: no stop-word list for %r: the stop-word rule is skipped for it", lang)
        self.skipped: Counter[str] = Counter()  # what the files hold besides records (WARC requests, ...)
        raws = iter_raw(self.files, params.max_record_bytes, params.format, self.skipped)
        head, cut = lookahead(raws)  # before the work folder or any output is touched
        if not head and not params.allow_empty_input:
            raise ConfigError(f"param 'clean.input': {redact(params.input)!r} holds no records "
                              f"({len(self.files)} file(s), empty or blank lines only); set "
                              "'clean.allow_empty_input: true' to publish an empty dataset")
        parsed = [parse_raw(raw, params.max_record_bytes, params.field_map) for raw in head]
        check_text_field(params.text_field, head, parsed, more=cut)
        records = [r for r in parsed if isinstance(r, Record)]
        self.field_kinds = {path: infer_kind(r.kept.get(path) for r in records) for path in params.keep_fields}
        self.doc_schema = schema_with(DOC_SCHEMA, self.field_kinds)
        self.num_mismatched: Counter[str] = Counter()
        self.raws = itertools.chain(head, raws)
        self.index = DedupIndex(params.dedup)

    def documents(self) -> Iterator[RawRecord]:
        for raw in self.raws:
            self.counts["num_bytes"] += raw.num_bytes
            yield raw

    def decider_args(self) -> tuple:
        return (self.params,)

    def verdict(self, result: dict[str, Any], raw: RawRecord) -> Verdict:
        if result["reason"] is not None:
            return Dropped(result["id"], result["reason"], result["source"], result["record"], result["lang"],
                           result["lang_prob"], result["index"])
        sig = result["signature"]  # uint32 or uint64 values, by the MinHash scheme
        signature = None if sig is None else np.frombuffer(sig, dtype=f"u{len(sig) // self.params.dedup.num_perm}")
        row = {k: result[k] for k in ("id", "text", "lang", "lang_prob", "source", "meta")}
        for path, kind in self.field_kinds.items():
            row[path], fits = coerce(result["kept"].get(path), kind)
            self.num_mismatched[path] += not fits
        return Candidate(row, result["key"], signature, result["index"], result["record"])

    def review(self, verdict: Verdict) -> Verdict:
        """Exact and near dedup against every document kept before this one."""
        if not isinstance(verdict, Candidate):
            return verdict
        row = verdict.row
        dup = self.index.check(row["id"], verdict.key, verdict.signature)
        if dup is None:
            return verdict
        return Dropped(row["id"], dup[0], row["source"], verdict.original, row["lang"], row["lang_prob"],
                       verdict.index, dup_of=dup[1])

    def stage_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        input_mb, seconds = self.counts["num_bytes"] / 1e6, metrics["seconds"]
        return {
            "num_input_files": len(self.files),
            "num_workers": self.num_workers,
            "input_mb": input_mb,
            "mb_per_s": input_mb / seconds,
            # CPU seconds summed over workers, so they show where the time goes, not wall time.
            **{f"cpu_seconds.{phase}": round(self.timings[phase], 3) for phase in PHASES},
            "cpu_seconds.dedup_and_write": round(self.timings["review_and_write"], 3),
            **dict(sorted(self.skipped.items())),
            **{f"keep_fields.{path}.type": kind for path, kind in self.field_kinds.items()},
            # values that did not fit their column's type, written as null
            **{f"keep_fields.{path}.num_mismatched": self.num_mismatched[path] for path in self.field_kinds},
        }


def lookahead(raws: Iterator[RawRecord]) -> tuple[list[RawRecord], bool]:
    """(the first records, at most LOOKAHEAD_RECORDS of them and about LOOKAHEAD_BYTES; whether it
    stopped at a limit, so that more records may follow)."""
    head: list[RawRecord] = []
    size = 0
    for raw in raws:
        head.append(raw)
        size += raw.num_bytes
        if len(head) >= LOOKAHEAD_RECORDS or size >= LOOKAHEAD_BYTES:
            return head, True
    return head, False


def check_text_field(text_field: str, head: list[RawRecord], parsed: list[Record | Rejection], more: bool) -> None:
    """A ConfigError if records were read and not one of them has the text field: the field name is wrong
    for this input (records that lack it while others have it are quarantined one by one)."""
    missing = [raw for raw, r in zip(head, parsed) if isinstance(r, Rejection) and r.reason == "invalid:missing_text"]
    if not missing or any(isinstance(r, Record) or r.reason in _HAS_TEXT_REASONS for r in parsed):
        return
    names: dict[str, None] = {}
    for raw in missing:
        obj = raw.payload if raw.kind == "row" else json.loads(raw.payload)
        names.update(dict.fromkeys(field_names(obj)))
    sources = list(dict.fromkeys(raw.source for raw in head))
    where = ", ".join(sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
    first = f"the first {len(head)} records of " if more else ""
    raise ConfigError(f"param 'clean.text_field': no record of {first}{where} has field {text_field!r}; its records "
                      f"have: {', '.join(sorted(names)) or 'no fields'}")


def run(params: Params) -> dict[str, Any]:
    """Clean `params.input` into `params.out_dir`; return the metrics (written to `detail_path`,
    the headline to `metrics_path`)."""
    check_owned_paths(STAGE, {"input": params.input}, {"out_dir": params.out_dir}, {"work_dir": params.work_dir})
    stage = CleanStage(params)
    metrics = stage.run(stage.files)
    write_csv(params.reasons_plot_path, ["reason", "family", "count"],
              [(reason, reason.split(":")[0], n) for reason, n in sorted(stage.reasons.items(),
                                                                          key=lambda rc: (-rc[1], rc[0]))])
    return metrics


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
