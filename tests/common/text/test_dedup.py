import hashlib
import re

import numpy as np
import pytest
import xxhash
from datasketch import LeanMinHash, MinHash, MinHashLSH
from datasketch.lsh import _optimal_param
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.common.text.dedup import DedupIndex, DedupParams, Signer, exact_key, lsh_bands, shingles

BASE = ("The old lighthouse keeper climbed the spiral stairs every evening to light the lamp, and from the top "
        "he could see the fishing boats returning to the harbour before the storm arrived over the bay.")


def test_exact_key_ignores_case_whitespace_and_punctuation():
    assert exact_key("Hello,   World!\n") == exact_key("hello world")
    assert exact_key("hello world") != exact_key("hello word")


def test_near_duplicates_found_and_first_occurrence_kept():
    params = DedupParams()
    sign, index = Signer(params, seed=1), DedupIndex(params)
    near = BASE.replace("evening", "night").replace("storm", "rain")
    other = "A completely different text about cooking rice with vegetables, garlic and a little soy sauce."
    zh = ("这条河流经古老的小镇，住在那里的人们世世代代在河里捕鱼。春天，随着积雪融化，河水上涨，"
          "渔民们便在岸边修补渔网。到了秋天，河面变得平静，孩子们在桥上看着归来的渔船，老人们坐在树下喝茶聊天。")
    zh_near = zh.replace("春天", "夏天")
    docs = [("a", BASE, "en"), ("b", other, "en"), ("c", near, "en"), ("d", BASE.upper(), "en"), ("e", zh, "zh"),
            ("f", zh_near, "zh")]
    results = [index.check(i, exact_key(t), sign(t, lang)) for i, t, lang in docs]
    assert results == [None, None, ("dedup:near", "a"), ("dedup:exact", "a"), None, ("dedup:near", "e")]


def test_switches():
    index = DedupIndex(DedupParams(exact=False, near=False))
    assert index.check("a", exact_key(BASE), None) is None
    assert index.check("b", exact_key(BASE), None) is None


def datasketch_signature(text: str, lang: str, params: DedupParams, seed: int) -> np.ndarray:
    """The signature as datasketch's MinHash makes it (with xxh32, over the same shingles)."""
    minhash = MinHash(num_perm=params.num_perm, seed=seed, hashfunc=xxhash.xxh32_intdigest)
    minhash.update_batch([s.encode() for s in shingles(text, lang, params.word_ngram, params.char_ngram)])
    return minhash.hashvalues


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300) | st.lists(st.sampled_from(["the", "river", "Old", "town", "河流", "古老", "的", ",", " ",
                                                           "\n"]), max_size=80).map(" ".join),
       st.sampled_from(["en", "zh"]), st.sampled_from([0, 1, 42]))
def test_signatures_are_datasketch_minhashes(text, lang, seed):
    params = DedupParams()
    got, want = Signer(params, seed)(text, lang), datasketch_signature(text, lang, params, seed)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_signatures_are_datasketch_minhashes_on_real_documents(devset_texts):
    params = DedupParams(num_perm=64, word_ngram=2, char_ngram=4)
    sign = Signer(params, seed=0)
    for text in devset_texts[::3]:
        for lang in ("en", "zh"):
            assert np.array_equal(sign(text, lang), datasketch_signature(text, lang, params, 0))


@pytest.mark.parametrize("num_perm", [2, 16, 64, 128, 256])
def test_lsh_bands_are_datasketchs(num_perm):
    for threshold in [i / 20 for i in range(21)] + [0.33, 0.7, 0.85, 0.999]:
        want = _optimal_param(threshold, num_perm, 0.5, 0.5)
        if want[0] < 2:
            with pytest.raises(ValueError, match="too small"):
                lsh_bands(threshold, num_perm)
        else:
            assert lsh_bands(threshold, num_perm) == want, threshold


class DatasketchIndex:
    """The index as it was, on datasketch's MinHashLSH."""

    def __init__(self, params: DedupParams) -> None:
        self.lsh, self.ids = MinHashLSH(threshold=params.threshold, num_perm=params.num_perm), []

    def check(self, doc_id: str, signature: np.ndarray) -> tuple[str, str] | None:
        minhash = LeanMinHash(seed=0, hashvalues=signature, scheme="affine32")
        candidates = self.lsh.query(minhash)
        if candidates:
            return "dedup:near", self.ids[min(candidates)]
        self.lsh.insert(len(self.ids), minhash, check_duplication=False)
        self.ids.append(doc_id)
        return None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 127), max_size=40)), min_size=1, max_size=40),
       st.sampled_from([0.3, 0.5, 0.7, 0.9]))
def test_index_finds_what_datasketchs_finds(edits, threshold):
    """Documents derived from four originals by changing a few signature values: the same near duplicates,
    with the same earliest copy, as datasketch's LSH index."""
    params = DedupParams(exact=False, threshold=threshold)
    originals = np.random.default_rng(0).integers(0, 2**32, (4, params.num_perm), dtype=np.uint32)
    ours, theirs = DedupIndex(params), DatasketchIndex(params)
    for i, (base, changed) in enumerate(edits):
        signature = originals[base].copy()
        signature[changed] ^= np.uint32(1 + i)
        assert ours.check(str(i), b"", signature) == theirs.check(str(i), signature)


def check_as_first_defined(text: str) -> None:
    """The exact key and the shingles as first defined: runs of non-word characters substituted."""
    non_word = re.compile(r"[\W_]+")
    assert exact_key(text) == hashlib.blake2b(non_word.sub("", text.casefold()).encode(), digest_size=16).digest()
    words, chars = non_word.sub(" ", text.casefold()).split(), non_word.sub("", text)
    assert shingles(text, "en", 3, 5) == {" ".join(words[i : i + 3]) for i in range(max(1, len(words) - 2))}
    assert shingles(text, "zh", 3, 5) == {chars[i : i + 5] for i in range(max(1, len(chars) - 4))}


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.lists(st.sampled_from(["Word", "ß", "İ", "_", "中文", "\u00a0", " ", "\n", "x1"]),
                                         max_size=30).map("".join))
def test_keys_and_shingles_as_first_defined(text):
    check_as_first_defined(text)


def test_keys_and_shingles_as_first_defined_on_real_documents(devset_texts):
    for text in devset_texts:
        check_as_first_defined(text)
