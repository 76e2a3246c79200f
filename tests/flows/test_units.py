"""The pure parts of the flows: config, DVC output parsing, the promotion rule, artifact tables."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flows.artifacts import artifact_key, comparison_rows, flatten, markdown_table
from flows.config import FlowsConfig, UnresolvedReference, load_config, resolve
from flows.graph import StageInfo, changed_deps, stage_outcome, stale_stages, status_json
from flows.commands import CommandFailed, CommandResult
from flows.registry import Evaluation, decide
from tests.conftest import ROOT


def stage(name: str, *needs: str) -> StageInfo:
    return StageInfo(name=name, needs=needs, deps=(), outs=(), metrics=(), plots=(), uncached=())


def test_shipped_config_loads_with_the_defaults():
    assert load_config(ROOT) == FlowsConfig()


def test_config_rejects_unknown_keys_naming_them(tmp_path: Path):
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "config.yaml").write_text(yaml.safe_dump({"retrain": {"crn": "* * * * *"}}))
    with pytest.raises(ValueError, match="retrain.crn"):
        load_config(tmp_path)


def test_references_resolve_against_params_and_name_what_is_missing():
    params = {"train": {"model_dir": "models/train"}, "clean": {"input": "data/raw/demo"}}
    assert resolve("${train.model_dir}/model.safetensors", params) == "models/train/model.safetensors"
    with pytest.raises(UnresolvedReference, match="export.out_dir"):
        resolve("${export.out_dir}/x", params)


def test_stale_stages_are_those_dvc_lists_and_everything_downstream():
    stages = [stage("a"), stage("b", "a"), stage("c", "b"), stage("d"), stage("e", "d")]
    assert stale_stages(stages, json.dumps({"b": ["changed command"]})) == {"b", "c"}
    assert stale_stages(stages, "{}") == set()
    assert status_json(["WARNING: something", '{"d": []}']) == '{"d": []}'


def test_changed_deps_from_dvc_status():
    status = {"clean": [{"changed deps": {"data/raw": "modified", "params.yaml": "new"}},
                        {"changed outs": {"data/clean": "deleted"}}], "tokenizer": ["changed command"]}
    assert changed_deps(json.dumps(status)) == {"clean": {"data/raw": "modified", "params.yaml": "new"}}


def test_stage_outcome_reads_dvc_progress_lines():
    assert stage_outcome("b", CommandResult(["Stage 'a' didn't change, skipping", "Running stage 'b':"])) == "ran"
    assert stage_outcome("b", CommandResult(["Stage 'b' didn't change, skipping"])) == "up to date"
    assert stage_outcome("b", CommandResult(["Stage 'b' is cached - skipping run, checking out outputs"])) \
        == "restored from run cache"


def test_dvc_lock_errors_are_told_apart_from_stage_errors():
    assert CommandFailed("x", 1, ["ERROR: Unable to acquire lock. Most likely another DVC process is running"]) \
        .dvc_lock_busy
    assert not CommandFailed("x", 1, ["ValueError: bad shard"]).dvc_lock_busy


def evaluation(bits_per_byte: float) -> Evaluation:
    return Evaluation(bits_per_byte=bits_per_byte, token_perplexity=10.0, num_docs=1, num_bytes=1, num_tokens=1)


def test_promotion_needs_the_margin():
    assert decide(evaluation(2.0), None, 0.01)[0]
    assert decide(evaluation(1.97), evaluation(2.0), 0.01)[0]  # 1.5% better
    promoted, reason = decide(evaluation(1.99), evaluation(2.0), 0.01)  # 0.5% better: not enough
    assert not promoted and "1.9800" in reason
    assert not decide(evaluation(2.1), evaluation(2.0), 0.0)[0]


def test_comparison_table_has_a_row_per_model():
    metrics = {"fp32": {"size_mb": 5.0, "latency": {"p50_ms": 2.0}}, "int8": {"size_mb": 1.3}, "speedup": 1.8}
    rows = comparison_rows(metrics)
    assert rows == [{"model": "fp32", "size_mb": 5.0, "latency.p50_ms": 2.0}, {"model": "int8", "size_mb": 1.3},
                    {"model": "(all)", "speedup": 1.8}]
    assert markdown_table(rows).splitlines()[0] == "| model | size_mb | latency.p50_ms | speedup |"
    assert flatten({"a": {"b": 1}, "c": 2}) == {"a.b": 1, "c": 2}
    assert artifact_key("stage", "semantic_filter") == "stage-semantic-filter"
