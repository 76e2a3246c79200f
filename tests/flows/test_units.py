"""The pure parts of the flows: config, DVC output parsing, the promotion rule, artifact tables, what an
experiment's worktree gets from the workspace."""
from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from flows.artifacts import artifact_key, flatten, markdown_table, model_comparison, output_rows, plot_lines
from flows.commands import CommandFailed, CommandResult
from flows.config import FlowsConfig, UnresolvedReference, load_config, resolve, resolve_present
from flows.experiment import link_uncached_outputs
from flows.graph import StageInfo, changed_deps, stage_outcome, stale_stages, status_json
from flows.registry import Evaluation, decide, evaluate_command
from flows.validation import (MAX_OVERRIDE_BYTES, MAX_OVERRIDES, MAX_OVERRIDES_BYTES, check_experiment_name,
                              check_overrides, looks_like_path, names_location)
from tests.conftest import ROOT


def stage(name: str, *needs: str) -> StageInfo:
    return StageInfo(name=name, needs=needs, deps=(), outs=(), metrics=(), plots=(), uncached=())


def test_shipped_config_loads_with_the_defaults():
    assert load_config(ROOT) == FlowsConfig()


def test_a_workspace_without_a_config_of_its_own_gets_the_shipped_one(tmp_path: Path):
    assert load_config(tmp_path) == load_config(ROOT)


def test_checkpoint_folders_are_those_params_yaml_names():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert resolve_present(FlowsConfig().checkpoint_dirs, params) == [
        params[stage]["checkpoint_dir"] for stage in ("train", "prune", "qat")]
    assert resolve_present(FlowsConfig().checkpoint_dirs, {"train": {"checkpoint_dir": "ckpt"}}) == ["ckpt"]


def test_config_rejects_unknown_keys_naming_them(tmp_path: Path):
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "config.yaml").write_text(yaml.safe_dump({"retrain": {"crn": "* * * * *"}}))
    with pytest.raises(ValueError, match="retrain.crn"):
        load_config(tmp_path)


@pytest.mark.parametrize("retrain, message", [({"device": "gpu"}, "retrain.device' must be cpu, cuda or auto"),
                                               ({"num_threads": -1}, "retrain.num_threads' must be >= 0")])
def test_config_refuses_scoring_settings_the_command_would_refuse(tmp_path: Path, retrain: dict, message: str):
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "config.yaml").write_text(yaml.safe_dump({"retrain": retrain}))
    with pytest.raises(ValueError, match=re.escape(message)):
        load_config(tmp_path)


def test_the_scoring_command_is_an_argument_list_for_this_interpreter(tmp_path: Path):
    command = evaluate_command(tmp_path / "m b.safetensors", tmp_path / "tok", tmp_path / "eval.jsonl",
                               tmp_path / "out.json", "cpu", 2)
    assert command[:3] == [sys.executable, "-m", "stages.evaluate"]
    assert command[3:] == ["--model", str(tmp_path / "m b.safetensors"), "--tokenizer", str(tmp_path / "tok"),
                           "--eval-set", str(tmp_path / "eval.jsonl"), "--out", str(tmp_path / "out.json"),
                           "--device", "cpu", "--num-threads", "2"]


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


EXPORT_CSV = """model,precision,num_params,file_mb,latency_ms_b1,val_ppl_easy,val_ppl_all
trained,fp32,1377408,5.3062,2.5727,27.9529,83.3127
prune_step_1,fp32,1229952,4.7437,2.3891,26.8801,81.7854
qat_int8,int8,1016960,1.0698,1.5883,24.305,76.5425
"""


def test_model_comparison_is_a_row_per_model_from_the_stage_table(tmp_path: Path):
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "export.csv").write_text(EXPORT_CSV)
    (tmp_path / "metrics" / "other.csv").write_text("step,loss\n1,2.5\n2,2.0\n")
    # the table is an output of the stage, declared as its plot or drawn by a top-level plot of dvc.yaml
    export = StageInfo(name="export", needs=(), deps=(),
                       outs=("models/export", "metrics/other.csv", "metrics/export.csv", "metrics/export.json"),
                       metrics=("metrics/export.json",), plots=(), uncached=())
    source, rows = model_comparison(export, tmp_path)
    assert source == "metrics/export.csv"
    assert [r["model"] for r in rows] == ["trained", "prune_step_1", "qat_int8"]  # the file's (the chain's) order
    assert rows[2] == {"model": "qat_int8", "precision": "int8", "parameters": 1016960, "file (MB)": 1.0698,
                       "latency, batch 1, fastest (ms)": 1.5883, "val ppl easy": 24.305, "val ppl all": 76.5425,
                       "baseline val ppl all": None, "vs baseline": None}  # not a git repo: no baseline
    assert model_comparison(replace(export, outs=("metrics/other.csv",)), tmp_path) is None
    assert markdown_table(rows).splitlines()[0].startswith("| model | precision | parameters | file (MB) |")
    # In git, the baseline is the table as committed at HEAD (what an experiment started from).
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "metrics/export.csv"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "baseline"], cwd=tmp_path,
                   check=True)
    (tmp_path / "metrics" / "export.csv").write_text(EXPORT_CSV.replace("76.5425", "72.7154"))
    _, rows = model_comparison(export, tmp_path)
    assert (rows[2]["val ppl all"], rows[2]["baseline val ppl all"], rows[2]["vs baseline"]) == (72.7154, 76.5425,
                                                                                                 "-5.0%")
    assert rows[0]["vs baseline"] == "+0.0%"

    (tmp_path / "models" / "export" / "onnx").mkdir(parents=True)
    (tmp_path / "models" / "export" / "onnx" / "model.onnx").write_bytes(b"x" * 1_500_000)
    (tmp_path / "models" / "export" / "card.md").write_text("card")
    assert output_rows(export.outs[:1], tmp_path) == [{"output": "models/export", "files": 2, "size": "1.5 MB"}]
    assert plot_lines([export], tmp_path) == [
        "- `metrics/other.csv` (export): 2 rows of step, loss",
        "- `metrics/export.csv` (export): 3 rows of model, precision, num_params, file_mb, latency_ms_b1, "
        "val_ppl_easy, val_ppl_all"]
    assert flatten({"a": {"b": 1}, "c": 2}) == {"a.b": 1, "c": 2}
    assert artifact_key("stage", "semantic_filter") == "stage-semantic-filter"


def test_checkpoint_folders_are_linked_and_uncached_files_copied_into_the_worktree(tmp_path: Path):
    workspace, worktree = tmp_path / "ws", tmp_path / "exp"
    (workspace / "ckpt" / "step_2").mkdir(parents=True)
    (workspace / "ckpt" / "step_2" / "shard.bin").write_bytes(b"weights")
    (workspace / "metrics").mkdir()
    (workspace / "metrics" / "train.json").write_text('{"loss": 2.0}')
    (workspace / "metrics" / "tracked.json").write_text('{"from": "workspace"}')
    (worktree / "metrics").mkdir(parents=True)
    (worktree / "metrics" / "tracked.json").write_text('{"from": "git"}')  # what git put there is kept
    train = StageInfo(name="train", needs=(), deps=(), outs=(), metrics=(), plots=(),
                      uncached=("metrics/train.json", "metrics/tracked.json", "metrics/missing.json"))
    link_uncached_outputs(workspace, worktree, [train], logging.getLogger("test"), ["ckpt", "other_ckpt"])
    linked = worktree / "ckpt" / "step_2" / "shard.bin"
    assert linked.read_bytes() == b"weights"
    assert linked.stat().st_ino == (workspace / "ckpt" / "step_2" / "shard.bin").stat().st_ino  # no bytes copied
    assert (worktree / "metrics" / "train.json").read_text() == '{"loss": 2.0}'
    assert (worktree / "metrics" / "train.json").stat().st_ino != (workspace / "metrics" / "train.json").stat().st_ino
    assert (worktree / "metrics" / "tracked.json").read_text() == '{"from": "git"}'
    assert not (worktree / "metrics" / "missing.json").exists()
    assert not (worktree / "other_ckpt").exists()  # none in the workspace


PARAMS = {"train": {"max_steps": 400, "lr": 0.001, "device": "auto", "progress_bar": True, "model_dir": "models/train",
                    "languages": ["en", "zh"], "optim": {"eps": 1e-8}},
          "semantic_filter": {"work_dir": "data/work/semantic_filter"},
          "clean": {"input": "data/raw/demo", "address": "", "pattern": "*"},
          "perplexity": {"reference": {"checkpoint": ""}}}


def test_overrides_of_existing_values_of_the_same_type_are_allowed():
    check_overrides(["train.max_steps=50", "train.lr=1e-3", "train.device=cpu", "train.progress_bar=false",
                     "train.languages=[en]", "train.optim.eps=1e-6", "clean.pattern='*.html'"], PARAMS)
    check_overrides([], PARAMS)


@pytest.mark.parametrize("override, reason", [
    ("semantic_filter.work_dir=/some/folder", "'semantic_filter.work_dir' names a file or folder"),
    ("semantic_filter.work_dir=scratch", "'semantic_filter.work_dir' names a file or folder"),
    ("train.model_dir=models/x", "'train.model_dir' names a file or folder"),
    ("clean.input=data/raw/other", "'clean.input' names a file or folder"),
    ("clean.address=ray://elsewhere:10001", "'clean.address' names a file or folder"),
    ("perplexity.reference.checkpoint=x", "'perplexity.reference.checkpoint' names a file or folder"),
    ("clean.pattern=../../*", "the value looks like a path"),
    ("train.device='~/x'", "the value looks like a path"),
    ("train.languages=[en,../x]", "the value looks like a path"),
    ("train.nope=1", "params.yaml has no key 'train.nope'"),
    ("nope.max_steps=1", "params.yaml has no key 'nope.max_steps'"),
    ("train.optim={eps: 1}", "'train.optim' is a section"),
    ("train.max_steps=1.5", "'train.max_steps' must stay a int (now 400), got a float"),
    ("train.max_steps=true", "must stay a int"),
    ("train.lr=1", "'train.lr' must stay a float"),
    ("train.device=${oc.env:HOME}", "interpolations"),
    ("train.device='a${oc.env:HOME}'", "interpolations"),
    ("+train.extra=1", "only a plain section.key=value"),
    ("++train.max_steps=1", "only a plain section.key=value"),
    ("~train.max_steps", "only a plain section.key=value"),
    ("train.max_steps=1,2", "only a plain section.key=value"),
    ("train@x.max_steps=1", "only a plain section.key=value"),
    ("train.max_steps", "does not parse"),
])
def test_overrides_refused_name_the_override_and_why(override: str, reason: str):
    with pytest.raises(ValueError, match=re.escape(reason)) as refused:
        check_overrides(["train.max_steps=50", override], PARAMS)
    assert str(refused.value).startswith(f"set_params {override!r}") and "\n" not in str(refused.value)


def test_too_many_or_too_long_overrides_are_refused_before_any_is_parsed():
    for overrides, message in [
        (["train.max_steps=50"] * 100_000, "set_params: 100,000 overrides (the profile's included); at most 200"),
        (["train.languages=[" + ",".join(["en"] * 100_000) + "]"], "bytes; one override may be at most 1,024"),
        (["train.languages=[" + ",".join(["en"] * 300) + "]"] * 20, "longer than the 8,192 bytes allowed in all"),
        ("train.max_steps=50", "set_params must be a list"),
        ([50], "set_params 50: each override must be a string")]:
        start = time.perf_counter()
        with pytest.raises(ValueError, match=re.escape(message)) as refused:
            check_overrides(overrides, PARAMS)
        assert time.perf_counter() - start < 0.1 and len(str(refused.value)) < 200
    with pytest.raises(ValueError, match=r"^set_params 'train.languages=\[\[\[.*\u2026 does not parse"):
        check_overrides(["train.languages=" + "[" * 500 + "]" * 500], PARAMS)  # deeper than Python's stack


def test_overrides_at_the_bounds_are_checked_in_well_under_a_second():
    """Hydra's parser is quadratic in one override's length: the bounds keep the worst case short."""
    longest = "train.languages=[" + ",".join(["en"] * ((MAX_OVERRIDE_BYTES - 18) // 3)) + "]"
    assert len(longest) <= MAX_OVERRIDE_BYTES
    for overrides in (["train.max_steps=50"] * MAX_OVERRIDES, [longest] * (MAX_OVERRIDES_BYTES // len(longest))):
        start = time.perf_counter()
        check_overrides(overrides, PARAMS)
        assert time.perf_counter() - start < 1


def test_the_location_rule():
    assert all(names_location(k) for k in ["a.out_dir", "a.tokens_dir", "a.metrics_path", "a.input", "a.raw_inputs",
                                           "a.output", "a.labels_file", "a.checkpoint", "a.address", "a.url"])
    assert not any(names_location(k) for k in ["a.max_steps", "a.checkpoint.every", "a.device", "a.dirty_ratio"])
    assert looks_like_path("data/x") and looks_like_path("..") and looks_like_path("~") and looks_like_path(["a", "b\\c"])
    assert not looks_like_path("cpu") and not looks_like_path(0.5) and not looks_like_path(["en"])


def test_experiment_names():
    for name in ["five", "ui-run", "exp_2024.01", "A" * 64]:
        check_experiment_name(name)
    for name in ["", "../x", "a/b", ".hidden", "-rf", "a..b", "x.lock", "x.", "a b", "é", "A" * 65, "a\nb"]:
        with pytest.raises(ValueError, match=r"^experiment_name .* is not allowed: use 1-64 letters"):
            check_experiment_name(name)


def test_the_quick_profile_is_a_valid_set_of_overrides_that_shrinks_every_model_stage():
    from flows.validation import check_overrides

    quick = load_config(ROOT).profiles["quick"]
    check_overrides(quick, yaml.safe_load((ROOT / "params.yaml").read_text()))
    assert {o.split(".")[0] for o in quick} == {"train", "prune", "qat", "export"}
