"""A real `dvc repro` of demo_corpus -> clean -> tokenizer -> perplexity -> train on a tiny config."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from stages.common.lm.token_shards import TIERS, open_tiers
from tests.conftest import BIN, init_dvc_repo, sh

pytestmark = pytest.mark.integration


@pytest.fixture
def dvc_repo(repo_copy: Path) -> Path:
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    params["demo_corpus"].update(num_docs=400, num_shards=2)
    # Straight from `clean`, whatever the default input becomes, so this test stays about these two stages.
    params["tokenizer"].update(input_dir="data/clean/docs", vocab_size=512)
    params["perplexity"].update(input_dir="data/clean/docs", min_docs_per_lang=10, val_fraction=0.1, num_threads=1)
    params["perplexity"]["reference"].update(preset="debug", steps=20, batch_size=8)
    params["train"].update(preset="debug", max_steps=12, micro_batch_size=4, num_threads=1, progress_bar=False)
    params["train"]["checkpoint"].update(every=5)
    params["train"]["eval"].update(every=6, windows=8)
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    return init_dvc_repo(repo_copy)


def test_repro_perplexity_then_nothing_to_do(dvc_repo: Path):
    out = sh([str(BIN / "dvc"), "repro", "perplexity"], dvc_repo)
    assert "Running stage 'tokenizer'" in out and "Running stage 'perplexity'" in out
    metrics = json.loads((dvc_repo / "metrics" / "detail" / "perplexity.json").read_text())
    num_kept = json.loads((dvc_repo / "metrics" / "clean.json").read_text())["num_kept"]
    assert metrics["num_docs"] == num_kept > 0
    assert sum(metrics[f"docs.{lang}.{tier}"] for lang in ("en", "zh") for tier in TIERS) == num_kept
    assert metrics["reference.val_perplexity"] > 1
    for path in ("data/perplexity/_SUCCESS", "models/reference_lm/model.safetensors", "models/tokenizer/tokenizer.json",
                 "data/perplexity/cutoffs.csv", "metrics/perplexity_hist.csv", "metrics/tokenizer.json"):
        assert (dvc_repo / path).is_file(), path
    shards = open_tiers(dvc_repo / "data" / "perplexity" / "tokens", "train")
    assert sum(s.num_docs for s in shards.values()) == sum(metrics[f"docs.train.{t}"] for t in TIERS)
    lock = yaml.safe_load((dvc_repo / "dvc.lock").read_text())
    assert {"tokenizer", "perplexity"} <= set(lock["stages"])

    again = sh([str(BIN / "dvc"), "repro", "perplexity"], dvc_repo)
    assert "Running stage" not in again

    # The distribution plot renders with its custom template (tiers coloured, cutoffs marked).
    plots = json.loads(sh([str(BIN / "dvc"), "plots", "show", "--json", "perplexity_histogram"], dvc_repo))
    spec = plots["data"]["perplexity_histogram"][0]["content"]
    assert spec["facet"]["row"]["field"] == "lang" and len(spec["spec"]["layer"]) == 2
    assert any(row["kind"] == "cutoff" for row in spec["data"]["values"])


def test_repro_train_under_torchrun(dvc_repo: Path):
    out = sh([str(BIN / "dvc"), "repro", "train"], dvc_repo)
    assert "Running stage 'perplexity'" in out and "Running stage 'train'" in out
    assert "torch.distributed.run" in out  # dvc.yaml's command launched torchrun
    metrics = json.loads((dvc_repo / "metrics" / "detail" / "train.json").read_text())
    parallel = yaml.safe_load((dvc_repo / "params.yaml").read_text())["train"]["parallel"]
    assert metrics["steps"] == 12 and metrics["num_processes"] == parallel["data_parallel_size"]
    for tier in TIERS:
        assert metrics[f"val.{tier}.perplexity"] < metrics[f"val.{tier}.perplexity_start"], tier
    assert (dvc_repo / "models" / "train" / "model.safetensors").is_file()
    assert sorted(p.name for p in (dvc_repo / "models" / "train_checkpoints").iterdir()) == [
        "step_00000010", "step_00000012"]
    assert "Running stage" not in sh([str(BIN / "dvc"), "repro", "train"], dvc_repo)

    # The training curves render: loss per step and validation perplexity per tier.
    shown = subprocess.run([str(BIN / "dvc"), "plots", "show", "--json"], cwd=dvc_repo, capture_output=True,
                           text=True, check=True)
    plots = json.loads(shown.stdout)  # (stderr: DVC's notes on plots of stages not run here)
    assert {"train_loss", "train_validation_perplexity", "train_grad_norm", "train_tier_ratios"} <= set(plots["data"])
    values = plots["data"]["train_validation_perplexity"][0]["content"]["data"]["values"]
    assert {row["step"] for row in values} == {"0", "6", "12"}
