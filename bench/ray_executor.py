"""Benchmark the `clean` stage under the Ray executor against the local executor, on the demo corpus.

    python -m bench.ray_executor              # 2 workers, 3 rounds
    python -m bench.ray_executor --rounds 5

Targets: the Ray executor's outputs are identical to the local executor's (kept documents,
quarantine and metric counts), and its throughput is at least 0.8x the local executor's on 2 cores.
Rounds alternate local and Ray runs (a shared machine's load then hits both alike); the best round of
each counts, the median is reported too, and so is the load average around each run. Ray runs use a
local cluster started once (as a stage joining a running cluster with `address: auto` does); one more
run, first, has the stage start and stop its own cluster, to show that fixed cost separately.
Results: bench/results/ray_executor.json and ray_executor.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _provenance
from stages import clean
from stages.common.runtime.executor import init_ray
from stages.common.runtime.params import load_section
from stages.common.runtime.parquet import read_table

ROOT = Path(__file__).resolve().parents[1]

DEMO = ROOT / "data" / "raw" / "demo"
COUNT_PREFIXES = ("num_read", "num_kept", "num_quarantined", "dropped.", "kept.")
# The stage and its packages (the executors live in the runtime), its params and the demo corpus's generator
MEASURES = ("stages/clean.py", "stages/common/text", "stages/common/runtime", "stages/demo_corpus", "params.yaml")


def demo_corpus(tmp: Path) -> Path:
    """data/raw/demo, or the same corpus built in a temp copy of the repo when the checkout has none."""
    if DEMO.is_dir():
        return DEMO
    copy = tmp / "repo"
    copy.mkdir()
    for name in ("stages", "params.yaml", "requirements.lock"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, copy / name)
    subprocess.run([sys.executable, "-m", "stages.demo_corpus"], cwd=copy, check=True)
    return copy / "data" / "raw" / "demo"


def run_once(params: clean.Params, tmp: Path, name: str, **overrides) -> tuple[dict, str]:
    """Run the stage into tmp/name; return (metrics + load averages, digest of the docs and quarantine)."""
    out = tmp / name
    p = dataclasses.replace(params, out_dir=str(out / "clean"), metrics_path=str(out / "metrics.json"),
                            detail_path=str(out / "detail.json"), reasons_plot_path=str(out / "reasons.csv"), work_dir=str(out / "work"), **overrides)
    load_before = os.getloadavg()[0]
    metrics = clean.run(p)
    metrics["load_before"], metrics["load_after"] = load_before, os.getloadavg()[0]
    digest = hashlib.sha256()
    for part in ("docs", "quarantine"):
        table = read_table(out / "clean" / part)
        digest.update(json.dumps(table.to_pylist(), sort_keys=True, ensure_ascii=False, default=str).encode())
    shutil.rmtree(out)
    return metrics, digest.hexdigest()


def counts(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k.startswith(COUNT_PREFIXES)}


def markdown(results: dict[str, Any]) -> list[str]:
    d, corpus, settings = results["docs_per_s"], results["corpus"], results["settings"]
    lines = ["# clean: Ray executor vs local executor", "", *_provenance.header(results),
             f"- demo corpus: {corpus['records']} records, {corpus['input_mb']} MB, "
             f"{corpus['num_shards']} shards of {settings['batch_size']} records, {settings['workers']} workers",
             f"- identical outputs (docs, quarantine, counts) in every run: **{results['identical']}**",
             f"- local: best **{d['local_best']:.0f} docs/s**, median {d['local_median']:.0f}",
             f"- Ray (cluster running): best **{d['ray_best']:.0f} docs/s**, median {d['ray_median']:.0f}",
             f"- Ray / local: **{results['ratio_best']:.2f}x** (best), {results['ratio_median']:.2f}x (median); "
             "target 0.8x",
             f"- Ray with the stage starting its own local cluster (address \"\"): {d['ray_with_own_cluster']:.0f} "
             f"docs/s; ray.init alone {results['cluster_start_seconds']:.1f} s",
             "", "| round | local s | local docs/s | ray s | ray docs/s | load (1 min) before/after |",
             "| --- | --- | --- | --- | --- | --- |"]
    for i, (lm, rm) in enumerate(zip(results["rounds"]["local"], results["rounds"]["ray"]), start=1):
        lines.append(f"| {i} | {lm['seconds']:.2f} | {lm['docs_per_s']:.0f} | {rm['seconds']:.2f} | "
                     f"{rm['docs_per_s']:.0f} | {lm['load_before']:.1f}/{lm['load_after']:.1f}, "
                     f"{rm['load_before']:.1f}/{rm['load_after']:.1f} |")
    lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    args = parser.parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    stamp = _provenance.stamp("ray_executor", MEASURES)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        params = dataclasses.replace(load_section("clean", clean.Params, args.params), input=str(demo_corpus(tmp)),
                                     num_workers=args.workers)
        runs: dict[str, list[dict]] = {"local": [], "ray": []}
        digests: dict[str, set[str]] = {"local": set(), "ray": set()}
        # The stage starts (and stops) its own local cluster: the fixed cost of `address: ""`.
        cold, cold_digest = run_once(params, tmp, "cold", executor="ray")
        digests["ray"].add(cold_digest)
        t0 = time.perf_counter()
        init_ray("", num_cpus=args.workers)
        cluster_start = time.perf_counter() - t0
        for _ in range(args.rounds):
            for executor in ("local", "ray"):
                metrics, digest = run_once(params, tmp, executor, executor=executor)
                runs[executor].append(metrics)
                digests[executor].add(digest)
        import ray

        ray.shutdown()
    local, on_ray = runs["local"], runs["ray"]
    best = {name: max(m["docs_per_s"] for m in ms) for name, ms in runs.items()}
    median = {name: statistics.median(m["docs_per_s"] for m in ms) for name, ms in runs.items()}
    identical = (len(digests["local"]) == 1 and digests["local"] == digests["ray"]
                 and all(counts(m) == counts(local[0]) for m in local + on_ray + [cold]))
    results = {
        **stamp,
        "settings": {"workers": args.workers, "batch_size": params.batch_size},
        "corpus": {"records": local[0]["num_read"], "input_mb": round(local[0]["input_mb"], 2),
                   "num_shards": local[0]["num_shards"]},
        "identical": identical,
        "outputs_sha256": sorted(digests["local"] | digests["ray"]),
        "counts": counts(local[0]),
        "docs_per_s": {"local_best": round(best["local"], 1), "ray_best": round(best["ray"], 1),
                       "local_median": round(median["local"], 1), "ray_median": round(median["ray"], 1),
                       "ray_with_own_cluster": round(cold["docs_per_s"], 1)},
        "ratio_best": round(best["ray"] / best["local"], 3),
        "ratio_median": round(median["ray"] / median["local"], 3),
        "cluster_start_seconds": round(cluster_start, 2),
        "rounds": {name: [{k: round(m[k], 2) for k in ("seconds", "docs_per_s", "load_before", "load_after")}
                          for m in ms] for name, ms in runs.items()},
        "targets": {"identical": identical, "throughput_ratio_at_least_0.8": best["ray"] / best["local"] >= 0.8},
    }
    _provenance.write(results, markdown)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
