from bench.semantic_filter import label_share


def test_label_share_cuts_every_group_alike_and_a_smaller_share_is_a_subset_of_a_larger():
    labels = {"id": [f"r{i}" for i in range(100)],
              "lang": ["en"] * 60 + ["zh"] * 40,
              "label": (["keep"] * 40 + ["drop"] * 20) + (["keep"] * 30 + ["drop"] * 10),
              "category": [None] * 40 + ["ad"] * 10 + ["boilerplate"] * 10 + [None] * 30 + ["ad"] * 10}
    half, tenth = label_share(labels, 0.5), label_share(labels, 0.1)
    groups = lambda rows: sorted((labels["lang"][i], labels["label"][i], labels["category"][i] or "") for i in rows)
    counts = {g: groups(half).count(g) for g in set(groups(half))}
    assert counts == {("en", "keep", ""): 20, ("en", "drop", "ad"): 5, ("en", "drop", "boilerplate"): 5,
                      ("zh", "keep", ""): 15, ("zh", "drop", "ad"): 5}
    assert len(tenth) == 4 + 1 + 1 + 3 + 1  # ceil: a group of any size keeps at least one
    assert set(tenth) <= set(half)
    assert label_share(labels, 1.0) == list(range(100))
    assert label_share(labels, 0.5) == half  # fixed by the ids, not by chance


def test_corpus_seeds_table_gives_rates_with_their_counts():
    from bench.semantic_filter import corpus_seeds_table

    figures = {"threshold.en": 0.5, "val.en.precision": 0.991, "val.en.recall": 0.97, "en.boilerplate.dropped_rate": 40 / 43,
               "en.boilerplate.num": 43, "en.other.dropped_rate": 7 / 157, "en.other.num": 157,
               "threshold.zh": 0.41, "val.zh.precision": 1.0, "val.zh.recall": 0.99, "zh.boilerplate.dropped_rate": 53 / 58,
               "zh.boilerplate.num": 58, "zh.other.dropped_rate": 0.0, "zh.other.num": 184}
    lines = corpus_seeds_table({"seed_1234": {"params.yaml": figures}})
    assert lines[2] == "| 1234 | params.yaml | en | 0.500 | 0.991 | 0.970 | 0.930 (40/43) | 0.045 (7/157) |"
    assert lines[3] == "| 1234 | params.yaml | zh | 0.410 | 1.000 | 0.990 | 0.914 (53/58) | 0.000 (0/184) |"
