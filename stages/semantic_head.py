"""`semantic_head` stage: train the semantic filter's classification head on the labelled examples.

One head per language with `min_labels_per_class` keep and drop training examples (plus a pooled head for
every other language, which needs as many over all languages: ConfigError naming the counts otherwise):
multinomial logistic regression over the sentence embedding, hashed n-grams and layout features
(stages/common/semantic/head.py). A deterministic hash of each example's id puts it in train or validation.
Outputs, so that choosing a threshold (stage `semantic_filter`) needs neither embedding nor training:

    <out_dir>/head.safetensors   weights of every head (prefix `<lang>.`)
    <out_dir>/head.json          classes, feature settings, languages
    <out_dir>/validation.parquet lang, id, label, category, p_keep, predicted category
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from safetensors.torch import save_file

from stages.common.runtime.atomic import atomic_dir
from stages.common.runtime.cli import stage_main
from stages.common.runtime.metrics import write_metrics
from stages.common.runtime.ownership import check_owned_paths
from stages.common.runtime.params import ConfigError, param, validate
from stages.common.semantic.features import Features, NgramParams
from stages.common.semantic.head import (
    KEEP,
    Head,
    MIN_VAL_PER_CLASS,
    binary_report,
    class_counts,
    low_confidence,
    predict,
    train_head,
)

log = logging.getLogger("refinery.semantic_head")
STAGE = "semantic_head"
POOLED = "*"


@dataclass(frozen=True)
class Params:
    embeddings_dir: str
    out_dir: str
    metrics_path: str  # headline figures (DVC metrics)
    detail_path: str  # every figure
    seed: int = param(0, min=0)
    val_fraction: float = param(0.2, gt=0.0, lt=1.0)
    # a language with fewer training examples of keep or drop uses the pooled head; the pooled head needs as many
    min_labels_per_class: int = param(20, min=1)
    # L2 penalty on a head's weights, per head (language code; "*" for the pooled head and every language
    # not named). The English head reads MiniLM embeddings that carry across genres; a strong penalty keeps it
    # from leaning on the demo's templated n-grams. Other languages have only n-grams to go on.
    l2: dict[str, float] = field(default_factory=lambda: {POOLED: 1e-4, "en": 1e-2})
    max_iter: int = param(100, min=1)  # L-BFGS iterations
    ngrams: NgramParams = field(default_factory=NgramParams)

    def __post_init__(self) -> None:
        validate(self, STAGE)
        if POOLED not in self.l2:
            raise ValueError(f"param 'semantic_head.l2' needs a {POOLED!r} entry (the pooled head), got {self.l2}")
        for name, value in self.l2.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"param 'semantic_head.l2.{name}' must be a number >= 0, got {value!r}")

    def l2_for(self, head: str) -> float:
        return float(self.l2.get(head, self.l2[POOLED]))


def is_validation(example_id: str, fraction: float) -> bool:
    digest = hashlib.blake2b(example_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


def class_names(labels: list[dict[str, Any]]) -> list[str]:
    categories = sorted({r["category"] or "low_score" for r in labels if r["label"] != KEEP})
    return [KEEP, *categories]


def head_groups(params: Params, langs: np.ndarray, is_drop: np.ndarray, val: np.ndarray) -> dict[str, np.ndarray]:
    """Training rows per head: the pooled head's (every language's) and those of each language with
    `min_labels_per_class` keep and drop training examples (the others use the pooled head). ConfigError,
    with the counts per language, when even the pooled head has fewer."""
    train_counts = {str(lang): class_counts(is_drop[(langs == lang) & ~val]) for lang in sorted(set(langs))}
    groups = {POOLED: np.flatnonzero(~val)}
    for lang, (num_keep, num_drop) in train_counts.items():
        if min(num_keep, num_drop) >= params.min_labels_per_class:
            groups[lang] = np.flatnonzero((langs == lang) & ~val)
        else:
            log.info("semantic_head: %r has %d keep and %d drop training examples, fewer than min_labels_per_class "
                     "(%d) of either: it uses the pooled head", lang, num_keep, num_drop, params.min_labels_per_class)
    num_keep, num_drop = class_counts(is_drop[~val])
    if min(num_keep, num_drop) < params.min_labels_per_class:
        per_lang = ", ".join(f"{lang} {k} keep / {d} drop" for lang, (k, d) in train_counts.items())
        raise ConfigError(
            f"param 'semantic_head.min_labels_per_class': the pooled head needs {params.min_labels_per_class} keep and "
            f"{params.min_labels_per_class} drop training examples, the labels hold {num_keep} keep and {num_drop} "
            f"drop once val_fraction {params.val_fraction:g} is held out ({per_lang}): label more examples "
            "(semantic_embed.labels_path) or lower semantic_head.min_labels_per_class")
    for lang in train_counts:
        val_keep, val_drop = class_counts(is_drop[(langs == lang) & val])
        if low_confidence(val_keep, val_drop):
            log.warning("semantic_head: %r has %d keep and %d drop validation examples, fewer than %d of either: "
                        "the semantic filter's threshold for it is low confidence", lang, val_keep, val_drop,
                        MIN_VAL_PER_CLASS)
    return groups


def check_data(params: Params, context: dict[str, Any]) -> list[tuple[str, str]]:
    """`refinery check`: the labels file (semantic_embed.labels_path) per language and class against what
    the heads need once `val_fraction` is held out (an error where even the pooled head falls short), and
    the languages clean keeps that have no labels. Labels without `lang` count as "?" here (the stage
    detects their language)."""
    path = Path(((context.get("params") or {}).get("semantic_embed") or {}).get("labels_path") or "")
    made_by = context["pending"](str(path)) if "pending" in context else None
    if made_by:
        return [("note", f"{path} is not read: stage {made_by!r} makes it and has not run yet")]
    if not path.is_file():
        return []  # reported as a missing input
    ids, langs, is_drop = [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            try:
                obj = json.loads(line) if line.strip() else None
            except ValueError:
                return [("error", f"{path}:{number}: not JSON")]
            if isinstance(obj, dict):
                ids.append(str(obj.get("id") or f"label-{number}"))
                langs.append(obj.get("lang") if isinstance(obj.get("lang"), str) else "?")
                is_drop.append(obj.get("label") != KEEP)
    val = np.array([is_validation(i, params.val_fraction) for i in ids], dtype=bool)
    lang_array, drop_array = np.array(langs), np.array(is_drop, dtype=bool)
    try:
        groups = head_groups(params, lang_array, drop_array, val)
    except ConfigError as e:
        return [("error", str(e))]
    counts = ", ".join(f"{lang} {k} keep / {d} drop" for lang in sorted(set(langs))
                       for k, d in [class_counts(drop_array[(lang_array == lang) & ~val])])
    heads = ", ".join(g for g in groups if g != POOLED) or "none"
    findings = [("note", f"{path}: {len(ids)} labels; training examples after the hold-out: {counts}; heads of their "
                         f"own: {heads}, the pooled head for the rest")]
    kept = (context.get("clean") or {}).get("docs") or {}
    missing = sorted(lang for lang in kept if lang not in set(langs))
    if missing and "?" not in langs:
        findings.append(("note", f"{path} has no labels in {', '.join(missing)}, which clean keeps: the pooled head "
                                 "judges them"))
    return findings


def run(params: Params) -> dict[str, Any]:
    check_owned_paths(STAGE, {"embeddings_dir": params.embeddings_dir}, {"out_dir": params.out_dir})
    start = time.perf_counter()
    labels, embeddings = read_labels(params.embeddings_dir)
    classes = class_names(labels)
    targets = np.array([classes.index(KEEP if r["label"] == KEEP else (r["category"] or "low_score"))
                        for r in labels])
    features = Features.build([r["text"] for r in labels], [r["lang"] for r in labels], embeddings, params.ngrams)
    val = np.array([is_validation(r["id"], params.val_fraction) for r in labels])
    langs = np.array([r["lang"] for r in labels])
    heads = train_heads(params, features, targets, len(classes), head_groups(params, langs, targets != 0, val))
    val_rows = np.flatnonzero(val)
    probs = predict(heads, POOLED, features.subset(val_rows), langs[val_rows])
    config = {"classes": classes, "heads": sorted(heads), "pooled": POOLED, "embedding_dim": embeddings.shape[1],
              "ngrams": dataclasses.asdict(params.ngrams)}
    with atomic_dir(params.out_dir, stage=STAGE) as tmp:
        save_file({f"{name}.{k}": v.contiguous() for name, head in heads.items() for k, v in head.state_dict().items()},
                  str(tmp / "head.safetensors"))
        (tmp / "head.json").write_text(json.dumps(config, indent=2) + "\n")
        pq.write_table(validation_table([labels[r] for r in val_rows], probs, classes), tmp / "validation.parquet")
    metrics: dict[str, Any] = {"num_train": int((~val).sum()), "num_validation": int(val.sum()),
                               "classes": len(classes), "seconds": time.perf_counter() - start}
    metrics.update(validation_report([labels[r] for r in val_rows], probs))
    write_metrics(metrics, headline(metrics), params.metrics_path, params.detail_path)
    return metrics


def read_labels(embeddings_dir: str) -> tuple[list[dict[str, Any]], np.ndarray]:
    """semantic_embed's labels.parquet: the label rows, and their embeddings as one (rows, dim) array."""
    table = pq.read_table(f"{embeddings_dir}/labels.parquet")
    labels = table.drop_columns(["embedding"]).to_pylist()
    return labels, table.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(labels), -1)


def train_heads(params: Params, features: Features, targets: np.ndarray, num_classes: int,
                groups: dict[str, np.ndarray]) -> dict[str, Head]:
    """One head per group of training rows (`head_groups`), by name."""
    heads = {}
    for name, rows in groups.items():
        heads[name] = train_head(features.subset(rows), targets[rows], num_classes, params.ngrams.num_buckets,
                                 params.l2_for(name), params.max_iter, params.seed)
        log.info("semantic_head: trained head %r on %d examples (l2 %g)", name, len(rows), params.l2_for(name))
    return heads


def validation_table(rows: list[dict[str, Any]], probs: np.ndarray, classes: list[str]) -> pa.Table:
    """What the heads predict for each validation label: p(keep) and the likeliest drop class."""
    return pa.table({
        "id": [r["id"] for r in rows],
        "lang": [r["lang"] for r in rows],
        "label": [r["label"] for r in rows],
        "category": [r["category"] for r in rows],
        "p_keep": probs[:, 0],
        "predicted": [classes[int(np.argmax(p[1:])) + 1] for p in probs],
    })


def validation_report(rows: list[dict[str, Any]], probs: np.ndarray) -> dict[str, Any]:
    """Precision, recall and F1 of dropping at p(keep) < 0.5, per language of the validation labels."""
    is_drop = np.array([r["label"] != KEEP for r in rows])
    row_langs = np.array([r["lang"] for r in rows])
    return {f"val_at_0.5.{lang}.{key}": value for lang in sorted(set(row_langs.tolist()))
            for key, value in binary_report(probs[row_langs == lang, 0], is_drop[row_langs == lang], 0.5).items()}


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` lists: validation F1 per language (at probability 0.5), examples trained on."""
    return {"num_train": metrics["num_train"],
            **{f"f1.{lang}": metrics[f"val_at_0.5.{lang}.f1"]
               for lang in sorted({k.split(".")[2] for k in metrics if k.startswith("val_at_0.5.")})}}


def main(argv: list[str] | None = None) -> None:
    stage_main(STAGE, Params, run, __doc__, argv)


if __name__ == "__main__":
    main()
