"""README "Your own data", step by step, on a mixed folder: `refinery init`, the files in corpus/ (a WARC
crawl, a Parquet export whose text is in `content`, a CSV file), `dvc add`, `clean.sources`, labels,
params sized for a small corpus, `refinery check`, `dvc repro` through `export`, `refinery summary`.
Every record is accounted for and none is lost to a field name."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stages.demo_corpus import stage as demo_corpus
from tests.conftest import BIN, sh
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.mixed_corpus import SOURCES, write_mixed_folder

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_torch_thread")]

# README step 6 for a corpus of a few hundred documents on a laptop: a small model, short runs.
SMALL_CORPUS = {
    "perplexity": {"val_fraction": 0.1, "reference": {"steps": 30, "batch_size": 8}, "num_threads": 1},
    "tokenizer": {"vocab_size": 512},
    "train": {"preset": "debug", "max_steps": 20, "micro_batch_size": 4},
    "prune": {"num_threads": 1, "precision": "fp32", "calibration_batches": 2, "mlp_schedule": [0.5],
              "head_schedule": [0.0], "channel_multiple": 8, "distill": {"steps": 3, "batch_size": 4}},
    "qat": {"num_threads": 1, "calibration_batches": 2, "distill": {"steps": 3, "batch_size": 4}},
    "export": {"num_threads": 1, "latency_runs": 2, "latency_rounds": 1, "val_batches": 2,
               "generate": {"max_new_tokens": 5}},
}


def merge(into: dict, changes: dict) -> None:
    for key, value in changes.items():
        if isinstance(value, dict):
            merge(into.setdefault(key, {}), value)
        else:
            into[key] = value


SURROGATE = re.compile("[\ud800-\udfff]")


def demo_texts_and_labels(folder: Path) -> tuple[list[str], Path]:
    """Texts of a small demo corpus (its malformed records, duplicates and other languages included) and
    its semantic-filter labels, standing in for a user's documents and labels."""
    params = demo_corpus.Params(out_dir=str(folder / "raw"), labels_path=str(folder / "labels.jsonl"),
                                semantic_labels_path=str(folder / "semantic_labels.jsonl"),
                                metrics_path=str(folder / "m.json"), detail_path=str(folder / "d.json"),
                                num_docs=900, num_shards=1, warc_docs=0)
    demo_corpus.run(params)
    texts = []
    for path in sorted((folder / "raw").glob("*.jsonl.gz")):
        for line in gzip.decompress(path.read_bytes()).splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            text = record.get("text") if isinstance(record, dict) else None
            # Exports hold UTF-8 (a JSON escape can carry a lone surrogate, which Parquet refuses) and texts
            # under clean.max_record_bytes (a CSV field over it that spans lines is split: docs/clean.md)
            if isinstance(text, str) and text.strip() and len(text) < 1_000_000 and not SURROGATE.search(text):
                texts.append(text)
    return texts, Path(params.semantic_labels_path)


def test_own_mixed_folder_from_init_to_export(tmp_path: Path):
    ws = tmp_path / "ws"
    refinery = str(BIN / "refinery")
    sh([refinery, "init", str(ws)], tmp_path)
    # Before the data is there, check names what is missing, one line each.
    empty = subprocess.run([refinery, "check"], cwd=ws, capture_output=True, text=True, timeout=300)
    assert empty.returncode == 2 and "Traceback" not in empty.stderr, empty.stderr
    assert all(line.startswith("error: ") for line in empty.stderr.splitlines()) and "labels" in empty.stderr
    texts, labels = demo_texts_and_labels(tmp_path / "demo")
    num_records = write_mixed_folder(ws / "corpus", texts)
    shutil.copy2(labels, ws / "labels" / "labels.jsonl")
    sh([str(BIN / "dvc"), "add", "corpus", "labels/labels.jsonl"], ws)

    params = yaml.safe_load((ws / "params.yaml").read_text())
    params["clean"]["sources"] = SOURCES
    merge(params, SMALL_CORPUS)
    (ws / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False, allow_unicode=True))

    checked = sh([refinery, "check"], ws)
    assert all(f"source '{name}'" in checked for name in num_records), checked
    sh([str(BIN / "dvc"), "repro"], ws, timeout=1500)

    clean = json.loads((ws / "metrics" / "detail" / "clean.json").read_text())
    assert clean["num_read"] == sum(num_records.values()) == clean["num_kept"] + clean["num_quarantined"]
    assert {name: clean[f"source.{name}.num_read"] for name in num_records} == num_records
    assert all(clean[f"source.{name}.num_kept"] > 0 for name in num_records)
    assert "dropped.invalid:missing_text" not in clean  # no record lost to a field name
    semantic = json.loads((ws / "metrics" / "detail" / "semantic_filter.json").read_text())
    assert semantic["num_read"] == clean["num_kept"] == semantic["num_kept"] + semantic["num_quarantined"]
    for path in ("models/export/onnx/model.int8.onnx", "models/export/hf/config.json", "reports/index.html"):
        assert (ws / path).is_file(), path

    report = (ws / "reports" / "index.html").read_text(encoding="utf-8")
    assert "Per input source" in report and all(f"<td>{name}</td>" in report for name in num_records)
    summary = sh([refinery, "summary"], ws)
    assert all(f"source {name}" in summary for name in num_records) and "stale" not in summary
    assert "Running stage" not in sh([str(BIN / "dvc"), "repro"], ws)
