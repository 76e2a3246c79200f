import hashlib
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xxhash
from datasketch import LeanMinHash, MinHash, MinHashLSH
from datasketch.lsh import _optimal_param
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.common.runtime.atomic import SUCCESS_MARKER
from stages.common.text.dedup import (
    DedupParams,
    DuplicateLookup,
    Signer,
    candidate_table,
    deduplicate,
    exact_key,
    lsh_bands,
    shingles,
    write_candidates,
)

BASE = ("The old lighthouse keeper climbed the spiral stairs every evening to light the lamp, and from the top "
        "he could see the fishing boats returning to the harbour before the storm arrived over the bay.")


def test_exact_key_ignores_case_whitespace_and_punctuation():
    assert exact_key("Hello,   World!\n") == exact_key("hello world")
    assert exact_key("hello world") != exact_key("hello word")


def dedup(tmp_path: Path, docs: list[tuple[str, bytes, np.ndarray | None]], params: DedupParams,
          shard_size: int = 2, progress=None) -> list[tuple[str, str] | None]:
    """The three phases as clean runs them, on (id, exact key, signature) triples cut into shards: each
    document's (reason, id of the kept copy), or None where it is kept."""
    shards, offset = [], 0
    for start in range(0, len(docs), shard_size):
        folder = tmp_path / f"shard-{start}"
        folder.mkdir(parents=True, exist_ok=True)
        part = docs[start:start + shard_size]
        table = candidate_table(range(len(part)), [key for _, key, _ in part], [sig for _, _, sig in part], params)
        shards.append((folder, offset, write_candidates(table, folder)))
        offset += len(part)
    lookup = DuplicateLookup(deduplicate(shards, tmp_path, params, "local", "", 1, progress))
    results = [lookup.check(i, doc_id) for i, (doc_id, _, _) in enumerate(docs)]
    lookup.finish()
    return results


def test_near_duplicates_found_and_first_occurrence_kept(tmp_path):
    params = DedupParams()
    sign = Signer(params, seed=1)
    near = BASE.replace("evening", "night").replace("storm", "rain")
    other = "A completely different text about cooking rice with vegetables, garlic and a little soy sauce."
    zh = ("这条河流经古老的小镇，住在那里的人们世世代代在河里捕鱼。春天，随着积雪融化，河水上涨，"
          "渔民们便在岸边修补渔网。到了秋天，河面变得平静，孩子们在桥上看着归来的渔船，老人们坐在树下喝茶聊天。")
    zh_near = zh.replace("春天", "夏天")
    docs = [("a", BASE, "en"), ("b", other, "en"), ("c", near, "en"), ("d", BASE.upper(), "en"), ("e", zh, "zh"),
            ("f", zh_near, "zh")]
    results = dedup(tmp_path, [(i, exact_key(t), sign(t, lang)) for i, t, lang in docs], params)
    assert results == [None, None, ("dedup:near", "a"), ("dedup:exact", "a"), None, ("dedup:near", "e")]


def test_a_group_keeps_its_first_document_only(tmp_path):
    """b is a near copy of a, c of b but not of a: all three are one group, and only a is kept (the rule of
    datatrove and NeMo Curator; a first-come index checking only kept documents would keep c)."""
    params = DedupParams(exact=False)
    num_bands, rows = lsh_bands(params.threshold, params.num_perm)
    a = np.arange(params.num_perm, dtype=np.uint32)
    b, c = a.copy(), a.copy()
    b[rows:] += 1000  # shares band 0 with a
    c[:rows] += 2000  # shares the other bands with b, none with a
    c[2 * rows:] = b[2 * rows:]
    c[rows:2 * rows] = b[rows:2 * rows]
    results = dedup(tmp_path, [("a", b"", a), ("b", b"", b), ("c", b"", c)], params)
    assert results == [None, ("dedup:near", "a"), ("dedup:near", "a")]


def test_switches(tmp_path):
    docs = [("a", exact_key(BASE), None), ("b", exact_key(BASE), None)]
    assert dedup(tmp_path, docs, DedupParams(exact=False, near=False)) == [None, None]
    assert dedup(tmp_path / "on", docs, DedupParams(near=False)) == [None, ("dedup:exact", "a")]


def test_an_interrupted_run_redoes_only_unfinished_partitions(tmp_path):
    params = DedupParams(partition_rows=10)
    rng = np.random.default_rng(0)
    originals = rng.integers(0, 2**32, (5, params.num_perm), dtype=np.uint32)
    docs = [(str(i), bytes([i % 7]) * 16, originals[i % 5]) for i in range(30)]
    first = []
    want = dedup(tmp_path, docs, params, progress=first.append)
    assert len(first) > 3 and not any(r.resumed for r in first)
    assert (first[1].folder / SUCCESS_MARKER).is_file()
    shutil.rmtree(first[1].folder)  # as if the run was killed while on partition 1 (it is published whole)
    again = []
    assert dedup(tmp_path, docs, params, progress=again.append) == want
    assert [r.index for r in again if not r.resumed] == [1]


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


def components_by_datasketch(signatures: list[np.ndarray], params: DedupParams) -> list[int | None]:
    """The rule computed another way: every pair datasketch's MinHashLSH reports, then union-find keeping the
    first document of each group. Each document's kept copy's index, or None where it is kept."""
    lsh = MinHashLSH(threshold=params.threshold, num_perm=params.num_perm)
    minhashes = [LeanMinHash(seed=0, hashvalues=sig, scheme="affine32") for sig in signatures]
    for i, minhash in enumerate(minhashes):
        lsh.insert(i, minhash, check_duplication=False)
    parent = list(range(len(signatures)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i, minhash in enumerate(minhashes):
        for j in lsh.query(minhash):
            a, b = sorted((root(i), root(j)))
            parent[b] = a
    return [None if root(i) == i else root(i) for i in range(len(signatures))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 127), max_size=40)), min_size=1, max_size=40),
       st.sampled_from([0.3, 0.5, 0.7, 0.9]), st.sampled_from([1, 3, 50]), st.sampled_from([7, 100, 10**6]))
def test_groups_are_datasketchs_whatever_the_shards_and_partitions(tmp_path_factory, edits, threshold, shard_size,
                                                                   partition_rows):
    """Documents derived from four originals by changing a few signature values: the same groups, with the
    same kept document, as union-find over datasketch's LSH matches, for any shard size and partition count."""
    params = DedupParams(exact=False, threshold=threshold, partition_rows=partition_rows)
    originals = np.random.default_rng(0).integers(0, 2**32, (4, params.num_perm), dtype=np.uint32)
    signatures = []
    for i, (base, changed) in enumerate(edits):
        signature = originals[base].copy()
        signature[changed] ^= np.uint32(1 + i)
        signatures.append(signature)
    want = [None if k is None else ("dedup:near", str(k)) for k in components_by_datasketch(signatures, params)]
    docs = [(str(i), b"", sig) for i, sig in enumerate(signatures)]
    assert dedup(tmp_path_factory.mktemp("dedup"), docs, params, shard_size) == want


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
