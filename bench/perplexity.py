"""Benchmark the tokenizer/perplexity stages against their targets.

    python -m bench.perplexity                  # all three parts, params.yaml settings, demo corpus
    python -m bench.perplexity --skip-stages    # only the scoring and shard-reader micro-benchmarks

1. scoring: tokens/s of `score_documents` with the default reference model (the `perplexity.reference`
   preset, the tokenizer's vocabulary size, `perplexity.precision`) on real demo documents when the
   clean docs exist, else on synthetic ones. Target: >= 20,000 tokens/s on 2 cores.
2. shard reader: training windows/s served by `TierSampler` from memory-mapped shards, against the
   tokens/s at which the same model trains on them (`Trainer.train_step` in one process, the
   reference LM's loop; same batch and precision).
   Target: the reader is >= 100x faster.
3. stages: runs `tokenizer` and `perplexity` with params.yaml settings on the demo corpus in a temp
   folder (their wall time is the demo's cost) and reads the tier target from the metrics: the mean
   perplexity of the hard tier >= 2x the easy tier's in each language, and the reference LM's
   validation perplexity.
4. scoring memory: private memory (RssAnon) of a fresh process after each of `--memory-shards` shards of
   1,024 synthetic documents (new random lengths every shard) are scored, with the scorer's shape buckets
   (default) and, side by side, with every width and projection size its own shape (`WIDTH_STEP` and
   `NLL_ROWS_STEP` set to 1). Growth: the median reading of the last third of the shards against that of the
   middle third. The first third is warm-up: the allocator's arenas settle over the first ~6 shards (a 26-shard
   run read 193-215 MB there, then 207-221 MB to the end), and a 13-shard run compared part of that climb with
   the plateau. One reading moves by a few MB as the allocator keeps or returns pages, so a single end point is
   noise. Target: under 5% with the buckets.

Timings on a shared machine are noisy: each micro-benchmark reports the best and the median of several
repeats. Results: bench/results/perplexity.json and perplexity.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench import _provenance
from stages import perplexity, tokenizer
from stages.common.lm import bpe, scoring
from stages.common.lm.model import Transformer, preset
from stages.common.lm.scoring import score_documents
from stages.common.lm.token_shards import TIERS, TierMix, TierSampler, TokenShard, TokenShardWriter
from stages.common.runtime.device import resolve_precision, seed_everything
from stages.common.runtime.params import load_section
from stages.common.runtime.parquet import read_table
from stages.common.training.trainer import DynamicClip, TrainConfig, in_process

ROOT = Path(__file__).resolve().parents[1]
SCORING_TARGET = 20_000
READER_TARGET = 100
TIER_TARGET = 2.0
MEMORY_GROWTH_TARGET = 0.05
# The tokenizer and perplexity stages and their packages, and the stages that make the documents they read
MEASURES = ("stages/tokenizer.py", "stages/perplexity.py", "stages/common/lm", "stages/common/training",
            "stages/common/runtime", "stages/semantic_embed.py", "stages/semantic_head.py", "stages/semantic_filter.py",
            "stages/common/semantic", "stages/clean.py", "stages/common/text", "stages/demo_corpus", "params.yaml")


def repeat(fn, repeats: int) -> list[float]:
    fn()  # warm-up: allocator, oneDNN kernel selection
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def demo_docs(tok_params: tokenizer.Params, num_tokens: int) -> tuple[list[np.ndarray], str]:
    """About `num_tokens` tokens of demo documents (every n-th doc, so both languages and all lengths),
    or synthetic documents with the demo's length profile when the clean docs or tokenizer are absent."""
    docs_dir, tok_dir = ROOT / tok_params.input_dir, ROOT / tok_params.out_dir
    if (docs_dir / "part-00000.parquet").is_file() and (tok_dir / bpe.TOKENIZER_FILE).is_file():
        texts = read_table(docs_dir, ["text"]).column("text").to_pylist()
        encoded = bpe.encode(bpe.load(tok_dir), texts[::7])
        docs, total = [], 0
        for ids in encoded:
            docs.append(ids)
            total += len(ids)
            if total >= num_tokens:
                break
        return docs, f"demo documents ({len(docs)} docs, every 7th)"
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(5.6, 0.6, size=num_tokens // 250), 20, 4000).astype(int)
    return [rng.integers(2, tok_params.vocab_size, size=n) for n in lengths], "synthetic documents"


def bench_scoring(params: perplexity.Params, tok_params: tokenizer.Params, repeats: int) -> dict:
    seed_everything(0)
    device = torch.device("cpu")
    precision = resolve_precision(params.precision, device)
    model = Transformer(preset(params.reference.preset, tok_params.vocab_size)).eval()
    docs, source = demo_docs(tok_params, 200_000)
    num_tokens = sum(min(len(d), params.max_score_tokens or len(d)) for d in docs)
    times = repeat(lambda: score_documents(model, docs, 0, params.max_score_tokens, params.score_batch_tokens,
                                           precision, device), repeats)
    return {
        "preset": params.reference.preset, "vocab_size": tok_params.vocab_size, "precision": precision,
        "num_params": model.num_params(), "docs": source, "num_tokens": num_tokens, "threads": torch.get_num_threads(),
        "tokens_per_s_best": round(num_tokens / min(times)),
        "tokens_per_s_median": round(num_tokens / statistics.median(times)),
        "target": SCORING_TARGET, "pass": num_tokens / statistics.median(times) >= SCORING_TARGET,
    }


def bench_reader(params: perplexity.Params, tok_params: tokenizer.Params, repeats: int) -> dict:
    seed_everything(0)
    device = torch.device("cpu")
    precision = resolve_precision(params.precision, device)
    cfg = preset(params.reference.preset, tok_params.vocab_size)
    batch_size, seq_len = params.reference.batch_size, cfg.max_seq_len
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for i, tier in enumerate(TIERS):  # 3 x 2M tokens, like the demo's shards
            writer = TokenShardWriter(Path(tmp) / tier, tok_params.vocab_size, 0)
            for _ in range(4000):
                writer.add(rng.integers(1, tok_params.vocab_size, size=500))
            writer.close()
        shards = {tier: TokenShard(Path(tmp) / tier) for tier in TIERS}
        sampler = TierSampler(shards, TierMix(), seq_len, batch_size, total_steps=1000, seed=0)
        num_batches = 200
        read_times = repeat(lambda: [sampler.batch(step) for step in range(num_batches)], repeats)
        read_tps = num_batches * batch_size * seq_len / statistics.median(read_times)

        model = Transformer(cfg)
        train_cfg = TrainConfig(max_steps=10_000, micro_batch_size=batch_size, gradient_accumulation_steps=1,
                                seq_len=seq_len, precision=precision, optim=params.reference.optim,
                                dynamic_clip=DynamicClip(enabled=False), eval_windows=0)
        trainer = in_process(model, sampler, train_cfg, device)

        def train_steps(n: int = 5) -> None:
            for _ in range(n):
                trainer.train_step()

        train_times = repeat(train_steps, max(2, repeats // 2))
        train_tps = 5 * batch_size * seq_len / statistics.median(train_times)
    return {
        "batch_size": batch_size, "seq_len": seq_len, "precision": precision,
        "reader_tokens_per_s": round(read_tps), "train_tokens_per_s": round(train_tps),
        "train_tokens_per_s_best": round(5 * batch_size * seq_len / min(train_times)),
        "ratio": round(read_tps / train_tps, 1), "target": READER_TARGET, "pass": read_tps / train_tps >= READER_TARGET,
    }


def rss_anon_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("RssAnon:"))


def memory_probe(params: perplexity.Params, tok_params: tokenizer.Params, shards: int, step: int) -> None:
    """In a fresh process: print RssAnon (MB) after each scored shard, as one JSON line."""
    if step:
        scoring.WIDTH_STEP = scoring.NLL_ROWS_STEP = step
    seed_everything(0)
    device = torch.device("cpu")
    model = Transformer(preset(params.reference.preset, tok_params.vocab_size)).eval()
    rng = np.random.default_rng(0)
    after = []
    for _ in range(shards):
        lengths = np.clip(rng.lognormal(5.0, 1.0, size=1024), 2, 20_000).astype(int)
        docs = [rng.integers(2, tok_params.vocab_size, size=n) for n in lengths]
        score_documents(model, docs, 0, params.max_score_tokens, params.score_batch_tokens,
                        resolve_precision(params.precision, device), device)
        after.append(round(rss_anon_mb(), 1))
    print(json.dumps(after))


def bench_memory(shards: int) -> dict:
    runs = {}
    for name, step in (("buckets", 0), ("every_shape", 1)):
        out = subprocess.run([sys.executable, "-m", "bench.perplexity", "--memory-probe", str(step),
                              "--memory-shards", str(shards)], cwd=ROOT, check=True, capture_output=True, text=True)
        after = json.loads(out.stdout.strip().splitlines()[-1])
        third = max(1, len(after) // 3)
        middle, last = statistics.median(after[-2 * third:-third]), statistics.median(after[-third:])
        runs[name] = {"rss_anon_mb_after_shard": after, "middle_third_median_mb": middle, "last_third_median_mb": last,
                      "growth": round(last / middle - 1, 4)}
    growth = runs["buckets"]["growth"]
    return {"shards": shards, "docs_per_shard": 1024, "precision": resolve_precision(
            load_section("perplexity", perplexity.Params).precision, torch.device("cpu")),
            "width_step": scoring.WIDTH_STEP, "nll_rows_step": scoring.NLL_ROWS_STEP, **runs,
            "target": MEMORY_GROWTH_TARGET, "pass": growth <= MEMORY_GROWTH_TARGET}


def bench_stages(tok_params: tokenizer.Params, params: perplexity.Params) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tok_p = dataclasses.replace(tok_params, input_dir=str(ROOT / tok_params.input_dir), out_dir=f"{tmp}/tokenizer",
                                    metrics_path=f"{tmp}/tokenizer.json", detail_path=f"{tmp}/tokenizer_detail.json")
        t0 = time.perf_counter()
        tok_metrics = tokenizer.run(tok_p)
        tok_seconds = time.perf_counter() - t0
        ppl_p = dataclasses.replace(params, input_dir=str(ROOT / params.input_dir), tokenizer_dir=tok_p.out_dir,
                                    out_dir=f"{tmp}/perplexity", model_dir=f"{tmp}/reference_lm",
                                    metrics_path=f"{tmp}/perplexity.json", detail_path=f"{tmp}/perplexity_detail.json",
                                    plot_path=f"{tmp}/hist.csv",
                                    work_dir=f"{tmp}/work")
        t0 = time.perf_counter()
        metrics = perplexity.run(ppl_p)
        ppl_seconds = time.perf_counter() - t0
    langs = sorted(k.split(".")[1] for k in metrics if k.startswith("hard_easy_ratio."))
    ratios = {lang: metrics[f"hard_easy_ratio.{lang}"] for lang in langs}
    return {
        "tokenizer_seconds": round(tok_seconds, 1), "perplexity_seconds": round(ppl_seconds, 1),
        "perplexity_seconds_by_phase": {k.split(".")[1]: v for k, v in metrics.items() if k.startswith("seconds.")},
        "chars_per_token": {k.split(".")[1]: v for k, v in tok_metrics.items() if k.startswith("chars_per_token.")},
        "num_docs": metrics["num_docs"], "num_tokens": metrics["num_tokens"],
        "num_scored_tokens": metrics["num_scored_tokens"], "stage_score_tokens_per_s": metrics["score_tokens_per_s"],
        "reference_train_tokens_per_s": metrics.get("reference.train_tokens_per_s"),
        "reference_val_perplexity": metrics["reference.val_perplexity"], "val_perplexity": metrics["val_perplexity"],
        "reference_final_loss": metrics.get("reference.final_loss"),
        "hard_easy_ratio": ratios,
        "mean_perplexity": {lang: {t: metrics[f"mean_perplexity.{lang}.{t}"] for t in TIERS} for lang in langs},
        "docs_per_tier": {lang: {t: metrics[f"docs.{lang}.{t}"] for t in TIERS} for lang in langs},
        "target": TIER_TARGET, "pass": all(r >= TIER_TARGET for r in ratios.values()),
    }


def markdown(results: dict[str, Any]) -> list[str]:
    lines = ["# perplexity benchmark", "", *_provenance.header(results), f"torch {results['machine']['torch']}.", ""]
    s = results["scoring"]
    lines += ["## scoring (target: >= 20,000 tokens/s on 2 cores)", "",
              f"- model `{s['preset']}` ({s['num_params'] / 1e6:.2f}M params, vocab {s['vocab_size']}), "
              f"{s['precision']}, "
              f"{s['threads']} threads, {s['num_tokens']} tokens of {s['docs']}",
              f"- **{s['tokens_per_s_median']:,} tokens/s** median (best {s['tokens_per_s_best']:,}): "
              f"{'PASS' if s['pass'] else 'FAIL'}", ""]
    r = results["reader"]
    lines += ["## shard reader vs training (target: reader >= 100x faster)", "",
              f"- batch {r['batch_size']} x {r['seq_len']} tokens, {r['precision']}",
              f"- reader **{r['reader_tokens_per_s']:,} tokens/s**, training {r['train_tokens_per_s']:,} tokens/s "
              f"(best {r['train_tokens_per_s_best']:,}): **{r['ratio']}x** {'PASS' if r['pass'] else 'FAIL'}", ""]
    if "memory" in results:
        m = results["memory"]
        lines += [f"## scoring memory (target: private memory grows < {m['target']:.0%})", "",
                  f"RssAnon of a fresh process after each of {m['shards']} shards of {m['docs_per_shard']} synthetic "
                  f"documents (new random lengths every shard), {m['precision']}:", "",
                  "| shapes | MB after each shard | median, middle third | median, last third | growth |",
                  "| --- | --- | ---: | ---: | ---: |"]
        for name, label in (("buckets", f"widths in steps of {m['width_step']}, projection rows of "
                                         f"{m['nll_rows_step']} (the stage)"),
                            ("every_shape", "every width and projection size its own shape")):
            r = m[name]
            lines.append(f"| {label} | {', '.join(f'{v:.0f}' for v in r['rss_anon_mb_after_shard'])} | "
                         f"{r['middle_third_median_mb']:.0f} | {r['last_third_median_mb']:.0f} | {r['growth']:+.1%} |")
        lines += ["", f"**{'PASS' if m['pass'] else 'FAIL'}**", ""]
    if "stages" in results:
        st = results["stages"]
        lines += ["## stages on the demo corpus (target: hard-tier mean perplexity >= 2x easy, per language)", "",
                  f"- tokenizer stage {st['tokenizer_seconds']} s, perplexity stage {st['perplexity_seconds']} s "
                  f"(phases: {st['perplexity_seconds_by_phase']})",
                  f"- {st['num_docs']} docs, {st['num_tokens']:,} tokens ({st['num_scored_tokens']:,} scored, "
                  f"{st['stage_score_tokens_per_s']:,.0f} tokens/s in the stage); chars/token {st['chars_per_token']}",
                  f"- reference LM: validation perplexity **{st['reference_val_perplexity']}** (all validation docs: "
                  f"{st['val_perplexity']}), final train loss {st['reference_final_loss']}, "
                  f"{st['reference_train_tokens_per_s']} tokens/s",
                  f"- hard/easy mean perplexity: **{st['hard_easy_ratio']}** {'PASS' if st['pass'] else 'FAIL'}",
                  f"- mean perplexity per tier: {st['mean_perplexity']}",
                  f"- documents per tier: {st['docs_per_tier']}", ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-stages", action="store_true", help="only the scoring and reader micro-benchmarks")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-shards", type=int, default=24, help="shards of the scoring-memory part")
    parser.add_argument("--memory-probe", type=int, default=None, help=argparse.SUPPRESS)  # internal: one run
    args = parser.parse_args()
    os.chdir(ROOT)
    tok_params = load_section("tokenizer", tokenizer.Params)
    params = load_section("perplexity", perplexity.Params)
    if args.memory_probe is not None:
        memory_probe(params, tok_params, args.memory_shards, args.memory_probe)
        return
    stamp = _provenance.stamp("perplexity", MEASURES)
    results: dict[str, Any] = {**stamp, "machine": {**stamp["machine"], "torch": torch.__version__}}
    results["scoring"] = bench_scoring(params, tok_params, args.repeats)
    print(json.dumps(results["scoring"]), flush=True)
    results["reader"] = bench_reader(params, tok_params, args.repeats)
    print(json.dumps(results["reader"]), flush=True)
    results["memory"] = bench_memory(args.memory_shards)
    print(json.dumps(results["memory"]), flush=True)
    if not args.skip_stages:
        results["stages"] = bench_stages(tok_params, params)
        print(json.dumps(results["stages"]), flush=True)
    _provenance.write(results, markdown)


if __name__ == "__main__":
    main()
