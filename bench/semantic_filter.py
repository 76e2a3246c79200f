"""Benchmark and self-score the semantic filter (stages semantic_embed -> semantic_head -> semantic_filter).

    python -m bench.semantic_filter     # needs the demo's clean output and labels (`dvc repro clean demo_corpus`)

1. Demo: the three stages with the params.yaml settings on data/clean/docs, timed end to end
   (documents/s = clean documents / total seconds, labels' embedding and head training included),
   and the validation accuracy, precision, recall and F1 per language at the chosen thresholds. Run
   twice on a fresh ONNX encoder cache: `demo_cold` pays the encoder's export + quantization (a first
   run, or a new encoder or library version), `demo` loads it from the cache (every later run).
2. Devset (../shared/devset, when present), with the head trained on the demo labels only: `clean`
   then the filter on devset.jsonl + devset_zh_boilerplate.jsonl; the share of surviving boilerplate
   dropped and of surviving other kinds (prose, fortune, manpage, html) dropped, per language, and per
   language and document kind the documents dropped and their reasons.
Results: bench/results/semantic_filter.json and .md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import _provenance
from stages import clean, semantic_embed, semantic_filter, semantic_head
from stages.common.runtime.executor import resolve_workers
from stages.common.runtime.params import load_section
from stages.common.runtime.parquet import read_table
from stages.common.semantic.encoder import Encoder

ROOT = Path(__file__).resolve().parents[1]

DEVSET = ROOT.parent / "shared" / "devset"
RUNS = ("demo_cold", "demo", "devset")
LABELLED_LANGS = ("en", "zh")  # the languages of the demo labels: per-kind figures for these
# The three semantic stages and their packages, and clean (run on the devset; it and the demo corpus's generator
# make the demo documents and labels)
MEASURES = ("stages/semantic_embed.py", "stages/semantic_head.py", "stages/semantic_filter.py",
            "stages/common/semantic", "stages/common/text", "stages/common/runtime", "stages/clean.py",
            "stages/demo_corpus", "params.yaml")


def run_demo(tmp: Path, params_path: Path, cache: Path) -> tuple[dict, semantic_head.Params, semantic_embed.Params,
                                                                semantic_filter.Params]:
    tmp.mkdir()
    e = dataclasses.replace(load_section("semantic_embed", semantic_embed.Params, params_path),
                            out_dir=str(tmp / "emb"), metrics_path=str(tmp / "embed.json"),
                            detail_path=str(tmp / "embed_detail.json"), onnx_cache_dir=str(cache))
    h = dataclasses.replace(load_section("semantic_head", semantic_head.Params, params_path),
                            embeddings_dir=e.out_dir, out_dir=str(tmp / "head"), metrics_path=str(tmp / "head.json"),
                            detail_path=str(tmp / "head_detail.json"))
    f = dataclasses.replace(load_section("semantic_filter", semantic_filter.Params, params_path),
                            docs_dir=e.docs_dir, embeddings_dir=e.out_dir, head_dir=h.out_dir,
                            out_dir=str(tmp / "out"), metrics_path=str(tmp / "filter.json"),
                            detail_path=str(tmp / "filter_detail.json"), work_dir=str(tmp / "work"))
    start = time.perf_counter()
    embed_m = semantic_embed.run(e)
    head_m = semantic_head.run(h)
    filter_m = semantic_filter.run(f)
    seconds = time.perf_counter() - start
    result = {
        "num_docs": filter_m["num_read"], "num_labels": embed_m["num_labels"], "seconds_total": seconds,
        "docs_per_s_end_to_end": filter_m["num_read"] / seconds,
        "target_200_docs_per_s": "PASS" if filter_m["num_read"] / seconds >= 200 else "FAIL",
        "onnx_cache_hit": embed_m["onnx_cache_hit"], "seconds_encoder_load": embed_m["encoder_load_seconds"],
        "seconds_embed": embed_m["seconds"], "seconds_head": head_m["seconds"], "seconds_filter": filter_m["seconds"],
        "texts_embedded": embed_m["num_embedded"], "texts_encoded": embed_m["num_encoded"],
        "encoded_per_s": embed_m["encoded_per_s"], "pass_rate": filter_m["pass_rate"],
        **{k: v for k, v in filter_m.items() if k.startswith(("val.", "threshold.", "dropped."))},
    }
    return result, h, e, f


def run_devset(tmp: Path, head: semantic_head.Params, embed: semantic_embed.Params,
                filter_params: semantic_filter.Params) -> dict:
    raw = tmp / "devset_raw"
    raw.mkdir()
    truth = {}
    for name in ("devset.jsonl", "devset_zh_boilerplate.jsonl"):
        shutil.copy(DEVSET / name, raw / name)
        for line in (DEVSET / name).open(encoding="utf-8"):
            row = json.loads(line)
            truth[row["id"]] = row
    c = clean.Params(input=str(raw), out_dir=str(tmp / "dev_clean"),
                     metrics_path=str(tmp / "dev_clean.json"), detail_path=str(tmp / "dev_clean_detail.json"),
                     reasons_plot_path=str(tmp / "dev_r.csv"),
                     work_dir=str(tmp / "dev_clean_work"))
    clean.run(c)
    docs = read_table(tmp / "dev_clean" / "docs", ["id", "text", "lang"]).to_pydict()
    encoder = Encoder(embed.encoder, embed.max_length, embed.batch_size, resolve_workers(embed.num_threads),
                      embed.backend, embed.quantize, embed.onnx_cache_dir)
    emb, _ = semantic_embed.embed(encoder, docs["text"], docs["lang"], embed.embed_languages)
    (tmp / "dev_emb").mkdir()
    semantic_embed.write_doc_embeddings(tmp / "dev_emb" / "docs.parquet", docs["id"], docs["lang"], emb)
    f = dataclasses.replace(filter_params, docs_dir=str(tmp / "dev_clean" / "docs"),
                            embeddings_dir=str(tmp / "dev_emb"), head_dir=head.out_dir, out_dir=str(tmp / "dev_out"),
                            metrics_path=str(tmp / "dev_filter.json"), detail_path=str(tmp / "dev_filter_detail.json"),
                            work_dir=str(tmp / "dev_filter_work"))
    semantic_filter.run(f)
    quarantine = read_table(tmp / "dev_out" / "quarantine", ["id", "reason"]).to_pydict()
    reason_of = dict(zip(quarantine["id"], quarantine["reason"]))
    total, drops, by_kind, kind_drops, reasons = Counter(), Counter(), Counter(), Counter(), Counter()
    for doc_id in docs["id"]:
        row = truth[doc_id]
        group = (row["lang"], "boilerplate" if row["kind"] == "boilerplate" else "other")
        total[group] += 1
        drops[group] += doc_id in reason_of
        by_kind[(row["lang"], row["kind"])] += 1
        kind_drops[(row["lang"], row["kind"])] += doc_id in reason_of
        if doc_id in reason_of:
            reasons[(row["lang"], row["kind"], reason_of[doc_id])] += 1
    return ({f"{lang}.{group}.dropped_rate": drops[(lang, group)] / total[(lang, group)]
             for lang, group in sorted(total)} | {f"{lang}.{group}.num": total[(lang, group)]
                                                   for lang, group in sorted(total)}
            # per language and document kind (en/zh: the languages with labels): share dropped, and why
            | {f"kind.{lang}.{kind}.dropped": f"{kind_drops[(lang, kind)]}/{n}"
               for (lang, kind), n in sorted(by_kind.items()) if lang in LABELLED_LANGS}
            | {f"reason.{lang}.{kind}.{reason}": n for (lang, kind, reason), n in sorted(reasons.items())
               if lang in LABELLED_LANGS})



def markdown(results: dict[str, Any]) -> list[str]:
    lines = ["# semantic_filter benchmark", "", *_provenance.header(results)]
    for name in (n for n in RUNS if n in results):
        lines += [f"## {name}", ""] + [f"- {k}: {v:.4f}" if isinstance(v, float) else f"- {k}: {v}"
                                       for k, v in results[name].items()] + [""]
    return lines


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    params_path = ROOT / "params.yaml"
    results: dict[str, Any] = _provenance.stamp("semantic_filter", MEASURES)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        results["demo_cold"], *_ = run_demo(tmp / "cold", params_path, tmp / "onnx_cache")
        results["demo"], head, embed, filter_params = run_demo(tmp / "warm", params_path, tmp / "onnx_cache")
        if (DEVSET / "devset.jsonl").is_file():  # the same head, thresholds and filter settings as the demo
            results["devset"] = run_devset(tmp, head, embed, filter_params)
    _provenance.write(results, markdown)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
