import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langdetect import detector_factory
from langdetect.detector import Detector
from langdetect.lang_detect_exception import LangDetectException

from stages.common.text.langid import FastDetector, LanguageIdentifier, SeededDraws, load_profiles, script_sample
from stages.common.text.normalize import NormalizeOptions, normalize


@pytest.fixture(scope="module")
def langid():
    return LanguageIdentifier(seed=0)


@pytest.mark.parametrize("text, lang", [
    ("The committee published its annual report on the state of the river and the fish that live in it.", "en"),
    # Han-only classical text: plain langdetect answers "ko" here (its Korean profile holds Hanja).
    ("我们之所以研究历史,不是为了要知道未来,而是要拓展视野,要了解现在的种种绝非自然。", "zh"),
    ("ANALYZE - 收集與資料庫有關的統計\nSYNOPSIS ANALYZE [ VERBOSE ] [ table ]\n如果沒有引數，ANALYZE 檢查在當前資料庫裡的所有表。", "zh"),
    ("これは日本語の文章です。ひらがなとカタカナが含まれています。東京は大きな都市です。", "ja"),
    ("Der Ausschuss hat seinen Jahresbericht über den Zustand des Flusses und der Fische veröffentlicht.", "de"),
    ("Our guide in Beijing, 王小明, showed us the old city walls and explained how the markets worked.", "en"),
])
def test_languages(langid, text, lang):
    assert langid(text).lang == lang


def test_deterministic_across_instances():
    text = "Le comité a publié son rapport annuel sur l'état de la rivière."
    a, b = LanguageIdentifier(seed=7)(text), LanguageIdentifier(seed=7)(text)
    assert a == b


def test_no_letters_is_undetermined(langid):
    assert langid("12345 67890 !!! ???").lang == "und"


@pytest.mark.parametrize("text, script", [
    ("option --all " * 5 + "显示所有文件" * 200, "han"),
    ("これは日本語です。" * 50, "kana"),
    ("한국어 문장입니다 " * 50, "hangul"),
    ("Это русский текст про реку. " * 50, "cyrillic"),
    ("word and other words " * 200, "latin"),
])
def test_sample_is_bounded_and_takes_dominant_script(text, script):
    sample, found = script_sample(text, max_chars=90)
    assert found == script and len(sample) <= 90 and "option" not in sample


def test_script_decided_documents_get_the_same_answer_cheaper():
    full = LanguageIdentifier(seed=0)
    cheap = LanguageIdentifier(seed=0, keep=("zh", "en"))  # Cyrillic cannot be kept: one trial suffices
    text = "Река течёт через старый город, и люди, которые там живут, ловят в ней рыбу уже много поколений."
    assert full(text).lang == cheap(text).lang == "ru"


# Plain Russian, short enough that one of the three trials answers Bulgarian.
RU_OR_BG = "Мама, мама, на балконе кот и он не хочет домой, а там холодно и темно."


def test_kept_probability_sums_the_kept_languages():
    """The label is the most probable language and `prob` its probability; `kept_prob` is the probability of
    the text being in one of the kept languages, the per-language probabilities averaged over the trials."""
    both = LanguageIdentifier(seed=0, keep=("ru", "bg"))(RU_OR_BG)
    alone = LanguageIdentifier(seed=0, keep=("ru",))(RU_OR_BG)
    assert both.lang == alone.lang == "ru" and both.prob == alone.prob == pytest.approx(2 / 3, abs=0.01)
    assert both.kept_prob == pytest.approx(1.0) and alone.kept_prob == alone.prob
    assert LanguageIdentifier(seed=0, keep=("en",))(RU_OR_BG).kept_prob == 0.0
    # Chinese: simplified and traditional are one kept language
    zh = LanguageIdentifier(seed=0, keep=("zh",))("我们之所以研究历史,不是为了要知道未来,而是要拓展视野,要了解现在的种种绝非自然。")
    assert zh.lang == "zh" and zh.kept_prob >= zh.prob


def test_kept_probability_is_stock_langdetects(devset_texts):
    """kept_prob is the sum of stock langdetect's own per-language probabilities over the kept languages."""
    keep = ("bg", "cs", "de", "en", "es", "fr", "it", "ja", "pl", "pt", "ru", "sk", "zh")
    langid = LanguageIdentifier(seed=0, keep=keep)
    texts = [normalize(text, NormalizeOptions())[0] for text in devset_texts[::9]]
    for text, got in zip(texts, langid.identify(texts)):
        stock = langid.configure(stock_detector(), *script_sample(text, 400))
        try:
            stock.get_probabilities()
        except LangDetectException:
            assert got.lang == "und"
            continue
        want = sum(p for name, p in zip(stock.langlist, stock.langprob) if name.split("-")[0] in keep)
        assert got.kept_prob == pytest.approx(min(want, 1.0), abs=1e-9), text[:80]


STOCK_SAMPLES = [
    "The committee published its annual report on the state of the river. HTTP and URL-ish CAPS WORDS here.",
    "Der Ausschuss hat seinen Jahresbericht über den Zustand des Flusses veröffentlicht, ÄÖÜ straße.",
    "Река течёт через старый город, и люди ловят в ней рыбу.  Double  spaces   here.",
    "我们之所以研究历史,不是为了要知道未来,而是要拓展视野 with some English words mixed in.",
    "これは日本語の文章です。ひらがなとカタカナが含まれています。",
    "Nhà nước Cộng hòa xã hội chủ nghĩa Việt Nam, mail me at a.b@example.com or http://x.example/y",
]


def stock_detector() -> Detector:
    detector_factory.init_factory()
    return Detector(detector_factory._factory)


def test_profiles_are_langdetects():
    """The profiles read straight from langdetect's files: its languages in its order, its probabilities."""
    stock, profiles = (detector_factory.init_factory(), detector_factory._factory)[1], load_profiles()
    assert profiles.langlist == stock.langlist and profiles.grams == list(stock.word_lang_prob_map)
    assert profiles.matrix.tolist() == list(stock.word_lang_prob_map.values())


@pytest.mark.parametrize("text", STOCK_SAMPLES)
def test_fast_detector_matches_stock_langdetect(text):
    fast, stock = FastDetector(load_profiles(), 3), stock_detector()
    for detector in (fast, stock):
        detector.seed = 3
        detector.n_trial = 3
        detector.append(text)
    assert fast.text == stock.text
    fast.cleaning_text()
    stock.cleaning_text()
    assert fast.text == stock.text and fast._extract_ngrams() == stock._extract_ngrams()
    got, want = fast.get_probabilities(), stock.get_probabilities()
    assert [lang.lang for lang in got] == [lang.lang for lang in want]
    assert [lang.prob for lang in got] == pytest.approx([lang.prob for lang in want], abs=1e-9)


@pytest.mark.parametrize("seed", [0, 3, 2**40 + 7])
def test_seeded_draws_are_those_of_random_random(seed):
    """The trials' noise (gauss) and n-gram picks (choice), made in bulk for several texts at once, are
    exactly what langdetect's own `random.Random(seed)` would give each, in any interleaving, for any
    sequence length."""
    draws, plan = SeededDraws(seed), random.Random(seed + 1)
    lengths = [1, 2, 3, 5, 64, 65, 1000, 40_000, 2**31 + 5]
    references = [random.Random(seed) for _ in lengths]
    pos, cached = np.zeros(len(lengths), dtype=np.int64), [None] * len(lengths)
    for _ in range(60):
        if plan.random() < 0.2:
            for i, reference in enumerate(references):
                value, pos[i], cached[i] = draws.gauss(int(pos[i]), cached[i])
                assert value == reference.gauss(0.0, 1.0)
        else:
            count = plan.randint(1, 60)
            picks, after = draws.choices(pos, np.array(lengths), count)
            for i, (reference, n) in enumerate(zip(references, lengths)):
                assert picks[i].tolist() == [reference.choice(range(n)) for _ in range(count)]
            pos = after[:, -1]


def test_fast_detector_answers_as_stock_langdetect_on_real_documents(devset_texts):
    """Where LanguageIdentifier asks langdetect (its samples of the dominant script, with its trial counts
    and the Han-only prior), the fast detector gives stock langdetect's languages and probabilities."""
    for keep in ((), ("zh", "en")):
        langid = LanguageIdentifier(seed=0, keep=keep)
        for text in devset_texts[::9]:
            sample, script = script_sample(normalize(text, NormalizeOptions())[0], 400)
            fast = langid.configure(FastDetector(load_profiles(), 0), sample, script)
            stock = langid.configure(stock_detector(), sample, script)
            try:
                want = stock.get_probabilities()
            except LangDetectException:
                with pytest.raises(LangDetectException):
                    fast.get_probabilities()
                continue
            got = fast.get_probabilities()
            assert [lang.lang for lang in got] == [lang.lang for lang in want], text[:80]
            assert [lang.prob for lang in got] == pytest.approx([lang.prob for lang in want], abs=1e-9)


def test_texts_detected_together_get_their_answers_alone(devset_texts):
    """identify() runs the trials of many texts in lockstep: each gets exactly what it gets alone."""
    langid = LanguageIdentifier(seed=0, keep=("zh", "en"))
    texts = [normalize(text, NormalizeOptions())[0] for text in devset_texts[::3]] + ["", "12345 !!!", "a"]
    assert langid.identify(texts) == [langid(text) for text in texts]


def reference_script_sample(text: str, max_chars: int) -> tuple[str, str]:
    """script_sample without its shortcut for ASCII text."""
    from stages.common.text import langid as L
    text = L.spread_sample(text, L.SCRIPT_SAMPLE_CHARS)
    num_cjk = len(L._CJK_RE.findall(text))
    num_other = len(L._NON_CJK_LETTER_RE.findall(text)) if num_cjk else 1
    if num_cjk and num_cjk * L.LETTERS_PER_CJK_CHAR >= num_other:
        return script_sample(text, max_chars)  # not ASCII: no shortcut taken
    counts = {script: len(pattern.findall(text)) for script, pattern in L._SCRIPT_RES.items()}
    script = max(counts, key=counts.__getitem__)
    letters = len(L._NON_CJK_LETTER_RE.findall(text)) if counts[script] else 0
    return L.spread_sample(text, max_chars), script if counts[script] * 2 > letters else "latin"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=5000))
def test_ascii_text_is_sampled_as_before(text):
    assert script_sample(text, 90) == reference_script_sample(text, 90)


def test_real_documents_are_sampled_as_before(devset_texts):
    for text in devset_texts:
        assert script_sample(text, 400) == reference_script_sample(text, 400)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40) | st.lists(st.sampled_from(["A", "b", "ÄÖ", "ǅ", "ϒ", "中", " ", "Σσ", "1"]), max_size=12)
       .map("".join))
def test_capital_runs_are_two_uppercase_characters_in_a_row(word):
    from stages.common.text.langid import _has_capital_run
    assert _has_capital_run(word) == any(a.isupper() and b.isupper() for a, b in zip(word, word[1:]))
