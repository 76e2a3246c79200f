"""Does the perplexity curriculum help? The train stage under four tier mixes, tier stability, tier contents.

    python -m bench.curriculum                    # after `dvc repro` (reads data/perplexity, models/tokenizer,
                                                  # data/raw/demo_labels.jsonl; writes nothing there)
    python -m bench.curriculum --steps 60 --seeds 0 --stability-docs 200   # a quick look

1. Arms: the train stage's own `stages.train.run`, in this process (one process, the path a lone worker
   takes: no torchrun, no process group), with params.yaml's `train` section and these overrides: the arm's
   `tier_mix`, `seed` (model init and data order), `max_steps` (fewer than the demo's, warmup scaled with
   them), one process with the demo's global batch as `micro_batch_size`, checkpoints only at the end, every
   output in a temporary folder. The same token budget (steps x global batch x seq_len) for every arm.
   Arms (fixed here, not read from params.yaml, so a rerun after the default changes measures the same):
     uniform   schedule `uniform`: batches drawn in proportion to each tier's windows (no curriculum)
     static    constant at the curriculum's start mix {easy .5, medium .3, hard .2}
     moving    linear .5/.3/.2 -> .2/.4/.4 (the curriculum params.yaml shipped with)
     reverse   linear .2/.4/.4 -> .5/.3/.2 (hard first)
   Every arm is validated on the same held-out windows, the first `--eval-windows` windows of each tier of
   the perplexity stage's val split: each tier, and `all`, the tiers' losses weighted by their whole val
   token counts (the trainer's own eval). Per arm: mean, std (n-1), min-max over seeds of the final `all`
   loss and per tier; steps to reach the uniform arm's mean final `all` loss (linear interpolation between
   eval points); Welch's t-test (two-sided) and the exact permutation test of each arm against uniform on the
   final loss of `all` and of each tier. The Welch tests of all arms on all val sets are one family,
   Holm-Bonferroni corrected: "significant" means the Holm p is below alpha (the raw p is kept next to it).
2. Tier stability: reference LMs trained with the perplexity stage's own functions (`train_reference`,
   `score_documents`, `compute_cutoffs`) from params.yaml's `perplexity` section with another seed (and
   another reference subset size), scoring a seeded sample of documents per language; compared with the
   published scores (data/perplexity/docs, the stage's seed): Spearman correlation of per-document
   perplexities and the share of documents that keep their tier, each scoring with its own percentile
   cutoffs on the sample.
3. Tier contents: per language and tier, the share of each labelled demo document kind
   (data/raw/demo_labels.jsonl, joined on id) and example documents nearest the tier's median perplexity.

Results: bench/results/curriculum.{json,md}, regenerated whole on every run (and after every training, so a
study cut short keeps what it measured); `--restat` recomputes the statistics from the runs in the JSON with the
current code, and records the commit, date and command that did it next to the runs' own.
"""
from __future__ import annotations

import argparse
import copy
import csv
import itertools
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch

from bench import _provenance
from stages import perplexity, train
from stages.common.lm import bpe
from stages.common.lm.corpus import reference_subset, tokenize_corpus
from stages.common.lm.scoring import assign_tiers, compute_cutoffs, score_documents
from stages.common.lm.token_shards import TIERS, is_validation, read_manifest
from stages.common.runtime.device import resolve_device, resolve_precision
from stages.common.runtime.digest import hash_unit
from stages.common.runtime.params import from_dict, read_params

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CURRICULUM_START = {"easy": 0.5, "medium": 0.3, "hard": 0.2}
CURRICULUM_END = {"easy": 0.2, "medium": 0.4, "hard": 0.4}
ARMS: dict[str, dict[str, Any]] = {
    "uniform": {"start": CURRICULUM_START, "end": CURRICULUM_START, "schedule": "uniform"},
    "static": {"start": CURRICULUM_START, "end": CURRICULUM_START, "schedule": "constant"},
    "moving": {"start": CURRICULUM_START, "end": CURRICULUM_END, "schedule": "linear"},
    "reverse": {"start": CURRICULUM_END, "end": CURRICULUM_START, "schedule": "linear"},
}
BASELINE = "uniform"
ALPHA = 0.05
# The train stage and the perplexity stage's reference LMs it runs, and the stages that make what it reads
# (data/perplexity, models/tokenizer, data/raw/demo_labels.jsonl)
MEASURES = ("stages/train.py", "stages/perplexity.py", "stages/common/lm", "stages/common/training",
            "stages/common/runtime", "stages/tokenizer.py", "stages/semantic_embed.py", "stages/semantic_head.py",
            "stages/semantic_filter.py", "stages/common/semantic", "stages/clean.py", "stages/common/text",
            "stages/demo_corpus", "params.yaml")
log = logging.getLogger("refinery.bench.curriculum")


# ---- analysis (pure functions: tests/bench/test_curriculum.py) ----------------------------------------
def spread(values: list[float]) -> dict[str, float]:
    """Mean, sample standard deviation (n - 1; 0 for one value), min and max."""
    values = [float(v) for v in values]
    return {"n": len(values), "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0, "min": min(values), "max": max(values)}


def steps_to_reach(steps: list[float], losses: list[float], target: float) -> float | None:
    """The first step at which the curve reaches `target` (loss <= target), interpolating linearly between
    eval points; None if it never does."""
    for i, (step, loss) in enumerate(zip(steps, losses)):
        if loss <= target:
            if i == 0:
                return float(step)
            s0, l0 = steps[i - 1], losses[i - 1]
            return float(s0 + (l0 - target) / (l0 - loss) * (step - s0))
    return None


def welch(a: list[float], b: list[float]) -> dict[str, float]:
    """Welch's unequal-variance t-test, two-sided (scipy): t (a - b), degrees of freedom, p."""
    from scipy import stats

    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return {"t": math.nan, "df": math.nan, "p": 1.0 if statistics.fmean(a) == statistics.fmean(b) else 0.0}
    result = stats.ttest_ind(a, b, equal_var=False)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return {"t": float(result.statistic), "df": df, "p": float(result.pvalue)}


def permutation_p(a: list[float], b: list[float]) -> dict[str, float]:
    """Exact two-sided permutation test on |mean(a) - mean(b)| over every split of the pooled values into
    groups of len(a) and len(b); also the smallest p any data could give (2 / C(n, k) for 3 + 3 seeds: 0.1)."""
    pooled, k = list(a) + list(b), len(a)
    observed = abs(statistics.fmean(a) - statistics.fmean(b))
    splits = list(itertools.combinations(range(len(pooled)), k))
    hits = 0
    for chosen in splits:
        x = [pooled[i] for i in chosen]
        y = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        hits += abs(statistics.fmean(x) - statistics.fmean(y)) >= observed - 1e-12
    return {"p": hits / len(splits), "splits": len(splits), "min_p": 2 / len(splits)}


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy import stats

    return float(stats.spearmanr(x, y).statistic)


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values, in the order given. The i-th smallest of m p-values is multiplied by
    m - i + 1, then made non-decreasing in that order and capped at 1: a test is significant at family-wise
    level alpha when its adjusted p < alpha. None (a test that could not run) stays None and does not count
    in m."""
    order = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    adjusted: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def compare_arms(runs: dict[str, list[dict[str, Any]]], baseline: str = BASELINE, metric: str = "all",
                 alpha: float = ALPHA) -> dict[str, Any]:
    """Per arm: spread of the final loss of each val set, steps to reach the baseline's mean final `metric`
    loss per seed, and the tests against the baseline on the final loss of each val set (`metric` also in
    the row's `welch` and `permutation`). A run is {"seed", "steps": [...], "loss": {set: [...]}} with one loss
    per eval step. The Welch tests of every arm on every val set are one family: `p_holm` is the
    Holm-adjusted p, `significant` means p_holm < alpha (`significant_raw`: the uncorrected p < alpha)."""
    target = statistics.fmean(r["loss"][metric][-1] for r in runs[baseline])
    out: dict[str, Any] = {"baseline": baseline, "metric": metric, "target_loss": target, "alpha": alpha, "arms": {}}
    base_final = {s: [r["loss"][s][-1] for r in runs[baseline]] for s in runs[baseline][0]["loss"]}
    tests: list[dict[str, Any]] = []  # the family: every per-set entry of every arm but the baseline
    for arm, arm_runs in runs.items():
        finals = {s: spread([r["loss"][s][-1] for r in arm_runs]) for s in arm_runs[0]["loss"]}
        reach = [steps_to_reach(r["steps"], r["loss"][metric], target) for r in arm_runs]
        reached = [s for s in reach if s is not None]
        row: dict[str, Any] = {"final_loss": finals, "steps_to_target": reach,
                               "steps_to_target_summary": spread(reached) if reached else None,
                               "reached": f"{len(reached)}/{len(reach)}"}
        if arm != baseline:
            # every val set, not only `metric`: a mix can move loss between tiers at the same overall loss
            row["per_set"] = {}
            for s in arm_runs[0]["loss"]:
                a, b = [r["loss"][s][-1] for r in arm_runs], base_final[s]
                welch_s = welch(a, b) if len(a) > 1 and len(b) > 1 else None
                perm = permutation_p(a, b)
                row["per_set"][s] = {"diff": statistics.fmean(a) - statistics.fmean(b),
                                     "p": welch_s["p"] if welch_s else None, "p_perm": perm["p"]}
                tests.append(row["per_set"][s])
                if s == metric:
                    row.update(diff_vs_baseline=row["per_set"][s]["diff"], welch=welch_s, permutation=perm)
        out["arms"][arm] = row
    for test, p_holm in zip(tests, holm([t["p"] for t in tests])):
        test.update(p_holm=p_holm, significant=p_holm is not None and p_holm < alpha,
                    significant_raw=test["p"] is not None and test["p"] < alpha)
    for row in out["arms"].values():
        if "per_set" in row:
            test = row["per_set"][metric]
            if row["welch"]:
                row["welch"]["p_holm"] = test["p_holm"]
            row["significant"], row["significant_raw"] = test["significant"], test["significant_raw"]
    out["correction"] = {"method": "holm", "num_tests": sum(t["p"] is not None for t in tests),
                         "family": "Welch's t-test of every arm against the baseline on every val set"}
    return out


def tier_agreement(ppl_a: np.ndarray, ppl_b: np.ndarray, langs: np.ndarray, percentiles: tuple[float, float],
                   min_docs: int) -> dict[str, Any]:
    """Per language: Spearman of the two scorings, and the share of documents in the same tier when each
    scoring tiers with its own percentile cutoffs (computed on these documents); also the share two tiers
    apart (easy <-> hard)."""
    def tiers(ppl):
        return assign_tiers(ppl, langs, compute_cutoffs(ppl, langs, percentiles, min_docs))

    ta, tb = tiers(ppl_a), tiers(ppl_b)
    out = {}
    for lang in sorted(set(langs.tolist())):
        m = langs == lang
        confusion = np.zeros((3, 3), dtype=int)
        np.add.at(confusion, (ta[m], tb[m]), 1)
        out[lang] = {"docs": int(m.sum()), "spearman": round(spearman(ppl_a[m], ppl_b[m]), 4),
                     "same_tier": round(float((ta[m] == tb[m]).mean()), 4),
                     "two_tiers_apart": round(float((np.abs(ta[m].astype(int) - tb[m]) == 2).mean()), 4),
                     "confusion": confusion.tolist()}
    return out


# ---- 1. the arms --------------------------------------------------------------------------------------
def arm_params(base: dict[str, Any], arm: str, seed: int, steps: int, tokens_dir: Path, work: Path,
               threads: int, eval_every: int, eval_windows: int) -> train.Params:
    data = copy.deepcopy(base)
    global_batch = (data["parallel"]["data_parallel_size"] or 1) * data["micro_batch_size"] * \
        data["gradient_accumulation_steps"]
    warmup = max(1, round(data["optim"]["warmup_steps"] * steps / data["max_steps"]))
    data.update({
        "tokens_dir": str(tokens_dir), "model_dir": str(work / "model"), "checkpoint_dir": str(work / "ckpt"),
        "metrics_path": str(work / "train.json"), "detail_path": str(work / "detail.json"),
        "steps_path": str(work / "steps.csv"), "val_path": str(work / "val.csv"),
        "seed": seed, "max_steps": steps, "micro_batch_size": global_batch, "gradient_accumulation_steps": 1,
        "nproc_per_node": 0, "num_threads": threads, "progress_bar": False, "log_every": 10 ** 6,
        "tier_mix": ARMS[arm],
    })
    data["parallel"] = {**data["parallel"], "data_parallel_size": 1}
    data["optim"] = {**data["optim"], "warmup_steps": warmup}
    data["checkpoint"] = {"every": 0, "keep": 1}
    data["eval"] = {"every": eval_every, "windows": eval_windows}
    return from_dict(train.Params, data, prefix="train.")


def run_arm(params: train.Params) -> dict[str, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    metrics = train.run(params)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    with open(params.val_path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {"seed": params.seed, "steps": [int(r["step"]) for r in rows],
            "loss": {s: [float(r[f"loss_{s}"]) for r in rows] for s in ("all", *TIERS)},
            "train_loss": metrics["final_loss"], "tokens_seen": metrics["tokens_seen"],
            "tokens_per_s": metrics["tokens_per_s"], "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


# ---- 2. tier stability --------------------------------------------------------------------------------
def stability(args: argparse.Namespace, params_file: dict[str, Any], work: Path, docs: dict[str, np.ndarray],
              on_variant=None) -> dict[str, Any]:
    base = copy.deepcopy(params_file["perplexity"])
    base.update({"input_dir": str(args.docs_dir), "tokenizer_dir": str(args.tokenizer_dir),
                 "out_dir": str(work / "out"), "model_dir": str(work / "model"), "work_dir": str(work / "scores"),
                 "metrics_path": str(work / "m.json"), "detail_path": str(work / "d.json"),
                 "plot_path": str(work / "h.csv"), "num_threads": args.threads})
    pp = from_dict(perplexity.Params, base, prefix="perplexity.")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(pp.device)
    precision = resolve_precision(pp.precision, device)
    tokenizer = bpe.load(pp.tokenizer_dir)
    eos_id = bpe.special_token_id(tokenizer, bpe.eos_token_of(pp.tokenizer_dir))
    scratch = work / "scratch"
    # the stage keeps no ids in memory; this benchmark of the demo corpus reads them
    table = pq.read_table(sorted(Path(args.docs_dir).glob("part-*.parquet")), columns=["id", "lang"])
    ids, all_langs = table.column("id").to_pylist(), np.array(table.column("lang").to_pylist(), dtype=object)
    # the sample: per language, the documents with the smallest seeded hash (the same for every variant)
    sample: list[int] = []
    for lang in sorted(set(all_langs.tolist())):
        members = [i for i in np.flatnonzero(all_langs == lang)]
        members.sort(key=lambda i: hash_unit(f"stability:{ids[i]}", 0, "little"))
        sample += members[:args.stability_docs]
    sample_ids = [ids[i] for i in sample]
    langs = all_langs[sample]
    published_pos = {doc_id: i for i, doc_id in enumerate(docs["id"])}
    published = np.array([docs["perplexity"][published_pos[d]] for d in sample_ids], dtype=np.float64)
    percentiles = tuple(pp.percentiles)
    variants = [{"name": f"seed {pp.seed + 1}", "seed": pp.seed + 1, "subset_fraction": pp.reference.subset_fraction}]
    for fraction in args.subset_fractions:
        variants.append({"name": f"subset {fraction}", "seed": pp.seed, "subset_fraction": fraction})
    out: dict[str, Any] = {
        "baseline": f"published scores (perplexity.seed {pp.seed}, subset_fraction {pp.reference.subset_fraction})",
        "docs_per_lang": args.stability_docs, "sample_docs": len(sample), "percentiles": list(percentiles),
        "max_score_tokens": pp.max_score_tokens, "reference_steps": pp.reference.steps, "variants": []}
    for v in variants:
        vp = from_dict(perplexity.Params, {**base, "seed": v["seed"],
                                           "reference": {**base["reference"], "subset_fraction": v["subset_fraction"]}},
                       prefix="perplexity.")
        t0, c0 = time.perf_counter(), time.process_time()
        splits = np.array([is_validation(i, vp.seed, vp.val_fraction) for i in ids], dtype=np.int8)
        # a corpus of its own: reference_subset writes the corpus's `in_reference` column, once
        corpus = tokenize_corpus(pp.input_dir, tokenizer, eos_id, scratch / f"corpus_{len(out['variants'])}",
                                 seed=pp.seed, val_fraction=pp.val_fraction, batch_docs=pp.read_batch_docs)
        in_reference = np.asarray(reference_subset(corpus, vp.reference.subset_fraction))
        train_docs = (corpus.doc(i) for i in np.flatnonzero(in_reference & (splits == 0)))
        model, ref_metrics = perplexity.train_reference(vp, train_docs, tokenizer.get_vocab_size(), eos_id,
                                                        precision, device, scratch / v["name"].replace(" ", "_"))
        nll, num_scored = score_documents(model, [corpus.doc(i) for i in sample], eos_id, vp.max_score_tokens,
                                          vp.score_batch_tokens, precision, device)
        ppl = np.exp(nll / num_scored)
        agreement = tier_agreement(published, ppl, langs, percentiles, vp.min_docs_per_lang)
        row = {**v, "reference_docs": ref_metrics["reference.num_docs"],
               "reference_final_loss": ref_metrics["reference.final_loss"], "per_lang": agreement,
               "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(time.process_time() - c0, 1)}
        out["variants"].append(row)
        if on_variant is not None:
            on_variant(out)
        print(f"stability {v['name']}: " + "; ".join(
            f"{lang} spearman {a['spearman']:.3f} same tier {a['same_tier']:.1%}" for lang, a in agreement.items())
              + f" ({row['wall_s']:.0f}s)", flush=True)
    return out


# ---- 3. tier contents ---------------------------------------------------------------------------------
def read_docs(docs_dir: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(docs_dir, columns=["id", "lang", "tier", "split", "perplexity", "text"])
    return {name: np.array(table.column(name).to_pylist(), dtype=object if name != "perplexity" else np.float64)
            for name in table.column_names}


def tier_contents(docs: dict[str, np.ndarray], labels_path: Path, examples: int, chars: int) -> dict[str, Any]:
    kinds = {}
    with open(labels_path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            kinds[record["id"]] = record["kind"]
    kind = np.array([kinds.get(d, "unlabelled") for d in docs["id"]], dtype=object)
    out: dict[str, Any] = {}
    for lang in sorted(set(docs["lang"].tolist())):
        out[lang] = {}
        for tier in TIERS:
            m = (docs["lang"] == lang) & (docs["tier"] == tier)
            values, counts = np.unique(kind[m], return_counts=True)
            ppl = docs["perplexity"][m]
            nearest = np.flatnonzero(m)[np.argsort(np.abs(np.log(ppl) - np.log(np.median(ppl))))[:examples]]
            out[lang][tier] = {
                "docs": int(m.sum()),
                "perplexity": {"min": float(ppl.min()), "median": float(np.median(ppl)), "max": float(ppl.max())},
                "kinds": {str(k): round(int(c) / int(m.sum()), 4) for k, c in sorted(zip(values, counts),
                                                                                      key=lambda kc: -kc[1])},
                "examples": [{"id": docs["id"][i], "kind": kind[i],
                              "perplexity": round(float(docs["perplexity"][i]), 1),
                              "text": " ".join(str(docs["text"][i]).split())[:chars]} for i in nearest],
            }
    return out


# ---- the report ---------------------------------------------------------------------------------------
def fmt_spread(s: dict[str, float] | None, digits: int = 3) -> str:
    if not s:
        return "-"
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def val_coverage(setup: dict[str, Any]) -> dict[str, Any] | None:
    """What the validation windows cover: per tier the windows scored (the trainer's: non-overlapping from the
    shard's start, at most `eval_windows`) and their predicted tokens, against the tier's val tokens; None when
    `setup` lacks the val token counts."""
    if not setup.get("val_tokens") or not setup.get("seq_len"):
        return None
    seq_len, val = setup["seq_len"], setup["val_tokens"]
    windows = {t: min(setup["eval_windows"], len(range(0, max(0, n - seq_len), seq_len))) for t, n in val.items()}
    tokens = {t: w * seq_len for t, w in windows.items()}
    return {"windows": windows, "tokens": tokens, "val_tokens": val,
            "share": sum(tokens.values()) / sum(val.values()),
            "share_per_tier": {t: tokens[t] / val[t] for t in val}}


def validation_text(setup: dict[str, Any]) -> str:
    """The validation set, named for what it is: the first windows of each tier, and their share of the split
    when the stored setup allows computing it."""
    text = f"the first {setup['eval_windows']} windows of each tier of the perplexity stage's val split"
    cov = val_coverage(setup)
    if cov is None:
        return text
    short = [f"{t} has only {w}" for t, w in cov["windows"].items() if w < setup["eval_windows"]]
    return (text + f" ({setup['seq_len']} predicted tokens each{'; ' + ', '.join(short) if short else ''}: "
            f"{sum(cov['tokens'].values()):,} of the split's {sum(cov['val_tokens'].values()):,} tokens, "
            f"{cov['share']:.0%}; " + ", ".join(f"{t} {x:.0%}" for t, x in cov["share_per_tier"].items()) + ")")


def study_limits(setup: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    return [
        f"one small model ({setup['preset']}), {setup['steps']} steps ({setup['tokens_per_arm']:,} tokens, "
        f"{setup['steps'] / setup['demo_steps']:.0%} of the demo's run), the demo corpus "
        f"({sum(setup['train_tokens'].values()):,} training tokens, partly templated)",
        f"n={min(map(len, runs.values()), default=0)} seeds per arm: only large differences can show as "
        "significant; a 'not significant' is no proof of no effect",
        f"the validation set is {validation_text(setup)}, the same for every arm; `all` weights each tier's loss "
        "by the tier's whole val token count, so it estimates the whole split's mean token loss from these windows",
        f"warmup scaled with the steps ({setup['warmup_steps']} of {setup['steps']}); one process x "
        f"{setup['threads'] or 'all'} threads instead of the demo's 2 DDP processes (the same global batch and data "
        "per step)",
    ]


def fmt_p(p: float | None, digits: int = 3) -> str:
    return "-" if p is None else f"{p:.{digits}f}"


def markdown(r: dict[str, Any]) -> list[str]:
    c, setup = r["comparison"] or {"arms": {}, "target_loss": math.nan, "alpha": ALPHA, "baseline": BASELINE}, \
        r["setup"]
    correction = c.get("correction") or {"num_tests": 0}
    holm_text = f"Holm-corrected over {correction['num_tests']} tests, alpha {c['alpha']}"
    stat = r.get("statistics")
    restated = (f" Statistics recomputed from the stored runs by commit {stat['commit'].removesuffix('-dirty')}"
                + (" with uncommitted changes to bench/curriculum.py" if stat["commit"].endswith("-dirty") else "")
                + f" on {stat['date']} (`{stat['command'].strip()}`)." if stat else "")
    lines = ["# Does the curriculum help? (bench/curriculum.py)", "", *_provenance.header(r),
             f"Training runs with torch {r['machine']['torch']} (the machine is shared with other jobs: wall times "
             f"are inflated); study wall {r['wall_s'] / 60:.1f} min, CPU {r['cpu_s'] / 60:.1f} min.{restated}"
             + ("" if r["complete"] else " **Partial results: the study was cut short.**"), "",
             "## Training arms", "",
             f"Model preset `{setup['preset']}` ({setup['num_params'] / 1e6:.2f}M parameters), "
             f"{setup['steps']} steps x "
             f"global batch {setup['global_batch']} x seq_len {setup['seq_len']} = **{setup['tokens_per_arm']:,} "
             f"training tokens per run** (the demo trains {setup['demo_steps']} steps: this is "
             f"{setup['steps'] / setup['demo_steps']:.0%} of it; warmup {setup['warmup_steps']} steps), one process x "
             f"{setup['threads'] or 'all'} threads, precision {setup['precision']}, seeds {setup['seeds']} "
             f"(init and data order). Training data: {setup['train_tokens']}. Validation (the same for every "
             f"arm): {validation_text(setup)}; `all` = the tiers' losses weighted by each tier's whole val token "
             f"count {setup['val_tokens']}; every {setup['eval_every']} steps.", "",
             "| arm | tier mix | final val loss `all` mean ± std (min-max) | easy | medium | hard | "
             f"steps to {c['target_loss']:.4f} (uniform's final `all`) | Δ vs uniform | Welch p | Holm p | perm. p |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, row in c["arms"].items():
        mix = ARMS[arm]
        mix_text = ("∝ tier windows " + "/".join(f"{x:.2f}" for x in setup["uniform_ratios"])
                    if mix["schedule"] == "uniform" else
                    "/".join(f"{mix['start'][t]:g}" for t in TIERS) +
                    ("" if mix["schedule"] == "constant" else " → " + "/".join(f"{mix['end'][t]:g}" for t in TIERS)))
        reach = row["steps_to_target_summary"]
        reach_text = (f"{reach['mean']:.0f} ({reach['min']:.0f}-{reach['max']:.0f}), {row['reached']} reached"
                      if reach else f"not reached (0/{len(row['steps_to_target'])})")
        diff = f"{row['diff_vs_baseline']:+.4f}" if "diff_vs_baseline" in row else "-"
        test = row.get("per_set", {}).get(c.get("metric", "all"), {})
        perm_p = f"{row['permutation']['p']:.2f}" if row.get("permutation") else "-"
        lines.append(f"| {arm} | {mix_text} | {fmt_spread(row['final_loss']['all'], 4)} | "
                     f"{fmt_spread(row['final_loss']['easy'])} | {fmt_spread(row['final_loss']['medium'])} | "
                     f"{fmt_spread(row['final_loss']['hard'])} | {reach_text} | {diff} | {fmt_p(test.get('p'))} | "
                     f"{fmt_p(test.get('p_holm'))} | {perm_p} |")
    perm = next((v["permutation"] for v in c["arms"].values() if "permutation" in v), {"splits": 0, "min_p": 1.0})
    lines += ["", f"Tests: Welch's t-test (unequal variances, two-sided, n={len(setup['seeds'])} per arm) of each "
              "arm against the uniform arm on the final validation loss of `all` and of each tier: "
              f"{correction['num_tests']} tests in one family, Holm-Bonferroni corrected (family-wise alpha "
              f"{c['alpha']}). **Significant means Holm p < {c['alpha']}**; the raw p is shown next to it and "
              "holds for one test read alone. Exact permutation test on the same figures (|mean difference| over "
              f"all {perm['splits']} splits of the pooled seeds; its smallest possible two-sided p here is "
              f"{perm['min_p']:.2f}" + (f", so it can never reach {c['alpha']}" if perm["min_p"] > c["alpha"] else "")
              + "; shown uncorrected, as a check on the t-test's normality assumption).", "",
              "| arm | val set | Δ vs uniform | Welch p (raw) | Holm p | perm. p | significant (Holm) | "
              "significant (raw p) |", "|---|---|---|---|---|---|---|---|"]
    for arm, row in c["arms"].items():
        for s, t in row.get("per_set", {}).items():
            lines.append(f"| {arm} | {s} | {t['diff']:+.4f} | {fmt_p(t['p'])} | {fmt_p(t['p_holm'])} | "
                         f"{t['p_perm']:.2f} | {'yes' if t['significant'] else 'no'} | "
                         f"{'yes' if t['significant_raw'] else 'no'} |")
    lines.append("")
    for arm, row in c.get("arms", {}).items():
        if arm == c["baseline"] or not row.get("welch"):
            continue
        verdict = ("significant" if row["significant"] else "**not significant**") + f" ({holm_text})" + (
            f", though its raw p alone is below {c['alpha']}" if row["significant_raw"] and not row["significant"]
            else "")
        tiers = "; ".join(f"{t} {x['diff']:+.3f} (p {fmt_p(x['p'])}, Holm {fmt_p(x['p_holm'])}, perm. "
                          f"{x['p_perm']:.2f}, {'significant' if x['significant'] else 'not significant'})"
                          for t, x in row["per_set"].items() if t in TIERS)
        lines.append(f"- {arm} vs uniform: {row['diff_vs_baseline']:+.4f} nats final `all` loss, Welch p = "
                     f"{row['welch']['p']:.3f}, Holm p = {fmt_p(row['welch']['p_holm'])}, permutation p = "
                     f"{row['permutation']['p']:.2f}: {verdict}. Per tier: {tiers}.")
    survivors = [f"{arm} {s}" for arm, row in c["arms"].items() for s, t in row.get("per_set", {}).items()
                 if t["significant"]]
    if c["arms"]:
        lines += ["", ("Tests that survive the correction: " + ", ".join(survivors) + "." if survivors else
                       f"No test survives the correction: no arm differs significantly from uniform on `all` or on "
                       f"any tier ({holm_text}).")]
    lines += ["", "Per run (final val loss `all`, train loss of the last 10 steps, wall / CPU seconds):", "",
              "| arm | seed | val `all` | val easy | val medium | val hard | train loss | wall s | CPU s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for arm, runs in r["runs"].items():
        for run in runs:
            lines.append(f"| {arm} | {run['seed']} | {run['loss']['all'][-1]:.4f} | {run['loss']['easy'][-1]:.3f} | "
                         f"{run['loss']['medium'][-1]:.3f} | {run['loss']['hard'][-1]:.3f} | {run['train_loss']:.3f} | "
                         f"{run['wall_s']:.0f} | {run['cpu_s']:.0f} |")
    lines += ["", "Validation loss `all` over steps (mean over seeds):", "",
              "| step | " + " | ".join(r["runs"]) + " |", "|---|" + "---|" * len(r["runs"])]
    any_runs = next(iter(r["runs"].values()))
    for i, step in enumerate(any_runs[0]["steps"]):
        lines.append(f"| {step} | " + " | ".join(
            f"{statistics.fmean(run['loss']['all'][i] for run in runs):.4f}" for runs in r["runs"].values()) + " |")
    if r.get("stability"):
        s = r["stability"]
        lines += ["", "## Tier stability", "",
                  f"{s['sample_docs']} documents ({s['docs_per_lang']} per language, a seeded sample) scored by "
                  f"reference LMs trained with the perplexity stage's own functions ({s['reference_steps']} steps, "
                  f"first {s['max_score_tokens']} tokens scored), compared with the {s['baseline']}. Each scoring "
                  f"tiers the sample with its own per-language cutoffs at percentiles {s['percentiles']}.", "",
                  "| variant | lang | Spearman | same tier | easy <-> hard | reference docs | wall s |",
                  "|---|---|---|---|---|---|---|"]
        for v in s["variants"]:
            for lang, a in v["per_lang"].items():
                lines.append(f"| {v['name']} | {lang} | {a['spearman']:.3f} | {a['same_tier']:.1%} | "
                             f"{a['two_tiers_apart']:.1%} | {v['reference_docs']} | {v['wall_s']:.0f} |")
    if r.get("contents"):
        lines += ["", "## What is in each tier", "",
                  "Share of each labelled demo kind (data/raw/demo_labels.jsonl; `unlabelled`: documents the "
                  "labels cannot be joined to: raw records without an id, for which clean derives one) per language "
                  "and tier. The labels' `article` covers several demo generators (templated prose, real documentation "
                  "text, word salad): the examples below show which lands where.", "",
                  "| lang | tier | docs | perplexity min / median / max | kinds |", "|---|---|---|---|---|"]
        for lang, tiers in r["contents"].items():
            for tier, t in tiers.items():
                p = t["perplexity"]
                lines.append(f"| {lang} | {tier} | {t['docs']} | {p['min']:.1f} / {p['median']:.1f} / {p['max']:.1f} | "
                             + ", ".join(f"{k} {v:.0%}" for k, v in t["kinds"].items()) + " |")
        lines += ["", "Examples (nearest the tier's median perplexity):", ""]
        for lang, tiers in r["contents"].items():
            for tier, t in tiers.items():
                for e in t["examples"]:
                    text = e["text"].replace("|", "\\|")
                    lines.append(f"- {lang} {tier} ({e['kind']}, ppl {e['perplexity']}): {text}")
    lines += ["", "## Limits", "", *[f"- {x}" for x in r["limits"]], ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.curriculum", description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--tokens-dir", type=Path, default=Path("data/perplexity/tokens"))
    parser.add_argument("--docs-dir", type=Path, default=Path("data/perplexity/docs"))
    parser.add_argument("--tokenizer-dir", type=Path, default=Path("models/tokenizer"))
    parser.add_argument("--labels", type=Path, default=Path("data/raw/demo_labels.jsonl"))
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps per run (the demo: 400)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = all cores; on a shared machine 1 is "
                        "many times faster than 2: OpenMP threads wait on busy cores)")
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--eval-windows", type=int, default=64, help="validation windows per tier")
    parser.add_argument("--stability-docs", type=int, default=500, help="documents per language (0 = skip)")
    parser.add_argument("--subset-fractions", type=float, nargs="*", default=[0.15],
                        help="other reference subset sizes to compare (each trains one more reference LM)")
    parser.add_argument("--examples", type=int, default=3, help="example documents per language and tier")
    parser.add_argument("--out", type=Path, default=RESULTS / "curriculum")
    parser.add_argument("--work-dir", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--restat", action="store_true",
                        help="recompute the statistics from the runs already in <out>.json and rewrite <out>.json "
                        "and .md (no training, no demo outputs needed)")
    args = parser.parse_args()
    if args.restat:
        restat(args.out)
        print(f"rewrote {args.out}.json and .md with the statistics of the current code")
        return
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    started, cpu_started = time.perf_counter(), time.process_time()
    stamp = _provenance.stamp("curriculum", MEASURES)
    params_file = read_params(args.params)
    base = params_file["train"]
    manifest = read_manifest(args.tokens_dir)
    docs = read_docs(args.docs_dir)
    contents = tier_contents(docs, args.labels, args.examples, 200) if args.labels.exists() else None
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in args.arms}
    stab: dict[str, Any] | None = None

    def save(complete: bool) -> None:
        """The results so far, written whole after every run: a study cut short keeps what it measured."""
        write_results(args, stamp, base, manifest, runs, stab, contents, started, cpu_started, complete)

    with tempfile.TemporaryDirectory(prefix="curriculum-", dir=args.work_dir) as tmp:
        work = Path(tmp)
        for seed in args.seeds:  # seed-major: a cut-short run still has every arm at the first seeds
            for arm in args.arms:
                params = arm_params(base, arm, seed, args.steps, args.tokens_dir, work / f"{arm}_{seed}", args.threads,
                                    args.eval_every, args.eval_windows)
                result = run_arm(params)
                runs[arm].append(result)
                print(f"{arm:8s} seed {seed}: final val loss all {result['loss']['all'][-1]:.4f} "
                      + " ".join(f"{t} {result['loss'][t][-1]:.3f}" for t in TIERS)
                      + f", train loss {result['train_loss']:.3f}, {result['wall_s']:.0f}s wall "
                        f"{result['cpu_s']:.0f}s CPU", flush=True)
                save(False)
        if args.stability_docs:
            def on_variant(partial: dict[str, Any]) -> None:
                nonlocal stab
                stab = partial
                save(False)

            stab = stability(args, params_file, work / "stability", docs, on_variant)
    save(True)
    print(f"wrote {args.out}.json and .md ({(time.perf_counter() - started) / 60:.1f} min wall)")


def write_results(args: argparse.Namespace, stamp: dict[str, Any], base: dict[str, Any], manifest: dict[str, Any],
                  runs: dict[str, list[dict[str, Any]]], stab: dict[str, Any] | None, contents: dict[str, Any] | None,
                  started: float, cpu_started: float, complete: bool) -> None:
    first = arm_params(base, args.arms[0], args.seeds[0], args.steps, args.tokens_dir, Path("unused"), args.threads,
                       args.eval_every, args.eval_windows)
    done = {arm: r for arm, r in runs.items() if r}
    comparison = compare_arms(done) if BASELINE in done else {}
    from stages.common.lm.model import Transformer, preset

    cfg = preset(first.preset, manifest["vocab_size"], **({"max_seq_len": first.seq_len} if first.seq_len else {}))
    train_windows = np.array([manifest["shards"][f"train/{t}"]["num_tokens"] - cfg.max_seq_len for t in TIERS])
    tokens_per_arm = args.steps * first.micro_batch_size * cfg.max_seq_len
    result = {
        **stamp,
        "machine": {**stamp["machine"], "torch": torch.__version__},
        "load": dict(stamp["load"]),  # its own copy: every save records the load at its end
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_s": round(time.process_time() - cpu_started, 1),  # every thread of this process (no children)
        "setup": {"preset": first.preset, "num_params": Transformer(cfg).num_params(), "steps": args.steps,
                  "demo_steps": base["max_steps"], "warmup_steps": first.optim.warmup_steps,
                  "global_batch": first.micro_batch_size, "seq_len": cfg.max_seq_len,
                  "tokens_per_arm": tokens_per_arm,
                  "threads": args.threads, "precision": resolve_precision(first.precision, torch.device("cpu"))
                  if first.precision == "auto" else first.precision, "seeds": args.seeds,
                  "eval_every": args.eval_every, "eval_windows": args.eval_windows,
                  "train_tokens": {t: manifest["shards"][f"train/{t}"]["num_tokens"] for t in TIERS},
                  "val_tokens": {t: manifest["shards"][f"val/{t}"]["num_tokens"] for t in TIERS},
                  "uniform_ratios": [round(float(x), 4) for x in train_windows / train_windows.sum()],
                  "params_tier_mix": base["tier_mix"], "arms": {a: ARMS[a] for a in args.arms}},
        "complete": complete,
        "runs": done, "comparison": comparison, "stability": stab, "contents": contents,
    }
    result["limits"] = study_limits(result["setup"], done)
    _provenance.write(result, markdown, out=args.out)


def git_commit() -> str:
    """HEAD's short hash, `-dirty` when bench/curriculum.py differs from it (the code that did the statistics)."""
    changed = _provenance.git("status", "--porcelain", "--", "bench/curriculum.py")
    return _provenance.git("rev-parse", "--short", "HEAD") + ("-dirty" if changed else "")


def restat(out: Path) -> None:
    """Recompute the statistics (and the limits text derived from the setup) from the runs stored in
    <out>.json with the current code; the runs, setup, machine, stability and contents stay as measured."""
    path = out.with_name(out.name + ".json")
    result = json.loads(path.read_text(encoding="utf-8"))
    if "commit" not in result:
        sys.exit(f"bench.curriculum: {path} records no commit (written before bench/_provenance.py): rerun the study "
                 "instead of --restat")
    result["comparison"] = compare_arms(result["runs"]) if BASELINE in result["runs"] else {}
    result["limits"] = study_limits(result["setup"], result["runs"])
    result["statistics"] = {"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                            "command": "python -m bench.curriculum " + " ".join(sys.argv[1:])}
    _provenance.write(result, markdown, out=out, record_end=False)


if __name__ == "__main__":
    main()
