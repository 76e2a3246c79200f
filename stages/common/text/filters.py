"""The filter-stage base: everything a filter stage does except deciding.

A filter stage reads documents in order, decides for each whether to keep it, and writes two Parquet
datasets (kept documents, and a quarantine of every dropped one with its reason). `FilterStage` owns
that skeleton, as datatrove's base filter does: cutting the input into shards of `batch_size`
documents, mapping them over the executor (a local process pool or Ray tasks, with per-shard results and
completion markers in `work_dir`, so a rerun redoes only unfinished shards), the writers, the counters
(`dropped.<reason>`, `kept.<lang>`), the quarantine rows, the check kept + quarantined == read before
anything is published, the common metrics and the progress bar.

A concrete stage supplies only its decision, in two halves:

- a `Decider` (built once per worker process) turns one shard's payload into one result row per
  document, the expensive part (clean: parse, normalise, language ID, quality rules, dedup keys;
  semantic_filter: the head's scores);
- the stage, in the driver and in input order, turns each result into a `Kept` or `Dropped` verdict
  (`verdict`) and may revise it with what only the whole input knows (`review`).

A stage that needs the whole input decided before its first verdict (clean's dedup) sets `settles`:
every shard is decided first, then `settle` runs (its phases may use the executor too), then the
verdicts are written, reading each shard's results back from `work_dir`. Other stages write each
shard's verdicts as soon as it is decided.

    <out_dir>/docs/part-*.parquet        kept documents (`doc_schema`)
    <out_dir>/quarantine/part-*.parquet  dropped documents with their reason (QUARANTINE_SCHEMA)
    <out_dir>/README.md                  the dataset card (stages.common.text.dataset_card)
"""
from __future__ import annotations

import logging
import pickle
import sys
import time
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pyarrow as pa
from tqdm import tqdm

from stages.common.runtime.atomic import atomic_dir
from stages.common.runtime.digest import fingerprint
from stages.common.runtime.executor import ShardResult, WorkDir, _importable, map_shards, resolve_workers
from stages.common.runtime.metrics import KEPT, kept, select, write_metrics
from stages.common.runtime.parquet import DOC_SCHEMA, QUARANTINE_SCHEMA, PartWriter
from stages.common.text.dataset_card import write_dataset_card

RESULTS_FILE = "results.pickle"  # a shard's result rows, one per document, in input order


@dataclass
class Kept:
    """A document the stage keeps: its output row (`doc_schema`), counted under `kept.<row["lang"]>`."""
    row: dict[str, Any]


@dataclass
class Dropped:
    """A document the stage drops: its quarantine row, less the stage's name."""
    id: str
    reason: str  # counted under `dropped.<reason>`
    source: str | None  # the input source (clean.sources) it came from
    record: str  # the original record, as JSON
    lang: str | None = None
    lang_prob: float | None = None
    index: int | None = None  # the record's position in its input file, where the stage knows it
    dup_of: str | None = None
    score: float | None = None  # the deciding value: a model's score, or what a rule measured
    file: str | None = None  # the input file it came from
    judged_text: str | None = None  # the text as the stage judged it, where it differs from the record's

    def row(self, stage: str) -> dict[str, Any]:
        return {"id": self.id, "stage": stage, "reason": self.reason, "lang": self.lang, "lang_prob": self.lang_prob,
                "source": self.source, "file": self.file, "index": self.index, "dup_of": self.dup_of,
                "score": self.score, "judged_text": self.judged_text, "record": self.record}


Verdict = Kept | Dropped


class Decider(Protocol):
    """The worker half of a decision, built once per worker process from `FilterStage.decider_args()`."""

    def __call__(self, payload: Any, timings: Counter[str]) -> list[dict[str, Any]]:
        """One result row per document of the shard, in order; CPU seconds per phase added to `timings`.
        A decider may also define `side_outputs(rows, folder) -> dict`: files of its own in the shard's
        folder (it may take fields out of the rows first), and figures for the shard's summary."""


class FilterStage(ABC):
    """A filter stage's run: see the module's docstring. Subclasses set `name` and `decider` and implement
    `documents`, `decider_args` and `verdict`; `payload`, `review` and `stage_metrics` are optional.

    `params` needs the fields every filter stage has: out_dir, metrics_path, detail_path, work_dir, batch_size,
    rows_per_part, executor, address, num_workers. Construct the stage right after `check_owned_paths`:
    the run's clock starts here."""

    name: ClassVar[str]  # the stage: quarantine rows, logs, progress bar
    decider: ClassVar[type[Decider]]
    doc_schema: ClassVar[pa.Schema] = DOC_SCHEMA
    settles: ClassVar[bool] = False  # every shard decided, then `settle`, before the first verdict

    def __init__(self, params: Any) -> None:
        self.params = params
        self.start = time.perf_counter()
        self.num_workers = resolve_workers(params.num_workers)
        self.counts: Counter[str] = Counter()  # num_read, num_shards, num_shards_resumed; a stage may add its own
        self.reasons: Counter[str] = Counter()
        self.kept_langs: Counter[str] = Counter()
        self.read_sources: Counter[str] = Counter()  # the funnel per input source (the docs' `source` column)
        self.kept_sources: Counter[str] = Counter()
        self.timings: Counter[str] = Counter()  # the deciders' phases, plus the driver's `review_and_write`

    @abstractmethod
    def documents(self) -> Iterable[Any]:
        """The input, in order."""

    @abstractmethod
    def decider_args(self) -> tuple:
        """What `decider` is built from in each worker process (sent to each once)."""

    @abstractmethod
    def verdict(self, result: dict[str, Any], doc: Any) -> Verdict:
        """One document's verdict from its decider result row and the document as `documents` gave it."""

    def payload(self, batch: list[Any], offset: int) -> Any:
        """What a worker gets for the shard of `batch`, whose first document is the input's `offset`-th."""
        return batch

    def review(self, verdict: Verdict) -> Verdict:
        """A second look in the driver, in input order, for what needs the whole input (e.g. dedup)."""
        return verdict

    def settle(self, shards: list[ShardResult], work: Path) -> None:
        """With `settles`: once every shard is decided (their folders and summaries, in order), before the
        first verdict. `work` is the stage's work folder, for what this step keeps between runs."""

    def stage_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The stage's own metrics, given the common ones."""
        return {}

    def headline(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The figures `dvc metrics show` lists: documents read and kept (per language) and throughput."""
        return {"num_read": metrics["num_read"], "num_kept": metrics["num_kept"],
                **{kept(lang): n for lang, n in select(metrics, KEPT).items()},
                "docs_per_s": metrics["docs_per_s"]}

    def run(self, input_files: Sequence[str | Path | bytes]) -> dict[str, Any]:
        """Filter `documents()` into `out_dir`; write and return the metrics. `input_files` (local paths, or
        for a remote file what identifies its version: storage.fingerprint_of), the params and the stage's
        code identify the work folder's shards."""
        p = self.params
        work = WorkDir(p.work_dir, fingerprint(p, input_files, sys.modules[type(self).__module__]))
        in_flight: deque[list[Any]] = deque()  # the documents of the shards handed out, in order
        with atomic_dir(p.out_dir, stage=self.name) as tmp:
            docs = PartWriter(tmp / "docs", self.doc_schema, p.rows_per_part)
            quarantine = PartWriter(tmp / "quarantine", QUARANTINE_SCHEMA, p.rows_per_part)
            shards = map_shards(_decide_shard, self._payloads(in_flight), work, p.executor, p.address,
                                self.num_workers, _start_worker, (_importable(self.decider), self.decider_args()))
            if self.settles:
                decided = []
                with tqdm(desc=f"{self.name}: decide", unit="doc", mininterval=2.0) as bar:
                    for shard in shards:
                        decided.append(self._count(shard, in_flight.popleft()))
                        bar.update(shard.summary["num_docs"])
                self.settle(decided, work.path)
                shards = iter(decided)
            with tqdm(desc=self.name if not self.settles else f"{self.name}: write", unit="doc",
                      mininterval=2.0) as bar:
                for shard in shards:
                    if self.settles:  # the documents are in the results: nothing of the input is held
                        batch = [None] * shard.summary["num_docs"]
                    else:
                        batch = self._count(shard, in_flight.popleft())
                    t0 = time.thread_time()
                    results = read_results(shard.folder)
                    if len(results) != len(batch):  # a bug, never a data problem: publish nothing
                        raise RuntimeError(f"accounting broken: shard {shard.index} has {len(results)} results "
                                           f"for {len(batch)} documents")
                    for doc, result in zip(batch, results):
                        verdict = self.review(self.verdict(result, doc))
                        if isinstance(verdict, Kept):
                            docs.write(verdict.row)
                            self.kept_langs[verdict.row["lang"]] += 1
                            source = verdict.row.get("source")
                            self.kept_sources[source] += 1
                        else:
                            self.reasons[verdict.reason] += 1
                            quarantine.write(verdict.row(self.name))
                            source = verdict.source
                        self.read_sources[source] += 1
                    self.timings["review_and_write"] += time.thread_time() - t0
                    bar.update(len(results))
            docs.close()
            quarantine.close()
            num_read, num_kept, num_quarantined = self.counts["num_read"], docs.num_rows, quarantine.num_rows
            if num_kept + num_quarantined != num_read:
                raise RuntimeError(f"accounting broken: kept {num_kept} + quarantined {num_quarantined} "
                                   f"!= read {num_read}")
            write_dataset_card(tmp, self.name, sys.modules[type(self).__module__], p)
        work.remove()  # only once the outputs are in place: a failed run leaves its finished shards
        seconds = time.perf_counter() - self.start
        metrics: dict[str, Any] = {
            "num_read": num_read,
            "num_kept": num_kept,
            "num_quarantined": num_quarantined,
            "pass_rate": num_kept / max(1, num_read),
            "seconds": seconds,
            "docs_per_s": num_read / seconds,
            "num_shards": self.counts["num_shards"],
            "num_shards_resumed": self.counts["num_shards_resumed"],  # finished by an earlier, failed run
            **{f"dropped.{reason}": n for reason, n in sorted(self.reasons.items())},
            **{kept(lang): n for lang, n in sorted(self.kept_langs.items())},
            **{f"source.{source}.{what}": counts[source] for source in sorted(self.read_sources, key=str)
               if source is not None for what, counts in (("num_read", self.read_sources),
                                                           ("num_kept", self.kept_sources))},
        }
        metrics.update(self.stage_metrics(metrics))
        write_metrics(metrics, self.headline(metrics), p.metrics_path, p.detail_path)
        logging.getLogger(f"refinery.{self.name}").info(
            "%s: read %d, kept %d (%.1f%%), quarantined %d in %.1fs (%.0f docs/s)", self.name, num_read, num_kept,
            100 * metrics["pass_rate"], num_quarantined, seconds, metrics["docs_per_s"])
        return metrics

    def _count(self, shard: ShardResult, batch: list[Any]) -> Any:
        """A decided shard's counts; returns what the caller wants next (the shard's documents, or the shard)."""
        self.counts["num_shards"] += 1
        self.counts["num_shards_resumed"] += shard.resumed
        self.timings.update(shard.summary["timings"])
        if shard.summary["num_docs"] != len(batch):  # a bug, never a data problem: publish nothing
            raise RuntimeError(f"accounting broken: shard {shard.index} has {shard.summary['num_docs']} results "
                               f"for {len(batch)} documents")
        return shard if self.settles else batch

    def _payloads(self, in_flight: deque[list[Any]]) -> Iterator[Any]:
        batch: list[Any] = []
        for doc in self.documents():
            batch.append(doc)
            if len(batch) >= self.params.batch_size:
                yield self._hand_out(batch, in_flight)
                batch = []
        if batch:
            yield self._hand_out(batch, in_flight)

    def _hand_out(self, batch: list[Any], in_flight: deque[list[Any]]) -> Any:
        offset = self.counts["num_read"]
        self.counts["num_read"] += len(batch)
        payload = self.payload(batch, offset)
        in_flight.append(batch)
        return payload


def read_results(folder: Path) -> list[dict[str, Any]]:
    """A finished shard's result rows (written by this stage's own workers into its locked work folder)."""
    with open(folder / RESULTS_FILE, "rb") as f:
        return pickle.load(f)


_decider: Decider | None = None  # once per worker process


def _start_worker(decider: type[Decider], args: tuple) -> None:
    global _decider
    _decider = decider(*args)


def _decide_shard(payload: Any, folder: Path) -> dict[str, Any]:
    assert _decider is not None, "worker not initialised"
    timings: Counter[str] = Counter()
    rows = _decider(payload, timings)
    side_outputs = getattr(_decider, "side_outputs", None)
    extra = side_outputs(rows, folder) if side_outputs is not None else {}
    # Pickled, not Parquet: the rows are plain Python values the driver reads back as they are, and
    # building Arrow arrays from Python objects makes pyarrow import pandas (half a second per worker).
    with open(folder / RESULTS_FILE, "wb") as f:
        pickle.dump(rows, f, protocol=pickle.HIGHEST_PROTOCOL)
    return {"num_docs": len(rows), "timings": dict(timings), **extra}
