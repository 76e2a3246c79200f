from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.common.runtime.params import ConfigError, from_dict
from stages.common.text.langid import LANGUAGES
from stages.common.text.quality import (
    _CJK_CHAR_RE,
    UNSPACED_LANGS,
    QualityParams,
    QualityRules,
    _dup_ngram_char_ratio,
    _top_ngram_ratio,
    languages_without_stop_words,
    stop_words,
)

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
    ("the cat " * 60, "en", "quality:top_2gram"),  # the n-gram rules judge texts of ngram_min_words (100) on
    ("the farmer carried seven baskets of apples down to the market square. " * 9
     + "A different closing sentence with its own words keeps the top pair of words rare enough.", "en",
     "quality:dup_ngrams"),
    ("数据处理" * 6 + " option value --verbose --recursive --force " * 8, "zh", "quality:low_script_ratio"),
])
def test_rule_reasons(text, lang, reason):
    assert rules.check(text, lang) == reason


# Short texts whose one repeated phrase is a large share of them; the n-gram rules would drop each.
SHORT_REPEATS = [
    ("Todo lo debil es viejo, todo lo fuerte es joven.\n\t\t-- Cristina de Suecia. (1626-1689) Reina de Suecia.",
     "es"),
    ("Don't change the reason, just change the excuses!\n\t\t-- Joe Cointment", "en"),
    ("12:35:24 <leeloo_> LCF: a tak na prawde\n12:35:45 <leeloo_> LCF: jestes fajny\n"
     "12:36:02 <leeloo_> LCF: i nie masz nic z blondyna :P\n12:36:10 <LCF> leeloo_: dzieki", "pl"),
    ("За да не бъдете излъгани от хората, не се доверявайте нито на името, нито на дрехите; за да не бъдете "
     "излъгани от книгите, не се доверявайте нито на заглавието, нито на корицата.", "bg"),
    ("俟我於著乎而，充耳以素乎而，尚之以瓊華乎而。\n俟我於庭乎而，充耳以青乎而，尚之以瓊瑩乎而。\n"
     "俟我於堂乎而，充耳以黃乎而，尚之以瓊英乎而。", "zh"),
]


@pytest.mark.parametrize("text, lang", SHORT_REPEATS)
def test_short_texts_are_not_judged_on_ngram_shares(text, lang):
    assert rules.check(text, lang) is None
    # ... which the n-gram rules, applied at any length, would drop
    everywhere = QualityRules(QualityParams(ngram_min_words=0, min_stop_words=0, min_words=0, min_chars=0))
    assert everywhere.check(text, lang) in {"quality:top_2gram", "quality:dup_ngrams"}


def test_a_short_list_of_notices_is_dropped_on_its_line_openings():
    notices = ("The MIT License (MIT)\n\nCopyright (c) 2025 Ana Ramírez\n\nCopyright (c) 2022 the contributors\n\n"
               "Copyright (c) 2018 Alex Grönholm and the other authors of this package")
    assert rules.judge(notices, "en")[0] == "quality:top_2gram_line_starts"


RU_GOOD = ("Река течёт через старый город, и люди, которые живут там, ловят в ней рыбу уже много поколений. "
           "Весной вода поднимается, когда тает снег, и рыбаки чинят сети на берегу.")
# German compounds and Finnish inflection make long words; prose in either stays within the word-length bounds.
DE_GOOD = ("Die Donaudampfschifffahrtsgesellschaft hat ihren Sitz in der alten Hafenstadt, und die "
           "Kapitänsmützenhersteller der Umgebung leben seit Generationen von ihr. Im Frühjahr steigt das Wasser.")
FI_GOOD = ("Kaupungin läpi virtaava joki on ollut kalastajien elinkeino vuosisatojen ajan, ja keväällä, kun lumi "
           "sulaa, vesi nousee rantaniityille asti.")
JA_GOOD = ("この川は古い町を流れていて、そこに住む人々は何世代にもわたって川で魚を捕ってきた。"
           "春になると雪が解けて水かさが増し、漁師たちは岸辺で網を繕い始める。")
TH_GOOD = ("แม่น้ำสายนี้ไหลผ่านเมืองเก่า และผู้คนที่อาศัยอยู่ที่นั่นได้จับปลาในแม่น้ำมาหลายชั่วอายุคน "
           "ในฤดูใบไม้ผลิ น้ำจะเพิ่มสูงขึ้นเมื่อหิมะละลาย")
KO_GOOD = ("이 강은 오래된 마을을 지나 흐르고, 그곳에 사는 사람들은 여러 세대에 걸쳐 강에서 물고기를 잡아 왔다. "
           "봄이 되면 눈이 녹아 물이 불어나고 어부들은 강가에서 그물을 손질한다.")


@pytest.mark.parametrize("text, lang", [(RU_GOOD, "ru"), (DE_GOOD, "de"), (FI_GOOD, "fi"), (JA_GOOD, "ja"),
                                        (TH_GOOD, "th"), (KO_GOOD, "ko")])
def test_prose_of_other_scripts_passes(text, lang):
    assert rules.check(text, lang) is None


def test_rules_follow_the_script():
    # Thai is written without spaces between words: word rules would see a handful of long "words".
    assert rules.check(TH_GOOD, "en") == "quality:too_few_words"
    # Cyrillic words count as words with letters (none of these is Latin).
    assert rules.check(" ".join(["123", "45,6", "7-8", "река"] * 5) + " и в не", "ru") == "quality:non_alpha_words"
    # Korean gets word rules, and has no stop-word list: keyword soup is not dropped for lacking stop words.
    assert rules.check("서울 아파트 매매 전세 월세 시세 분양 정보 부동산 중개 상담 문의 환영 강남 송파 "
                       "서초 마포 용산 성동 광진 동작 관악", "ko") is None
    assert languages_without_stop_words(["ko", "en", "ru", "ja", "th", "sw", "ko"]) == ["ko", "sw"]


@pytest.mark.parametrize("text, lang, reason", [
    ("Купить телефон недорого Москва доставка скидки акция смартфон чехол зарядка наушники гарантия отзывы цена",
     "ru", "quality:stop_words"),
    ("Короткий текст, и всё.", "ru", "quality:too_short"),
    ("Wohnung mieten Berlin Altbau Balkon provisionsfrei Erstbezug Einbauküche Tiefgarage Stellplatz Parkett "
     "Fußbodenheizung", "de", "quality:stop_words"),
    ("Die Verbrauchsgüterkaufrichtlinienumsetzungsgesetzgebung Rechtsschutzversicherungsgesellschaften "
     "Grundstücksverkehrsgenehmigungszuständigkeitsübertragungsverordnung und die Arbeitsunfähigkeitsbescheinigung "
     "Donaudampfschifffahrtsgesellschaftskapitän Nahrungsmittelunverträglichkeit Kraftfahrzeughaftpflicht "
     "Bundesausbildungsförderungsgesetz der Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz",
     "de", "quality:mean_word_length"),
    ("短い文です。", "ja", "quality:too_short"),
    ("設定ファイルを読み込みます。設定ファイルを書き込みます。" + " --verbose --recursive --force option value" * 8,
     "ja", "quality:low_script_ratio"),
    ("สวัสดีครับ", "th", "quality:too_short"),
    ("ตั้งค่าไฟล์การกำหนดค่าของระบบ" + " --verbose --recursive --force option value" * 8, "th",
     "quality:low_script_ratio"),
    ("แม่น้ำสายนี้ไหลผ่านเมืองเก่าและผู้คน" * 12 + "จับปลา", "th", "quality:dup_ngrams"),
])
def test_rule_reasons_by_script(text, lang, reason):
    assert rules.check(text, lang) == reason


def test_stop_word_lists():
    lists = stop_words()
    assert {"en", "de", "fr", "es", "it", "pt", "nl", "pl", "cs", "sk", "ru", "bg", "uk", "sv"} <= set(lists)
    assert set(lists) <= set(LANGUAGES) - UNSPACED_LANGS  # a code the detector answers, of a spaced language
    assert lists["en"] == {"the", "be", "to", "of", "and", "that", "have", "with"}  # Gopher's
    assert all(len(words) >= 8 for words in lists.values())
    # Matched whole and case-insensitively, punctuation aside: "Und" and "dem," count, "Dampfer" holds no "der".
    text = "Und Dampfer Fahrt Hafen dem, Schiff Kapitän Matrose Deck Anker Segel Wind Welle"
    assert rules.check(text, "de") is None
    assert rules.check(text.replace("dem,", "Boot"), "de") == "quality:stop_words"


def test_renamed_params_name_their_new_key():
    with pytest.raises(ConfigError,
                       match="'clean.quality.min_stop_words_en' was renamed 'clean.quality.min_stop_words'"):
        from_dict(QualityParams, {"min_stop_words_en": 2}, prefix="clean.quality.")
    with pytest.raises(ConfigError, match="renamed 'clean.quality.min_script_chars'"):
        from_dict(QualityParams, {"min_cjk_chars": 20}, prefix="clean.quality.")


def test_thresholds_come_from_params():
    lenient = QualityRules(QualityParams(min_stop_words=0))
    text = "Lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore"
    assert lenient.check(text, "en") is None


# A chat log of six lines, two of them trailing off: speech, not a page of teasers.
TRAILING_OFF = ("and yesterday they took the whole class to the brewery on a trip\n"
                "you can guess what that turned into....\n"
                "but on the other hand, while I was drunk I came up with a new design\n"
                "so I did not lose anything in the end :)\n"
                "and as for the mess, the anthem of that faculty should be played\n"
                "like that Peter Gabriel song or something...")


def test_few_trailing_lines_do_not_decide_a_short_text():
    assert rules.check(TRAILING_OFF, "en") is None  # 2 of 6 lines: over the ratio, under the count
    assert QualityRules(QualityParams(min_ellipsis_lines=2)).check(TRAILING_OFF, "en") == "quality:ellipsis_lines"
    longer = TRAILING_OFF + "\nand then the rest of it went on for a while...\nthe end"
    assert rules.check(longer, "en") == "quality:ellipsis_lines"  # 3 of 8


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
