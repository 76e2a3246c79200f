"""The filter-stage base on a toy filter: counters, quarantine rows, accounting, input order, resume."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stages.common.runtime.parquet import QUARANTINE_SCHEMA, read_table
from stages.common.text.filters import Dropped, FilterStage, Kept, Verdict

DOCS = [
    {"id": "a", "text": "three good words", "lang": "en", "source": "toy.jsonl"},
    {"id": "b", "text": "short", "lang": "en", "source": "toy.jsonl"},
    {"id": "c", "text": "buy spam now please", "lang": "en", "source": "toy.jsonl"},
    {"id": "d", "text": "vier gute worte hier", "lang": "de", "source": "toy.jsonl"},
    {"id": "e", "text": "three good words", "lang": "en", "source": "toy.jsonl"},  # a copy of "a"
]


@dataclass(frozen=True)
class ToyParams:
    out_dir: str
    metrics_path: str
    detail_path: str
    work_dir: str
    batch_size: int = 2
    rows_per_part: int = 100
    num_workers: int = 1
    executor: str = "local"
    address: str = ""


class WordRules:
    """The worker half: a chain of early returns, one reason each."""

    def __call__(self, batch: list[dict[str, Any]], timings: Counter[str]) -> list[dict[str, Any]]:
        timings["rules"] += 1.0
        return [{"reason": self.reason(doc["text"])} for doc in batch]

    @staticmethod
    def reason(text: str) -> str | None:
        if len(text.split()) < 3:
            return "too_few_words"
        if "spam" in text:
            return "spam"
        return None


class LosesARecord(WordRules):
    def __call__(self, batch: list[dict[str, Any]], timings: Counter[str]) -> list[dict[str, Any]]:
        return super().__call__(batch, timings)[:-1]


class ToyFilter(FilterStage):
    name = "toy"
    decider = WordRules

    def __init__(self, params: ToyParams, docs: list[dict[str, Any]] = DOCS) -> None:
        super().__init__(params)
        self.docs = docs
        self.seen: set[str] = set()
        self.fail_on: str | None = None

    def documents(self) -> list[dict[str, Any]]:
        return self.docs

    def decider_args(self) -> tuple:
        return ()

    def verdict(self, result: dict[str, Any], doc: dict[str, Any]) -> Verdict:
        if doc["id"] == self.fail_on:
            raise KeyboardInterrupt("driver killed")
        if result["reason"] is None:
            return Kept({"id": doc["id"], "text": doc["text"], "lang": doc["lang"], "lang_prob": 1.0,
                         "source": doc["source"], "meta": "{}"})
        return Dropped(doc["id"], result["reason"], doc["source"], json.dumps(doc), doc["lang"])

    def review(self, verdict: Verdict) -> Verdict:
        """A global pass: the first copy of a text wins, which needs the documents in input order."""
        if not isinstance(verdict, Kept):
            return verdict
        if verdict.row["text"] in self.seen:
            row = verdict.row
            return Dropped(row["id"], "dup", row["source"], json.dumps(row), row["lang"], dup_of="a")
        self.seen.add(verdict.row["text"])
        return verdict

    def stage_metrics(self, metrics: dict[str, Any]) -> dict[str, Any]:
        return {"cpu_seconds.rules": self.timings["rules"]}


def toy_params(tmp_path: Path, **overrides: Any) -> ToyParams:
    return ToyParams(out_dir=str(tmp_path / "out"), metrics_path=str(tmp_path / "metrics.json"),
                     detail_path=str(tmp_path / "metrics.detail.json"),
                     work_dir=str(tmp_path / "work"), **overrides)


def outputs(params: ToyParams) -> tuple[list[dict], list[dict]]:
    return (read_table(Path(params.out_dir) / "docs").to_pylist(),
            read_table(Path(params.out_dir) / "quarantine").to_pylist())


def test_reasons_become_counters_and_quarantine_rows(tmp_path):
    params = toy_params(tmp_path)
    metrics = ToyFilter(params).run([b"toy inputs"])
    docs, quarantine = outputs(params)
    assert [d["id"] for d in docs] == ["a", "d"]
    assert {q["id"]: (q["reason"], q["stage"]) for q in quarantine} == {
        "b": ("too_few_words", "toy"), "c": ("spam", "toy"), "e": ("dup", "toy")}
    by_id = {q["id"]: q for q in quarantine}
    assert json.loads(by_id["c"]["record"])["text"] == "buy spam now please" and by_id["e"]["dup_of"] == "a"
    assert {k: v for k, v in metrics.items() if k.startswith(("dropped.", "kept."))} == {
        "dropped.dup": 1, "dropped.spam": 1, "dropped.too_few_words": 1, "kept.de": 1, "kept.en": 1}
    assert metrics["num_read"] == 5 == metrics["num_kept"] + metrics["num_quarantined"]
    assert metrics["num_shards"] == 3 and metrics["num_shards_resumed"] == 0  # 5 documents, 2 a shard
    assert metrics["cpu_seconds.rules"] == 3.0  # the deciders' timings, summed over shards
    assert json.loads(Path(params.detail_path).read_text()) == metrics
    assert (Path(params.out_dir) / "_SUCCESS").is_file() and not Path(params.work_dir).exists()


def test_quarantine_rows_have_the_quarantine_schema():
    row = Dropped("x", "spam", "f.jsonl", "{}", "en", 0.9, index=3, score=0.1).row("toy")
    assert list(row) == QUARANTINE_SCHEMA.names
    assert row["stage"] == "toy" and row["reason"] == "spam" and row["dup_of"] is None


def test_a_filter_that_loses_a_record_fails_loudly_and_publishes_nothing(tmp_path):
    class Lossy(ToyFilter):
        decider = LosesARecord

    params = toy_params(tmp_path)
    with pytest.raises(RuntimeError, match=r"accounting broken: shard 0 has 1 results for 2 documents"):
        Lossy(params).run([b"toy inputs"])
    assert not Path(params.out_dir).exists() and not Path(params.metrics_path).exists()


def test_empty_input_publishes_empty_datasets(tmp_path):
    params = toy_params(tmp_path)
    metrics = ToyFilter(params, docs=[]).run([])
    assert outputs(params) == ([], [])
    assert metrics["num_read"] == metrics["num_kept"] == metrics["num_shards"] == 0


def test_a_rerun_after_a_failure_resumes_finished_shards(tmp_path):
    reference = toy_params(tmp_path / "reference")
    ToyFilter(reference).run([b"toy inputs"])
    params = toy_params(tmp_path / "run")
    failing = ToyFilter(params)
    failing.fail_on = "e"  # in the last shard: the first two are finished by then
    with pytest.raises(KeyboardInterrupt):
        failing.run([b"toy inputs"])
    assert not Path(params.out_dir).exists() and len(list(Path(params.work_dir).glob("shard-*"))) >= 2
    metrics = ToyFilter(params).run([b"toy inputs"])
    assert metrics["num_shards_resumed"] >= 2 and metrics["num_shards"] == 3
    assert outputs(params) == outputs(reference)
