"""`clean` stage: raw records -> normalised, language-filtered, quality-filtered, deduplicated docs.

Per record, cheapest first: parse/validate -> normalise (HTML, control chars, mojibake, NFKC, regex
removals, whitespace) -> minimum length -> language ID -> quality rules -> exact key + MinHash signature.
`Cleaner` decides that in the workers, a shard at a time (language ID for the shard's texts together);
the filter-stage base (stages/common/text/filters.py) runs it on shards of `batch_size` records over the
executor (a local process pool or Ray tasks), each shard's results kept in `work_dir` with a completion
marker, so a rerun redoes only unfinished shards. Each shard also writes its candidates' dedup keys.
Once every shard is decided, dedup runs its partitioned phases over those keys (stages.common.text.dedup:
each group of exact or near duplicates keeps its first document in input order; no process holds every
key), then the parent process reads the shards' results back in order and writes two Parquet datasets:

    <out_dir>/docs/part-*.parquet        kept documents (id, text, lang, lang_prob, source, meta, keep_fields...)
    <out_dir>/quarantine/part-*.parquet  every dropped or invalid record, with its reason

Invariant, checked before anything is published: kept + quarantined == records read.
"""
from __future__ import annotations

import dataclasses
import glob
import itertools
import json
import logging
import os
import re
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
from tqdm import tqdm

from stages.common.runtime.atomic import write_csv
from stages.common.runtime.cli import stage_main
from stages.common.runtime.executor import (  # noqa: F401 (bench/clean.py uses resolve_workers)
    ShardResult,
    check_executor,
    resolve_workers,
)
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import ConfigError, param, validate
from stages.common.runtime.parquet import DOC_SCHEMA
from stages.common.runtime.storage import (
    CONNECT_TIMEOUT_S,
    READ_TIMEOUT_S,
    exists,
    fingerprint_of,
    input_size,
    set_timeouts,
)
from stages.common.runtime.urls import is_url, redact, url_path
from stages.common.text.dedup import (
    DedupParams,
    DuplicateLookup,
    Signer,
    candidate_table,
    deduplicate,
    exact_key,
    write_candidates,
)
from stages.common.text.fields import coerce, infer_kind, schema_with
from stages.common.text.filters import Dropped, FilterStage, Kept, Verdict
from stages.common.text.langid import LANGUAGES, LangResult, LanguageIdentifier
from stages.common.text.normalize import NormalizeOptions, normalize
from stages.common.text.quality import QualityParams, QualityRules, languages_without_stop_words
from stages.common.text.readers.dispatch import iter_raw
from stages.common.text.readers.files import FORMATS, list_input_files
from stages.common.text.readers.records import (
    DEFAULT_MAX_RECORD_BYTES,
    FieldMap,
    ROW_KINDS,
    RawRecord,
    Record,
    Rejection,
    field_names,
    parse_raw,
)
from stages.common.text.readers.tabular import check_headers

log = logging.getLogger("refinery.clean")
STAGE = "clean"
PHASES = ("parse", "normalize", "langid", "rules", "signature")
# Before any output is touched, the first records are read ahead (at most this many, and this many bytes)
# to check that the text field exists and to type the kept fields' columns.
LOOKAHEAD_RECORDS = 1000
LOOKAHEAD_BYTES = 64 << 20
# A file's first records are judged to lack the text field when more than `max_missing_text_share` of them
# and at least this many (or all of them) do: a few malformed records are quarantined, not an error.
MIN_MISSING_TEXT = 5
# Column names a kept field may not take: the docs' own, and those semantic_filter and perplexity add.
RESERVED_COLUMNS = frozenset(DOC_SCHEMA.names) | {"quality_score", "perplexity", "tier", "split", "num_tokens"}


SOURCE_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, kw_only=True)
class Source:
    """One kind of input under `clean.input`: where its files are and how its records become documents.
    A key left unset (null) takes the value of clean's own key of that name."""
    name: str  # the docs' and the quarantine's `source` column; the funnel is counted per source
    path: str = ""  # a file, folder (searched with clean.pattern) or glob, relative to clean.input; "" = all of it
    format: str | None = param(None, choices=FORMATS)
    text_field: str | None = param(None, nonempty=True)
    id_field: str | None = param(None, nonempty=True)
    keep_fields: tuple[str, ...] | None = None
    rename: dict[str, str] = field(default_factory=dict)  # field name -> new name, before the keys above apply


@dataclass(frozen=True)
class InputSource:
    """A source as the stage reads it: clean's keys filled in."""
    key: str  # the params key that describes it, for errors: clean or clean.sources[i]
    name: str
    location: str  # clean.input joined with the source's path
    format: str
    fields: FieldMap


@dataclass(frozen=True, kw_only=True)  # keyword-only: the path fields have no default, wherever they sit
class Params:
    input: str  # a file, a folder (searched recursively with `pattern`) or a glob; local or a URL (s3://, gs://, ...)
    pattern: str = "*"
    # Several kinds of file under `input`, each with its own format and fields; () = `input` is one source.
    sources: tuple[Source, ...] = ()
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
    # remote inputs (s3://, https://, ...): the longest wait for a connection, and for each answer
    remote_connect_timeout_s: float = param(CONNECT_TIMEOUT_S, gt=0.0, placement=True)
    remote_read_timeout_s: float = param(READ_TIMEOUT_S, gt=0.0, placement=True)
    allow_empty_input: bool = False  # an input without a single record is an error unless this is true
    format: str = param("auto", choices=FORMATS)  # the reader for every input file; auto = by extension
    text_field: str = param("text", nonempty=True)  # a field name or a dotted path (payload.content)
    id_field: str = param("id", nonempty=True)
    keep_fields: tuple[str, ...] = ()  # fields (names or dotted paths) kept as typed docs columns
    # Of the first records read from a file, the largest share that may lack the text field; more is an
    # error before any work (the field name is wrong for that file).
    max_missing_text_share: float = param(0.05, min=0.0, max=1.0)
    # `refinery check`: records read from the start of each source to project what clean keeps
    check_records: int = param(200, min=1, placement=True)
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
        for i, source in enumerate(self.sources):
            validate(source, f"{STAGE}.sources[{i}]")
        if self.quality.min_mean_word_length > self.quality.max_mean_word_length:
            raise ValueError("param 'clean.quality.min_mean_word_length': must be <= "
                             f"'clean.quality.max_mean_word_length', got {self.quality.min_mean_word_length} > "
                             f"{self.quality.max_mean_word_length}")
        check_executor(STAGE, self.executor, self.address)
        check_keep_fields(f"{STAGE}.keep_fields", self.keep_fields)
        names: set[str] = set()
        for i, source in enumerate(self.sources):
            key = f"{STAGE}.sources[{i}]"
            if not SOURCE_NAME_RE.fullmatch(source.name) or source.name in names:
                what = "is used by an earlier source" if source.name in names else \
                    "must be 1-64 letters, digits, '_' or '-'"
                raise ValueError(f"param '{key}.name': {source.name!r} {what}")
            names.add(source.name)
            if source.keep_fields is not None:
                check_keep_fields(f"{key}.keep_fields", source.keep_fields)
            targets = list(source.rename.values())
            for old, new in source.rename.items():
                if not isinstance(new, str) or not new or not old or targets.count(new) > 1:
                    raise ValueError(f"param '{key}.rename.{old}': must be a new, non-empty field name that no other "
                                     f"field is renamed to, got {new!r}")

    def input_sources(self) -> list[InputSource]:
        """The sources to read, in order: `sources`, or `input` as one source named after it."""
        if not self.sources:
            return [InputSource(STAGE, default_source_name(self.input), self.input, self.format,
                                FieldMap(self.text_field, self.id_field, self.keep_fields))]
        return [InputSource(f"{STAGE}.sources[{i}]", s.name, join_location(self.input, s.path),
                            s.format or self.format,
                            FieldMap(s.text_field or self.text_field, s.id_field or self.id_field,
                                     self.keep_fields if s.keep_fields is None else s.keep_fields,
                                     tuple(s.rename.items())))
                for i, s in enumerate(self.sources)]

    @property
    def keep_columns(self) -> tuple[str, ...]:
        """Every source's kept fields: the docs' added columns, in order of first mention."""
        return tuple(dict.fromkeys(path for source in self.input_sources() for path in source.fields.keep))


def check_keep_fields(key: str, keep_fields: tuple[str, ...]) -> None:
    for i, name in enumerate(keep_fields):
        if not name or name in RESERVED_COLUMNS or name in keep_fields[:i]:
            what = "is empty" if not name else "is listed twice" if name in keep_fields[:i] else \
                f"is a column name the docs have or a later stage adds ({', '.join(sorted(RESERVED_COLUMNS))})"
            raise ValueError(f"param '{key}[{i}]': {name!r} {what}")


def default_source_name(location: str) -> str:
    """The one source's name when `clean.sources` is empty: the input's last path part (`data/raw/demo` ->
    `demo`, `corpus/*.jsonl` -> `corpus`), without extensions, as a source name allows."""
    parts = [p for p in url_path(location).replace("\\", "/").split("/") if p and not glob.has_magic(p)]
    stem = parts[-1].split(".")[0] if parts else ""
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", stem)[:64].strip("_")
    return name or "input"


def join_location(root: str, path: str) -> str:
    if not path:
        return root
    return f"{root.rstrip('/')}/{path.lstrip('/')}" if is_url(root) else os.path.join(root, path)


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
            lang_prob: float | None = None, text: str | None = None, value: float | None = None) -> dict[str, Any]:
    """A dropped record's result row; `text` is the text as judged (after normalisation), `value` what the
    deciding rule measured."""
    return {"id": doc_id, "reason": reason, "lang": lang, "lang_prob": lang_prob, "source": source, "index": index,
            "record": record, "judged_text": text, "score": value}


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
        self.sources = params.input_sources()
        if params.record_time_budget_s and threading.current_thread() is not threading.main_thread():
            log.warning("clean: records are processed outside a main thread, so 'clean.record_time_budget_s' "
                        "cannot interrupt them")

    def side_outputs(self, rows: list[dict[str, Any]], folder: Path) -> dict[str, int]:
        """The shard's dedup candidates file (stages.common.text.dedup, phase 1); their keys and signatures
        leave the rows."""
        positions = [i for i, row in enumerate(rows) if row["reason"] is None]
        keys = [rows[i].pop("key") for i in positions]
        signatures = [None if (sig := rows[i].pop("signature")) is None  # uint32 or uint64, by the MinHash scheme
                      else np.frombuffer(sig, dtype=f"u{len(sig) // self.p.dedup.num_perm}") for i in positions]
        return {"num_dedup_rows": write_candidates(candidate_table(positions, keys, signatures, self.p.dedup), folder)}

    def __call__(self, batch: list[RawRecord], timings: Counter[str]) -> list[dict[str, Any]]:
        """Each record as far as language ID, then language ID of all their texts at once (the detector's
        trials run in lockstep across them, the same answers as one by one), then each one's quality rules
        and dedup keys."""
        firsts = [self.normalized(raw, timings) for raw in batch]
        pending = [first for first in firsts if isinstance(first, Normalized)]
        t0 = time.thread_time()
        langs = iter(self.langid.identify([record.text for record in pending]))
        timings["langid"] += time.thread_time() - t0
        rows = [self.checked(first, next(langs), timings) if isinstance(first, Normalized) else first
                for first in firsts]
        for raw, row in zip(batch, rows):  # until here `source` was the file
            row["file"], row["source"] = row["source"], self.sources[raw.origin].name
        return rows

    def normalized(self, raw: RawRecord, timings: Counter[str]) -> Normalized | dict[str, Any]:
        """Parse and normalise: the record for language ID, or its result row if dropped already."""
        t0 = time.thread_time()
        parsed = parse_raw(raw, self.p.max_record_bytes, self.sources[raw.origin].fields)
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
            return dropped(parsed.id, "quality:too_short", parsed.source, parsed.index, original, text=text,
                           value=len(text))
        return Normalized(parsed, text, original, t2 - t1)

    def checked(self, record: Normalized, lang: LangResult, timings: Counter[str]) -> dict[str, Any]:
        """The language filter, the quality rules and the dedup keys, within what is left of the time budget."""
        parsed, text, original = record.parsed, record.text, record.original
        if lang.lang not in self.languages:
            return dropped(parsed.id, f"lang:{lang.lang}", parsed.source, parsed.index, original, lang.lang, lang.prob,
                           text, lang.prob)
        if lang.kept_prob < self.p.min_lang_prob:  # in SOME kept language, be it ru or bg, es or pt, ...
            return dropped(parsed.id, f"lang_low_prob:{lang.lang}", parsed.source, parsed.index, original,
                           lang.lang, lang.prob, text, lang.kept_prob)
        budget = self.p.record_time_budget_s
        try:
            if budget and record.cpu_seconds >= budget:
                raise RecordTooSlow
            with time_budget(budget - record.cpu_seconds if budget else 0):
                t0 = time.thread_time()
                reason, value = self.rules.judge(text, lang.lang)
                t1 = time.thread_time()
                timings["rules"] += t1 - t0
                if reason:
                    return dropped(parsed.id, reason, parsed.source, parsed.index, original, lang.lang, lang.prob,
                                   text, value)
                signature = self.signer(text, lang.lang) if self.signer else None
                key = exact_key(text)
                timings["signature"] += time.thread_time() - t1
        except RecordTooSlow:
            return dropped(parsed.id, "invalid:too_slow", parsed.source, parsed.index, original)
        return {"id": parsed.id, "reason": None, "lang": lang.lang, "lang_prob": lang.prob, "source": parsed.source,
                "index": parsed.index, "record": original, "text": text,
                "meta": json.dumps(parsed.meta, ensure_ascii=False, default=str), "kept": parsed.kept, "key": key,
                "signature": None if signature is None else signature.tobytes()}


class CleanStage(FilterStage):
    name = STAGE
    decider = Cleaner
    settles = True  # dedup decides once every shard is

    def __init__(self, params: Params) -> None:
        super().__init__(params)
        self.sources = params.input_sources()
        files_by_source = source_files(params, self.sources)
        self.files = [f for files in files_by_source for f in files]
        log.info("clean: %d input file(s) in %d source(s), executor %s, %d worker(s)", len(self.files),
                 len(self.sources), params.executor, self.num_workers)
        if params.quality.min_stop_words:
            for lang in languages_without_stop_words(params.languages):
                log.info("clean: no stop-word list for %r: the stop-word rule is skipped for it", lang)
        t0, num_checked = time.perf_counter(), 0
        for source, files in zip(self.sources, files_by_source):  # a bad header in the last file stops it now
            num_checked += check_headers(files, params.max_record_bytes, source.format)
        if num_checked:
            log.info("clean: the headers of %d CSV/TSV/Parquet/Arrow file(s) checked in %.1f s", num_checked,
                     time.perf_counter() - t0)
        self.skipped: Counter[str] = Counter()  # what the files hold besides records (WARC requests, ...)
        streams: list[Iterator[RawRecord]] = []
        records: list[Record] = []  # the first ones of each source, to type the kept fields' columns
        num_head = 0
        for origin, (source, files) in enumerate(zip(self.sources, files_by_source)):
            raws = iter_raw(files, params.max_record_bytes, source.format, self.skipped)
            if origin:
                raws = (dataclasses.replace(raw, origin=origin) for raw in raws)
            # before the work folder or any output is touched
            head, cut = lookahead(raws, max(LOOKAHEAD_BYTES // len(self.sources), 1 << 20))
            parsed = [parse_raw(raw, params.max_record_bytes, source.fields) for raw in head]
            check_text_field(source, head, parsed, cut, params.max_missing_text_share)
            records += [r for r in parsed if isinstance(r, Record)]
            streams.append(itertools.chain(head, raws))
            num_head += len(head)
        if not num_head and not params.allow_empty_input:
            raise ConfigError(f"param 'clean.input': {redact(params.input)!r} holds no records "
                              f"({len(self.files)} file(s), empty or blank lines only); set "
                              "'clean.allow_empty_input: true' to publish an empty dataset")
        self.field_kinds = {path: infer_kind(r.kept.get(path) for r in records) for path in params.keep_columns}
        self.doc_schema = schema_with(DOC_SCHEMA, self.field_kinds)
        self.num_mismatched: Counter[str] = Counter()
        self.raws = itertools.chain(*streams)
        self.duplicates: DuplicateLookup | None = None  # once settled
        self.position = 0  # of the next verdict's document in the input

    def documents(self) -> Iterator[RawRecord]:
        for raw in self.raws:
            self.counts["num_bytes"] += raw.num_bytes
            yield raw

    def decider_args(self) -> tuple:
        return (self.params,)

    def settle(self, shards: list[ShardResult], work: Path) -> None:
        """Dedup's phases 2 and 3 over the candidates the shards wrote (stages.common.text.dedup)."""
        t0 = time.perf_counter()
        located, offset = [], 0
        for shard in shards:
            located.append((shard.folder, offset, shard.summary["num_dedup_rows"]))
            offset += shard.summary["num_docs"]
        p = self.params
        with tqdm(desc=f"{STAGE}: dedup", unit="partition", mininterval=2.0) as bar:
            def progress(result: ShardResult) -> None:
                self.counts["dedup.num_partitions"] += 1
                self.counts["dedup.num_partitions_resumed"] += result.resumed
                self.counts["dedup.num_pairs"] += result.summary["num_pairs"]
                bar.update()

            duplicates = deduplicate(located, work, p.dedup, p.executor, p.address, self.num_workers, progress)
        self.counts["dedup.num_keys"] = sum(rows for _, _, rows in located)
        self.duplicates = DuplicateLookup(duplicates)
        self.timings["dedup_wall"] = time.perf_counter() - t0
        log.info("clean: dedup over %d keys in %d partition(s): %d duplicate(s) in %.1fs",
                 self.counts["dedup.num_keys"], self.counts["dedup.num_partitions"], len(duplicates),
                 self.timings["dedup_wall"])

    def verdict(self, result: dict[str, Any], raw: None) -> Verdict:
        position, self.position = self.position, self.position + 1
        if result["reason"] is not None:
            return Dropped(result["id"], result["reason"], result["source"], result["record"], result["lang"],
                           result["lang_prob"], result["index"], score=result["score"], file=result["file"],
                           judged_text=result["judged_text"])
        dup = self.duplicates.check(position, result["id"])
        if dup is not None:
            return Dropped(result["id"], dup[0], result["source"], result["record"], result["lang"],
                           result["lang_prob"], result["index"], dup_of=dup[1], file=result["file"],
                           judged_text=result["text"])
        row = {k: result[k] for k in ("id", "text", "lang", "lang_prob", "source", "file", "meta")}
        for path, kind in self.field_kinds.items():
            row[path], fits = coerce(result["kept"].get(path), kind)
            self.num_mismatched[path] += not fits
        return Kept(row)

    def stage_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        input_mb, seconds = self.counts["num_bytes"] / 1e6, metrics["seconds"]
        return {
            "num_input_files": len(self.files),
            "num_workers": self.num_workers,
            "input_mb": input_mb,
            "mb_per_s": input_mb / seconds,
            # CPU seconds summed over workers, so they show where the time goes, not wall time.
            **{f"cpu_seconds.{phase}": round(self.timings[phase], 3) for phase in PHASES},
            "cpu_seconds.write": round(self.timings["review_and_write"], 3),
            # dedup's phases 2 and 3 (phase 1 is part of `signature`), wall time
            "seconds.dedup": round(self.timings["dedup_wall"], 3),
            **{key: self.counts[key] for key in ("dedup.num_keys", "dedup.num_partitions",
                                                 "dedup.num_partitions_resumed", "dedup.num_pairs")},
            **dict(sorted(self.skipped.items())),
            **{f"keep_fields.{path}.type": kind for path, kind in self.field_kinds.items()},
            # values that did not fit their column's type, written as null
            **{f"keep_fields.{path}.num_mismatched": self.num_mismatched[path] for path in self.field_kinds},
        }


def source_files(params: Params, sources: list[InputSource]) -> list[list[str]]:
    """Each source's input files, in order. Every file under `clean.input` (with `clean.pattern`) belongs to
    exactly one source: one that two sources match, or that none does, is a ConfigError naming it."""
    try:
        everything = list_input_files(params.input, params.pattern)
    except ValueError as e:  # no input file, or one it cannot name: the user's to fix, in one line
        raise ConfigError(f"param 'clean.input': {e}") from None
    if not params.sources:
        return [everything]
    owner: dict[str, str] = {}
    files_by_source = []
    for source in sources:
        try:
            files = list_input_files(source.location, params.pattern)
        except ValueError as e:
            raise ConfigError(f"param '{source.key}.path': {e}") from None
        for f in files:
            if f in owner:
                raise ConfigError(f"param '{source.key}.path': {redact(f)} is also read by source {owner[f]!r}: "
                                  "each file must belong to one source")
            owner[f] = source.name
        files_by_source.append(files)
    unclaimed = [f for f in everything if f not in owner]
    if unclaimed:
        raise ConfigError(f"param 'clean.sources': {len(unclaimed)} input file(s) belong to no source, e.g. "
                          f"{redact(unclaimed[0])}: add a source for them, or narrow 'clean.pattern'")
    return files_by_source


def lookahead(raws: Iterator[RawRecord], max_bytes: int = LOOKAHEAD_BYTES) -> tuple[list[RawRecord], bool]:
    """(the first records, at most LOOKAHEAD_RECORDS of them and about `max_bytes`; whether it stopped at a
    limit, so that more records may follow)."""
    head: list[RawRecord] = []
    size = 0
    for raw in raws:
        head.append(raw)
        size += raw.num_bytes
        if len(head) >= LOOKAHEAD_RECORDS or size >= max_bytes:
            return head, True
    return head, False


def check_text_field(source: InputSource, head: list[RawRecord], parsed: list[Record | Rejection], more: bool,
                     max_share: float) -> None:
    """A ConfigError if, of a file's first records, more than `max_share` lack the text field: the field
    name is wrong for that file (later records that lack it are quarantined one by one)."""
    counts: dict[str, list[int]] = {}  # file -> [records, records without the text field]
    for raw, r in zip(head, parsed):
        count = counts.setdefault(raw.source, [0, 0])
        count[0] += 1
        count[1] += isinstance(r, Rejection) and r.reason == "invalid:missing_text"
    for path, (num, num_missing) in counts.items():
        if num_missing <= max_share * num or num_missing < min(num, MIN_MISSING_TEXT):
            continue
        names: dict[str, None] = {}
        for raw, r in zip(head, parsed):
            if raw.source == path and isinstance(r, Rejection) and r.reason == "invalid:missing_text":
                obj = source.fields.renamed(raw.payload if raw.kind in ROW_KINDS else json.loads(raw.payload))
                names.update(dict.fromkeys(field_names(obj)))
        first = f"the first {num}" if more and path == head[-1].source else f"the {num}"  # that file was cut short
        key = f"{source.key}.text_field" if source.key != STAGE else "clean.text_field"
        what = (f"none of {first} records of {path} has field {source.fields.text!r}" if num_missing == num else
                f"{num_missing} of {first} records of {path} lack field {source.fields.text!r} (more than a share "
                f"of {max_share:g}: 'clean.max_missing_text_share')")
        raise ConfigError(f"param '{key}': {what}; its records have: {', '.join(sorted(names)) or 'no fields'}")


def check_data(params: Params, context: dict[str, Any]) -> list[tuple[str, str]]:
    """`refinery check`: the first `check_records` records of each source through clean's own checks (dedup
    aside), in this process. ("note" | "error", line) findings; `context["clean"]` gets the projected
    documents and characters per language that clean publishes, for the later stages' checks."""
    set_timeouts(params.remote_connect_timeout_s, params.remote_read_timeout_s)
    made_by = context["pending"](params.input) if "pending" in context else None
    if made_by:
        return [("note", f"{params.input} is not read: stage {made_by!r} makes it and has not run yet")]
    findings: list[tuple[str, str]] = []
    sources = params.input_sources()
    cleaner = Cleaner(params)
    projected_docs: Counter[str] = Counter()
    projected_chars: Counter[str] = Counter()
    for origin, (source, files) in enumerate(zip(sources, source_files(params, sources))):
        check_headers(files, params.max_record_bytes, source.format)
        # the first records of each file (of the first `check_records` files), so that every kind shows
        per_file = max(1, params.check_records // len(files))
        head = [dataclasses.replace(raw, origin=origin) for path in files[:params.check_records]
                for raw in itertools.islice(iter_raw([path], params.max_record_bytes, source.format, Counter()),
                                            per_file)]
        parsed = [parse_raw(raw, params.max_record_bytes, source.fields) for raw in head]
        check_text_field(source, head, parsed, True, params.max_missing_text_share)
        rows = cleaner(head, Counter()) if head else []
        num_sample = len(rows)
        kept = [row for row in rows if row["reason"] is None]
        scale = estimate_records(files, params, source) / max(1, num_sample)
        for row in kept:
            projected_docs[row["lang"]] += scale
            projected_chars[row["lang"]] += scale * len(row["text"])
        reasons = Counter(row["reason"] for row in rows if row["reason"] is not None)
        langs = Counter(row["lang"] for row in rows if row["lang"])
        fields: dict[str, None] = {}
        for r in parsed:
            if isinstance(r, Record):
                fields.update(dict.fromkeys(["text", "id", *r.kept, *r.meta]))
        top = ", ".join(f"{reason} {n}" for reason, n in reasons.most_common(4))
        findings.append(("note", f"source {source.name!r}: {len(files)} file(s); of {num_sample} records from their "
                                 "starts "
                                 f"clean would keep {len(kept)} ({len(kept) / max(1, num_sample):.0%}) before dedup"
                                 + (f"; dropped: {top}" if top else "")
                                 + (f"; languages: {', '.join(f'{k} {n}' for k, n in langs.most_common(6))}"
                                    if langs else "")
                                 + (f"; fields: {', '.join(fields)}" if fields else "")
                                 + f"; about {round(scale * num_sample):,} records in all"))
        if num_sample and not kept:
            found = ", ".join(f"{k} {n}" for k, n in langs.most_common(4) if k not in params.languages)
            key = "clean.languages" if found else f"{source.key if source.key != STAGE else 'clean'}"
            findings.append(("error", f"param {key!r}: source {source.name!r} would keep none of "
                                      f"{num_sample} records (dropped: {top}"
                                      + (f"; languages found: {found}; kept: {', '.join(params.languages)})"
                                         if found else ")")))
    for lang in params.languages:
        if not projected_docs[lang]:
            findings.append(("note", f"clean.languages lists {lang!r}, but no source's first records are in it"))
    context["clean"] = {"docs": dict(projected_docs), "chars": dict(projected_chars)}
    return findings


def estimate_records(files: list[str], params: Params, source: InputSource, limit: int = 100_000) -> float:
    """The records in `files`: counted, file after file, until `limit` records; the files not counted by
    their bytes, at the counted files' records per byte."""
    num_counted = bytes_counted = 0
    for i, path in enumerate(files):
        if num_counted >= limit:
            rest = sum(input_size(f) for f in files[i:])
            return num_counted + num_counted / max(1, bytes_counted) * rest
        records = iter_raw([path], params.max_record_bytes, source.format, Counter())
        num_counted += sum(1 for _ in itertools.islice(records, limit - num_counted))  # a huge file: a lower bound
        bytes_counted += input_size(path)
    return num_counted


def run(params: Params) -> dict[str, Any]:
    """Clean `params.input` (its sources) into `params.out_dir`; return the metrics (written to
    `detail_path`, the headline to `metrics_path`)."""
    set_timeouts(params.remote_connect_timeout_s, params.remote_read_timeout_s)
    check_owned_paths(STAGE, {"input": params.input}, {"out_dir": params.out_dir}, {"work_dir": params.work_dir},
                      url_exists=exists)
    stage = CleanStage(params)
    metrics = stage.run([fingerprint_of(f).encode() if is_url(f) else f for f in stage.files])
    write_csv(params.reasons_plot_path, ["reason", "family", "count"],
              [(reason, reason.split(":")[0], n) for reason, n in sorted(stage.reasons.items(),
                                                                          key=lambda rc: (-rc[1], rc[0]))])
    return metrics


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
