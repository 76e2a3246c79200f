"""A real `dvc repro` of the pipeline in a fresh git + DVC repo, on a small demo corpus."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, init_dvc_repo, sh

pytestmark = pytest.mark.integration


@pytest.fixture
def dvc_repo(repo_copy: Path) -> Path:
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    params["demo_corpus"]["num_docs"] = 600
    params["demo_corpus"]["num_shards"] = 2
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return init_dvc_repo(repo_copy)


CHAIN = ["demo_corpus", "clean", "semantic_embed", "semantic_head", "semantic_filter"]


def test_repro_runs_the_chain_then_does_nothing(dvc_repo: Path):
    out = sh([str(BIN / "dvc"), "repro", "semantic_filter"], dvc_repo)
    assert all(f"Running stage '{stage}'" in out for stage in CHAIN)
    metrics = json.loads((dvc_repo / "metrics" / "detail" / "clean.json").read_text())
    assert metrics["num_read"] == 600 == metrics["num_kept"] + metrics["num_quarantined"]
    assert metrics["num_kept"] > 0 and metrics["kept.zh"] > 0 and metrics["kept.en"] > 0
    assert (dvc_repo / "data" / "clean" / "_SUCCESS").is_file()
    semantic = json.loads((dvc_repo / "metrics" / "detail" / "semantic_filter.json").read_text())
    assert semantic["num_read"] == metrics["num_kept"] == semantic["num_kept"] + semantic["num_quarantined"]
    lock = yaml.safe_load((dvc_repo / "dvc.lock").read_text())
    assert set(CHAIN) <= set(lock["stages"])
    outputs = sorted((dvc_repo / "data").rglob("*.parquet"))
    mtimes = [p.stat().st_mtime_ns for p in outputs]

    again = sh([str(BIN / "dvc"), "repro", "semantic_filter"], dvc_repo)
    assert "Running stage" not in again
    assert [p.stat().st_mtime_ns for p in outputs] == mtimes

    # A new threshold policy reruns only the filter: no re-embedding, no retraining.
    set_param(dvc_repo, "semantic_filter", "target_precision", 0.99)
    third = sh([str(BIN / "dvc"), "repro", "semantic_filter"], dvc_repo)
    assert "Running stage 'semantic_filter'" in third
    assert not any(f"Running stage '{stage}'" in third for stage in CHAIN[:-1])

    # A changed clean param reruns clean and what depends on it, not the corpus.
    set_param(dvc_repo, "clean", "languages", ["en"])
    fourth = sh([str(BIN / "dvc"), "repro", "semantic_filter"], dvc_repo)
    assert "Running stage 'clean'" in fourth and "Running stage 'demo_corpus'" not in fourth
    assert "kept.zh" not in json.loads((dvc_repo / "metrics" / "detail" / "clean.json").read_text())


def set_param(repo: Path, section: str, key: str, value) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params[section][key] = value
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
