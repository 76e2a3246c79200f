import csv
import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from stages import perplexity, tokenizer
from stages.common.lm import bpe
from stages.common.lm.model import load_checkpoint
from stages.common.lm.token_shards import SPLITS, TIERS, TokenShard, open_tiers
from stages.common.runtime.params import ConfigError
from stages.common.runtime.parquet import read_table
from tests.fixtures.hf_datasets import expected_features, hf_load
from tests.fixtures.lm_corpus import one_torch_thread, synthetic_docs, write_docs  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NUM_DOCS = 240


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, one_torch_thread) -> tuple[Path, Path, list[dict]]:
    """Docs (two Parquet files) and a tokenizer trained on them by the tokenizer stage."""
    root = tmp_path_factory.mktemp("ppl")
    docs = synthetic_docs(NUM_DOCS, seed=2, noisy_share=0.25)
    docs_dir = write_docs(root / "docs", docs, rows_per_part=100)
    tokenizer.run(tokenizer.Params(input_dir=str(docs_dir), out_dir=str(root / "tok"),
                                   metrics_path=str(root / "tok.json"),
                                   detail_path=str(root / "tok.detail.json"), vocab_size=400))
    return docs_dir, root / "tok", docs


def make_params(tmp_path: Path, corpus, name: str = "run", **overrides) -> perplexity.Params:
    docs_dir, tok_dir, _ = corpus
    # A fixed 60 steps (max_epochs 0): these tests check what a trained reference LM does with the documents.
    reference = dataclasses.replace(perplexity.ReferenceParams(), **{
        "preset": "debug", "steps": 60, "max_epochs": 0.0, "batch_size": 16, "subset_fraction": 0.5,
        "optim": perplexity.ReferenceOptim(lr=1e-2, warmup_steps=5), **overrides.pop("reference", {})})
    settings = dict(input_dir=str(docs_dir), tokenizer_dir=str(tok_dir), out_dir=str(tmp_path / name / "out"),
                    model_dir=str(tmp_path / name / "model"), metrics_path=str(tmp_path / name / "metrics.json"),
                    detail_path=str(tmp_path / name / "metrics.detail.json"),
                    plot_path=str(tmp_path / name / "hist.csv"), work_dir=str(tmp_path / name / "work"),
                    precision="fp32", val_fraction=0.1,
                    min_docs_per_lang=20, read_batch_docs=64, reference=reference)
    return perplexity.Params(**{**settings, **overrides})


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, corpus, one_torch_thread):
    params = make_params(tmp_path_factory.mktemp("first"), corpus)
    return params, perplexity.run(params)


def test_every_document_scored_tiered_and_sharded(first_run, corpus):
    params, metrics = first_run
    _, tok_dir, docs = corpus
    out = Path(params.out_dir)
    assert (out / "_SUCCESS").is_file() and not (out / "_scratch").exists()
    rows = read_table(out / "docs").to_pylist()
    assert [r["id"] for r in rows] == [d["id"] for d in docs]  # input order, nothing lost
    assert set(rows[0]) == {"id", "text", "lang", "lang_prob", "source", "file", "meta", "perplexity", "tier", "split",
                            "num_tokens"}
    assert all(r["perplexity"] > 1 and r["tier"] in TIERS and r["split"] in SPLITS for r in rows)
    for lang in ("en", "zh"):  # per-language thirds
        counts = [sum(1 for r in rows if r["lang"] == lang and r["tier"] == t) for t in TIERS]
        assert max(counts) - min(counts) <= 2, counts
    # Noisy documents (random letters/characters) are what the reference LM finds hard.
    noisy = [r for r, d in zip(rows, docs) if "。" not in d["text"] and " ." not in d["text"]]
    assert sum(r["tier"] == "hard" for r in noisy) / len(noisy) > 0.8

    # Token shards: every document in exactly one (split, tier) shard, tokens as the tokenizer gives them.
    tok = bpe.load(tok_dir)
    position = {(s, t): 0 for s in SPLITS for t in TIERS}
    for split in SPLITS:
        shards = open_tiers(out / "tokens", split)
        for row in rows:
            if row["split"] != split:
                continue
            shard = shards[row["tier"]]
            ids = shard.doc(position[split, row["tier"]]).tolist()
            position[split, row["tier"]] += 1
            assert ids == tok.encode(row["text"]).ids + [0] and len(ids) == row["num_tokens"] + 1
    assert sum(position.values()) == NUM_DOCS
    manifest = json.loads((out / "tokens" / "manifest.json").read_text())
    assert manifest["vocab_size"] == 400 and manifest["eos_id"] == 0 and manifest["dtype"] == "uint16"
    for (split, tier), n in position.items():
        assert manifest["shards"][f"{split}/{tier}"]["num_docs"] == n == metrics[f"docs.{split}.{tier}"]
        assert TokenShard(out / "tokens" / split / tier).num_docs == n


def test_metrics_cutoffs_plot_and_model(first_run):
    params, metrics = first_run
    assert json.loads(Path(params.detail_path).read_text()) == metrics
    assert metrics["num_docs"] == NUM_DOCS == sum(metrics[f"docs.{s}.{t}"] for s in SPLITS for t in TIERS)
    assert metrics["num_tokens"] == sum(metrics[f"tokens.{s}.{t}"] for s in SPLITS for t in TIERS)
    assert metrics["reference.trained"] == 1 and metrics["reference.final_loss"] < metrics["reference.first_loss"]
    assert metrics["reference.tokens_seen"] == 60 * 16 * 64 and metrics["reference.num_skipped_steps"] == 0
    assert metrics["reference.val_perplexity"] > 1 and metrics["num_pooled_langs"] == 0
    for lang in ("en", "zh"):
        assert metrics[f"hard_easy_ratio.{lang}"] > 2
        assert metrics[f"mean_perplexity.{lang}.easy"] < metrics[f"mean_perplexity.{lang}.medium"] < \
            metrics[f"mean_perplexity.{lang}.hard"]
    with open(Path(params.out_dir) / "cutoffs.csv", newline="") as f:
        cutoffs = {row["lang"]: row for row in csv.DictReader(f)}
    assert set(cutoffs) == {"*", "en", "zh"} and cutoffs["en"]["source"] == "lang"
    assert float(cutoffs["en"]["easy_max"]) == pytest.approx(metrics["cutoffs.en.easy_max"], rel=1e-4)
    with open(params.plot_path, newline="") as f:
        plot = list(csv.DictReader(f))
    assert sum(int(r["docs"]) for r in plot if r["kind"] == "bin") == NUM_DOCS
    assert sum(1 for r in plot if r["kind"] == "cutoff") == 4
    model = load_checkpoint(Path(params.model_dir) / "model.safetensors")
    assert model.config.vocab_size == 400 and model.config.dim == 32


def test_published_docs_load_with_hf_datasets_through_the_card(tmp_path, first_run):
    """The folder also holds token shards and a CSV: the card's configs make `load_dataset` read docs/ only."""
    params, metrics = first_run
    out = Path(params.out_dir)
    (folder,) = hf_load(tmp_path, {"path": str(out)})
    assert folder["num_rows"] == NUM_DOCS and folder["rows"] == read_table(out / "docs").to_pylist()
    assert folder["features"] == expected_features(out / "docs")
    assert {k: folder["features"][k] for k in ("perplexity", "tier", "split", "num_tokens")} == \
        {"perplexity": "float32", "tier": "string", "split": "string", "num_tokens": "int32"}
    card = (out / "README.md").read_text()
    assert "- \"en\"\n- \"zh\"" in card and "config_name: quarantine" not in card
    for lang in ("en", "zh"):
        for tier in TIERS:
            assert f"| `{lang}` / `{tier}` | {metrics[f'docs.{lang}.{tier}']:,} |" in card
    assert f"| `val` | {metrics['num_val_docs']:,} |" in card and "`tokens/`" in card


def test_same_inputs_give_the_same_bytes(tmp_path, first_run, corpus):
    params, _ = first_run
    again = make_params(tmp_path, corpus)
    perplexity.run(again)
    for rel in ("docs/part-00000.parquet", "tokens/train/hard.bin", "tokens/val/easy.idx.npy", "cutoffs.csv",
                "README.md"):
        assert (Path(params.out_dir) / rel).read_bytes() == (Path(again.out_dir) / rel).read_bytes(), rel
    assert (Path(params.model_dir) / "model.safetensors").read_bytes() == \
        (Path(again.model_dir) / "model.safetensors").read_bytes()


def test_a_given_checkpoint_and_frozen_cutoffs_reproduce_the_run(tmp_path, first_run, corpus):
    params, metrics = first_run
    frozen = make_params(tmp_path, corpus, cutoffs_from=str(Path(params.out_dir) / "cutoffs.csv"),
                         reference={"checkpoint": str(Path(params.model_dir) / "model.safetensors")})
    frozen_metrics = perplexity.run(frozen)
    assert frozen_metrics["reference.trained"] == 0
    first = read_table(Path(params.out_dir) / "docs", ["perplexity", "tier"])
    second = read_table(Path(frozen.out_dir) / "docs", ["perplexity", "tier"])
    assert first.column("tier").to_pylist() == second.column("tier").to_pylist()
    np.testing.assert_allclose(first.column("perplexity").to_numpy(), second.column("perplexity").to_numpy(), rtol=1e-6)


def test_quality_score_picks_the_reference_subset_and_small_languages_pool(tmp_path, corpus):
    docs_dir, tok_dir, docs = corpus
    scores = [float(i % 10) for i in range(len(docs))]
    scored_dir = write_docs(tmp_path / "scored", docs, quality_scores=scores)
    params = dataclasses.replace(make_params(tmp_path, corpus, min_docs_per_lang=1000, cutoffs_from="reference"),
                                 input_dir=str(scored_dir))
    metrics = perplexity.run(params)
    rows = read_table(Path(params.out_dir) / "docs").to_pylist()
    assert rows[0]["quality_score"] == 0.0  # input columns are carried through
    # The top half of each language by score (ties in input order), minus the validation documents.
    top = set()
    for lang in ("en", "zh"):
        members = sorted((i for i, r in enumerate(rows) if r["lang"] == lang), key=lambda i: -scores[i])
        top |= set(members[:len(members) // 2])
    assert min(scores[i] for i in top) >= 4 and max(scores[i] for i in set(range(NUM_DOCS)) - top) <= 5
    assert metrics["reference.num_docs"] == sum(1 for i in top if rows[i]["split"] == "train")
    assert metrics["num_pooled_langs"] == 2 and metrics["cutoffs.en.pooled"] == 1
    assert metrics["cutoffs.en.easy_max"] == metrics["cutoffs.zh.easy_max"]


def test_reference_lm_trained_on_a_user_corpus(tmp_path, corpus):
    _, _, docs = corpus
    english = [d for d in docs if d["lang"] == "en"]
    params = make_params(tmp_path, corpus, reference={"input_dir": str(write_docs(tmp_path / "ref", english))})
    metrics = perplexity.run(params)
    num_val = metrics["reference.val_num_docs"]
    assert 0 < num_val < len(english) // 4 and metrics["reference.num_docs"] == len(english) - num_val
    assert 1 < metrics["reference.val_perplexity"] < metrics["val_perplexity"]  # its own kind of text is easier
    assert not any(k.startswith("reference_bias.") for k in metrics)
    with pytest.raises(ValueError, match="cutoffs_from"):
        dataclasses.replace(params, cutoffs_from="reference")
    with pytest.raises(ValueError, match="exclude"):
        perplexity.ReferenceParams(checkpoint="m.safetensors", input_dir="docs")


@pytest.mark.parametrize("overrides, match", [
    ({"percentiles": (70.0, 30.0)}, "percentiles"),
    ({"percentiles": (10.0, 20.0, 30.0)}, "percentiles"),
    ({"val_fraction": 1.0}, "val_fraction"),
    ({"device": "tpu"}, "device"),
    ({"score_batch_tokens": 0}, "score_batch_tokens"),
])
def test_invalid_params_are_named(overrides, match):
    with pytest.raises(ValueError, match=match):
        perplexity.Params(input_dir="docs", tokenizer_dir="tok", out_dir="out", model_dir="model",
                          metrics_path="metrics.json",
                          detail_path="metrics.detail.json", plot_path="hist.csv", work_dir="work", **overrides)


def test_checkpoint_with_another_vocabulary_is_refused(tmp_path, first_run, corpus):
    params, _ = first_run
    other_tok = tmp_path / "tok"
    tokenizer.run(tokenizer.Params(input_dir=params.input_dir, out_dir=str(other_tok),
                                   metrics_path=str(tmp_path / "t.json"),
                                   detail_path=str(tmp_path / "t.detail.json"), vocab_size=300))
    bad = dataclasses.replace(make_params(tmp_path, corpus, reference={"checkpoint": str(
        Path(params.model_dir) / "model.safetensors")}), tokenizer_dir=str(other_tok))
    with pytest.raises(ValueError, match="vocabulary 400"):
        perplexity.run(bad)
    assert not Path(bad.out_dir).exists()  # nothing published


def test_reference_steps_follow_the_token_count():
    """`steps` is a cap: a small reference corpus gets about `max_epochs` passes, not 300 steps over it."""
    demo = perplexity.ReferenceParams()  # 16 x 256 tokens a step
    assert perplexity.reference_steps(demo, 2_742_897, 256) == (300, demo.optim)  # the demo: the cap comes first
    steps, optim = perplexity.reference_steps(demo, 10_000, 256)  # ~21 documents
    assert steps == 3 and optim.warmup_steps == 1 and optim.lr == demo.optim.lr
    twice = dataclasses.replace(demo, max_epochs=2.0)
    assert perplexity.reference_steps(twice, 100_000, 256)[0] == math.ceil(2 * 100_000 / 4096)
    assert perplexity.reference_steps(dataclasses.replace(demo, max_epochs=0.0), 10_000, 256) == (300, demo.optim)


def test_a_small_corpus_stops_before_the_reference_lm_in_one_line(tmp_path, corpus, monkeypatch, capsys):
    """Thirty documents and the default val_fraction: no validation documents for the train stage. One line
    naming the param and the counts, status 2, before the reference LM trains; nothing published."""
    _, tok_dir, _ = corpus
    docs_dir = write_docs(tmp_path / "docs", synthetic_docs(30, seed=5))
    monkeypatch.setattr(perplexity, "train_reference", lambda *a: pytest.fail("trained the reference LM"))
    section = {"input_dir": str(docs_dir), "tokenizer_dir": str(tok_dir), "out_dir": str(tmp_path / "out"),
               "model_dir": str(tmp_path / "model"), "metrics_path": str(tmp_path / "m.json"),
               "detail_path": str(tmp_path / "d.json"), "plot_path": str(tmp_path / "h.csv"),
               "work_dir": str(tmp_path / "work"), "precision": "fp32", "reference": {"preset": "debug"}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"perplexity": section}))
    with pytest.raises(SystemExit) as exit_code:
        perplexity.main(["--params", str(tmp_path / "params.yaml")])
    stderr = capsys.readouterr().err
    err = [line for line in stderr.splitlines() if line.startswith("error:")]  # the others: progress bars
    assert exit_code.value.code == 2 and len(err) == 1 and "Traceback" not in stderr, stderr
    assert re.fullmatch(r"error: param 'perplexity\.val_fraction': 0\.02 of 30 documents gives a validation split of "
                        r"\d documents, [\d,]+ tokens; the train stage's validation needs 3 documents and 771 tokens, "
                        r"257 per tier .*: raise perplexity\.val_fraction \(about 0\.\d+ for this corpus\)", err[0])
    assert not any(Path(tmp_path, name).exists() for name in ("out", "model", "m.json", "d.json"))


def test_a_tier_short_of_tokens_stops_the_stage_before_anything_is_written(tmp_path, first_run, corpus):
    """The split holds enough tokens for three tiers, but the tiers cut it unevenly: the check on each (split,
    tier) runs once the tiers are known, before any shard or metric is written."""
    _, metrics = first_run
    sizes = {t: metrics[f"tokens.val.{t}"] + metrics[f"docs.val.{t}"] for t in TIERS}  # end-of-document tokens in
    need = min(sizes.values()) + 1
    assert 3 * need <= sum(sizes.values())  # so only the per-tier check can stop it
    params = make_params(tmp_path, corpus, min_tokens_per_tier=perplexity.TierTokens(val=need))
    with pytest.raises(ConfigError, match=rf"^param 'perplexity\.val_fraction': 0\.1 of 240 documents gives a "
                                          rf"validation split of tiers of easy [\d,]+, medium [\d,]+, hard [\d,]+ "
                                          rf"tokens; the train stage's validation needs {need:,} tokens in each tier"):
        perplexity.run(params)
    assert not Path(params.out_dir).exists() and not Path(params.model_dir).exists()
    assert not Path(params.metrics_path).exists()
    with pytest.raises(ConfigError, match=r"^param 'perplexity\.min_tokens_per_tier\.train': the training split "
                                          r"\(240 documents, val_fraction 0\.1\) holds \d+ documents, [\d,]+ tokens; "
                                          r"the train stage needs 3 documents and 3,000,000 tokens"):
        perplexity.run(make_params(tmp_path, corpus, min_tokens_per_tier=perplexity.TierTokens(train=1_000_000)))


def test_without_validation_documents_no_figure_is_nan(tmp_path, corpus):
    """val_fraction 0 (allowed with min_tokens_per_tier.val 0): the validation perplexities are left out, not NaN;
    and the reference LM, on its own few thousand tokens, trains about one pass over them, not 60 steps."""
    params = make_params(tmp_path, corpus, val_fraction=0.0, min_tokens_per_tier=perplexity.TierTokens(val=0),
                         reference={"max_epochs": 1.0})
    metrics = perplexity.run(params)
    assert metrics["num_val_docs"] == 0 and metrics["reference.val_num_docs"] == 0
    assert "val_perplexity" not in metrics and "reference.val_perplexity" not in metrics
    assert all(not isinstance(v, float) or math.isfinite(v) for v in metrics.values())
    assert "ref_val_ppl" not in json.loads(Path(params.metrics_path).read_text())
    tokens = metrics["reference.num_tokens"]
    assert metrics["reference.steps"] == math.ceil(tokens / (16 * 64)) < 60
    assert 1.0 <= metrics["reference.epochs"] < 1.0 + 16 * 64 / tokens
