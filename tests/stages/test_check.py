"""`refinery check` (stages.check) and the stage command's own checks: a mistake in params.yaml
or a missing input is one line naming the key, exit status 2, no traceback, before torchrun or any work
starts and without touching an output."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from stages.check import ERROR_CHARS, check_workspace
from stages.common.runtime.ownership import input_exists, missing_input
from tests.conftest import ROOT

PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """dvc.yaml and params.yaml of the project, and the curriculum study the report depends on (the stages
    are imported from the checkout)."""
    for name in ("dvc.yaml", "params.yaml", "requirements.lock", "bench/results/curriculum.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "stages", tmp_path / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def edit(params: dict[str, Any], key: str, value: Any) -> None:
    *path, last = key.split(".")
    for part in path:
        params = params[part]
    params[last] = value


def write_params(workspace: Path, changes: dict[str, Any], name: str = "params.yaml") -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for key, value in changes.items():
        edit(params, key, value)
    path = workspace / name
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


# One of each kind of mistake, and the line `refinery check` gives for it.
MISTAKES = {
    "unknown key": ({"train.max_step": 3},
                    "unknown param 'train.max_step' (did you mean 'train.max_steps'? known: checkpoint, "),
    "wrong type": ({"tokenizer.vocab_size": "big"}, "param 'tokenizer.vocab_size': expected an integer, got 'big'"),
    "out of range": ({"qat.seed": -1}, "param 'qat.seed': must be >= 0, got -1"),
    "parallel sizes": ({"train.parallel.tensor_parallel_size": 3, "train.parallel.data_parallel_size": 1},
                       "param 'train.parallel.tensor_parallel_size': must divide the model's heads (4), kv heads (4) "
                       "and MLP width (384): one of 1, 2, 4, got 3"),
    "processes": ({"prune.distill.batch_size": 7},
                  "param 'prune.distill.batch_size': must be a multiple of 'prune.nproc_per_node' (2), as the "
                  "processes split each batch; got 7"),
    "missing input": ({"clean.input": "data/raw/mine"},
                      "param 'clean.input': data/raw/mine does not exist and no stage in dvc.yaml makes it"),
    "unknown section": ({"trian": {"max_steps": 3}}, "unknown section 'trian' in "),
    "scratch in an output": ({"train.checkpoint_dir": "models/train/ckpt"},
                             "param 'train.checkpoint_dir': models/train/ckpt overlaps an output of stage 'train': "
                             "choose a folder of its own"),
}


def test_the_project_params_check_out(workspace):
    assert check_workspace(workspace) == []


@pytest.mark.parametrize("kind", list(MISTAKES))
def test_each_mistake_is_one_line_naming_the_key(workspace, kind):
    changes, message = MISTAKES[kind]
    write_params(workspace, changes)
    errors = check_workspace(workspace)
    assert len(errors) == 1 and errors[0].startswith(message) and "\n" not in errors[0]


def test_every_mistake_is_reported_at_once_by_the_command(workspace):
    """The command (`refinery check` runs it) names them all, one line each (the first of each section:
    the parallel sizes are in `train`, after its unknown key), exit status 2, no traceback; relative paths
    count from the workspace, not the folder it was started in."""
    path = write_params(workspace, {k: v for changes, _ in MISTAKES.values() for k, v in changes.items()},
                        name="broken.yaml")
    proc = subprocess.run([sys.executable, "-m", "stages.check", "--params", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    expected = [message for kind, (_, message) in MISTAKES.items() if kind != "parallel sizes"]
    assert len(lines) == len(expected)
    assert all(any(line.startswith(f"error: {message}") for line in lines) for message in expected), lines


def test_no_params_file_or_pipeline_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "stages.check", "--root", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (2, f"error: {tmp_path / 'params.yaml'}: no such params file\n")
    (tmp_path / "params.yaml").write_text("{}\n")
    proc = subprocess.run([sys.executable, "-m", "stages.check", "--root", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {tmp_path}: no dvc.yaml here")


def test_an_anchor_bomb_or_a_duplicate_key_is_one_line(tmp_path):
    """A params file of nested aliases (10^9 items once expanded) is refused as it is read, in one line."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
                    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10))
                    + "report:\n  title: *a9\n")
    duplicate = tmp_path / "duplicate.yaml"
    duplicate.write_text("report:\n  title: a\n  title: b\n")
    for path, message in [(bomb, f"{bomb}:2:10: alias *a0 stands for a mapping or list"),
                          (duplicate, f"{duplicate}:3:3: key 'report.title' appears twice")]:
        proc = subprocess.run([sys.executable, "-m", "stages.check", "--params", str(path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith(f"error: {message}"), proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stdout == ""


def test_a_pipeline_of_other_commands_checks_its_raw_inputs(tmp_path):
    """Stages that are not `python -m stages.*` (the flows' tests use such pipelines): their sections are
    only required to be read by some stage, and what no stage makes must exist."""
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {
        "count": {"cmd": "python count.py", "deps": ["count.py", "${count.raw}"], "params": ["count"],
                  "outs": ["out/count.txt"]},
        "measure": {"cmd": "python measure.py", "deps": ["out/count.txt"], "outs": ["out/measure.txt"]}}}))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"count": {"raw": "raw", "n": 3}}))
    (tmp_path / "count.py").write_text("")
    assert check_workspace(tmp_path) == ["param 'count.raw': raw does not exist and no stage in dvc.yaml makes it"]
    (tmp_path / "raw").mkdir()
    assert check_workspace(tmp_path) == []
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"count": {"raw": "r" * 100_000, "n": 3}}))
    [error] = check_workspace(tmp_path)  # a line naming a value: cut short
    assert error.startswith("param 'count.raw': rrr") and len(error) == ERROR_CHARS and error.endswith("\u2026")


def test_a_missing_input_names_the_stage_that_makes_it(workspace, monkeypatch):
    monkeypatch.chdir(workspace)
    assert missing_input("semantic_filter", "docs_dir", PARAMS["semantic_filter"]["docs_dir"]) == (
        f"param 'semantic_filter.docs_dir': {PARAMS['semantic_filter']['docs_dir']} does not exist (made by stage "
        "'clean': run it first, `dvc repro clean`)")
    assert missing_input("clean", "input", "elsewhere/raw") == \
        "param 'clean.input': elsewhere/raw does not exist and no stage in dvc.yaml makes it"


def test_a_glob_input_needs_its_folder(tmp_path):
    assert not input_exists(tmp_path / "raw" / "*.jsonl")
    (tmp_path / "raw").mkdir()
    assert input_exists(tmp_path / "raw" / "*.jsonl")  # no file yet: the stage says so ("holds no records")


# ---- the stage command: the same mistakes stop `python -m stages.<name>` before it starts anything ----

def stage(workspace: Path, name: str, params: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"stages.{name}", "--params", str(params)], cwd=workspace,
                          capture_output=True, text=True, timeout=120)


def test_incompatible_parallel_sizes_stop_train_before_torchrun(workspace):
    """The layout of the issue this guards against: tensor parallel 3, data parallel 1, a 4-head model."""
    model_dir = workspace / PARAMS["train"]["model_dir"]
    model_dir.mkdir(parents=True)
    (model_dir / "model.safetensors").write_text("an earlier model")
    params = write_params(workspace, MISTAKES["parallel sizes"][0])
    proc = stage(workspace, "train", params)
    assert proc.returncode == 2
    assert proc.stderr == f"error: {MISTAKES['parallel sizes'][1]}\n"  # no launch line, no traceback
    assert (model_dir / "model.safetensors").read_text() == "an earlier model"
    assert sorted(p.name for p in model_dir.parent.iterdir()) == ["train"]


def test_an_unknown_key_stops_the_stage_in_one_line(workspace):
    changes, message = MISTAKES["unknown key"]
    proc = stage(workspace, "train", write_params(workspace, changes))
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {message}") and proc.stderr.count("\n") == 1


def test_a_missing_input_stops_the_stage_before_it_touches_an_output(workspace):
    out_dir = workspace / PARAMS["clean"]["out_dir"]
    out_dir.mkdir(parents=True)
    (out_dir / "_SUCCESS").write_text("")  # the stage's own output: it could replace it, but must not start
    proc = stage(workspace, "clean", write_params(workspace, MISTAKES["missing input"][0]))
    assert (proc.returncode, proc.stderr) == (2, f"error: {MISTAKES['missing input'][1]}\n")
    assert sorted(p.name for p in out_dir.iterdir()) == ["_SUCCESS"]
    assert not (workspace / PARAMS["clean"]["work_dir"]).exists()


def test_an_input_made_by_an_earlier_stage_is_named_before_torchrun(workspace):
    proc = stage(workspace, "train", workspace / "params.yaml")
    tokens = PARAMS["train"]["tokens_dir"]
    assert (proc.returncode, proc.stderr) == (
        2, f"error: param 'train.tokens_dir': {tokens} does not exist (made by stage 'perplexity': run it first, "
           "`dvc repro perplexity`)\n")


SENTENCES = [
    "The river runs through the old town and the people who live there have fished in it for generations.",
    "A small bakery on the corner of the square opens before dawn and the smell of bread fills the street.",
    "The library on the hill keeps old maps of the valley, and students come to trace the roads of the farmers.",
    "In the spring the water rises with the melting snow, and the fishermen mend their nets on the bank.",
    "The first buses arrive with workers who stop to buy rolls on their way to the factory by the railway.",
    "On rainy afternoons the reading room is full, and the old clock above the door is the only thing heard.",
]


def own_corpus(workspace: Path, num_docs: int) -> None:
    """The workspace reads `num_docs` English documents of its own instead of the demo corpus."""
    docs = [{"id": f"d{i}", "text": " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(3)) + f" Item {i}."}
            for i in range(num_docs)]
    folder = workspace / "corpus"
    folder.mkdir()
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    labels = [{"text": SENTENCES[i % 6] + f" Note {i}.", "label": "keep" if i % 2 else "drop", "lang": "en",
               "category": None if i % 2 else "ad"} for i in range(36)]
    (workspace / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    dvc_yaml = yaml.safe_load((workspace / "dvc.yaml").read_text())
    del dvc_yaml["stages"]["demo_corpus"]
    (workspace / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml, sort_keys=False))
    params = yaml.safe_load((workspace / "params.yaml").read_text())
    del params["demo_corpus"]
    params["clean"]["input"] = "corpus"
    params["semantic_embed"]["labels_path"] = "labels.jsonl"
    (workspace / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def test_check_reads_the_data_and_a_small_corpus_fails_it_with_the_params_to_change(workspace, capsys):
    own_corpus(workspace, 60)
    errors = check_workspace(workspace)
    notes = capsys.readouterr().out
    assert "clean: source 'corpus': 1 file(s); of 60 records from their starts clean would keep 60 (100%)" in notes
    assert "languages: en 60; fields: text, id" in notes and "about 60 records in all" in notes
    assert "train.max_steps 400 x 4,096 tokens a step passes over about" in notes  # learnt by heart
    assert [e.split(":")[0] for e in errors] == ["param 'semantic_head.min_labels_per_class'",
                                                 "param 'perplexity.val_fraction'"], errors
    assert "the labels hold" in errors[0] and "(en " in errors[0]
    assert "raise perplexity.val_fraction (to about" in errors[1] and "\n" not in "".join(errors)


def test_check_names_a_source_that_would_keep_nothing(workspace, capsys):
    own_corpus(workspace, 60)
    write = yaml.safe_load((workspace / "params.yaml").read_text())
    write["clean"]["languages"] = ["zh"]
    (workspace / "params.yaml").write_text(yaml.safe_dump(write, sort_keys=False))
    errors = check_workspace(workspace)
    assert errors[0] == ("param 'clean.languages': source 'corpus' would keep none of 60 records (dropped: lang:en "
                         "60; languages found: en 60; kept: zh)")
    assert check_workspace(workspace, read_data=False) == []  # --params-only


def test_check_projects_what_train_reads_of_each_tier(workspace, capsys):
    own_corpus(workspace, 600)
    params = yaml.safe_load((workspace / "params.yaml").read_text())
    params["perplexity"]["val_fraction"] = 0.1
    params["train"]["micro_batch_size"] = 256
    (workspace / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    errors = check_workspace(workspace)
    assert errors[1:] == [e for e in errors if e.startswith("train: about ")] and len(errors) == 2, errors
    assert "fewer than one micro batch of train.micro_batch_size 256 windows of seq_len 256" in errors[1]
