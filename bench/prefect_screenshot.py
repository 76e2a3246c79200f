"""A UI-style `pipeline` run on a finished workspace, timed, and a screenshot of its page in the Prefect UI.

    python -m bench.prefect_screenshot                      # this checkout, after `dvc repro` and a commit
    python -m bench.prefect_screenshot --workspace PATH --no-screenshot

Starts the real server and deployments (`python -m flows.serve`, its own PREFECT_HOME, a free loopback
port), creates a run of the `pipeline` deployment through the API exactly as the UI's Run button does (no
parameters), waits for it, and records how long it took, which stages it reproduced (from the stage tasks'
results) and whether `dvc exp show` lists it. Then headless Chromium logs in to the UI (the password in the
UI's local storage, over the DevTools protocol) and captures the run's page: docs/img/prefect-run.png.
Results: bench/results/prefect_ui_run.{json,md}. The run is saved as a DVC experiment of the workspace.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import _provenance
from stages.common.report import browser

ROOT = Path(__file__).resolve().parents[1]
IMAGE = ROOT / "docs" / "img" / "prefect-run.png"
CREDENTIALS_FILE = "refinery-server-auth"  # flows/serve.py keeps the server's credentials there
# The flows and their server, the runtime they call and the pipeline they check (every stage up to date)
MEASURES = ("flows", "stages/common/runtime", "dvc.yaml", "params.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def healthy(api_url: str, auth: str) -> bool:
    request = urllib.request.Request(f"{api_url}/health",
                                     headers={"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def ui_run(api_url: str, auth: str, workspace: Path) -> dict:
    """Create a `pipeline` run with no parameters, as the UI's Run button does, and wait for it."""
    os.environ.update({"PREFECT_API_URL": api_url, "PREFECT_API_AUTH_STRING": auth})
    from prefect import get_client
    from prefect.deployments import run_deployment

    wait_for(lambda: _deployment_exists("pipeline/pipeline"), 120, "the `pipeline` deployment")
    start = time.perf_counter()
    run = run_deployment("pipeline/pipeline", parameters={}, timeout=1800)
    seconds = time.perf_counter() - start
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))
    planned = [m.message for m in logs if m.message.startswith("stages to reproduce:")]
    stage_commands = [m.message for m in logs if "Running stage" in m.message]
    shown = subprocess.run([str(Path(sys.executable).parent / "dvc"), "exp", "show", "--json"], cwd=workspace,
                           capture_output=True, text=True, check=True).stdout
    return {"flow_run_id": str(run.id), "flow_run_name": run.name, "state": run.state.type.value,
            "seconds_from_creation_to_end": round(seconds, 1), "dvc_status_said": planned,
            "stage_commands_run": len(stage_commands),
            "listed_by_dvc_exp_show": run.name in shown}


def _deployment_exists(name: str) -> bool:
    from prefect import get_client

    try:
        with get_client(sync_client=True) as client:
            client.read_deployment_by_name(name)
        return True
    except Exception:  # noqa: BLE001 (not registered yet: keep waiting)
        return False


def screenshot(ui_url: str, auth: str, flow_run_id: str, out: Path) -> None:
    """Log in to the UI as a person would (the UI keeps the password in local storage), open the run's page
    and capture it, over Chromium's DevTools protocol."""
    from websockets.sync.client import connect

    chromium = browser.find_browser()
    if chromium is None:
        raise FileNotFoundError("no Chromium-family browser on PATH")
    with tempfile.TemporaryDirectory(prefix="refinery-chromium-") as profile:
        proc = subprocess.Popen([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                 "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1440,1000",
                                 "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            active = Path(profile) / "DevToolsActivePort"
            port = wait_for(lambda: active.is_file() and active.read_text().split("\n")[0], 30, "Chromium")
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=5).read())
            page = next(t for t in targets if t["type"] == "page")
            with connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
                ids = iter(range(1, 1_000_000))

                def call(method: str, **params):
                    request_id = next(ids)
                    ws.send(json.dumps({"id": request_id, "method": method, "params": params}))
                    while True:
                        message = json.loads(ws.recv(timeout=60))
                        if message.get("id") == request_id:
                            return message.get("result", {})

                call("Page.navigate", url=ui_url)
                time.sleep(3)
                call("Runtime.evaluate", expression=f"localStorage.setItem('prefect-password', "
                                                    f"btoa({json.dumps(auth)}))")
                call("Page.navigate", url=f"{ui_url}/runs/flow-run/{flow_run_id}")
                time.sleep(10)  # the page loads its data from the API after the app starts
                data = call("Page.captureScreenshot", format="png")["data"]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(base64.b64decode(data))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    pixels = browser.read_png(out)
    if pixels.std() < 5:
        raise RuntimeError(f"{out}: the screenshot is blank")


def markdown(result: dict[str, Any]) -> list[str]:
    return ["# A UI-style `pipeline` run on the finished workspace", "", *_provenance.header(result),
            f"Run `{result['flow_run_name']}` ended {result['state']} in {result['seconds_from_creation_to_end']} s "
            f"from creation to end (Prefect's 2 s poll and a new process included); the flow logged "
            f"{'; '.join(result['dvc_status_said'])!r} and ran {result['stage_commands_run']} stage command(s); "
            f"listed by `dvc exp show`: {'yes' if result['listed_by_dvc_exp_show'] else 'no'}."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=ROOT)
    parser.add_argument("--out", type=Path, default=IMAGE)
    parser.add_argument("--no-screenshot", action="store_true")
    args = parser.parse_args()
    stamp = _provenance.stamp("prefect_screenshot", MEASURES)
    home = Path(tempfile.mkdtemp(prefix="refinery-prefect-"))
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "DO_NOT_TRACK": "1", "DVC_NO_ANALYTICS": "1"}
    for key in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING"):
        env.pop(key, None)
    log = open(home / "serve.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "flows.serve", "--port", str(port), "--workspace",
                               str(args.workspace.resolve())], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    api_url, ui_url = f"http://127.0.0.1:{port}/api", f"http://127.0.0.1:{port}"
    try:
        credentials = home / CREDENTIALS_FILE
        auth = wait_for(lambda: credentials.is_file() and credentials.read_text().strip(), 120, "the credentials")
        wait_for(lambda: healthy(api_url, auth), 180, "the server")
        workspace = args.workspace.resolve()
        result = {**stamp, "workspace": str(workspace), **ui_run(api_url, auth, workspace)}
        if not args.no_screenshot:
            screenshot(ui_url, auth, result["flow_run_id"], args.out)
            result["screenshot"] = str(args.out.relative_to(ROOT)) if args.out.is_relative_to(ROOT) else str(args.out)
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
    _provenance.write(result, markdown, name="prefect_ui_run")
    print(json.dumps(result, indent=2))
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
