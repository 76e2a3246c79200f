"""The `retrain` flow against a real Prefect server and real `dvc status` / `dvc repro`.

The pipeline is one cheap stage that "trains" by copying one of three real debug-preset checkpoints,
picked by the newest raw file, so each test step controls whether the candidate is better or worse:
`a` (20 steps), `b` (150 steps: better than a), `c` (untrained: worse than b).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from flows.registry import MODEL_FILE
from flows.retrain import retrain
from stages.common.lm import bpe
from stages.common.lm.model import Transformer, preset, save_checkpoint
from stages.common.training.optim import OptimParams
from tests.fixtures.lm_corpus import one_torch_thread, synthetic_docs  # noqa: F401 (fixture)
from tests.fixtures.training import train_in_process
from tests.flows.conftest import flow_run_id, make_repo, shipped_config, task_runs

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("prefect_server", "one_torch_thread")]

EOS, PAD = "<|endoftext|>", "<|pad|>"
TRAINING_STEPS = {"a": 20, "b": 150, "c": 0}
SEQ_LEN = 32

PIPELINE = """
stages:
  train:
    cmd: python pick.py
    deps: [pick.py, raw]
    params: [train]
    outs:
      - ${train.model_dir}
    metrics:
      - metrics/train.json:
          cache: false
"""
PICK = """
    import json, os, shutil, yaml
    p = yaml.safe_load(open("params.yaml"))["train"]
    newest = sorted(os.listdir("raw"))[-1]
    name = open(os.path.join("raw", newest)).read().split()[-1]
    os.makedirs(p["model_dir"], exist_ok=True)
    shutil.copy(f"fixtures/models/{name}.safetensors", os.path.join(p["model_dir"], "model.safetensors"))
    os.makedirs("metrics", exist_ok=True)
    json.dump({"num_raw_files": len(os.listdir("raw"))}, open("metrics/train.json", "w"))
    print("trained model", name)
"""


@pytest.fixture(scope="module")
def fixtures_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BPE tokenizer, the three checkpoints, and Parquet docs with a validation split."""
    out = tmp_path_factory.mktemp("fixtures")
    texts = [d["text"] for d in synthetic_docs(300, seed=1)]
    tokenizer = bpe.train_bpe(texts, vocab_size=320, min_frequency=2, eos_token=EOS, pad_token=PAD)
    (out / "tokenizer").mkdir()
    bpe.save(tokenizer, out / "tokenizer", EOS, PAD)
    stream = np.concatenate([np.append(ids, 0) for ids in bpe.encode(tokenizer, texts)]).astype(np.int64)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = np.random.default_rng(step).integers(0, len(stream) - SEQ_LEN - 1, 16)
        rows = torch.from_numpy(np.stack([stream[s:s + SEQ_LEN + 1] for s in starts]))
        return rows[:, :-1], rows[:, 1:]

    for name, steps in TRAINING_STEPS.items():
        torch.manual_seed(0)
        model = Transformer(preset("debug", tokenizer.get_vocab_size()))
        if steps:
            train_in_process(model, batch, steps, OptimParams(lr=1e-2, warmup_steps=5))
        save_checkpoint(model, out / "models" / f"{name}.safetensors")
    docs = synthetic_docs(80, seed=2)
    (out / "docs").mkdir()
    pq.write_table(pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs],
                             "split": ["val" if i % 2 else "train" for i in range(len(docs))]}),
                   out / "docs" / "part-00000.parquet")
    return out


@pytest.fixture
def retrain_repo(tmp_path: Path, fixtures_dir: Path, in_workspace) -> Path:
    config = shipped_config(raw_inputs=["raw"], candidates=["${train.model_dir}/model.safetensors"],
                            tokenizer="fixtures/tokenizer", eval_docs="fixtures/docs", min_improvement=0.01,
                            num_threads=1)  # the scoring command: tiny models, a shared machine
    repo = make_repo(tmp_path / "repo", PIPELINE, {"train": {"model_dir": "models/train"}},
                     {"pick.py": PICK, "raw/0001.txt": "model: a\n"}, config)
    shutil.copytree(fixtures_dir, repo / "fixtures")
    return in_workspace(repo)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_promotes_better_keeps_worse_and_does_nothing_without_new_data(retrain_repo: Path):
    repo, champion = retrain_repo, retrain_repo / "models" / "champion"
    first = retrain()
    assert first["decision"] == "promoted" and first["reason"].startswith("no champion yet")
    assert sha256(champion / MODEL_FILE) == sha256(repo / "fixtures" / "models" / "a.safetensors")
    assert (champion / "tokenizer" / "tokenizer.json").is_file()
    eval_set = (repo / "models" / "eval_set.jsonl").read_bytes()
    assert len(eval_set.splitlines()) == 40  # the val half of the fixture docs, frozen

    (repo / "raw" / "0002.txt").write_text("model: b\n")  # new data: a better model
    state = retrain(return_state=True)
    second = state.result()
    # both models were scored by the command, its output in the flow run's log
    assert sorted(t.name for t in task_runs(flow_run_id(state)) if t.name.startswith("evaluate")) \
        == ["evaluate-candidate", "evaluate-champion"]
    assert flow_logs(flow_run_id(state)).count("refinery.evaluate INFO") == 2
    assert second["decision"] == "promoted" and second["reason"].startswith("better")
    assert second["metrics"]["candidate"]["bits_per_byte"] < 0.99 * second["metrics"]["champion"]["bits_per_byte"]
    assert sha256(champion / MODEL_FILE) == sha256(repo / "fixtures" / "models" / "b.safetensors")

    (repo / "raw" / "0003.txt").write_text("model: c\n")  # new data: a worse model
    third = retrain()
    assert third["decision"] == "kept champion" and third["reason"].startswith("not better")
    assert third["metrics"]["candidate"]["bits_per_byte"] > third["metrics"]["champion"]["bits_per_byte"]
    assert sha256(champion / MODEL_FILE) == sha256(repo / "fixtures" / "models" / "b.safetensors")
    assert sha256(repo / "models" / "train" / MODEL_FILE) == sha256(repo / "fixtures" / "models" / "c.safetensors")

    entries = json.loads((repo / "models" / "registry.json").read_text())["entries"]
    assert [e["decision"] for e in entries] == ["promoted", "promoted", "kept champion"]
    assert json.loads((champion / "champion.json").read_text()) == entries[1]
    assert len({e["eval_set"]["sha256"] for e in entries}) == 1  # every candidate met the same text
    assert (repo / "models" / "eval_set.jsonl").read_bytes() == eval_set
    last = entries[-1]
    assert last["dvc_lock_sha256"] == sha256(repo / "dvc.lock")
    assert last["git_revision"] == head_commit(repo) and last["candidate"]["path"] == "models/train/model.safetensors"
    assert last["pipeline_metrics"] == {"metrics/train.json": {"num_raw_files": 3}}

    state = retrain(return_state=True)  # nothing new
    assert state.result()["decision"] == "nothing new"
    assert len(json.loads((repo / "models" / "registry.json").read_text())["entries"]) == 3
    # only the check ran: no pipeline subflow (it would show as a task run too), no evaluation
    assert [t.name.rsplit("-", 1)[0] for t in task_runs(flow_run_id(state))] == ["detect-new-data"]
    assert "nothing to run" in flow_logs(flow_run_id(state))


def head_commit(repo: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()


def flow_logs(run_id) -> str:
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10, at_exit=False)  # logs are sent in batches: send this run's now
    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
    return "\n".join(log.message for log in logs)
