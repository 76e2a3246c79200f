from bench.languages import score_kinds


def row(i, lang, kind, text="x" * 150, dup_of=None):
    return {"id": str(i), "lang": lang, "kind": kind, "text": text, "dup_of": dup_of}


def test_score_kinds_counts_drops_per_language_and_kind_and_not_duplicates_of_kept_documents():
    rows = [row(0, "en", "manpage"), row(1, "en", "manpage"), row(2, "en", "manpage"),
            row(3, "en", "boilerplate"), row(4, "zh", "fortune"), row(5, "zh", "fortune", text="short"),
            row(6, "zh", "fortune", dup_of="4")]
    outcome = {"0": {"kept": True, "reason": ""}, "1": {"kept": False, "reason": "quality:too_short"},
               "2": {"kept": False, "reason": "dedup:near"}, "3": {"kept": False, "reason": "quality:stop_words"},
               "4": {"kept": False, "reason": "lang:ja"}, "5": {"kept": False, "reason": "quality:too_short"},
               "6": {"kept": False, "reason": "dedup:exact"}}
    kinds = score_kinds(rows, outcome)
    assert kinds["en"]["manpage"] == {"docs": 3, "dropped": 1, "dropped_share": 1 / 3,
                                      "drop_reasons": {"quality:too_short": 1}}
    assert kinds["en"]["boilerplate"]["dropped_share"] == 1.0
    # the short document and the injected duplicate are not counted
    assert kinds["zh"]["fortune"] == {"docs": 1, "dropped": 1, "dropped_share": 1.0, "drop_reasons": {"lang:ja": 1}}
