"""`refinery compare` on a real git + DVC repository: the workspace, a commit and an experiment."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flows.compare import FIGURES, Run, compare, table_lines
from tests.conftest import BIN, init_dvc_repo, sh

STAGES = sorted({stage for _, stage, _, _ in FIGURES})


def write_metrics(root: Path, ppl_all: float, num_kept: int) -> None:
    values = {"clean": {"num_read": 100, "num_kept": num_kept}, "train": {"val_ppl.all": ppl_all, "val_ppl.hard": 9.0},
              "export": {"file_mb": 1.07, "latency_ms": 1.6}}
    for stage in STAGES:
        (root / "metrics" / f"{stage}.json").write_text(json.dumps(values.get(stage, {})))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "metrics").mkdir(parents=True)
    params = {stage: {"metrics_path": f"metrics/{stage}.json"} for stage in STAGES}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    stages = {"report": {"cmd": "true", "metrics": [{f"metrics/{s}.json": {"cache": False}} for s in STAGES]}}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    write_metrics(root, 90.0, 60)
    init_dvc_repo(root)
    sh(["git", "add", "-A"], root)
    sh(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first run"], root)
    return root


def test_compare_the_workspace_with_head_and_an_older_commit(repo: Path):
    write_metrics(repo, 81.0, 66)
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "second run"], repo)
    write_metrics(repo, 99.0, 66)  # uncommitted: the workspace
    lines = compare(repo, ["workspace", "HEAD~1"], baseline_name="HEAD")
    assert lines[0].split()[:4] == ["run", "read", "clean", "semantic"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["HEAD"].split()[1:3] == ["100", "66"] and rows["workspace"].split()[5] == "99"
    deltas = [line for line in lines if line.startswith("  vs HEAD")]
    assert len(deltas) == 2  # the workspace's and HEAD~1's changes against HEAD
    assert "+22.2% ✗" in deltas[0] and "-9.1%" in deltas[1] and lines[-1].startswith("  baseline: HEAD;")
    with pytest.raises(ValueError, match="'nope' is neither a DVC experiment"):
        compare(repo, ["nope"])


def test_the_cli_lists_every_run_of_dvc_exp_show(repo: Path):
    out = sh([str(BIN / "refinery"), "compare"], repo)
    assert out.splitlines()[1].startswith("workspace") and "  baseline: " in out


def test_deltas_are_judged_by_which_way_is_better():
    base = Run("a", "a", {"ppl all": 10.0, "train tok/s": 100.0})
    other = Run("b", "b", {"ppl all": 9.0, "train tok/s": 90.0})
    deltas = table_lines([base, other], base)[3]
    assert "-10.0% ✓" in deltas and "-10.0% ✗" in deltas
