import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.common.report import data
from tests.fixtures.report import write_datasets


def test_the_funnel_counts_each_step_per_language_and_the_tokens_of_each_split():
    docs = {"lang": ["en", "en", "zh", "zh"], "tier": ["easy", "hard", "easy", "easy"],
            "split": ["train", "train", "train", "val"], "num_tokens": [5, 7, 11, 13]}
    funnel = data.funnel(10, ["en", "en", "en", "zh", "zh"], ["en", "en", "zh", "zh"], docs)
    assert funnel["langs"] == ["en", "zh"]
    assert [(s["step"], s["total"]) for s in funnel["steps"]] == [
        ("read", 10), ("kept by clean", 5), ("kept by semantic_filter", 4), ("tier easy", 3), ("tier medium", 0),
        ("tier hard", 1)]
    assert funnel["steps"][1]["by_lang"] == {"en": 3, "zh": 2} and funnel["steps"][3]["by_lang"] == {"en": 1, "zh": 2}
    assert funnel["train"]["easy"] == {"en": {"docs": 1, "tokens": 5}, "zh": {"docs": 1, "tokens": 11}}
    assert funnel["val"]["easy"]["zh"] == {"docs": 1, "tokens": 13} and funnel["train"]["medium"]["en"]["docs"] == 0


def test_read_funnel_counts_the_datasets(tmp_path):
    paths = write_datasets(tmp_path)
    funnel = data.read_funnel(paths["clean"], paths["filtered"], paths["docs"])
    assert [s["total"] for s in funnel["steps"][:3]] == [46, 27, 21]
    assert sum(s["total"] for s in funnel["steps"][3:]) == 21


def test_drops_are_grouped_by_family_sorted_by_count_and_split_by_language():
    reasons = ["lang:de", "quality:too_short", "lang:fr", "lang:de", "dedup:near", "quality:stop_words", "lang:de"]
    langs = ["de", None, "fr", "de", "en", "zh", "de"]
    stage = data.drop_reasons("clean", 20, reasons, langs, ["en", "zh"])
    assert stage["num_dropped"] == 7 and stage["columns"] == ["en", "zh", "other"]
    assert [(g["family"], g["count"]) for g in stage["families"]] == [
        ("language", 4), ("quality rule", 2), ("duplicate", 1)]
    language = stage["families"][0]["reasons"]
    assert [(r["reason"], r["count"]) for r in language] == [("lang:de", 3), ("lang:fr", 1)]
    assert language[0]["by_lang"] == {"en": 0, "zh": 0, "other": 3}
    quality = {r["reason"]: r["by_lang"] for r in stage["families"][1]["reasons"]}
    assert quality == {"quality:stop_words": {"en": 0, "zh": 1, "other": 0},
                       "quality:too_short": {"en": 0, "zh": 0, "other": 1}}
    assert data.example_reasons([stage], 1) == [("clean", "lang:de"), ("clean", "quality:stop_words"),
                                                ("clean", "dedup:near")]
    picked = data.example_rows(reasons, ["lang:de", "dedup:near"], 2, seed=0)
    assert picked["dedup:near"] == [4] and len(picked["lang:de"]) == 2 and set(picked["lang:de"]) <= {0, 3, 6}
    assert picked == data.example_rows(reasons, ["lang:de", "dedup:near"], 2, seed=0)  # seeded
    samples = {tuple(data.example_rows(reasons, ["lang:de"], 2, seed=s)["lang:de"]) for s in range(20)}
    assert len(samples) > 1  # a sample, not the first rows


@pytest.mark.parametrize("record, text", [
    ('{"id": "a", "text": "hello"}', "hello"),
    ('{"id": "a", "text": 3.5}', '{"id": "a", "text": 3.5}'),  # invalid:non_string_text: the record itself
    ('{"id": "broken', '{"id": "broken'),
    ("true", "true"),
    ("plain cleaned text", "plain cleaned text"),
])
def test_record_text_takes_the_text_field_of_a_json_object_else_the_record(record, text):
    assert data.record_text(record) == text


def test_excerpts_are_bounded_and_control_characters_visible():
    assert data.excerpt("a" * 50, 10) == "a" * 10 + "…"
    assert data.excerpt("  x\x00y\x1b\n\n\n\n\nz  ", 100) == "x\\x00y\\x1b\n\nz"
    assert data.excerpt("tab\tand\nnewline", 100) == "tab\tand\nnewline"


def test_tier_examples_are_the_documents_nearest_each_median():
    langs = ["en"] * 5 + ["zh"] * 2
    tiers = ["easy"] * 5 + ["hard"] * 2
    ppl = [1.0, 2.0, 3.0, 4.0, 100.0, 50.0, 60.0]
    picks = data.tier_examples(langs, tiers, ppl, 2)
    assert picks[("en", "easy")] == [1, 2]  # median 3: itself and 2 (|2-3| = |4-3|, the earlier row wins)
    assert picks[("zh", "hard")] == [5, 6]


def test_long_training_logs_are_thinned_keeping_the_last_step():
    rows = [{"step": str(i)} for i in range(1001)]
    thinned = data.thin(rows, max_points=100)
    assert len(thinned) <= 102 and thinned[0]["step"] == "0" and thinned[-1]["step"] == "1000"
    assert data.thin(rows[:50], max_points=100) == rows[:50]


def test_semantic_scores_and_histograms_per_language():
    metrics = {"threshold.*": 0.4, "threshold.en": 0.3, "val.en.num": 4, "val.en.precision": 1.0}
    validation = {"lang": ["en", "en", "en", "zh"], "label": ["keep", "drop", "drop", "keep"],
                  "p_keep": [0.95, 0.05, 1.0, 0.5]}
    sem = data.semantic_filter(metrics, validation, {"en": 7}, ["semantic:ad", "semantic:ad"], ["en", "zh"], 10)
    (en,) = sem["langs"]
    assert en["lang"] == "en" and en["threshold"] == 0.3 and en["kept"] == 7 and en["dropped"] == {"semantic:ad": 1}
    assert en["hist"]["keep"][9] == 1 and en["hist"]["drop"][0] == 1 and en["hist"]["drop"][9] == 1  # p = 1.0
    assert en["val"]["precision"] == 1.0 and en["val"]["recall"] is None and sem["pooled_threshold"] == 0.4


def test_stage_seconds_follow_the_given_order_then_names():
    metrics = {"b": {"seconds": 2}, "a": {"seconds": 1.5}, "c": {"x": 1}, "z": {"seconds": 3}}
    assert data.stage_seconds(metrics, ["b", "c", "a"]) == [("b", 2.0), ("a", 1.5), ("z", 3.0)]


def test_values_are_read_from_the_row_groups_that_hold_them(tmp_path, monkeypatch):
    folder = tmp_path / "ds"
    folder.mkdir()
    for part in range(2):  # 2 files x 5 row groups of 3 rows
        table = pa.table({"text": [f"t{part * 15 + i}" for i in range(15)]})
        pq.write_table(table, folder / f"part-0000{part}.parquet", row_group_size=3)
    read = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group",
                        lambda self, i, **kw: read.append(i) or original(self, i, **kw))
    assert data.read_values_at(folder, "text", [1, 2, 16, 29]) == {1: "t1", 2: "t2", 16: "t16", 29: "t29"}
    assert read == [0, 0, 4]  # one group of the first file, two of the second
    assert data.num_rows(folder) == 30


def test_a_missing_dataset_or_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"^.*nowhere: no Parquet file"):
        data.read_columns(tmp_path / "nowhere", ["lang"])
    with pytest.raises(FileNotFoundError, match=r"^.*x\.json: not found"):
        data.read_json(tmp_path / "x.json")


def test_the_funnel_of_each_source_counts_read_kept_and_trained():
    docs = {"source": ["crawl", "export", "export"], "split": ["train", "train", "val"], "num_tokens": [5, 7, 11]}
    rows = data.source_funnel(["crawl", "export", "export", "crawl", "export", None], ["crawl", "export", "export"],
                              ["crawl", "export", "export"], docs)
    assert rows == [
        {"source": "export", "read": 3, "clean": 2, "semantic_filter": 2, "train_docs": 1, "train_tokens": 7},
        {"source": "crawl", "read": 2, "clean": 1, "semantic_filter": 1, "train_docs": 1, "train_tokens": 5},
        {"source": None, "read": 1, "clean": 0, "semantic_filter": 0, "train_docs": 0, "train_tokens": 0}]
