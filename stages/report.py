"""`report` stage: one self-contained HTML page that shows what a run did.

    <out_path>    (reports/index.html) inline CSS and SVG, no script, no request to anywhere: open it from disk

Sections: the document funnel per language (read -> kept by clean -> kept by semantic_filter -> per tier, and
the tokens that reached training); why documents were dropped, by stage, family and reason, with examples;
the semantic filter's thresholds and validation scores; perplexity histograms with the cutoffs and typical
documents per tier; training curves (and the curriculum study's summary, when bench/curriculum.py's results
are there); every model of the compression chain with its generation samples;
lineage (git revision, params digest, the dvc.lock digests of the inputs, library versions, machine, stage
wall times). It reads the stages' outputs only (Parquet columns it needs, metrics, CSVs) and imports no
torch: on the demo run it takes about a second of CPU (bench/report.py).
"""
from __future__ import annotations

import datetime
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.common.report import data, html, lineage
from stages.common.runtime.atomic import atomic_path, write_csv
from stages.common.runtime.cli import stage_main
from stages.common.runtime.params import param, validate

log = logging.getLogger("refinery.report")
STAGE = "report"


@dataclass(frozen=True)
class Params:
    clean_dir: str  # the clean stage's docs/ and quarantine/
    filtered_dir: str  # the semantic_filter stage's docs/ and quarantine/
    semantic_validation_path: str  # the semantic head's validation scores (lang, label, p_keep)
    docs_dir: str  # the perplexity stage's docs (lang, tier, split, perplexity, num_tokens, text)
    metrics_dir: str  # every stage's full metrics, <stage>.json
    hist_path: str  # the perplexity stage's histogram CSV
    train_steps_path: str
    train_val_path: str
    export_table_path: str  # the export stage's table CSV (one row per model)
    samples_path: str  # the export stage's generation samples (FP32 and INT8)
    params_path: str  # digested for the lineage, not a DVC dep (the stages' own sections are)
    lock_path: str  # dvc.lock: the digests of the inputs; read, not a DVC dep (DVC rewrites it after each stage)
    out_path: str
    funnel_path: str  # the funnel as CSV (step, lang, docs): `dvc plots show` draws it
    # bench/curriculum.py's results, shown under Training ("" = none); a DVC dep of report in dvc.yaml
    curriculum_path: str
    title: str = param("Refinery run report", nonempty=True)
    example_reasons: int = param(2, min=0)  # drop reasons with examples: the most frequent of each family and stage
    examples_per_reason: int = param(3, min=0)
    examples_per_tier: int = param(2, min=0)  # per language and tier: the documents nearest the tier's median
    example_chars: int = param(300, min=20)  # characters shown per example
    seed: int = param(0, min=0)  # the sample of records shown for each reason

    def __post_init__(self) -> None:
        validate(self, STAGE)


def drop_examples(params: Params, drops: list[dict[str, Any]],
                  reasons: dict[str, list[str]]) -> dict[tuple[str, str], list[tuple[str, float | None]]]:
    """(excerpt, measured value) of a seeded sample of the records of the most frequent reasons of each
    family, read from the quarantines: the text as the stage judged it (clean: after normalisation, so a
    page's text rather than its HTML) where the record got that far, and what the deciding rule measured."""
    folders = {"clean": Path(params.clean_dir), "semantic_filter": Path(params.filtered_dir)}
    wanted = data.example_reasons(drops, params.example_reasons)
    examples: dict[tuple[str, str], list[tuple[str, float | None]]] = {}
    for stage, folder in folders.items():
        rows = data.example_rows(reasons[stage], [r for s, r in wanted if s == stage], params.examples_per_reason,
                                 params.seed)
        picked = [i for picks in rows.values() for i in picks]
        records, judged, scores = (data.read_values_at(folder / "quarantine", column, picked)
                                   for column in ("record", "judged_text", "score"))
        for reason, picks in rows.items():
            examples[stage, reason] = [(data.excerpt(judged[i] or data.record_text(records[i]), params.example_chars),
                                        scores[i]) for i in picks]
    return examples


def tier_examples(params: Params) -> dict[tuple[str, str], list[tuple[float, str]]]:
    """(perplexity, excerpt) of the typical documents of each language and tier, tiers in order."""
    docs = data.read_columns(params.docs_dir, ["lang", "tier", "perplexity"])
    picks = data.tier_examples(docs["lang"], docs["tier"], docs["perplexity"], params.examples_per_tier)
    texts = data.read_values_at(params.docs_dir, "text", [r for rows in picks.values() for r in rows])
    order = {t: i for i, t in enumerate(data.TIERS)}
    return {key: [(docs["perplexity"][r], data.excerpt(texts[r], params.example_chars)) for r in rows]
            for key, rows in sorted(picks.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], len(order))))}


def read_metrics(metrics_dir: Path) -> dict[str, dict[str, Any]]:
    """Every stage's full metrics; the ones the page draws from must be there."""
    metrics = {p.stem: data.read_json(p) for p in sorted(metrics_dir.glob("*.json"))}
    for stage in ("semantic_filter", "perplexity", "train", "prune", "export"):
        if stage not in metrics:
            raise FileNotFoundError(f"{metrics_dir / stage}.json: not found (the report reads it; run the {stage} "
                                    "stage)")
    return metrics


def gather(params: Params) -> dict[str, Any]:
    """Every figure of the page, from the stages' outputs."""
    metrics = read_metrics(Path(params.metrics_dir))
    funnel = data.read_funnel(params.clean_dir, params.filtered_dir, params.docs_dir)
    read, clean_kept, filter_kept = (funnel["steps"][i] for i in range(3))
    quarantines = {stage: data.read_columns(Path(folder) / "quarantine", ["reason", "lang"])
                   for stage, folder in (("clean", params.clean_dir), ("semantic_filter", params.filtered_dir))}
    drops = [data.drop_reasons(stage, num_read, q["reason"], q["lang"], funnel["langs"])
             for (stage, q), num_read in zip(quarantines.items(), (read["total"], clean_kept["total"]))]
    inputs = [params.clean_dir, params.filtered_dir, params.semantic_validation_path, params.docs_dir,
              params.metrics_dir, params.hist_path, params.train_steps_path, params.train_val_path,
              params.export_table_path, params.samples_path]
    origin = lineage.lineage(params.params_path, params.lock_path, inputs)
    sem = quarantines["semantic_filter"]
    return {
        "title": params.title,
        "generated_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "funnel": funnel,
        "drops": drops,
        "examples": drop_examples(params, drops, {stage: q["reason"] for stage, q in quarantines.items()}),
        "semantic": data.semantic_filter(
            metrics["semantic_filter"], data.read_columns(params.semantic_validation_path, ["lang", "label", "p_keep"]),
            filter_kept["by_lang"], sem["reason"], sem["lang"]),
        "perplexity": data.perplexity(data.read_csv(params.hist_path), metrics["perplexity"]),
        "tier_examples": tier_examples(params),
        "training": data.training(data.read_csv(params.train_steps_path), data.read_csv(params.train_val_path),
                                  metrics["train"]),
        "curriculum": data.curriculum(params.curriculum_path),
        "compression": data.compression(data.read_csv(params.export_table_path), metrics["export"],
                                        metrics["prune"], data.read_json(params.samples_path)),
        "timings": data.stage_seconds(metrics, origin["stages"]),
        "lineage": origin,
    }


def funnel_rows(funnel: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(step, language, documents), steps in pipeline order; `all` for every language together."""
    rows = []
    for step in funnel["steps"]:
        rows.append((step["step"], "all", step["total"]))
        rows += [(step["step"], lang, n) for lang, n in sorted(step["by_lang"].items())]
    return rows


def run(params: Params) -> dict[str, Any]:
    start = time.perf_counter()
    figures = gather(params)
    figures["seconds"] = time.perf_counter() - start
    page = html.page(figures)
    with atomic_path(params.out_path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    write_csv(params.funnel_path, ["step", "lang", "docs"], funnel_rows(figures["funnel"]))
    result = {"bytes": len(page.encode()), "seconds": round(time.perf_counter() - start, 3)}
    log.info("report: %s (%d KB) in %.2f s", params.out_path, result["bytes"] // 1024, result["seconds"])
    return result


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
