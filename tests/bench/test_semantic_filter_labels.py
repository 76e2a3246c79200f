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
