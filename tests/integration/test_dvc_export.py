"""A real `dvc repro` of prune -> qat -> export on the debug preset, from a small trained teacher, tokenizer
and token shards placed where the upstream stages (train, tokenizer, perplexity) put them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, init_dvc_repo, sh
from tests.fixtures.compress import make_inputs
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.report import write_datasets

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture
def dvc_repo(repo_copy: Path, tmp_path: Path) -> Path:
    params = yaml.safe_load((repo_copy / "params.yaml").read_text())
    inputs = make_inputs(tmp_path / "inputs")
    for key, dst in (("teacher", params["prune"]["teacher_dir"]), ("tokenizer", params["export"]["tokenizer_dir"]),
                     ("tokens", params["prune"]["tokens_dir"])):
        shutil.copytree(inputs[key], repo_copy / dst)
    write_datasets(repo_copy)  # data/clean, data/semantic_filter, data/perplexity/docs: the model card's funnel
    params["prune"].update(num_threads=1, precision="fp32", calibration_batches=2, mlp_schedule=[0.5, 0.5],
                           head_schedule=[0.0, 0.5], channel_multiple=8)
    params["prune"]["distill"].update(steps=3, batch_size=4)
    params["qat"].update(num_threads=1, calibration_batches=2)
    params["qat"]["distill"].update(steps=3, batch_size=4)
    params["export"].update(num_threads=1, latency_runs=2, latency_rounds=1, val_batches=2)
    params["export"]["generate"].update(max_new_tokens=5)
    (repo_copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))
    return init_dvc_repo(repo_copy)


def test_repro_prune_qat_export_then_nothing_to_do(dvc_repo: Path):
    # --single-item: the chain from prune to export; its inputs (trained model, tokenizer, shards, datasets) are
    # already in place, and the report after it would need every upstream stage's metrics
    chain = [str(BIN / "dvc"), "repro", "--single-item", "prune", "qat", "export"]
    out = sh(chain, dvc_repo)
    for stage in ("prune", "qat", "export"):
        assert f"Running stage '{stage}'" in out
    metrics = json.loads((dvc_repo / "metrics" / "detail" / "export.json").read_text())
    assert metrics["parity.fp32_max_abs_diff"] < 1e-4 and metrics["half_mlp.step"] == 1
    for path in ("models/pruned/step_2/model.safetensors", "models/qat/qat/quant.safetensors",
                 "models/export/onnx/model.int8.onnx", "models/export/hf/config.json", "models/export/samples.json",
                 "metrics/export.csv"):
        assert (dvc_repo / path).is_file(), path
    lock = yaml.safe_load((dvc_repo / "dvc.lock").read_text())
    assert {"prune", "qat", "export"} <= set(lock["stages"])

    again = sh(chain, dvc_repo)
    assert "Running stage" not in again

    # `dvc metrics show` lists the headline only; `dvc plots show` draws the comparison of every model
    shown = json.loads(sh([str(BIN / "dvc"), "metrics", "show", "--json", "metrics/export.json"], dvc_repo))
    headline = shown[""]["data"]["metrics/export.json"]["data"]
    assert sorted(headline) == ["file_mb", "latency_ms", "ratio.int8_file_vs_fp32", "ratio.int8_latency_vs_fp32_b1",
                                "ratio.int8_ppl_vs_fp32"]
    assert headline["ratio.int8_file_vs_fp32"] == pytest.approx(metrics["ratio.int8_file_vs_fp32"], rel=1e-3)
    plots = json.loads(sh([str(BIN / "dvc"), "plots", "show", "--json", "export_models"], dvc_repo))
    spec = plots["data"]["export_models"][0]["content"]
    assert len(spec["repeat"]) == 3 and {row["model"] for row in spec["data"]["values"]} >= {"trained", "qat_int8"}
