from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.common.text.quality import (_CJK_CHAR_RE, QualityParams, QualityRules, _dup_ngram_char_ratio,
                                        _top_ngram_ratio)

EN_GOOD = ("The river runs through the old town and the people who live there have fished in it for "
           "generations. In the spring the water rises with the melting snow.")
ZH_GOOD = "这条河流经古老的小镇，住在那里的人们世世代代在河里捕鱼。春天，随着积雪融化，河水上涨，渔民们便开始修补渔网。"

rules = QualityRules(QualityParams())


def test_good_text_passes():
    assert rules.check(EN_GOOD, "en") is None
    assert rules.check(ZH_GOOD, "zh") is None


@pytest.mark.parametrize("text, lang, reason", [
    ("Too short to keep, the and of.", "en", "quality:too_short"),
    ("短短一句话。", "zh", "quality:too_short"),
    ("the of and to " + "a b c d e f g h i j k l m n o p q r s t u v w x y z", "en", "quality:mean_word_length"),
    ("Supercalifragilisticexpialidocious antidisestablishmentarianism " * 4 + "the and of", "en",
     "quality:mean_word_length"),
    ("# hash # tags # everywhere # in # this # text # and # the # of # words # here", "en", "quality:symbol_ratio"),
    ("12 34 56 78 90 12 34 56 78 90 11 22 33 the and of 44 55 66 77 88 99", "en", "quality:non_alpha_words"),
    ("Lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore", "en",
     "quality:stop_words"),
    ("- the first item of the list\n- the second item of it\n- and a third one to see\n- with the fourth", "en",
     "quality:bullet_lines"),
    ("And then the story goes on and on for a long while until...\nThe rest of it is hidden from the readers "
     "who came...\nRead more of the text to find out what the end of it...\nthe end of the piece", "en",
     "quality:ellipsis_lines"),
    ("Click here to buy the product\n" * 4 + "The one and only line of the content.", "en", "quality:dup_lines"),
    ("Subscribe to the newsletter of the day for more news\n" * 2 + "ok the and of\nfine to be\nyes with that", "en",
     "quality:dup_line_chars"),
    ("the cat " * 30, "en", "quality:top_2gram"),
    ("the farmer carried seven baskets of apples down to the market square. " * 3
     + "A different closing sentence with its own words keeps the top pair of words rare enough.", "en",
     "quality:dup_ngrams"),
    ("数据处理" * 6 + " option value --verbose --recursive --force " * 8, "zh", "quality:low_cjk_ratio"),
])
def test_rule_reasons(text, lang, reason):
    assert rules.check(text, lang) == reason


def test_thresholds_come_from_params():
    lenient = QualityRules(QualityParams(min_stop_words_en=0))
    text = "Lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore"
    assert lenient.check(text, "en") is None


# The repetition ratios against the straightforward loops they replace.
def reference_top_ngram_ratio(tokens: list[str], n: int) -> float:
    if len(tokens) < n + 1:
        return 0.0
    gram, count = Counter(zip(*(tokens[i:] for i in range(n)))).most_common(1)[0]
    return 0.0 if count < 2 else count * sum(len(t) for t in gram) / sum(len(t) for t in tokens)


def reference_dup_ngram_char_ratio(tokens: list[str], n: int) -> float:
    if len(tokens) < n * 2:
        return 0.0
    grams = list(zip(*(tokens[i:] for i in range(n))))
    counts = Counter(grams)
    covered = bytearray(len(tokens))
    for i, gram in enumerate(grams):
        if counts[gram] > 1:
            covered[i : i + n] = b"\x01" * n
    return sum(len(t) for t, c in zip(tokens, covered) if c) / sum(len(t) for t in tokens)


def check_ratios(tokens: list[str]) -> None:
    total = sum(map(len, tokens))
    for n in (2, 5, 10):
        assert _top_ngram_ratio(tokens, n, total) == reference_top_ngram_ratio(tokens, n)
        assert _dup_ngram_char_ratio(tokens, n, total) == reference_dup_ngram_char_ratio(tokens, n)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "bb", "the", "of", "river", "中", "文", "x" * 12]), max_size=80))
def test_repetition_ratios_match_the_loops(tokens):
    check_ratios(tokens)


def test_repetition_ratios_match_the_loops_on_real_documents(devset_texts):
    for text in devset_texts:
        check_ratios(text.split())
        check_ratios(_CJK_CHAR_RE.findall(text))
