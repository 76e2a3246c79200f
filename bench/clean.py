"""Benchmark and self-score the `clean` stage.

    python -m bench.clean                 # demo corpus (data/raw/demo) and ../shared/devset if present
    python -m bench.clean --workers 1     # single process, for a per-core figure

For each corpus: documents/s and MB/s through `stages.clean.run` with the params.yaml settings, the
read-only time, and CPU time per phase. On the devset (and on the demo corpus, from its labels) it
scores the quality targets: language-ID accuracy, other languages kept as zh/en, keep rate of
good zh/en text, exact-duplicate removal, near-duplicate recall, HTML tags left in kept text.
Results: bench/results/clean.json and clean.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _provenance
from stages import clean
from stages.common.runtime.params import load_section
from stages.common.runtime.parquet import read_table
from stages.common.text.normalize import HTML_TAG_RE
from stages.common.text.readers import iter_raw, list_input_files, parse_raw

ROOT = Path(__file__).resolve().parents[1]

DEVSET = ROOT.parent / "shared" / "devset" / "devset.jsonl"
DEMO = ROOT / "data" / "raw" / "demo"
DEMO_LABELS = ROOT / "data" / "raw" / "demo_labels.jsonl"
# HTML tags as a reader would recognise them: known element names, any closing tag, or any tag with
# an attribute. Placeholders such as `<file>` or `<stdin>` in man pages and docs are text, not markup.
ANY_TAG_RE = re.compile(r"{}|</[a-zA-Z][\w-]*>|<[a-zA-Z][\w-]*\s+[\w-]+\s*=\s*[\"'][^<>]*>".format(HTML_TAG_RE.pattern),
                        re.I | re.S)
KEEP_LANGS = ("zh", "en")
# The stage, its text and runtime packages and its params; the demo corpus's generator decides the demo figures
MEASURES = ("stages/clean.py", "stages/common/text", "stages/common/runtime", "stages/demo_corpus", "params.yaml")


def run_clean(params: clean.Params, input_path: Path, workers: int | None) -> tuple[dict, dict[str, dict]]:
    """Run the stage into a temp dir; return (metrics, outcome per id)."""
    with tempfile.TemporaryDirectory() as tmp:
        overrides = {"input": str(input_path), "out_dir": f"{tmp}/out", "metrics_path": f"{tmp}/metrics.json",
                     "reasons_plot_path": f"{tmp}/reasons.csv", "work_dir": f"{tmp}/work",
                     "detail_path": f"{tmp}/detail.json"}
        if workers is not None:
            overrides["num_workers"] = workers
        p = dataclasses.replace(params, **overrides)
        t0 = time.perf_counter()
        num_read = sum(1 for _ in iter_raw(list_input_files(p.input, p.pattern)))
        read_seconds = time.perf_counter() - t0
        metrics = clean.run(p)
        metrics["read_only_seconds"] = read_seconds
        assert num_read == metrics["num_read"]
        outcome: dict[str, dict] = {}
        for row in read_table(f"{tmp}/out/docs", ["id", "text", "lang"]).to_pylist():
            outcome[row["id"]] = {"kept": True, "lang": row["lang"], "text": row["text"], "reason": None}
        for row in read_table(f"{tmp}/out/quarantine", ["id", "lang", "reason"]).to_pylist():
            outcome.setdefault(row["id"], {"kept": False, "lang": row["lang"], "reason": row["reason"]})
    return metrics, outcome


def score(labels: list[dict], outcome: dict[str, dict], good_kinds: set[str]) -> dict[str, float]:
    """The quality targets on labelled documents (`labels`: id, text length, lang, kind, dup_type, dup_of)."""
    s: dict[str, float] = {}
    for lang in KEEP_LANGS:
        docs = [d for d in labels if d["lang"] == lang and d["chars"] >= 50]
        right = sum(1 for d in docs if outcome[d["id"]]["lang"] == lang)
        s[f"langid_accuracy_{lang}"] = right / max(1, len(docs))
        s[f"langid_num_{lang}"] = len(docs)
    others = [d for d in labels if d["lang"] not in KEEP_LANGS and d["lang"] and d["chars"] >= 50]
    s["others_kept_as_zh_en_rate"] = sum(
        1 for d in others if outcome[d["id"]]["kept"] and outcome[d["id"]]["lang"] in KEEP_LANGS) / max(1, len(others))
    s["others_num"] = len(others)
    good = [d for d in labels if d["lang"] in KEEP_LANGS and d["chars"] >= 200 and not d["dup_type"]
            and d["kind"] in good_kinds]
    s["good_zh_en_keep_rate"] = sum(1 for d in good if outcome[d["id"]]["kept"]) / max(1, len(good))
    s["good_zh_en_num"] = len(good)
    # A duplicate pair is resolved when at most one of the two is kept. The stage keeps the first
    # occurrence in input order, which is not always the one the labels call the original.
    for dup_type in ("exact", "near"):
        pairs = [(outcome[d["id"]]["kept"], outcome[d["dup_of"]]["kept"]) for d in labels
                 if d["dup_type"] == dup_type and d["dup_of"] in outcome]
        live = [pair for pair in pairs if any(pair)]  # pairs where other rules dropped both say nothing
        s[f"{dup_type}_dup_recall"] = sum(1 for pair in live if not all(pair)) / max(1, len(live))
        s[f"{dup_type}_dup_pairs_scored"] = len(live)
    s["exact_dups_labelled_kept"] = sum(1 for d in labels if d["dup_type"] == "exact" and outcome[d["id"]]["kept"])
    # documents the labels call no one's copy, dropped as a duplicate: either the kept original of a pair
    # (when its copy comes first in input order) or a false match
    originals = {d["dup_of"] for d in labels if d["dup_of"]}
    s["non_dups_dropped_as_dups"] = sum(1 for d in labels if not d["dup_type"] and d["id"] not in originals
                                        and (outcome[d["id"]]["reason"] or "").startswith("dedup:"))
    s["kept_docs_with_html_tags"] = sum(1 for o in outcome.values() if o["kept"] and ANY_TAG_RE.search(o["text"]))
    return s


def devset_labels(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.open(encoding="utf-8")]
    return [{"id": r["id"], "chars": len(r["text"]), "lang": r["lang"], "kind": r["kind"],
             "dup_type": r.get("dup_type") or (r.get("dup_of") and "near"), "dup_of": r.get("dup_of")} for r in rows]


def demo_labels(labels_path: Path, corpus: Path, max_record_bytes: int) -> list[dict]:
    """Demo labels joined to the records by (shard, line); ids and lengths come from the records."""
    parsed = {}
    for raw in iter_raw(list_input_files(str(corpus))):
        record = parse_raw(raw, max_record_bytes)
        parsed[(Path(raw.source).name, raw.index)] = (record.id, len(getattr(record, "text", "")))
    labels = []
    for line in labels_path.open(encoding="utf-8"):
        r = json.loads(line)
        if r["malformed"]:
            continue
        doc_id, chars = parsed[(r["shard"], r["line"])]
        labels.append({"id": doc_id, "chars": chars, "lang": r["lang"], "kind": r["kind"],
                       "dup_type": r["dup_type"], "dup_of": r["dup_of"]})
    return labels


def markdown(results: dict[str, Any]) -> list[str]:
    lines = ["# clean benchmark", "", *_provenance.header(results)]
    for name in ("demo", "devset"):
        if name not in results:
            continue
        m = results[name]["metrics"]
        lines += [f"## {name}", "", f"- {m['num_read']} records, {m['input_mb']:.1f} MB, {m['num_workers']} workers",
                  f"- **{m['docs_per_s']:.0f} docs/s**, {m['mb_per_s']:.2f} MB/s ({m['seconds']:.2f} s wall; "
                  f"read alone {m['read_only_seconds']:.2f} s)",
                  "- CPU seconds per phase: " + ", ".join(f"{k.split('.', 1)[1]} {v:.2f}" for k, v in m.items()
                                                          if k.startswith("cpu_seconds."))]
        for key, value in results[name].get("scores", {}).items():
            lines.append(f"- {key}: {value:.4f}" if isinstance(value, float) else f"- {key}: {value}")
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None, help="override clean.num_workers")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    args = parser.parse_args()
    params = load_section("clean", clean.Params, args.params)
    results: dict[str, Any] = _provenance.stamp("clean", MEASURES)
    if DEMO.is_dir():
        metrics, outcome = run_clean(params, DEMO, args.workers)
        results["demo"] = {"metrics": metrics}
        if DEMO_LABELS.is_file():
            labels = demo_labels(DEMO_LABELS, DEMO, params.max_record_bytes)
            results["demo"]["scores"] = score(labels, outcome, {"article", "long", "noisy", "html"})
    else:
        print(f"no demo corpus at {DEMO}: run `make demo` (or `dvc repro demo_corpus`) first", file=sys.stderr)
    if DEVSET.is_file():
        metrics, outcome = run_clean(params, DEVSET, args.workers)
        results["devset"] = {"metrics": metrics,
                             "scores": score(devset_labels(DEVSET), outcome, {"prose", "fortune", "manpage", "html"})}
    _provenance.write(results, markdown)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
