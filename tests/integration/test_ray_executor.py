"""The data stages under a local Ray cluster (executor: ray) give the local executor's outputs, and a
rerun after a failure redoes only the unfinished shards. One Ray instance (2 CPUs) for the module."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from stages import clean, perplexity, semantic_filter
from stages.common.runtime.atomic import SUCCESS_MARKER, is_complete
from stages.common.runtime.executor import WorkDir, init_ray, map_shards
from stages.common.runtime.parquet import read_table
from stages.common.text import filters
from tests.conftest import sh
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.stages.test_clean import corpus as clean_corpus
from tests.stages.test_clean import make_params as clean_params
from tests.stages.test_clean import outputs
from tests.stages.test_perplexity import corpus as ppl_corpus  # noqa: F401 (fixture)
from tests.stages.test_perplexity import make_params as ppl_params
from tests.stages.test_semantic_filter import pipeline  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration
COUNT_PREFIXES = ("num_read", "num_kept", "num_quarantined", "num_docs", "num_tokens", "num_scored", "dropped.",
                  "kept.", "docs.", "tokens.", "threshold.")


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    ray = pytest.importorskip("ray")
    assert init_ray("", num_cpus=2)  # the stages find it running and leave it so
    # pytest imports this file under a name Ray's workers cannot import: ship its functions by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


def counts(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k.startswith(COUNT_PREFIXES)}


def test_clean_under_ray_matches_local(tmp_path):
    raw = clean_corpus(tmp_path)  # the original and its exact and near copies land in different shards
    local = clean.run(clean_params(tmp_path / "local", raw, num_workers=2, batch_size=2))
    on_ray = clean.run(clean_params(tmp_path / "ray", raw, batch_size=2, executor="ray"))
    assert outputs(clean_params(tmp_path / "local", raw)) == outputs(clean_params(tmp_path / "ray", raw))
    assert counts(on_ray) == counts(local) and on_ray["num_shards"] == 6 and on_ray["num_shards_resumed"] == 0
    assert on_ray["dropped.dedup:exact"] == on_ray["dropped.dedup:near"] == 1
    assert on_ray["num_kept"] + on_ray["num_quarantined"] == on_ray["num_read"] == 12
    assert (tmp_path / "ray" / "out" / SUCCESS_MARKER).is_file() and not (tmp_path / "ray" / "work").exists()


def test_clean_rerun_after_a_failure_redoes_only_unfinished_shards(tmp_path, monkeypatch):
    """Simulated: the driver dies after reading two shard results (the workers have finished some more),
    then the results of two finished shards are deleted, as if lost with their node. The rerun must
    compute exactly the shards without a marker and publish the same outputs as an undisturbed run."""
    raw = clean_corpus(tmp_path)
    reference = clean_params(tmp_path / "reference", raw, num_workers=1, batch_size=2)
    clean.run(reference)
    params = clean_params(tmp_path / "run", raw, batch_size=2, executor="ray")
    read_results, reads = filters.read_results, []

    def driver_dies(folder):
        reads.append(folder)
        if len(reads) > 2:
            raise KeyboardInterrupt("driver killed")
        return read_results(folder)

    monkeypatch.setattr(filters, "read_results", driver_dies)
    with pytest.raises(KeyboardInterrupt):
        clean.run(params)
    monkeypatch.undo()
    assert not (Path(params.out_dir) / SUCCESS_MARKER).exists()  # nothing published
    work = Path(params.work_dir)
    for _ in range(100):  # the shards in flight were cancelled; an interrupted one may still be unwinding
        if not list(work.glob(".shard-*")):
            break
        time.sleep(0.1)
    finished = sorted(p for p in work.glob("shard-*") if is_complete(p))
    assert len(finished) >= 2
    for lost in finished[:2]:
        shutil.rmtree(lost)
    kept = {p.name: (p / SUCCESS_MARKER).stat().st_mtime_ns for p in finished[2:]}
    before_rerun = {p.name: (p / SUCCESS_MARKER).stat().st_mtime_ns for p in work.glob("shard-*") if is_complete(p)}
    assert before_rerun == kept

    shard_mtimes = {}
    original_remove = WorkDir.remove
    monkeypatch.setattr(WorkDir, "remove", lambda self: (shard_mtimes.update(
        {p.name: (p / SUCCESS_MARKER).stat().st_mtime_ns for p in self.path.glob("shard-*")}), original_remove(self)))
    metrics = clean.run(params)
    assert metrics["num_shards"] == 6 and metrics["num_shards_resumed"] == len(kept)
    assert all(shard_mtimes[name] == mtime for name, mtime in kept.items())  # finished shards left alone
    assert len(shard_mtimes) == 6
    assert outputs(params) == outputs(reference)
    assert not work.exists()


def test_clean_command_joins_a_running_cluster(repo_copy, tmp_path):
    """`python -m stages.clean` (the dvc.yaml command) with `address` set: the stage's functions live in
    __main__ there, and its tasks must still see what their worker's initializer set."""
    import ray
    import yaml

    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    params["clean"].update(input=str(clean_corpus(tmp_path)), batch_size=2, executor="ray",
                           address=ray.get_runtime_context().gcs_address)
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    sh([sys.executable, "-m", "stages.clean"], repo_copy)
    metrics = json.loads((repo_copy / "metrics" / "detail" / "clean.json").read_text())
    assert metrics["num_shards"] == 6 and metrics["num_kept"] == 3 and metrics["num_read"] == 12
    assert (repo_copy / "data" / "clean" / SUCCESS_MARKER).is_file()
    assert not (repo_copy / "data" / "work" / "clean").exists()


def _die_once(payload: tuple[int, str], folder: Path) -> dict:
    """Kills its own worker process on the first attempt at shard 1: a lost worker, not an exception."""
    value, attempts = payload
    marker = Path(attempts) / f"attempt-{value}"
    if value == 1 and not marker.exists():
        marker.write_text("")
        os._exit(1)
    (folder / "value").write_text(str(value))
    return {"value": value, "pid": os.getpid()}


def _no_init() -> None:
    pass


def test_a_killed_worker_is_retried(tmp_path):
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    work = WorkDir(tmp_path / "work", "fp")
    results = list(map_shards(_die_once, [(i, str(attempts)) for i in range(4)], work, "ray", "", 0, _no_init, ()))
    assert [r.summary["value"] for r in results] == [0, 1, 2, 3]
    assert (attempts / "attempt-1").is_file() and all(is_complete(r.folder) for r in results)
    assert (work.shard(1) / "value").read_text() == "1"


def test_semantic_filter_under_ray_matches_local(pipeline):  # noqa: F811
    local = dataclasses.replace(pipeline, num_workers=2, batch_size=1)
    on_ray = dataclasses.replace(pipeline, batch_size=1, executor="ray", out_dir=pipeline.out_dir + "_ray",
                                 metrics_path=pipeline.metrics_path + ".ray.json",
                                 detail_path=pipeline.metrics_path + ".ray.detail.json",
                                 work_dir=pipeline.work_dir + "_ray")
    m_local, m_ray = semantic_filter.run(local), semantic_filter.run(on_ray)
    for part in ("docs", "quarantine"):
        assert read_table(Path(local.out_dir) / part).to_pylist() == read_table(Path(on_ray.out_dir) / part).to_pylist()
    assert counts(m_ray) == counts(m_local) and m_ray["num_shards"] == 4
    assert m_ray["num_kept"] + m_ray["num_quarantined"] == m_ray["num_read"] == 4


@pytest.mark.usefixtures("one_torch_thread")
def test_perplexity_scoring_under_ray_matches_local(tmp_path, ppl_corpus):  # noqa: F811
    local = ppl_params(tmp_path, ppl_corpus, "local")
    on_ray = ppl_params(tmp_path, ppl_corpus, "ray", executor="ray")
    m_local, m_ray = perplexity.run(local), perplexity.run(on_ray)
    rows_local = read_table(Path(local.out_dir) / "docs").to_pylist()
    rows_ray = read_table(Path(on_ray.out_dir) / "docs").to_pylist()
    assert [r["id"] for r in rows_ray] == [r["id"] for r in rows_local]
    assert [r["tier"] for r in rows_ray] == [r["tier"] for r in rows_local]
    # Same weights, same batches, one thread on both sides: the same floats.
    assert np.array_equal([r["perplexity"] for r in rows_ray], [r["perplexity"] for r in rows_local])
    assert counts(m_ray) == counts(m_local)
    assert m_ray["score.num_shards"] == m_local["score.num_shards"] == 4
    for split in ("train", "val"):
        for tier in ("easy", "medium", "hard"):
            a = Path(local.out_dir) / "tokens" / split / f"{tier}.bin"
            assert a.read_bytes() == (Path(on_ray.out_dir) / "tokens" / split / f"{tier}.bin").read_bytes()
