"""The `pipeline` flow against a real Prefect server: tasks per stage, experiments, failures, the lock."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from uuid import uuid4

import pytest
import yaml
from prefect.client.schemas.objects import FlowRun
from prefect.states import Crashed

from flows.pipeline import pipeline
from tests.conftest import ROOT
from tests.flows.conftest import artifacts, dvc, exp_show, flow_run_id, read_flow_run, task_runs

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_server")]


def set_param(repo: Path, section: str, key: str, value) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params[section][key] = value
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def test_workspace_run_one_task_per_stage_then_nothing_to_do(two_stage_repo: Path):
    state = pipeline(return_state=True)
    assert state.is_completed()
    result = state.result()
    assert [(s["stage"], s["outcome"]) for s in result["stages"]] == [("count", "ran"), ("measure", "ran")]
    assert json.loads((two_stage_repo / "metrics" / "measure.json").read_text()) == {"length": 18}
    assert "up to date" in dvc("status", cwd=two_stage_repo)

    runs = {t.name: t for t in task_runs(flow_run_id(state))}
    assert {"count", "measure"} <= set(runs) and all(t.state.is_completed() for t in runs.values())
    assert runs["count"].start_time < runs["measure"].start_time  # dependency order
    found = artifacts(flow_run_id(state))
    assert {"stage-count", "stage-measure", "pipeline-summary"} <= set(found)
    assert {"file": "metrics/count.json", "metric": "chars", "value": 18} in json.loads(found["stage-count"].data)

    again = pipeline()
    assert [s["outcome"] for s in again["stages"]] == ["up to date", "up to date"]


def test_overrides_run_as_a_dvc_experiment_and_leave_the_workspace_alone(two_stage_repo: Path):
    pipeline()  # the workspace is built; the experiment starts from it
    params_before = (two_stage_repo / "params.yaml").read_bytes()
    lock_before = (two_stage_repo / "dvc.lock").read_bytes()
    checkpoint = two_stage_repo / "ckpt" / "state.txt"
    checkpoint_before = checkpoint.stat()
    # what killed runs leave: a registered worktree and a half-made folder; the next run removes both
    exps = two_stage_repo / ".dvc" / "tmp" / "flows" / "exps"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(exps / "killed"), "HEAD"], cwd=two_stage_repo,
                   check=True)
    (exps / "half-made" / "out").mkdir(parents=True)

    state = pipeline(set_params=["count.n=5"], experiment_name="five", return_state=True)
    assert state.is_completed()
    assert [(s["stage"], s["outcome"]) for s in state.result()["stages"]] == [("count", "ran"), ("measure", "ran")]
    assert (two_stage_repo / "params.yaml").read_bytes() == params_before
    assert (two_stage_repo / "dvc.lock").read_bytes() == lock_before
    assert json.loads((two_stage_repo / "metrics" / "measure.json").read_text()) == {"length": 18}
    # The experiment's `measure` rewrote its linked checkpoint folder: the workspace's file is untouched.
    assert checkpoint.read_text() == "18 chars" and checkpoint.stat().st_ino == checkpoint_before.st_ino
    assert checkpoint.stat().st_mtime_ns == checkpoint_before.st_mtime_ns
    shown = exp_show(two_stage_repo)
    assert shown["five"]["params"] == {"count": {"n": 5, "sleep_s": 0, "fail": False},
                                      "measure": {"unit": "chars", "work_dir": "work"}}
    assert shown["five"]["metrics"] == {"metrics/count.json": {"n": 5, "chars": 30},
                                        "metrics/measure.json": {"length": 30}}
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=two_stage_repo, capture_output=True, text=True).stdout
    assert len(worktrees.splitlines()) == 1  # the experiment's worktree is gone, and the leftovers
    assert list(exps.iterdir()) == []
    assert all(t.state.is_completed() for t in task_runs(flow_run_id(state)))

    # A run killed before its own cleanup (crashed, or cancelled): the state hook the runner then calls,
    # called as Prefect calls it, removes the worktree.
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(exps / "killed"), "HEAD"], cwd=two_stage_repo,
                   check=True)
    killed = FlowRun(flow_id=uuid4(), name="killed", parameters={"set_params": ["count.n=2"]})
    for hook in pipeline.on_crashed_hooks:
        hook(flow=pipeline, flow_run=killed, state=Crashed())
    assert not (exps / "killed").exists()
    assert "killed" not in subprocess.run(["git", "worktree", "list"], cwd=two_stage_repo, capture_output=True,
                                          text=True).stdout


def test_a_failing_stage_fails_its_task_and_the_flow_with_its_own_error(two_stage_repo: Path):
    set_param(two_stage_repo, "count", "fail", True)
    state = pipeline(return_state=True)
    assert state.is_failed()
    assert "corrupt raw shard raw/a.txt: bad header" in state.message
    flow_run = read_flow_run(flow_run_id(state))
    assert flow_run.state.is_failed() and "corrupt raw shard" in flow_run.state.message
    runs = {t.name: t for t in task_runs(flow_run_id(state))}
    assert runs["count"].state.is_failed() and runs["count"].run_count == 1  # a stage's own error: no retry
    assert "measure" not in runs  # nothing after the failed stage ran


def test_a_second_run_on_the_same_workspace_is_refused(two_stage_repo: Path):
    set_param(two_stage_repo, "count", "sleep_s", 6)
    first = subprocess.Popen([sys.executable, "-c", "from flows.pipeline import pipeline; pipeline()"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lock = two_stage_repo / ".dvc" / "tmp" / "refinery-flow.lock"
    deadline = time.monotonic() + 60
    while not (lock.is_file() and lock.read_text()):
        assert first.poll() is None and time.monotonic() < deadline, first.stdout.read() if first.stdout else ""
        time.sleep(0.2)

    state = pipeline(return_state=True)
    assert state.is_failed()
    assert "is busy" in state.message and lock.read_text().split("'")[1] in state.message

    output, _ = first.communicate(timeout=120)
    assert first.returncode == 0, output
    assert pipeline()["stages"][0]["outcome"] == "up to date"


@pytest.mark.parametrize("override, reason", [
    ("measure.work_dir=/tmp/elsewhere", "'measure.work_dir' names a file or folder"),
    ("measure.unit=../../elsewhere", "the value looks like a path"),
    ("count.missing=1", "params.yaml has no key 'count.missing'"),
    ("count.n=three", "'count.n' must stay a int"),
])
def test_overrides_that_are_not_allowed_fail_the_run_before_anything_runs(two_stage_repo: Path, override: str,
                                                                          reason: str):
    state = pipeline(set_params=[override], return_state=True)
    assert state.is_failed() and reason in state.message, state.message
    assert task_runs(flow_run_id(state)) == []  # refused before the worktree, the lock or any stage
    assert not (two_stage_repo / ".dvc" / "tmp" / "flows" / "exps").exists()


@pytest.mark.parametrize("name", ["../../escape", ".hidden", "-f", "a/b", "x" * 65])
def test_experiment_names_that_could_escape_are_refused(two_stage_repo: Path, name: str):
    state = pipeline(experiment_name=name, return_state=True)
    assert state.is_failed() and state.message.endswith(
        f"experiment_name {name!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', starting with a "
        f"letter or digit (no '..', no trailing '.' or '.lock')"), state.message
    assert task_runs(flow_run_id(state)) == []
