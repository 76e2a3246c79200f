"""A real Prefect server on a free loopback port, tiny DVC repos, and reads of what the API recorded."""
from __future__ import annotations

import json
import os
import socket
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import yaml

from flows.config import WORKSPACE_ENV
from flows.serve import CREDENTIALS_FILE, load_or_create_credentials, start_server
from tests.conftest import BIN, ROOT, init_dvc_repo, sh


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class PrefectServer:
    api_url: str
    port: int
    auth_string: str  # what the UI's login asks for and PREFECT_API_AUTH_STRING holds

    @property
    def ui_url(self) -> str:
        return self.api_url.removesuffix("/api")


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """The server `flows.serve` starts (authentication, CORS for its own origin only, UI included), on a free
    loopback port with its own PREFECT_HOME and SQLite file; points this process's Prefect settings (and
    its children's environment) at it, with its credentials."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    auth_string, _ = load_or_create_credentials(home / CREDENTIALS_FILE)
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_UI_STATIC_DIRECTORY": str(home / "ui"),
           "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home}/prefect.db"}
    for key in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING"):
        env.pop(key, None)
    log = open(home / "server.log", "wb")
    try:
        server = start_server(port, auth_string, base_env=env, output=log)
    except (RuntimeError, TimeoutError) as e:
        raise AssertionError(f"{e}\n{(home / 'server.log').read_text()}") from e
    api_url = f"http://127.0.0.1:{port}/api"
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, PREFECT_HOME, temporary_settings

    client = {"PREFECT_API_URL": api_url, "PREFECT_HOME": str(home), "PREFECT_API_AUTH_STRING": auth_string}
    saved = {k: os.environ.get(k) for k in client}
    os.environ.update(client)  # for subprocesses started by tests
    try:
        with temporary_settings(updates={PREFECT_API_URL: api_url, PREFECT_HOME: str(home),
                                         PREFECT_API_AUTH_STRING: auth_string}):
            yield PrefectServer(api_url, port, auth_string)
    finally:
        # Send what the log and event workers still hold while the server is up; else at exit they retry
        # a server that is gone, for over a minute.
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=10)
        EventsWorker.drain_all(timeout=10)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.fixture
def in_workspace(monkeypatch: pytest.MonkeyPatch):
    """Point the flows (this process's and the subprocesses' of a test) at a repository, as
    `flows.serve --workspace` does: the workspace is not a flow parameter."""
    def use(repo: Path) -> Path:
        monkeypatch.setenv(WORKSPACE_ENV, str(repo))
        return repo

    return use


def shipped_config(**retrain: Any) -> dict[str, Any]:
    """flows/config.yaml as shipped, with `retrain` keys replaced."""
    config = yaml.safe_load((ROOT / "flows" / "config.yaml").read_text())
    config["retrain"].update(retrain)
    return config


def write_config(repo: Path, config: dict[str, Any]) -> None:
    (repo / "flows").mkdir(exist_ok=True)
    (repo / "flows" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def git_commit(repo: Path, message: str = "state") -> None:
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-q", "-m", message], repo)


def make_repo(repo: Path, dvc_yaml: str, params: dict[str, Any], files: dict[str, str],
              config: dict[str, Any] | None = None) -> Path:
    """A git + DVC repo with the given pipeline, params and files, committed (experiments need a commit)."""
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "dvc.yaml").write_text(textwrap.dedent(dvc_yaml))
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(textwrap.dedent(text))
    write_config(repo, config or shipped_config())
    # metrics gitignored (the harder case: the project tracks them in git, so a worktree has them), and
    # checkpoints gitignored as in the project
    (repo / ".gitignore").write_text("/metrics/\n/ckpt/\n")
    init_dvc_repo(repo)
    sh(["git", "config", "user.name", "test"], repo)  # `dvc exp save` commits
    sh(["git", "config", "user.email", "test@example.com"], repo)
    git_commit(repo, "pipeline")
    return repo


# A two-stage pipeline of cheap commands: `count` repeats the raw text `count.n` times, `measure` records
# the length and keeps a checkpoint folder across runs (scratch, not a DVC output, gitignored, listed in the
# flows config's checkpoint_dirs, as the project's train stage does), replacing its file by rename as
# stages/common/training/checkpoint.py does.
# Metrics are gitignored (see make_repo). With $STAGE_CALLS set, each stage command appends
# "<stage> <pid>" to that file when it starts.
TWO_STAGES = """
stages:
  count:
    cmd: python count.py
    deps: [count.py, raw]
    params: [count]
    outs: [out/count.txt]
    metrics:
      - metrics/count.json:
          cache: false
  measure:
    cmd: python measure.py
    deps: [measure.py, out/count.txt]
    params: [measure]
    outs: [out/measure.txt]
    metrics:
      - metrics/measure.json:
          cache: false
"""
CALLED = """
        import os
        def called(stage):
            if os.environ.get("STAGE_CALLS"):
                with open(os.environ["STAGE_CALLS"], "a") as f:
                    f.write(f"{stage} {os.getpid()}\\n")
"""
TWO_STAGE_FILES = {
    "raw/a.txt": "hello\n",
    "count.py": CALLED + """
        import json, time, yaml
        called("count")
        p = yaml.safe_load(open("params.yaml"))["count"]
        time.sleep(p["sleep_s"])
        if p["fail"]:
            raise ValueError("corrupt raw shard raw/a.txt: bad header")
        text = "".join(open(os.path.join("raw", f)).read() for f in sorted(os.listdir("raw")))
        os.makedirs("out", exist_ok=True); os.makedirs("metrics", exist_ok=True)
        open("out/count.txt", "w").write(text * p["n"])
        json.dump({"n": p["n"], "chars": len(text * p["n"])}, open("metrics/count.json", "w"))
        print("count: wrote", len(text * p["n"]), "characters")
    """,
    "measure.py": CALLED + """
        import json, yaml
        called("measure")
        unit = yaml.safe_load(open("params.yaml"))["measure"]["unit"]
        n = len(open("out/count.txt").read())
        os.makedirs("metrics", exist_ok=True); os.makedirs("ckpt", exist_ok=True)
        open("out/measure.txt", "w").write(str(n))
        open("ckpt/.state.tmp", "w").write(f"{n} {unit}")
        os.replace("ckpt/.state.tmp", "ckpt/state.txt")
        json.dump({"length": n}, open("metrics/measure.json", "w"))
    """,
}
TWO_STAGE_PARAMS = {"count": {"n": 3, "sleep_s": 0, "fail": False}, "measure": {"unit": "chars", "work_dir": "work"}}


@pytest.fixture
def two_stage_repo(tmp_path: Path, in_workspace) -> Path:
    """The two-stage repo, as the flows' workspace."""
    config = {**shipped_config(), "checkpoint_dirs": ["ckpt"]}
    return in_workspace(make_repo(tmp_path / "repo", TWO_STAGES, TWO_STAGE_PARAMS, TWO_STAGE_FILES, config))


def flow_run_id(state) -> UUID:
    return state.state_details.flow_run_id


def task_runs(run_id: UUID) -> list:
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter

    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id={"any_": [run_id]}))


def artifacts(run_id: UUID) -> dict[str, Any]:
    """{key: artifact} of one flow run."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id={"any_": [run_id]}))
    return {a.key: a for a in found if a.key}


def read_flow_run(run_id: UUID):
    from prefect import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id)


def dvc(*args: str, cwd: Path) -> str:
    return sh([str(BIN / "dvc"), *args], cwd)


def exp_show(repo: Path) -> dict[str, dict]:
    """{experiment name: {"params": ..., "metrics": ...}} from `dvc exp show --json`."""
    shown = {}
    for baseline in json.loads(dvc("exp", "show", "--json", cwd=repo)):
        for exp in baseline.get("experiments") or []:
            data = exp["revs"][0]["data"]
            shown[exp["name"]] = {"params": data["params"]["params.yaml"]["data"],
                                  "metrics": {k: v["data"] for k, v in data["metrics"].items()}}
    return shown
