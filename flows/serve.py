"""`python -m flows.serve`: a local Prefect server on 127.0.0.1 and the `pipeline` and `retrain` deployments.

Starts `prefect server start` (SQLite under PREFECT_HOME, ~/.prefect by default; analytics off) unless
one already answers on the port, then serves both deployments from this process until Ctrl-C, which
also stops the server it started. The `retrain` schedule is not paused on shutdown (Prefect's default
for `serve`), so it stays active across restarts of this process.
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only: the server has no authentication
SERVER_START_TIMEOUT_S = 120

log = logging.getLogger("refinery.flows.serve")


def serve_env(api_url: str) -> dict[str, str]:
    """Set before Prefect is imported: its settings are read from the environment at import."""
    return {"PREFECT_API_URL": api_url, "PREFECT_SERVER_API_HOST": HOST, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1", "DVC_NO_ANALYTICS": "1",
            # a run started in the UI begins within 2 s instead of Prefect's 10 s poll (a local SQLite server)
            "PREFECT_RUNNER_POLL_FREQUENCY": os.environ.get("PREFECT_RUNNER_POLL_FREQUENCY", "2"),
            # flow runs execute in subprocesses that import `flows.*` and `stages.*` from this checkout
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


def is_healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def start_server(port: int, api_url: str) -> subprocess.Popen:
    """`prefect server start` on the loopback interface; returns once the API answers."""
    args = [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", HOST, "--port", str(port),
            "--analytics-off"]
    server = subprocess.Popen(args, env=os.environ.copy())
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not is_healthy(api_url):
        if server.poll() is not None:
            raise RuntimeError(f"`{' '.join(args)}` exited with {server.returncode} (port {port} taken?)")
        if time.monotonic() > deadline:
            server.terminate()
            raise TimeoutError(f"Prefect server did not answer on {api_url} within {SERVER_START_TIMEOUT_S} s")
        time.sleep(0.5)
    return server


def deployments(workspace: Path) -> list:
    """The `pipeline` deployment (every UI run is a DVC experiment) and the scheduled `retrain`."""
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron

    from flows.config import load_config
    from flows.pipeline import pipeline
    from flows.retrain import retrain

    cfg = load_config(workspace)
    where = {} if workspace == ROOT else {"workspace": str(workspace)}
    common = {"entrypoint_type": EntrypointType.MODULE_PATH, "tags": ["refinery"]}
    return [
        pipeline.to_deployment(
            name="pipeline", parameters={"experiment": True, **where}, **common,
            description="Reproduce every DVC stage as a DVC experiment (`dvc exp show`); "
                        "set_params takes `dvc exp run --set-param` overrides such as train.max_steps=50."),
        retrain.to_deployment(
            name="retrain", parameters=where, **common,
            schedules=[Cron(cfg.retrain.cron, timezone=cfg.retrain.timezone)],
            description="On new raw data: rebuild, score against the champion, promote only if better."),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("REFINERY_PREFECT_PORT", "4200")))
    parser.add_argument("--workspace", type=Path, default=ROOT, help="the DVC repository the flows run on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per API request otherwise
    api_url = f"http://{HOST}:{args.port}/api"
    os.environ.update(serve_env(api_url))
    server = None if is_healthy(api_url) else start_server(args.port, api_url)
    log.info("Prefect UI: http://%s:%d (server %s)", HOST, args.port, "started" if server else "already running")
    try:
        from prefect import serve

        serve(*deployments(args.workspace.resolve()), pause_on_shutdown=False)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
