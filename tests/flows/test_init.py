"""`refinery init` (flows/workspace.py): a workspace for your own data, made from the shipped pipeline."""
from __future__ import annotations

import importlib.metadata
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from flows.workspace import (CORPUS_DIR, CURRICULUM_DEP, DEMO_STAGE, LABELS_PATH, TEMPLATE_DIR, labels_readme,
                             own_data_dvc_yaml, own_data_params, plot_templates)
from stages.clean import Params as CleanParams
from stages.common.runtime.dvcfile import interpolate, maker, read_dvc_stages
from stages.common.runtime.params import from_dict
from stages.common.text.readers import SUPPORTED_SUFFIXES
from tests.conftest import BIN, ROOT
from tests.flows.test_cli import refinery

SHIPPED_DVC = (ROOT / "dvc.yaml").read_text()
SHIPPED_PARAMS = (ROOT / "params.yaml").read_text()
EDITED = {("clean", "input"): CORPUS_DIR, ("clean", "sources"): [], ("semantic_embed", "labels_path"): LABELS_PATH,
          ("report", "curriculum_path"): ""}


def test_the_template_is_the_pipeline_this_checkout_ships():
    assert (TEMPLATE_DIR / "dvc.yaml.in").read_text() == SHIPPED_DVC
    assert (TEMPLATE_DIR / "params.yaml.in").read_text() == SHIPPED_PARAMS


def test_params_are_the_shipped_ones_without_the_demo_and_with_your_inputs():
    text = own_data_params(SHIPPED_PARAMS)
    expected = yaml.safe_load(SHIPPED_PARAMS)
    del expected[DEMO_STAGE]
    for (section, key), value in EDITED.items():
        expected[section][key] = value
    assert yaml.safe_load(text) == expected
    assert DEMO_STAGE not in text

    # every comment line outside the demo section and clean.sources is kept, in order
    def comments(lines: list[str]) -> list[str]:
        return [line.strip() for line in lines if line.strip().startswith("#")]

    shipped = SHIPPED_PARAMS.splitlines()
    demo_start = shipped.index(f"{DEMO_STAGE}:")
    demo_end = shipped.index("clean:")
    sources = next(i for i, line in enumerate(shipped) if line.startswith("  sources:"))
    sources_end = next(j for j in range(sources + 1, len(shipped)) if not shipped[j].startswith("    "))
    kept = comments(shipped[:demo_start] + shipped[demo_end:sources] + shipped[sources_end:])
    generated = iter(comments(text.splitlines()))
    assert all(line in generated for line in kept)  # a subsequence: order kept too
    assert re.search(r"^  input: corpus +# a file, a folder", text, re.M)


def test_the_commented_sources_example_is_valid_for_clean():
    text = own_data_params(SHIPPED_PARAMS)
    example = re.sub(r"^  #(  [ -])", r"   \1", text, flags=re.M).replace("  sources: []", "  sources:")
    clean = yaml.safe_load(example)["clean"]
    assert [s["name"] for s in clean["sources"]] == ["crawl", "export", "articles"]
    params = from_dict(CleanParams, clean, prefix="clean.")
    assert [s.name for s in params.input_sources()] == ["crawl", "export", "articles"]


def test_dvc_yaml_is_the_shipped_pipeline_without_the_demo_its_code_deps_and_the_curriculum_study():
    text = own_data_dvc_yaml(SHIPPED_DVC, "1.2.3")
    assert "refinery 1.2.3" in text.splitlines()[0] and DEMO_STAGE not in text
    shipped, made = yaml.safe_load(SHIPPED_DVC), yaml.safe_load(text)
    assert set(made["stages"]) == set(shipped["stages"]) - {DEMO_STAGE}
    for name, stage in made["stages"].items():
        code = [d for d in shipped["stages"][name]["deps"] if d.startswith("stages/") or d == "requirements.lock"]
        dropped = code + [CURRICULUM_DEP] * (name == "report")
        assert code and stage == {**shipped["stages"][name],
                                  "deps": [d for d in shipped["stages"][name]["deps"] if d not in dropped]}
    assert CURRICULUM_DEP in shipped["stages"]["report"]["deps"] and CURRICULUM_DEP not in text
    assert [list(p) for p in made["plots"]] == [list(p) for p in shipped["plots"]]
    assert plot_templates(text) == sorted(p.name for p in (ROOT / "stages" / "plots").glob("*.json"))


def test_every_input_of_the_workspace_is_yours_or_made_by_a_stage(tmp_path: Path):
    (tmp_path / "dvc.yaml").write_text(own_data_dvc_yaml(SHIPPED_DVC, "0"))
    params = yaml.safe_load(own_data_params(SHIPPED_PARAMS))
    stages = read_dvc_stages(tmp_path)
    deps = {interpolate(d, params) for s in stages for d in s.deps}
    assert {d for d in deps if not maker(d, stages, params)} == {CORPUS_DIR, LABELS_PATH}


def test_the_labels_readme_states_the_counts_params_yaml_asks_for():
    text = labels_readme({"clean": {"languages": ["de", "fr"]},
                          "semantic_head": {"min_labels_per_class": 20, "val_fraction": 0.2}})
    assert "(`clean.languages`: de, fr)" in text
    assert "at least 20 keep and 20 drop *training*" in text
    assert "at least 25 of each class per language" in text
    assert "write 29 or more: then at least 20\nland in training 19 times out of 20" in text


@pytest.mark.integration
def test_init_makes_a_workspace_that_check_and_dvc_understand(tmp_path: Path):
    made = refinery("init", "ws", cwd=tmp_path)
    ws = tmp_path / "ws"
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"Made a Refinery workspace in {ws}: ") and f"\n  cd {ws}\n" in made.stdout
    assert "`dvc add corpus`" in made.stdout and "`refinery check`" in made.stdout
    assert (ws / "dvc.yaml").read_text() == own_data_dvc_yaml(SHIPPED_DVC, importlib.metadata.version("refinery"))
    assert (ws / "params.yaml").read_text() == own_data_params(SHIPPED_PARAMS)
    assert sorted(p.name for p in (ws / CORPUS_DIR).iterdir()) == ["README.md"]
    assert "at least 20 keep and 20 drop" in (ws / "labels" / "README.md").read_text()
    assert not (ws / LABELS_PATH).exists()
    ignored = set((ws / ".gitignore").read_text().split())
    assert {"/data/", "/models/", "/reports/", "/corpus/", f"/{LABELS_PATH}"} <= ignored
    for name in plot_templates((ws / "dvc.yaml").read_text()):
        assert (ws / ".dvc" / "plots" / name).read_text() == (ROOT / "stages" / "plots" / name).read_text()
    config = subprocess.run([str(BIN / "dvc"), "config", "core.analytics"], cwd=ws, capture_output=True, text=True)
    assert config.stdout.strip() == "false"

    # What is still yours to do is a one-line error each: the labels and the empty corpus folder.
    check = refinery("check", cwd=ws)
    assert check.returncode == 2 and check.stderr.splitlines() == [
        f"error: param 'semantic_embed.labels_path': {LABELS_PATH} does not exist and no stage in dvc.yaml makes it",
        "error: param 'clean.input': input 'corpus' (pattern '*') matches no "
        + "/".join(SUPPORTED_SUFFIXES) + " file"], check.stderr
    (ws / LABELS_PATH).write_text('{"text": "Flash sale, today only", "label": "drop", "category": "ad"}\n')
    check = refinery("check", cwd=ws)
    assert check.returncode == 2 and "Traceback" not in check.stderr
    errors = check.stderr.splitlines()
    assert all(line.startswith("error: ") for line in errors), check.stderr
    assert any(line.startswith("error: param 'clean.input': input 'corpus'") for line in errors), check.stderr

    status = subprocess.run([str(BIN / "dvc"), "status"], cwd=ws, capture_output=True, text=True)
    assert status.returncode == 0 and "clean:" in status.stdout, status.stderr

    params_before = (ws / "params.yaml").read_bytes()
    again = refinery("init", str(ws))
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr == (f"error: {ws} already holds dvc.yaml and params.yaml: `refinery init` never overwrites a "
                            "workspace (use an empty folder, or edit the files)\n")
    assert (ws / "params.yaml").read_bytes() == params_before

