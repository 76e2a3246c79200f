"""A teammate's fresh clone that has pulled the DVC cache is up to date: every output of every stage is in
git or in DVC's cache, so `dvc status` there finds nothing to rerun. Scratch folders (the checkpoints of
train, prune and qat, the work folders) are no outputs: the clone lacks them and DVC does not mind.

No stage runs: small stand-in files take the place of every input and output, and `dvc commit` records
them in dvc.lock as a finished run would."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stages.common.runtime.dvcfile import interpolate, read_dvc_stages
from tests.conftest import BIN, ROOT, init_dvc_repo, sh

pytestmark = pytest.mark.integration
GIT_USER = ["-c", "user.name=test", "-c", "user.email=test@example.com"]


def stand_in(path: Path) -> None:
    """A file (a name with a suffix) or a folder with one file, unless there is one already."""
    if path.exists():
        return
    if path.suffix:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{path.name}\n")
    else:
        path.mkdir(parents=True)
        (path / "part-00000.bin").write_bytes(path.name.encode())


def dvc_status(repo: Path) -> dict:
    return json.loads(sh([str(BIN / "dvc"), "status", "--json"], repo).strip().splitlines()[-1])


def test_a_clone_with_the_dvc_cache_is_up_to_date_without_the_checkpoint_folders(repo_copy: Path, tmp_path: Path):
    shutil.copy2(ROOT / ".gitignore", repo_copy / ".gitignore")
    init_dvc_repo(repo_copy)
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    stages = read_dvc_stages(repo_copy)
    for stage in stages:  # outputs first: an input inside another stage's output folder is written into it
        for path in stage.outs:
            stand_in(repo_copy / interpolate(path, params))
    for stage in stages:
        for path in stage.deps:
            stand_in(repo_copy / interpolate(path, params))
    checkpoints = [params[stage]["checkpoint_dir"] for stage in ("train", "prune", "qat")]
    for folder in checkpoints:  # what a run leaves
        stand_in(repo_copy / folder / "step_00000010")
    sh([str(BIN / "dvc"), "commit", "--force", "--quiet"], repo_copy)
    lock = yaml.safe_load((repo_copy / "dvc.lock").read_text())
    assert set(lock["stages"]) == {s.name for s in stages}
    assert dvc_status(repo_copy) == {}

    sh([str(BIN / "dvc"), "remote", "add", "--default", "storage", str(tmp_path / "remote")], repo_copy)
    sh([str(BIN / "dvc"), "push", "--quiet"], repo_copy)
    sh(["git", "add", "-A"], repo_copy)
    sh(["git", *GIT_USER, "commit", "--quiet", "-m", "a finished run"], repo_copy)

    clone = tmp_path / "clone"
    sh(["git", "clone", "--quiet", str(repo_copy), str(clone)], tmp_path)
    sh([str(BIN / "dvc"), "pull", "--quiet"], clone)
    assert not any((clone / folder).exists() for folder in checkpoints)
    assert dvc_status(clone) == {}
    repro = subprocess.run([str(BIN / "dvc"), "repro", "--dry"], cwd=clone, capture_output=True, text=True)
    assert repro.returncode == 0 and "Running stage" not in repro.stdout, repro.stdout + repro.stderr
