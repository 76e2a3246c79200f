"""The report's figures as plain dicts and lists, built by pure functions from Parquet columns, CSV rows and
metric dicts. The readers at the bottom are the IO edge: they read only the columns asked for, and
`read_values_at` only the row groups holding the rows asked for (the example texts).

Counts of documents come from the datasets themselves (each stage's kept documents and its quarantine), so
the funnel adds up by construction; the metrics files give what only the stages measured (thresholds,
validation scores, timings)."""
from __future__ import annotations

import csv
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from stages.common.lm.tiers import TIERS
from stages.common.runtime.metrics import semantic_val, threshold, val_perplexity

# reason prefix (before ':') -> the family the report groups it under
FAMILIES = {"invalid": "invalid record", "lang": "language", "lang_low_prob": "language", "quality": "quality rule",
            "dedup": "duplicate", "semantic": "semantic category"}
OTHER = "other"  # drops whose language is not one of the kept ones (or unknown: invalid records)
MAX_POINTS = 600  # points per training curve: longer runs are thinned to every k-th step (the last one kept)
CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
BLANK_LINES_RE = re.compile(r"\n\s*\n\s*\n+")


# ---- the funnel: documents per step, per language, and the tokens that reached training ----

def funnel(num_read: int, clean_langs: Sequence[str], filtered_langs: Sequence[str],
           docs: dict[str, Sequence[Any]]) -> dict[str, Any]:
    """Documents read -> kept by clean -> kept by semantic_filter -> in each perplexity tier, per language;
    then documents and tokens per tier and language in the train split (what training draws from) and the
    validation split. `docs` holds the perplexity stage's columns lang, tier, split, num_tokens."""
    langs = sorted(set(clean_langs))
    steps: list[dict[str, Any]] = [
        {"step": "read", "total": num_read, "by_lang": {}},
        {"step": "kept by clean", "total": len(clean_langs), "by_lang": dict(Counter(clean_langs))},
        {"step": "kept by semantic_filter", "total": len(filtered_langs), "by_lang": dict(Counter(filtered_langs))},
    ]
    per_tier = Counter(zip(docs["tier"], docs["lang"]))
    for tier in TIERS:
        by_lang = {lang: per_tier[tier, lang] for lang in langs if per_tier[tier, lang]}
        steps.append({"step": f"tier {tier}", "total": sum(by_lang.values()), "by_lang": by_lang})
    splits: dict[str, dict[str, dict[str, dict[str, int]]]] = {
        split: {tier: {lang: {"docs": 0, "tokens": 0} for lang in langs} for tier in TIERS}
        for split in ("train", "val")}
    for lang, tier, split, num_tokens in zip(docs["lang"], docs["tier"], docs["split"], docs["num_tokens"]):
        cell = splits[split][tier][lang]
        cell["docs"] += 1
        cell["tokens"] += int(num_tokens)
    return {"langs": langs, "steps": steps, **splits}


# ---- drops: why documents left, per stage, family and reason ----

def family(reason: str) -> str:
    return FAMILIES.get(reason.split(":", 1)[0], reason.split(":", 1)[0])


def drop_reasons(stage: str, num_read: int, reasons: Sequence[str], langs: Sequence[str | None],
                 kept_langs: Sequence[str]) -> dict[str, Any]:
    """A stage's quarantine as families sorted by count, each with its reasons sorted by count, and the
    count per kept language (documents in any other language, or in none, count as `other`)."""
    columns = [*kept_langs, OTHER]
    per_reason: dict[str, Counter] = defaultdict(Counter)
    for reason, lang in zip(reasons, langs):
        per_reason[reason][lang if lang in kept_langs else OTHER] += 1
    families: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for reason, counts in per_reason.items():
        families[family(reason)].append({"reason": reason, "count": sum(counts.values()),
                                         "by_lang": {c: counts[c] for c in columns}})
    groups = [{"family": name, "count": sum(r["count"] for r in rows),
               "reasons": sorted(rows, key=lambda r: (-r["count"], r["reason"]))} for name, rows in families.items()]
    return {"stage": stage, "num_read": num_read, "num_dropped": len(reasons), "columns": columns,
            "families": sorted(groups, key=lambda g: (-g["count"], g["family"]))}


def example_reasons(stages: Sequence[dict[str, Any]], per_family: int) -> list[tuple[str, str]]:
    """(stage, reason) of the `per_family` most frequent reasons of each family of each stage, families in
    the order the stage lists them (most documents first)."""
    return [(s["stage"], r["reason"]) for s in stages for g in s["families"] for r in g["reasons"][:per_family]]


def example_rows(reasons: Sequence[str], wanted: Sequence[str], per_reason: int, seed: int) -> dict[str, list[int]]:
    """Row numbers of a seeded random sample of `per_reason` records of each wanted reason (in row order), so
    the examples show a reason's typical drops, not only the records that came first."""
    rows: dict[str, list[int]] = {reason: [] for reason in wanted}
    for i, reason in enumerate(reasons):
        if reason in rows:
            rows[reason].append(i)
    rng = random.Random(seed)
    return {reason: sorted(rng.sample(found, min(per_reason, len(found)))) for reason, found in rows.items()}


def record_text(record: str) -> str:
    """The text of a quarantined record: its `text` field when it is a JSON object with one, else the record
    as stored (a malformed line, or the cleaned text of a rule or duplicate drop)."""
    try:
        value = json.loads(record)
    except ValueError:
        return record
    return value["text"] if isinstance(value, dict) and isinstance(value.get("text"), str) else record


def excerpt(text: str, max_chars: int) -> str:
    """At most `max_chars` characters, control characters written as \\xNN, runs of blank lines shortened."""
    text = BLANK_LINES_RE.sub("\n\n", text.strip())
    cut = text[:max_chars] + ("…" if len(text) > max_chars else "")
    return CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", cut)


# ---- the semantic filter: thresholds, validation scores, score distributions ----

def semantic_filter(metrics: dict[str, Any], validation: dict[str, Sequence[Any]], kept: dict[str, int],
                    reasons: Sequence[str], reason_langs: Sequence[str | None], num_bins: int = 20) -> dict[str, Any]:
    """Per language: the threshold the stage chose on the head's validation split, its validation scores there
    (and whether it had too few keep or drop examples to trust: `low_confidence`), the documents it kept and
    dropped per category, and the histogram of validation scores (p_keep) by true label. `validation` holds
    the head's columns lang, label, p_keep; `kept` counts kept documents per language."""
    langs = sorted({key.split(".", 1)[1] for key in metrics if key.startswith("threshold.")} - {"*"})
    hist: dict[str, dict[str, list[int]]] = {lang: {"keep": [0] * num_bins, "drop": [0] * num_bins} for lang in langs}
    for lang, label, p_keep in zip(validation["lang"], validation["label"], validation["p_keep"]):
        if lang in hist and label in ("keep", "drop"):
            hist[lang][label][min(int(p_keep * num_bins), num_bins - 1)] += 1
    dropped = Counter(zip(reason_langs, reasons))
    per_lang = []
    for lang in langs:
        val = {k: metrics.get(semantic_val(lang, k)) for k in ("num", "precision", "recall", "f1", "accuracy",
                                                               "num_keep", "num_drop", "low_confidence")}
        per_lang.append({"lang": lang, "threshold": metrics[threshold(lang)], "val": val, "kept": kept.get(lang, 0),
                         "dropped": {r: n for (l, r), n in sorted(dropped.items()) if l == lang},
                         "hist": hist[lang]})
    return {"langs": per_lang, "pooled_threshold": metrics.get(threshold("*")), "num_bins": num_bins}


# ---- perplexity tiers ----

def tier_examples(langs: Sequence[str], tiers: Sequence[str], perplexities: Sequence[float],
                  per_tier: int) -> dict[tuple[str, str], list[int]]:
    """Row numbers of the `per_tier` documents closest to each (language, tier)'s median perplexity: the
    typical documents of a tier rather than its edges."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, key in enumerate(zip(langs, tiers)):
        groups[key].append(i)
    picks = {}
    for key, rows in sorted(groups.items()):
        ordered = sorted(rows, key=lambda i: perplexities[i])
        median = perplexities[ordered[len(ordered) // 2]]
        picks[key] = sorted(sorted(rows, key=lambda i: (abs(perplexities[i] - median), i))[:per_tier],
                            key=lambda i: perplexities[i])
    return picks


def perplexity(hist_rows: Sequence[dict[str, str]], metrics: dict[str, Any]) -> dict[str, Any]:
    """Per language: the histogram of log10 perplexity (bins coloured by tier) with its cutoffs, and the
    cutoffs, pooled flag and mean perplexity per tier from the stage's metrics."""
    per_lang: dict[str, dict[str, Any]] = {}
    for row in hist_rows:
        lang = per_lang.setdefault(row["lang"], {"lang": row["lang"], "bins": [], "cutoffs": []})
        low, high = float(row["log10_perplexity"]), float(row["log10_perplexity_end"])
        if row["kind"] == "bin":
            lang["bins"].append((low, high, float(row["docs"]), row["tier"]))
        else:
            lang["cutoffs"].append((low, row["tier"]))
    for lang, entry in per_lang.items():
        entry["easy_max"] = metrics.get(f"cutoffs.{lang}.easy_max")
        entry["medium_max"] = metrics.get(f"cutoffs.{lang}.medium_max")
        entry["pooled"] = bool(metrics.get(f"cutoffs.{lang}.pooled"))
        entry["mean"] = {t: metrics.get(f"mean_perplexity.{lang}.{t}") for t in TIERS}
    return {"langs": [per_lang[k] for k in sorted(per_lang)], "val_perplexity": metrics.get("val_perplexity"),
            "reference_val_perplexity": metrics.get("reference.val_perplexity")}


# ---- training curves ----

def thin(rows: Sequence[dict[str, str]], max_points: int = MAX_POINTS) -> list[dict[str, str]]:
    """Every k-th row so that at most about `max_points` remain, the last row always kept."""
    step = max(1, -(-len(rows) // max_points))
    kept = list(rows[::step])
    if rows and kept[-1] is not rows[-1]:
        kept.append(rows[-1])
    return kept


def column(rows: Sequence[dict[str, str]], name: str) -> list[float]:
    return [float(r[name]) if r.get(name) not in (None, "") else float("nan") for r in rows]


def training(steps: Sequence[dict[str, str]], val: Sequence[dict[str, str]], metrics: dict[str, Any]) -> dict[str, Any]:
    """The curves the train stage logged (loss, learning rate, gradient norm and clip threshold, tier ratios,
    tokens/s per step; validation perplexity per tier) and its summary figures."""
    rows = thin(steps)
    curves = {name: column(rows, name) for name in ("loss", "lr", "grad_norm", "clip_threshold", "tokens_per_s",
                                                   *[f"ratio_{t}" for t in TIERS])}
    val_curves = {t: column(val, f"perplexity_{t}") for t in TIERS if val and f"perplexity_{t}" in val[0]}
    summary = {k: metrics.get(k) for k in ("steps", "tokens_seen", "final_loss", "tokens_per_s", "precision",
                                           "num_processes", "num_params", "num_clipped_steps", "num_skipped_steps",
                                           "peak_memory_mb", "seconds")}
    return {"steps": column(rows, "step"), "curves": curves, "val_steps": column(val, "step"),
            "val_curves": val_curves, "summary": summary,
            "val_final": {t: metrics.get(val_perplexity(t)) for t in TIERS}}


# ---- compression: every model of the chain ----

def curriculum(path: str | Path) -> dict[str, Any] | None:
    """The curriculum study's summary (bench/curriculum.py's JSON: arms against uniform sampling, tier
    stability), or None when `path` is empty or the file is absent: the study is optional."""
    if not path or not Path(path).is_file():
        return None
    study = read_json(path)
    comparison, setup = study.get("comparison") or {}, study.get("setup") or {}
    # Holm-corrected p over the study's whole family of tests; a file written before the correction holds the
    # raw p only, and its `significant` follows that raw p
    correction = comparison.get("correction")
    arms = []
    for name, row in (comparison.get("arms") or {}).items():
        final, welch = row["final_loss"]["all"], row.get("welch") or {}
        arms.append({"arm": name, "mean": final["mean"], "std": final["std"], "min": final["min"], "max": final["max"],
                     "diff": row.get("diff_vs_baseline"), "p": welch.get("p_holm" if correction else "p"),
                     "significant": row.get("significant"), "reached": row.get("reached")})
    stability = [{"variant": v["name"], "lang": lang, "spearman": a["spearman"], "same_tier": a["same_tier"]}
                 for v in (study.get("stability") or {}).get("variants", []) for lang, a in v["per_lang"].items()]
    return {"date": study.get("date"), "statistics_date": (study.get("statistics") or {}).get("date"),
            "preset": setup.get("preset"), "steps": setup.get("steps"),
            "tokens_per_arm": setup.get("tokens_per_arm"), "seeds": setup.get("seeds", []),
            "eval_windows": setup.get("eval_windows"), "alpha": comparison.get("alpha"),
            "num_tests": correction["num_tests"] if correction else None,
            "target_loss": comparison.get("target_loss"), "arms": arms, "stability": stability}


def compression(table: Sequence[dict[str, str]], export_metrics: dict[str, Any], prune_metrics: dict[str, Any],
                samples: dict[str, Any]) -> dict[str, Any]:
    """The export stage's table (one row per model: parameters, file size, latency, throughput, validation
    perplexity per tier) with each FP32 model's MLP width and heads from the prune stage, the ratios and
    the INT8 checks the export stage made (parity, the CPUs the file is exact on), and its FP32 / INT8 generation samples."""
    rows = []
    for row in table:
        source = "teacher" if row["model"] == "trained" else row["model"].removeprefix("prune_")
        shape = {k: prune_metrics.get(f"{source}.{k}") for k in ("ffn_dim", "num_heads")}
        rows.append({**{k: (v if k in ("model", "precision") else float(v)) for k, v in row.items()}, **shape})
    return {"rows": rows,
            "ratios": {k: v for k, v in sorted(export_metrics.items()) if k.startswith(("ratio.", "half_mlp."))},
            "parity": {k: v for k, v in sorted(export_metrics.items()) if k.startswith(("parity.", "int8."))},
            "latency_seq_len": export_metrics.get("latency_seq_len"), "samples": samples}


def stage_seconds(metrics: dict[str, dict[str, Any]], order: Sequence[str]) -> list[tuple[str, float]]:
    """Wall time per stage (its metrics' `seconds`), in `order` first, then any others by name."""
    names = [s for s in order if s in metrics] + sorted(set(metrics) - set(order))
    return [(name, float(metrics[name]["seconds"])) for name in names if "seconds" in metrics[name]]


# ---- readers (the IO edge) ----

def read_json(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (the report reads it; run the stage that writes it)")
    return json.loads(path.read_text(encoding="utf-8"))


def read_csv(path: str | Path) -> list[dict[str, str]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (the report reads it; run the stage that writes it)")
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def parquet_files(path: str | Path) -> list[Path]:
    """A Parquet file, or a dataset folder's part-*.parquet files in order."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob("part-*.parquet"))
    if not files:
        raise FileNotFoundError(f"{path}: no Parquet file (the report reads it; run the stage that writes it)")
    return files


def num_rows(path: str | Path) -> int:
    """Rows of a dataset, from the files' footers alone."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in parquet_files(path))


def read_columns(path: str | Path, columns: Sequence[str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {c: [] for c in columns}
    for file in parquet_files(path):
        table = pq.read_table(file, columns=list(columns))
        for c in columns:
            out[c] += table.column(c).to_pylist()
    return out


def read_values_at(path: str | Path, name: str, rows: Sequence[int]) -> dict[int, Any]:
    """Column `name` at the given row numbers (counted over the whole dataset), reading only the row groups
    that hold them; None for each where the dataset has no such column."""
    wanted, out, offset = sorted(set(rows)), {}, 0
    for file in parquet_files(path):
        parquet = pq.ParquetFile(file)
        if name not in parquet.schema_arrow.names:
            return {r: None for r in wanted}
        for group in range(parquet.num_row_groups):
            size = parquet.metadata.row_group(group).num_rows
            inside = [r for r in wanted if offset <= r < offset + size]
            if inside:
                values = parquet.read_row_group(group, columns=[name]).column(name)
                out.update({r: values[r - offset].as_py() for r in inside})
            offset += size
    return out


def read_funnel(clean_dir: str | Path, filtered_dir: str | Path, docs_dir: str | Path) -> dict[str, Any]:
    """The funnel of a run from the clean and semantic_filter stages' datasets (docs/ and quarantine/) and the
    perplexity stage's docs, with the funnel of each input source (`sources`)."""
    clean, filtered = Path(clean_dir), Path(filtered_dir)
    clean_docs = read_columns(clean / "docs", ["lang", "source"])
    quarantined = read_columns(clean / "quarantine", ["source"])["source"]
    filtered_docs = read_columns(filtered / "docs", ["lang", "source"])
    docs = read_columns(docs_dir, ["lang", "tier", "split", "num_tokens", "source"])
    out = funnel(len(clean_docs["lang"]) + len(quarantined), clean_docs["lang"], filtered_docs["lang"], docs)
    out["sources"] = source_funnel(clean_docs["source"] + quarantined, clean_docs["source"], filtered_docs["source"],
                                   docs)
    return out


def source_funnel(read: Sequence[str | None], clean: Sequence[str | None], filtered: Sequence[str | None],
                  docs: dict[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Per input source (clean.sources): documents read, kept by clean and by semantic_filter, and the
    documents and tokens of the training split; one row per source, in order of documents read."""
    num_read, num_clean, num_filtered = Counter(read), Counter(clean), Counter(filtered)
    train_docs: Counter[str | None] = Counter()
    train_tokens: Counter[str | None] = Counter()
    for source, split, num_tokens in zip(docs["source"], docs["split"], docs["num_tokens"]):
        if split == "train":
            train_docs[source] += 1
            train_tokens[source] += int(num_tokens)
    return [{"source": source, "read": n, "clean": num_clean[source], "semantic_filter": num_filtered[source],
             "train_docs": train_docs[source], "train_tokens": train_tokens[source]}
            for source, n in num_read.most_common()]
