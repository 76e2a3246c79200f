"""The data stages on a real two-node Ray cluster, started the way a user starts one: `ray start --head` and
`ray start --address` (two nodes of one CPU each, on this machine). Each stage joins it with `address: auto`
(RAY_ADDRESS names the head, as on a machine outside the cluster), must publish exactly the bytes the local
executor publishes (every file byte for byte; of the metrics files, which carry wall and CPU times, every
other figure), and must have run its shard tasks on both nodes. The work folder is shared by both nodes here
because they are on one machine; on a real cluster it must be on a shared filesystem.

What Ray 2.60 does, and so why the fixture is as it is:
- `--temp-dir` may be given per node ("Can be specified per node", `ray start --help`): each node keeps its
  sockets, session and logs in its own folder, which is how the test tells the nodes' work apart. The head
  gets `--port 0` (a free port, which `ray start` writes to `<temp dir>/ray_current_cluster`).
- A loopback `--node-ip-address` is replaced with this machine's address (`resolve_ip_for_localhost`), and
  RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which keeps 127.0.0.1, makes `ray start --address` refuse to start a
  second node. So the nodes listen on this machine's address; the cluster requires a token of its own.
- `ray start --head` turns token authentication on by itself when ~/.ray/auth_token exists (a local
  `ray.init()` writes one), `ray start --address` does not and then fails with InvalidAuthToken: every node
  and the driver get RAY_AUTH_MODE=token and the path of the cluster's token explicitly.
- `ray stop` cannot pick a cluster: it stops every Ray process on this machine it may signal. Each node runs
  under `ray start --block` instead, which stops the processes it started on SIGTERM (they die with it if it
  is killed, and it gets SIGTERM if this process dies first); any process still using the cluster's folder
  after that is killed by its pid.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stages import clean, perplexity, semantic_filter
from stages.common.runtime.atomic import SUCCESS_MARKER
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.stages.test_clean import corpus as clean_corpus
from tests.stages.test_clean import make_params as clean_params
from tests.stages.test_perplexity import corpus as ppl_corpus  # noqa: F401 (fixture)
from tests.stages.test_perplexity import make_params as ppl_params
from tests.stages.test_semantic_filter import pipeline  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration
RAY_CLI = Path(sys.executable).with_name("ray")  # the venv's `ray`: its nodes run this Python
TASK_FUNCTION = "_ray_task"  # stages.common.runtime.executor's one Ray task, whatever the stage
START_TIMEOUT_S = 120
PR_SET_PDEATHSIG = 1  # prctl(2)


@dataclasses.dataclass
class Node:
    name: str  # its custom resource: node_a (the head) or node_b
    temp_dir: Path
    process: subprocess.Popen
    log: Path  # what `ray start` printed

    def tasks_run(self) -> int:
        """Shard tasks this node has started so far: a Ray worker writes `:task_name:<function>` to its log
        file as each task starts. (The log monitor, which would move dead workers' logs away, is off.)"""
        logs = self.temp_dir / "session_latest" / "logs"
        return sum(path.read_text(errors="replace").count(f":task_name:{TASK_FUNCTION}\n")
                   for path in logs.glob("worker-*.out"))


@dataclasses.dataclass
class Cluster:
    address: str  # the head's GCS, host:port
    nodes: list[Node]

    def tasks_run(self) -> dict[str, int]:
        return {node.name: node.tasks_run() for node in self.nodes}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start_node(name: str, root: Path, env: dict[str, str], *args: str) -> Node:
    """`ray start --block` for one node of one CPU with resource `name` and a small object store, in a
    session of its own; returns once the node has joined (`ray start` writes the cluster's address into its
    temp dir then)."""
    temp_dir = root / name
    temp_dir.mkdir()
    log = root / f"{name}.log"
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    command = [str(RAY_CLI), "start", "--block", *args, "--num-cpus", "1", "--resources", json.dumps({name: 1}),
               "--temp-dir", str(temp_dir), "--dashboard-agent-listen-port", str(free_port()),
               "--object-store-memory", str(100 * 1024 ** 2), "--include-log-monitor", "false", "--disable-usage-stats"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True,
                                   # SIGTERM when this process ends, were it killed before its teardown
                                   preexec_fn=lambda: prctl(PR_SET_PDEATHSIG, signal.SIGTERM))
    node = Node(name, temp_dir, process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (temp_dir / "ray_current_cluster").is_file():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_nodes([node])
            raise RuntimeError(f"ray start ({name}) did not start:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.2)
    return node


def stop_nodes(nodes: list[Node]) -> None:
    """SIGTERM to each `ray start --block`: it stops its node's processes, then exits (SIGKILL to its
    process group after 30 s)."""
    running = [node.process for node in nodes if node.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    for process in running:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def processes_using(root: Path) -> list[int]:
    """Pids of the processes (but this one) that name `root` in their command line or hold a file under it
    open: a node's processes all do, even those that rename themselves (`ray::DashboardAgent`)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            names = [(proc / "cmdline").read_bytes().decode(errors="replace"),
                     *(os.readlink(fd) for fd in (proc / "fd").iterdir())]
        except (FileNotFoundError, ProcessLookupError, PermissionError):  # it ended meanwhile, or is not ours
            continue
        if any(str(root) in name for name in names):
            pids.append(int(proc.name))
    return pids


def reload_ray_auth() -> None:
    """Ray caches the authentication mode and token per process: make this one read the environment again."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    reset_auth_token_state()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head node (resource node_a) and a second node (node_b) for the module. RAY_ADDRESS names the head
    while it runs, so a stage's `address: auto` joins it; the driver's connections end with each stage."""
    ray = pytest.importorskip("ray")
    from ray._private import ray_constants

    if not RAY_CLI.is_file():
        pytest.skip(f"no `ray` command beside {sys.executable}")
    if not sys.platform.startswith("linux"):
        pytest.skip("Ray supports multi-node clusters on Linux only")
    # Short: Ray's socket paths (<temp dir>/session_<date>_<pid>/sockets/plasma_store) must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="ray-"))
    token = root / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR)}
    env.update(auth, RAY_USAGE_STATS_ENABLED="0")
    nodes: list[Node] = []
    with pytest.MonkeyPatch.context() as mp:
        try:
            nodes.append(start_node("node_a", root, env, "--head", "--port", "0", "--include-dashboard", "false",
                                    "--dashboard-port", str(free_port()),
                                    "--ray-client-server-port", str(free_port())))
            address = (root / "node_a" / "ray_current_cluster").read_text().strip()
            nodes.append(start_node("node_b", root, env, "--address", address))

            # This process may have run a local cluster before (stages.common.runtime.executor.init_ray with
            # no address), which leaves it set to refuse multi-node clusters; and its auth state cached.
            mp.delenv(ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, raising=False)
            mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
            mp.delenv("RAY_AUTH_TOKEN", raising=False)
            for key, value in {**auth, "RAY_ADDRESS": address, "RAY_USAGE_STATS_ENABLED": "0"}.items():
                mp.setenv(key, value)
            reload_ray_auth()

            ray.init(address=address, configure_logging=False)
            try:
                alive = [n for n in ray.nodes() if n["Alive"]]
                assert sorted(name for n in alive for name in n["Resources"] if name.startswith("node_")) == \
                    ["node_a", "node_b"]
                assert [n["Resources"]["CPU"] for n in alive] == [1.0, 1.0]
            finally:
                ray.shutdown()
            yield Cluster(address, nodes)
        finally:
            if ray.is_initialized():  # a stage that failed while connected
                ray.shutdown()
            stop_nodes(nodes)
            for pid in processes_using(root):  # none so far: `ray start --block` stops them all
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    os.kill(pid, signal.SIGKILL)
            mp.undo()
            reload_ray_auth()
            shutil.rmtree(root, ignore_errors=True)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def is_time_or_placement(key: str) -> bool:
    """A metric that is no figure of the data: a wall or CPU time (`seconds`, `seconds.score`,
    `cpu_seconds.langid`, `reference.train_seconds`), a rate from one (`docs_per_s`, `score_tokens_per_s`), or
    the worker count."""
    return key == "num_workers" or any(part == "seconds" or part.endswith(("_seconds", "_per_s"))
                                       for part in key.split("."))


def figures(data: bytes) -> dict:
    return {k: v for k, v in json.loads(data).items() if not is_time_or_placement(k)}


def assert_same_outputs(local: Path, on_ray: Path, metrics_files: set[str]) -> None:
    """Every file the local run wrote under `local` has the same bytes under `on_ray`, and no other file
    is there; `metrics_files` (relative paths) hold times, so only their other figures are compared."""
    a, b = tree(local), tree(on_ray)
    assert sorted(a) == sorted(b)
    assert metrics_files <= set(a)
    differ = sorted(rel for rel in a if rel not in metrics_files and a[rel] != b[rel])
    assert not differ, f"not byte-identical under executor ray: {differ}"
    for rel in metrics_files:
        assert figures(a[rel]) == figures(b[rel]), rel


def run_on_cluster(cluster: Cluster, run: Callable[[], dict]) -> tuple[dict, dict[str, int]]:
    """The stage's metrics and the shard tasks each node started while it ran."""
    before = cluster.tasks_run()
    metrics = run()
    deadline = time.monotonic() + 10  # a worker's log line may reach its file after the task's result
    while True:
        after = cluster.tasks_run()
        ran = {name: after[name] - before[name] for name in after}
        if all(n > 0 for n in ran.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert all(n > 0 for n in ran.values()), f"shard tasks per node: {ran} (both nodes should have run some)"
    return metrics, ran


def test_clean_on_two_nodes_gives_the_local_bytes(cluster, tmp_path):
    raw = clean_corpus(tmp_path)  # 12 records, 6 shards of 2
    clean.run(clean_params(tmp_path / "local", raw, num_workers=1, batch_size=2))
    metrics, ran = run_on_cluster(cluster, lambda: clean.run(
        clean_params(tmp_path / "ray", raw, batch_size=2, executor="ray", address="auto")))
    assert metrics["num_shards"] == 6 and metrics["num_read"] == 12 and metrics["num_kept"] == 3
    assert sum(ran.values()) >= metrics["num_shards"]  # dedup may run tasks of its own
    assert (tmp_path / "ray" / "out" / SUCCESS_MARKER).is_file() and not (tmp_path / "ray" / "work").exists()
    assert_same_outputs(tmp_path / "local", tmp_path / "ray", {"metrics/clean.json", "metrics/clean.detail.json"})


def test_semantic_filter_on_two_nodes_gives_the_local_bytes(cluster, pipeline, tmp_path):  # noqa: F811
    def under(name: str, **placement) -> semantic_filter.Params:
        root = tmp_path / name
        return dataclasses.replace(pipeline, out_dir=str(root / "out"), metrics_path=str(root / "m" / "filter.json"),
                                   detail_path=str(root / "m" / "filter.detail.json"), work_dir=str(root / "work"),
                                   batch_size=1, **placement)

    semantic_filter.run(under("local", num_workers=1))
    metrics, ran = run_on_cluster(cluster, lambda: semantic_filter.run(under("ray", executor="ray", address="auto")))
    assert metrics["num_shards"] == 4 == sum(ran.values()) and metrics["num_read"] == 4
    assert_same_outputs(tmp_path / "local", tmp_path / "ray", {"m/filter.json", "m/filter.detail.json"})


@pytest.mark.usefixtures("one_torch_thread")
def test_perplexity_scoring_on_two_nodes_gives_the_local_bytes(cluster, tmp_path, ppl_corpus):  # noqa: F811
    perplexity.run(ppl_params(tmp_path, ppl_corpus, "local"))
    metrics, ran = run_on_cluster(cluster, lambda: perplexity.run(
        ppl_params(tmp_path, ppl_corpus, "ray", executor="ray", address="auto")))
    assert metrics["score.num_shards"] == 4 == sum(ran.values())
    assert_same_outputs(tmp_path / "local", tmp_path / "ray", {"metrics.json", "metrics.detail.json"})
