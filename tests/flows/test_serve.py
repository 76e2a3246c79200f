"""`python -m flows.serve` against a real server: deployments, the retrain schedule, a run started as the UI
starts one, and the schedule still active after the serving process stops."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.flows.conftest import exp_show

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


def test_serve_deploys_runs_from_the_api_and_keeps_the_schedule(two_stage_repo: Path, prefect_server: str,
                                                                 tmp_path: Path):
    port = prefect_server.rsplit(":", 1)[1].split("/")[0]
    # Output to a file, not a pipe: the runs' logs can fill a pipe nobody reads until the end, and the
    # serving process would then block on its next write.
    log_path = tmp_path / "serve.log"
    # SIGINT back to its default in the child: a shell starting this suite in the background (`make test &`)
    # makes its commands ignore SIGINT, the child would inherit that and never see the Ctrl-C below.
    serve = subprocess.Popen([sys.executable, "-m", "flows.serve", "--port", port, "--workspace", str(two_stage_repo)],
                             cwd=ROOT, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        retrain = wait_for_deployment("retrain/retrain", serve)
        cron = yaml.safe_load((ROOT / "flows" / "config.yaml").read_text())["retrain"]["cron"]
        assert [s.schedule.cron for s in retrain.schedules] == [cron] and retrain.schedules[0].active
        assert retrain.parameters == {"workspace": str(two_stage_repo)}
        assert read_deployment("pipeline/pipeline").parameters["experiment"] is True

        # What the UI's "Run" button does: a flow run of the deployment, picked up by the serving process.
        from prefect.deployments import run_deployment

        run = run_deployment("pipeline/pipeline", parameters={"set_params": ["count.n=2"], "experiment_name": "ui-run"},
                             timeout=180)
        assert run.state.is_completed(), run.state.message
        assert exp_show(two_stage_repo)["ui-run"]["metrics"]["metrics/measure.json"] == {"length": 12}
    finally:
        serve.send_signal(signal.SIGINT)  # Ctrl-C: the runner's graceful shutdown
        serve.wait(timeout=180)  # graceful shutdown is slow on a loaded 2-core machine
    output = log_path.read_text()
    after = read_deployment("retrain/retrain")
    assert not after.paused and after.schedules[0].active, output
