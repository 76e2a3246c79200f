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
3. Fewer labels (`--label-fractions`): the head retrained on stratified shares of the demo labels, the
   devset scored again.
4. Other demo seeds (`--corpus-seeds`): the demo labels generated with other seeds, the head trained on
   them, the devset scored under the params.yaml threshold rule and the others of THRESHOLD_RULES, with the
   default seed's head too: how much the devset figures move with the labels' random draws and the rule.
Results: bench/results/semantic_filter.json and .md.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import _provenance
import pyarrow.parquet as pq

from stages import clean, demo_corpus, semantic_embed, semantic_filter, semantic_head
from stages.common.runtime.digest import seeded_hash
from stages.common.runtime.executor import resolve_workers
from stages.common.runtime.params import load_section
from stages.common.runtime.parquet import read_table
from stages.common.semantic.encoder import Encoder

ROOT = Path(__file__).resolve().parents[1]

DEVSET = ROOT.parent / "shared" / "devset"
RUNS = ("demo_cold", "demo", "devset")
LABEL_FRACTIONS = (0.5, 0.2, 0.1, 0.05, 0.02)  # shares of the demo labels for the fewer-labels runs
CORPUS_SEEDS = (1, 2)  # other demo corpus seeds: the devset figures with labels from other random draws
# Threshold rules compared on every seed's head besides the params.yaml one: (target_precision, max_threshold)
THRESHOLD_RULES = {"precision 0.995, no cap": (0.995, 1.0), "precision 0.98, no cap": (0.98, 1.0),
                   "precision 0.995, cap 0.5": (0.995, 0.5)}
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


def prepare_devset(tmp: Path, embed: semantic_embed.Params) -> tuple[Path, Path, dict[str, dict]]:
    """`clean` on the devset (ids and texts only) and its documents' embeddings: (docs dir, embeddings dir,
    the devset's rows by id)."""
    raw = tmp / "devset_raw"
    raw.mkdir()
    truth = {}
    for name in ("devset.jsonl", "devset_zh_boilerplate.jsonl"):
        with (DEVSET / name).open(encoding="utf-8") as src, (raw / name).open("w", encoding="utf-8") as dst:
            for line in src:
                row = json.loads(line)
                truth[row["id"]] = row
                dst.write(json.dumps({"id": row["id"], "text": row["text"]}, ensure_ascii=False) + "\n")
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
    return tmp / "dev_clean" / "docs", tmp / "dev_emb", truth


def score_devset(tmp: Path, docs_dir: Path, emb_dir: Path, truth: dict[str, dict], head_dir: str,
                 filter_params: semantic_filter.Params, name: str = "dev") -> tuple[dict, dict]:
    """The filter with `head_dir`'s head and thresholds on the devset's clean documents: the shares dropped per
    language and kind, and the filter's metrics (its thresholds and validation figures)."""
    f = dataclasses.replace(filter_params, docs_dir=str(docs_dir), embeddings_dir=str(emb_dir), head_dir=head_dir,
                            out_dir=str(tmp / f"{name}_out"), metrics_path=str(tmp / f"{name}_filter.json"),
                            detail_path=str(tmp / f"{name}_filter_detail.json"), work_dir=str(tmp / f"{name}_work"))
    filter_m = semantic_filter.run(f)
    ids = read_table(docs_dir, ["id"]).to_pydict()["id"]
    quarantine = read_table(tmp / f"{name}_out" / "quarantine", ["id", "reason"]).to_pydict()
    reason_of = dict(zip(quarantine["id"], quarantine["reason"]))
    total, drops, by_kind, kind_drops, reasons = Counter(), Counter(), Counter(), Counter(), Counter()
    for doc_id in ids:
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
               if lang in LABELLED_LANGS}), filter_m


def label_share(labels: dict[str, list], fraction: float, seed: int = 0) -> list[int]:
    """Row indices of a stratified `fraction` of the labels: per (lang, label, category), the ceil(fraction * n)
    rows of lowest seeded hash of their id, so the rows a smaller fraction keeps are among a larger one's."""
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(labels["lang"], labels["label"], labels["category"])):
        groups.setdefault(key, []).append(i)
    rows = []
    for members in groups.values():
        members.sort(key=lambda i: seeded_hash(str(labels["id"][i]), seed, "little"))
        rows += members[:math.ceil(fraction * len(members))]
    return sorted(rows)


def run_fewer_labels(tmp: Path, head: semantic_head.Params, filter_params: semantic_filter.Params,
                     dev: tuple[Path, Path, dict[str, dict]], fractions: tuple[float, ...]) -> dict:
    """Per share of the demo labels: the examples per language and class, the head's thresholds and validation
    figures on that share's own validation split, and the devset's dropped shares."""
    table = pq.read_table(Path(head.embeddings_dir) / "labels.parquet")
    columns = table.select(["id", "lang", "label", "category"]).to_pydict()
    out = {}
    for fraction in fractions:
        name = f"labels_{fraction:g}"
        emb = tmp / f"{name}_emb"
        emb.mkdir()
        rows = label_share(columns, fraction)
        pq.write_table(table.take(rows), emb / "labels.parquet")
        os.symlink(Path(head.embeddings_dir).resolve() / "docs.parquet", emb / "docs.parquet")
        h = dataclasses.replace(head, embeddings_dir=str(emb), out_dir=str(tmp / f"{name}_head"),
                                metrics_path=str(tmp / f"{name}_head.json"),
                                detail_path=str(tmp / f"{name}_head_detail.json"))
        semantic_head.run(h)
        counts = Counter((columns["lang"][i], columns["label"][i]) for i in rows)
        dev_figures, filter_m = score_devset(tmp, dev[0], dev[1], dev[2], h.out_dir, filter_params, name)
        out[name] = ({f"examples.{lang}.{label}": n for (lang, label), n in sorted(counts.items())}
                     | {k: v for k, v in filter_m.items() if k.startswith(("val.", "threshold."))}
                     | {k: v for k, v in dev_figures.items() if k.endswith(".dropped_rate")})
    return out


def run_corpus_seeds(tmp: Path, embed: semantic_embed.Params, head: semantic_head.Params,
                     filter_params: semantic_filter.Params, dev: tuple[Path, Path, dict[str, dict]],
                     seeds: tuple[int, ...]) -> dict:
    """Per demo corpus seed: the demo's labels generated with that seed (same generator, other draws), the head
    trained on them, the devset scored: how much the devset figures move with the labels' random draws."""
    out = {}
    for seed in seeds:
        name = f"seed_{seed}"
        d = dataclasses.replace(load_section("demo_corpus", demo_corpus.Params, ROOT / "params.yaml"), seed=seed,
                                out_dir=str(tmp / f"{name}_raw"), labels_path=str(tmp / f"{name}_raw_labels.jsonl"),
                                semantic_labels_path=str(tmp / f"{name}_labels.jsonl"),
                                metrics_path=str(tmp / f"{name}_dc.json"), detail_path=str(tmp / f"{name}_dcd.json"))
        demo_corpus.run(d)
        # the devset's clean docs as the documents: only the labels' embeddings are used here
        e = dataclasses.replace(embed, labels_path=d.semantic_labels_path, docs_dir=str(dev[0]),
                                out_dir=str(tmp / f"{name}_emb"), metrics_path=str(tmp / f"{name}_e.json"),
                                detail_path=str(tmp / f"{name}_ed.json"))
        semantic_embed.run(e)
        h = dataclasses.replace(head, embeddings_dir=e.out_dir, out_dir=str(tmp / f"{name}_head"),
                                metrics_path=str(tmp / f"{name}_head.json"),
                                detail_path=str(tmp / f"{name}_head_detail.json"))
        semantic_head.run(h)
        out[name] = threshold_rules(tmp, dev, h.out_dir, filter_params, name)
    return out


def threshold_rules(tmp: Path, dev: tuple[Path, Path, dict[str, dict]], head_dir: str,
                    filter_params: semantic_filter.Params, name: str) -> dict:
    """The devset scored with one head under each threshold rule of THRESHOLD_RULES (the params.yaml one
    first): each rule's thresholds, validation figures and devset dropped shares."""
    out = {}
    rules = {"params.yaml": (filter_params.target_precision, filter_params.max_threshold), **THRESHOLD_RULES}
    for rule, (target, cap) in rules.items():
        f = dataclasses.replace(filter_params, target_precision=target, max_threshold=cap)
        dev_figures, filter_m = score_devset(tmp, dev[0], dev[1], dev[2], head_dir, f, f"{name}_{len(out)}")
        out[rule] = ({k: v for k, v in filter_m.items() if k.startswith(("val.", "threshold."))}
                     | {k: v for k, v in dev_figures.items() if k.endswith((".dropped_rate", ".num"))})
    return out


def corpus_seeds_table(runs: dict[str, dict[str, dict]]) -> list[str]:
    lines = ["| demo seed | threshold rule | lang | threshold | val precision | val recall | devset boilerplate "
             "dropped | devset other dropped |", "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, rules in runs.items():
        for (rule, f), lang in ((r, lang) for r in rules.items() for lang in LABELLED_LANGS):
            bp, other = f[f"{lang}.boilerplate.dropped_rate"], f[f"{lang}.other.dropped_rate"]
            lines.append(f"| {name.removeprefix('seed_')} | {rule} | {lang} | {f[f'threshold.{lang}']:.3f} | "
                         f"{f[f'val.{lang}.precision']:.3f} | {f[f'val.{lang}.recall']:.3f} | {bp:.3f} "
                         f"({round(bp * f[f'{lang}.boilerplate.num'])}/{f[f'{lang}.boilerplate.num']}) | {other:.3f} "
                         f"({round(other * f[f'{lang}.other.num'])}/{f[f'{lang}.other.num']}) |")
    return lines


def fewer_labels_table(runs: dict[str, dict]) -> list[str]:
    cols = [("examples.{}.keep", "keep examples"), ("examples.{}.drop", "drop examples"), ("threshold.{}", "threshold"),
            ("val.{}.precision", "val precision"), ("val.{}.recall", "val recall"),
            ("{}.boilerplate.dropped_rate", "devset boilerplate dropped"), ("{}.other.dropped_rate", "devset other dropped")]
    lines = ["| labels | lang | " + " | ".join(title for _, title in cols) + " |",
             "| --- | --- |" + " ---: |" * len(cols)]
    for name, figures in runs.items():
        for lang in LABELLED_LANGS:
            cells = [figures.get(key.format(lang)) for key, _ in cols]
            lines.append(f"| {name.removeprefix('labels_')} | {lang} | " + " | ".join(
                "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in cells) + " |")
    return lines


def markdown(results: dict[str, Any]) -> list[str]:
    lines = ["# semantic_filter benchmark", "", *_provenance.header(results)]
    for name in (n for n in RUNS if n in results):
        lines += [f"## {name}", ""] + [f"- {k}: {v:.4f}" if isinstance(v, float) else f"- {k}: {v}"
                                       for k, v in results[name].items()] + [""]
    if results.get("fewer_labels"):
        lines += ["## Fewer labels", "",
                  "The head retrained on a stratified share of the demo labels (each language, label and category "
                  "cut alike), its thresholds chosen on that share's own validation split; the devset scored as "
                  "above. `1` is the full labels file (the devset run above).", "",
                  *fewer_labels_table(results["fewer_labels"]), ""]
    if results.get("corpus_seeds"):
        lines += ["## Other demo seeds", "",
                  "The demo corpus generated with other seeds (the same generator and shares, other random draws), "
                  "its labels embedded and the head trained on them with the params.yaml settings; the devset "
                  "scored as above, under the params.yaml threshold rule and, with the same head, under the others "
                  "named. The devset has about 43 (en) and 58 (zh) boilerplate documents: one document is "
                  "0.023 and 0.017 of those rates.", "", *corpus_seeds_table(results["corpus_seeds"]), ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label-fractions", type=float, nargs="*", default=list(LABEL_FRACTIONS),
                        help="shares of the demo labels to retrain the head on (none: skip)")
    parser.add_argument("--corpus-seeds", type=int, nargs="*", default=list(CORPUS_SEEDS),
                        help="demo corpus seeds whose labels the head is also trained on, each scored on the devset "
                             "(none: skip)")
    args = parser.parse_args()
    params_path = ROOT / "params.yaml"
    results: dict[str, Any] = _provenance.stamp("semantic_filter", MEASURES)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        results["demo_cold"], *_ = run_demo(tmp / "cold", params_path, tmp / "onnx_cache")
        results["demo"], head, embed, filter_params = run_demo(tmp / "warm", params_path, tmp / "onnx_cache")
        if (DEVSET / "devset.jsonl").is_file():  # the same head, thresholds and filter settings as the demo
            dev = prepare_devset(tmp, embed)
            results["devset"], _ = score_devset(tmp, *dev, head.out_dir, filter_params)
            results["fewer_labels"] = run_fewer_labels(tmp, head, filter_params, dev, (1.0, *args.label_fractions))
            seed = load_section("demo_corpus", demo_corpus.Params, params_path).seed
            results["corpus_seeds"] = {f"seed_{seed}": threshold_rules(tmp, dev, head.out_dir, filter_params, "rules")} \
                | run_corpus_seeds(tmp, embed, head, filter_params, dev, tuple(args.corpus_seeds))
    _provenance.write(results, markdown)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
