"""The train stage across "nodes": two torchrun agents on loopback (`--nnodes=2`, c10d rendezvous),
one process each, against the single-node run with the same total process count (2).

Node loss: one agent and its worker are killed mid-run; the job is then relaunched on both nodes, as
Slurm (`--requeue`) or a Kubernetes PyTorchJob (restartPolicy OnFailure) would, and resumes from the
newest checkpoint. (torchelastic's in-place re-rendezvous of a restarted node failed here with torch
2.13: the surviving agent's new round still counts the dead node and times out waiting for its
`role_info` - see README, "Training across nodes".)"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from tests.conftest import ROOT
from tests.fixtures.train_inputs import write_token_shards
from tests.integration.test_train_torchrun import launch, losses, params_file, weights

pytestmark = pytest.mark.integration
STEPS = 120
OVERRIDES = {"max_steps": STEPS, "gradient_accumulation_steps": 2, "parallel": {"data_parallel_size": 2},
             "checkpoint": {"every": 10, "keep": 2}, "eval": {"every": 0, "windows": 4}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(params: Path, port: int, run_id: str, log: Path) -> subprocess.Popen:
    """One node's torchrun agent, exactly as a Slurm task or a PyTorchJob pod starts it."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}", "--max-restarts=0",
            "-m", "stages.train", "--params", str(params)]
    return subprocess.Popen(argv, cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def run_two_nodes(params: Path, tmp_path: Path, run_id: str) -> list[subprocess.Popen]:
    port = free_port()
    first = start_node(params, port, run_id, tmp_path / "node0.log")
    time.sleep(0.5)  # the first agent binds the rendezvous port and hosts the store
    return [first, start_node(params, port, run_id, tmp_path / "node1.log")]


def wait_all(nodes: list[subprocess.Popen], timeout: float = 240) -> list[int]:
    deadline = time.monotonic() + timeout
    return [node.wait(timeout=max(1.0, deadline - time.monotonic())) for node in nodes]


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> Path:
    return write_token_shards(tmp_path_factory.mktemp("tokens"))


@pytest.fixture(scope="module")
def single_node(tmp_path_factory, tokens) -> Path:
    run_dir = tmp_path_factory.mktemp("single_node")
    launch(params_file(run_dir, tokens, **OVERRIDES))  # torchrun --standalone --nproc-per-node=2
    return run_dir


def test_two_nodes_on_loopback_end_with_the_single_node_weights(tmp_path, tokens, single_node):
    params = params_file(tmp_path, tokens, **OVERRIDES)
    codes = wait_all(run_two_nodes(params, tmp_path, "two-nodes"))
    assert codes == [0, 0], (tmp_path / "node0.log").read_text()[-3000:]
    metrics = json.loads((tmp_path / "train.detail.json").read_text())
    assert metrics["num_processes"] == 2 and metrics["steps"] == STEPS
    expected, got = weights(single_node), weights(tmp_path)
    assert all(torch.equal(expected[name], got[name]) for name in expected)  # bit for bit
    assert losses(tmp_path) == losses(single_node)


def test_a_lost_node_then_a_relaunch_resumes_from_the_last_checkpoint(tmp_path, tokens, single_node):
    params = params_file(tmp_path, tokens, **OVERRIDES)
    nodes = run_two_nodes(params, tmp_path, "lost-node")
    deadline = time.monotonic() + 120
    while not (tmp_path / "ckpt" / "step_00000020").is_dir():
        assert time.monotonic() < deadline and all(n.poll() is None for n in nodes), "ended before the kill"
        time.sleep(0.01)
    lost = psutil.Process(nodes[1].pid)
    for proc in [lost, *lost.children(recursive=True)]:  # the agent and its worker: the whole node
        proc.kill()
    codes = wait_all(nodes, timeout=120)
    assert codes[0] != 0 and not (tmp_path / "train.json").exists()  # the job failed with its node

    codes = wait_all(run_two_nodes(params, tmp_path, "lost-node-relaunch"))
    assert codes == [0, 0], (tmp_path / "node0.log").read_text()[-3000:]
    metrics = json.loads((tmp_path / "train.detail.json").read_text())
    assert 20 <= metrics["resumed_from_step"] < STEPS
    assert [int(line.split(",")[0]) for line in (tmp_path / "steps.csv").read_text().splitlines()[1:]] == list(
        range(STEPS))
    expected, got = weights(single_node), weights(tmp_path)
    assert all(torch.equal(expected[name], got[name]) for name in expected)
