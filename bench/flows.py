"""Benchmark the Prefect flows against their targets.

    python -m bench.flows                 # tiny demo config (400 documents), every stage of dvc.yaml
    python -m bench.flows --num-docs 24000 --no-tiny --name flows_full_demo   # the full demo (slow on 2 cores)

In a temporary git + DVC copy of the committed project (git HEAD), with a private Prefect server on 127.0.0.1 and
`python -m flows.serve` serving the deployments, as `make flows` does:
1. UI run: the `pipeline` deployment is started through the API exactly as the UI's Run button does,
   with a parameter override; target: the run completes and `dvc exp show` lists it with the override and
   the metrics of every stage.
2. Overhead: the experiment is applied to the workspace (`dvc exp apply`), so every stage is up to date;
   then plain `dvc repro`, the `pipeline` flow called in-process, and the `pipeline` deployment run
   from the API (workspace mode) are timed. Target: the flow, end to end, under 15 s.

Results: bench/results/flows.json and flows.md (`--name flows_full_demo`: flows_full_demo.json and .md).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OVERHEAD_TARGET_S = 15.0
# The flows and the runtime they call, the pipeline they run, and the tiny settings the default run uses
MEASURES = ("flows", "stages/common/runtime", "dvc.yaml", "params.yaml", "bench/_tiny.py")
PIPELINE_FILES = ("stages", "dvc.yaml", "params.yaml", "requirements.lock", "flows/config.yaml", ".gitignore",
                  "bench/results/curriculum.json")  # the report's curriculum study


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = free_port()
PREFECT_HOME = Path(tempfile.mkdtemp(prefix="refinery-bench-prefect-"))
# Prefect reads its settings from the environment when it is imported: set them first.
os.environ.update(PREFECT_API_URL=f"http://127.0.0.1:{PORT}/api", PREFECT_HOME=str(PREFECT_HOME),
                  PREFECT_SERVER_ANALYTICS_ENABLED="false", DO_NOT_TRACK="1", DVC_NO_ANALYTICS="1",
                  PYTHONPATH=str(ROOT))

import yaml  # noqa: E402 (after the Prefect settings above)

from bench import _provenance  # noqa: E402 (after the Prefect settings above)
from bench._tiny import TINY, merge_existing  # noqa: E402 (after the Prefect settings above)
from flows.commands import command_env, dvc  # noqa: E402 (after the Prefect settings above)
from flows.config import WORKSPACE_ENV  # noqa: E402 (after the Prefect settings above)
from flows.serve import CREDENTIALS_FILE, is_healthy, load_or_create_credentials, start_server  # noqa: E402 (after the Prefect settings above)


def sh(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=command_env())  # the venv's python
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout + proc.stderr


def make_repo(repo: Path, num_docs: int, tiny: bool) -> None:
    """The committed pipeline (git HEAD: work in progress in the checkout does not disturb the figures)."""
    repo.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD", *PIPELINE_FILES], cwd=ROOT,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(repo, filter="data")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    if tiny:
        for name, values in TINY.items():
            merge_existing(params.get(name, {}), values)
    params["demo_corpus"]["num_docs"] = num_docs
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    sh(["git", "init", "-q"], repo)
    sh(["git", "config", "user.name", "bench"], repo)
    sh(["git", "config", "user.email", "bench@example.com"], repo)
    sh(dvc("init", "-q"), repo)
    sh(dvc("config", "core.analytics", "false"), repo)
    sh(["git", "add", "-A"], repo)
    sh(["git", "commit", "-q", "-m", "bench"], repo)


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def wait_for_deployments(serve: subprocess.Popen) -> None:
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with get_client(sync_client=True) as client:
                client.read_deployment_by_name("retrain/retrain")
            return
        except ObjectNotFound:
            if serve.poll() is not None:
                raise RuntimeError("flows.serve exited") from None
            time.sleep(0.5)
    raise TimeoutError("deployments did not appear")


def experiment_row(repo: Path, name: str) -> dict:
    for baseline in json.loads(sh(dvc("exp", "show", "--json"), repo)):
        for exp in baseline.get("experiments") or []:
            if exp["name"] == name:
                return exp["revs"][0]["data"]
    raise LookupError(f"experiment {name} is not in dvc exp show")


def ui_run(repo: Path, override: str) -> dict:
    from prefect.deployments import run_deployment

    name = "bench-ui-run"
    seconds, run = timed(lambda: run_deployment("pipeline/pipeline", timeout=7200,
                                                parameters={"set_params": [override], "experiment_name": name}))
    data = experiment_row(repo, name)
    section, _, rest = override.partition(".")
    key, _, value = rest.partition("=")
    shown = data["params"]["params.yaml"]["data"][section]
    for part in key.split("."):
        shown = shown[part]
    stages = list(yaml.safe_load((repo / "dvc.yaml").read_text())["stages"])
    metrics = sorted(data["metrics"])
    return {"seconds": round(seconds, 1), "state": run.state.type.value, "experiment": name, "override": override,
            "param_shown": shown, "param_matches": str(shown) == value, "metrics_files": metrics,
            "num_stages": len(stages)}


def overhead(repo: Path, repeats: int) -> dict:
    from prefect.deployments import run_deployment

    from flows.pipeline import pipeline

    sh(dvc("exp", "apply", "bench-ui-run"), repo)
    sh(dvc("repro"), repo)  # settles anything exp apply could not restore
    plain = [timed(lambda: sh(dvc("repro"), repo))[0] for _ in range(repeats)]
    os.environ[WORKSPACE_ENV] = str(repo)  # the workspace is bound by the environment, never a run parameter
    flow_runs = [timed(lambda: pipeline()) for _ in range(repeats)]
    assert all(all(s["outcome"] == "up to date" for s in r["stages"]) for _, r in flow_runs), flow_runs
    ui_seconds, run = timed(lambda: run_deployment("pipeline/pipeline", parameters={"experiment": False},
                                                   timeout=600))
    flow_s = [t for t, _ in flow_runs]
    return {"plain_dvc_repro_s": [round(t, 2) for t in plain], "flow_in_process_s": [round(t, 2) for t in flow_s],
            "flow_from_api_s": round(ui_seconds, 2), "flow_from_api_state": run.state.type.value,
            "overhead_vs_plain_dvc_s": round(statistics.median(flow_s) - statistics.median(plain), 2)}


def markdown(results: dict[str, Any]) -> list[str]:
    ui, up = results["ui_run"], results["up_to_date"]
    median_flow = statistics.median(up["flow_in_process_s"])
    return [
        "# Prefect flows", "", *_provenance.header(results),
        f"Demo corpus {results['num_docs']} documents{' (tiny stage settings)' if results['tiny'] else ''}; "
        f"{ui['num_stages']} DVC stages; the pipeline as committed (git HEAD).", "",
        "| check | measured | target | ok |", "|---|---|---|---|",
        f"| pipeline flow, every stage up to date, end to end (median of {len(up['flow_in_process_s'])}) "
        f"| {median_flow:.1f} s | < {OVERHEAD_TARGET_S:.0f} s | {'yes' if median_flow < OVERHEAD_TARGET_S else 'NO'} |",
        f"| same, started through the API as the UI does (runner subprocess included) | {up['flow_from_api_s']:.1f} s "
        f"| < {OVERHEAD_TARGET_S:.0f} s | {'yes' if up['flow_from_api_s'] < OVERHEAD_TARGET_S else 'NO'} |",
        f"| full pipeline run from the UI (`{ui['override']}`) listed by `dvc exp show` with params and metrics "
        f"| {ui['state']}, {ui['param_shown']} shown, {len(ui['metrics_files'])} metrics files, {ui['seconds']:.0f} s "
        f"| listed | {'yes' if ui['param_matches'] and ui['metrics_files'] else 'NO'} |", "",
        "Up-to-date run, seconds:", "",
        f"- plain `dvc repro`: {up['plain_dvc_repro_s']}",
        f"- `pipeline` flow in-process (one `dvc status`, a task and an artifact per stage, `dvc plots show`, "
        f"the summary): {up['flow_in_process_s']}",
        f"- Prefect's overhead, flow minus plain `dvc repro` (medians): {up['overhead_vs_plain_dvc_s']} s",
        f"- started through the API: {up['flow_from_api_s']} s, of which up to 2 s wait for the serving "
        f"process's poll (PREFECT_RUNNER_POLL_FREQUENCY) and the rest start a fresh Python for the run",
        "", f"Metrics files in the experiment: {', '.join(ui['metrics_files'])}", "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-docs", type=int, default=400)
    parser.add_argument("--no-tiny", dest="tiny", action="store_false", help="params.yaml's stage settings")
    parser.add_argument("--override", default="perplexity.reference.steps=30")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="flows", choices=("flows", "flows_full_demo"),
                        help="results file name under bench/results (flows_full_demo: the full demo's run)")
    args = parser.parse_args()
    stamp = _provenance.stamp("flows", MEASURES)
    auth, _ = load_or_create_credentials(PREFECT_HOME / CREDENTIALS_FILE)
    os.environ["PREFECT_API_AUTH_STRING"] = auth  # this process's client; flows.serve --attach reads it too
    server = start_server(PORT, auth)
    serve = None
    with tempfile.TemporaryDirectory(prefix="refinery-bench-flows-") as tmp:
        repo = Path(tmp) / "repo"
        try:
            make_repo(repo, args.num_docs, args.tiny)
            serve = subprocess.Popen([sys.executable, "-m", "flows.serve", "--attach", "--port", str(PORT), "--workspace",
                                      str(repo)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for_deployments(serve)
            results = {**stamp, "num_docs": args.num_docs, "tiny": args.tiny, "ui_run": ui_run(repo, args.override),
                       "up_to_date": overhead(repo, args.repeats)}
        finally:
            if serve is not None:
                serve.terminate()
                serve.wait(timeout=60)
            server.terminate()
            server.wait(timeout=60)
            shutil.rmtree(PREFECT_HOME, ignore_errors=True)
    _provenance.write(results, markdown, name=args.name)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    assert not is_healthy(os.environ["PREFECT_API_URL"]), "the chosen port is taken"
    main()
