"""A real `dvc repro` of the pipeline in a fresh git + DVC repo, on a small demo corpus."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def sh(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture
def dvc_repo(repo_copy: Path) -> Path:
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    params["demo_corpus"]["num_docs"] = 600
    params["demo_corpus"]["num_shards"] = 2
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh(["git", "init", "--quiet"], repo_copy)
    sh([str(BIN / "dvc"), "init", "--quiet"], repo_copy)
    sh([str(BIN / "dvc"), "config", "core.analytics", "false"], repo_copy)
    return repo_copy


def test_repro_runs_the_chain_then_does_nothing(dvc_repo: Path):
    out = sh([str(BIN / "dvc"), "repro"], dvc_repo)
    assert "Running stage 'demo_corpus'" in out and "Running stage 'clean'" in out
    metrics = json.loads((dvc_repo / "metrics" / "clean.json").read_text())
    assert metrics["num_read"] == 600 == metrics["num_kept"] + metrics["num_quarantined"]
    assert metrics["num_kept"] > 0 and metrics["kept.zh"] > 0 and metrics["kept.en"] > 0
    assert (dvc_repo / "data" / "clean" / "_SUCCESS").is_file()
    lock = yaml.safe_load((dvc_repo / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"demo_corpus", "clean"}
    outputs = sorted((dvc_repo / "data" / "clean").rglob("*.parquet"))
    mtimes = [p.stat().st_mtime_ns for p in outputs]

    again = sh([str(BIN / "dvc"), "repro"], dvc_repo)
    assert "Running stage" not in again
    assert [p.stat().st_mtime_ns for p in outputs] == mtimes
    assert "up to date" in sh([str(BIN / "dvc"), "status"], dvc_repo)

    # A changed param reruns only what depends on it.
    params = yaml.safe_load((dvc_repo / "params.yaml").read_text())
    params["clean"]["languages"] = ["en"]
    (dvc_repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    third = sh([str(BIN / "dvc"), "repro"], dvc_repo)
    assert "Running stage 'clean'" in third and "Running stage 'demo_corpus'" not in third
    assert "kept.zh" not in json.loads((dvc_repo / "metrics" / "clean.json").read_text())
