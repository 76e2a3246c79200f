"""The `pipeline` flow over the project's own dvc.yaml, whatever stages it holds, on a tiny configuration."""
from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import pytest
import yaml

from bench._tiny import TINY, merge_existing
from flows.artifacts import flatten
from flows.pipeline import pipeline
from tests.conftest import ROOT, init_dvc_repo
from tests.flows.conftest import artifacts, dvc, flow_run_id, read_flow_run, task_runs

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_server")]
log = logging.getLogger(__name__)


@pytest.fixture
def project_repo(repo_copy: Path, in_workspace) -> Path:
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    for name, tiny in TINY.items():
        merge_existing(params.get(name, {}), tiny)
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    (repo_copy / "flows").mkdir()
    shutil.copy2(ROOT / "flows" / "config.yaml", repo_copy / "flows" / "config.yaml")
    return in_workspace(init_dvc_repo(repo_copy))


def test_pipeline_reproduces_every_stage_of_the_project(project_repo: Path):
    stages = list(yaml.safe_load((project_repo / "dvc.yaml").read_text())["stages"])
    state = pipeline(return_state=True)
    assert state.is_completed(), state.message
    result = state.result()
    assert sorted(r["stage"] for r in result["stages"]) == sorted(stages)
    assert all(r["outcome"] == "ran" for r in result["stages"])
    lock = yaml.safe_load((project_repo / "dvc.lock").read_text())
    assert set(lock["stages"]) == set(stages)
    # dependency order: every stage runs after the stages whose outputs it reads
    order = [r["stage"] for r in result["stages"]]
    assert order.index("demo_corpus") < order.index("clean") < order.index("tokenizer") < order.index("perplexity")

    run = read_flow_run(flow_run_id(state))
    assert run.state.is_completed()
    runs = {t.name: t for t in task_runs(flow_run_id(state))}
    assert set(stages) <= set(runs) and all(t.state.is_completed() for t in runs.values())
    found = artifacts(flow_run_id(state))
    assert {f"stage-{s.replace('_', '-')}" for s in stages} | {"pipeline-summary"} <= set(found)
    clean_rows = json.loads(found["stage-clean"].data)
    clean_metrics = flatten(json.loads((project_repo / "metrics" / "clean.json").read_text()))
    assert {r["metric"]: r["value"] for r in clean_rows} == clean_metrics
    if "export" in stages:  # one row per model of the chain, in its order
        models = [row["model"] for row in json.loads(found["model-comparison"].data)]
        assert models[0] == "trained" and models.index("prune_step_1") < models.index("qat_int8"), models

    start = time.perf_counter()
    again = pipeline()
    log.info("pipeline flow with every stage up to date: %.1f s", time.perf_counter() - start)
    assert all(r["outcome"] == "up to date" for r in again["stages"])
    assert "up to date" in dvc("status", cwd=project_repo)
