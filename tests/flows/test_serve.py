"""`python -m flows.serve` against a real server: it refuses a server it did not start unless attached with
the credentials; deployments, the retrain schedule, runs started as the UI starts them (nothing changed:
no stage runs; an override: only the stages it changes; cancelled: its stage stopped, its worktree
removed), a run pointed at another repository refused, and the schedule still active after the serving
process stops."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows.config import WORKSPACE_ENV
from tests.conftest import ROOT
from tests.flows.conftest import PrefectServer, dvc, exp_show, make_repo, read_flow_run

pytestmark = [pytest.mark.integration]


def read_deployment(name: str):
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return client.read_deployment_by_name(name)


def wait_for_deployment(name: str, serve: subprocess.Popen, timeout_s: float = 90):
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return read_deployment(name)
        except ObjectNotFound:
            assert serve.poll() is None, f"the serving process exited (exit code {serve.returncode})"
            assert time.monotonic() < deadline, f"deployment {name} did not appear"
            time.sleep(0.5)


def test_serve_refuses_a_server_it_did_not_start(prefect_server: PrefectServer):
    done = subprocess.run([sys.executable, "-m", "flows.serve", "--port", str(prefect_server.port)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"port {prefect_server.port} is already in use by a server flows.serve did not start: stop it, "
        f"choose another --port, or pass --attach to use it"]

    done = subprocess.run([sys.executable, "-m", "flows.serve", "--port", str(prefect_server.port), "--attach"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PREFECT_API_AUTH_STRING": "refinery:wrong"})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (f"--attach: the server on port {prefect_server.port} refused "
                                                    f"the credentials (HTTP 401)")


def test_serve_deploys_runs_from_the_api_and_keeps_the_schedule(two_stage_repo: Path, prefect_server: PrefectServer,
                                                                 tmp_path: Path):
    foreign = make_repo(tmp_path / "foreign", FOREIGN_DVC_YAML, {}, {})
    dvc("repro", cwd=two_stage_repo)  # the workspace is built: every stage up to date
    checkpoint = (two_stage_repo / "ckpt" / "state.txt").stat()
    calls = tmp_path / "stage-calls.txt"  # each stage command that starts appends a line (conftest)
    exps = two_stage_repo / ".dvc" / "tmp" / "flows" / "exps"
    # Output to a file, not a pipe: the runs' logs can fill a pipe nobody reads until the end, and the
    # serving process would then block on its next write.
    log_path = tmp_path / "serve.log"
    # SIGINT back to its default in the child: a shell starting this suite in the background (`make test &`)
    # makes its commands ignore SIGINT, the child would inherit that and never see the Ctrl-C below.
    serve = subprocess.Popen([sys.executable, "-m", "flows.serve", "--port", str(prefect_server.port), "--attach",
                              "--workspace", str(two_stage_repo)],
                             cwd=ROOT, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, WORKSPACE_ENV: str(foreign),  # --workspace wins
                                  "STAGE_CALLS": str(calls)},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        retrain = wait_for_deployment("retrain/retrain", serve)
        cron = yaml.safe_load((ROOT / "flows" / "config.yaml").read_text())["retrain"]["cron"]
        assert [s.schedule.cron for s in retrain.schedules] == [cron] and retrain.schedules[0].active
        assert retrain.parameters == {}
        pipeline_deployment = read_deployment("pipeline/pipeline")
        assert pipeline_deployment.parameters == {"experiment": True}
        assert "workspace" not in pipeline_deployment.parameter_openapi_schema["properties"]

        # What the UI's "Run" button does: a flow run of the deployment, picked up by the serving process.
        # Nothing changed: no stage command runs, and the run is an experiment like any other.
        from prefect.deployments import run_deployment

        unchanged = run_deployment("pipeline/pipeline", timeout=180)
        assert unchanged.state.is_completed(), unchanged.state.message
        assert not calls.exists()
        assert exp_show(two_stage_repo)[unchanged.name]["metrics"]["metrics/measure.json"] == {"length": 18}

        # An override of the last stage's param reruns that stage, and nothing before it.
        run = run_deployment("pipeline/pipeline", parameters={"set_params": ["measure.unit=bytes"],
                                                              "experiment_name": "ui-run"}, timeout=180)
        assert run.state.is_completed(), run.state.message
        assert [line.split()[0] for line in calls.read_text().splitlines()] == ["measure"]
        assert exp_show(two_stage_repo)["ui-run"]["params"]["measure"]["unit"] == "bytes"
        assert (two_stage_repo / "ckpt" / "state.txt").stat().st_mtime_ns == checkpoint.st_mtime_ns

        # The UI's "Cancel" while a stage runs: the stage is stopped and the experiment's worktree removed.
        calls.unlink()
        slow = run_deployment("pipeline/pipeline", parameters={"set_params": ["count.sleep_s=600"],
                                                               "experiment_name": "cancelled"}, timeout=0)
        wait_until(lambda: calls.exists() and calls.read_text().endswith("\n"), serve, "the count stage to start")
        stage_pid = int(calls.read_text().split()[1])
        cancel(slow.id)
        wait_until(lambda: read_flow_run(slow.id).state.is_cancelled() and not (exps / "cancelled").exists(), serve,
                   "the run to be cancelled and its worktree removed")
        wait_until(lambda: not running(stage_pid), serve, "the stage to stop")
        worktrees = subprocess.run(["git", "worktree", "list"], cwd=two_stage_repo, capture_output=True, text=True)
        assert len(worktrees.stdout.splitlines()) == 1, worktrees.stdout

        # The attack: a run pointed at another repository. Prefect's schema check lets unknown parameters
        # through; the flow has no such parameter, so the run ends before anything runs.
        refused = run_deployment("pipeline/pipeline", parameters={"workspace": str(foreign)}, timeout=180)
        assert refused.state.is_crashed(), refused.state
        assert not (foreign / "pwned").exists()
    finally:
        serve.send_signal(signal.SIGINT)  # Ctrl-C: the runner's graceful shutdown
        serve.wait(timeout=180)  # graceful shutdown is slow on a loaded 2-core machine
    output = log_path.read_text()
    assert "but was provided with parameters ['experiment', 'workspace']" in output
    after = read_deployment("retrain/retrain")
    assert not after.paused and after.schedules[0].active, output


def wait_until(condition, serve: subprocess.Popen, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert serve.poll() is None, f"the serving process exited (exit code {serve.returncode})"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def cancel(run_id) -> None:
    """What the UI's Cancel button does: the run is set to Cancelling; its runner kills it."""
    from prefect import get_client
    from prefect.states import Cancelling

    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run_id, Cancelling(), force=True)


def running(pid: int) -> bool:
    """Whether a process is alive (a zombie, dead but not yet reaped by its new parent, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# A repository whose one command would show that it ran.
FOREIGN_DVC_YAML = """
stages:
  pwn:
    cmd: touch pwned
"""

