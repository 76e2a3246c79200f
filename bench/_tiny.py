"""The smallest params that run the whole chain: per-stage overrides merged into a copy of params.yaml."""
from __future__ import annotations

from typing import Any

# Tiny settings per stage, applied only to keys params.yaml has (stages being built may rename keys: a
# missing one costs time, not correctness). Extend when a stage lands with a costly default.
TINY: dict[str, dict[str, Any]] = {
    "demo_corpus": {"num_docs": 400, "num_shards": 2},
    # one worker = in-process: a forked pool after the stage has started threads hung (futex) on 2 cores
    "clean": {"num_workers": 1},
    "semantic_filter": {"num_workers": 1},
    "semantic_embed": {"num_threads": 1},
    "tokenizer": {"vocab_size": 512},
    "perplexity": {"min_docs_per_lang": 10, "val_fraction": 0.1, "num_threads": 1,
                   "reference": {"preset": "debug", "steps": 20, "batch_size": 8}},
    "train": {"preset": "debug", "max_steps": 6, "micro_batch_size": 2, "gradient_accumulation_steps": 1,
              "num_threads": 1, "device": "cpu", "progress_bar": False, "max_restarts": 0,
              "parallel": {"data_parallel_size": 1}, "checkpoint": {"every": 0}, "eval": {"every": 0, "windows": 2}},
    "prune": {"device": "cpu", "num_threads": 1, "calibration_batches": 1, "val_batches": 1,
              "distill": {"steps": 2, "batch_size": 2}},
    "qat": {"num_threads": 1, "calibration_batches": 1, "val_batches": 1, "distill": {"steps": 2, "batch_size": 2}},
    "export": {"num_threads": 1, "latency_seq_len": 16, "throughput_batch_size": 2, "latency_runs": 1,
               "latency_rounds": 1, "val_batches": 1, "val_batch_size": 2},
}


def merge_existing(section: dict[str, Any], tiny: dict[str, Any]) -> None:
    for key, value in tiny.items():
        if key in section and isinstance(value, dict) and isinstance(section[key], dict):
            merge_existing(section[key], value)
        elif key in section:
            section[key] = value
