import gzip
import json
from pathlib import Path

import pytest

from stages.demo_corpus import MALFORMED, Params, _prose, harvest, run


def _build(root: Path, seed: int = 7) -> Params:
    params = Params(seed=seed, num_docs=600, num_shards=3, out_dir=str(root / "demo"),
                    labels_path=str(root / "labels.jsonl"))
    run(params)
    return params


def _files(params: Params) -> dict[str, bytes]:
    paths = sorted(Path(params.out_dir).glob("part-*.jsonl.gz")) + [Path(params.labels_path)]
    return {p.name: p.read_bytes() for p in paths}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Params, list[bytes], list[dict]]:
    params = _build(tmp_path_factory.mktemp("a"))
    lines = [line for name, data in _files(params).items() if name.startswith("part-")
             for line in gzip.decompress(data).split(b"\n")[:-1]]
    labels = [json.loads(line) for line in Path(params.labels_path).read_text(encoding="utf-8").splitlines()]
    return params, lines, labels


def test_same_seed_same_bytes(corpus, tmp_path: Path) -> None:
    params = corpus[0]
    assert _files(_build(tmp_path)) == _files(params)
    assert (Path(params.out_dir) / "_SUCCESS").is_file()
    assert _files(_build(tmp_path / "other", seed=8)) != _files(params)


def test_labels_describe_the_records(corpus) -> None:
    _, lines, labels = corpus
    assert len(lines) == len(labels) == 600
    assert {lab["malformed"] for lab in labels} == set(MALFORMED) | {None}
    assert len({lab["lang"] for lab in labels} - {None}) >= 6
    seen: dict[str, str] = {}
    for line, lab in zip(lines, labels):
        if lab["malformed"]:
            continue
        rec = json.loads(line)
        assert rec.get("id") == lab["id"] and rec["text"].strip()
        if lab["dup_of"]:
            assert lab["dup_of"] in seen  # the original appears earlier in the stream
            assert (seen[lab["dup_of"]] == rec["text"]) == (lab["dup_type"] == "exact")
        if lab["kind"] == "html":
            assert "<html" in rec["text"]
        if lab["id"]:
            seen[lab["id"]] = rec["text"]
    assert {lab["dup_type"] for lab in labels} == {None, "exact", "near"}


def test_english_reads_like_english(corpus) -> None:
    """English bodies are real prose (docstrings, help topics) or templated sentences: nearly all of
    them pass the Gopher stop-word rule that `clean` applies, unlike Faker's word salad."""
    _, lines, labels = corpus
    stop_words = {"the", "be", "to", "of", "and", "that", "have", "with"}
    texts = [json.loads(line)["text"] for line, lab in zip(lines, labels)
             if lab["lang"] == "en" and lab["kind"] in ("article", "noisy", "long")]
    assert len(texts) > 100
    passing = [t for t in texts if sum(w.lower() in stop_words for w in t.split()) >= 2]
    assert len(passing) / len(texts) >= 0.95
    pool = {p for _, pieces in harvest() for piece in pieces for p in piece.split("\n\n")}
    real = [t for t in texts if t.split("\n\n")[0] in pool]
    assert len(real) / len(texts) >= 0.7  # a small corpus gets real prose for every article


def test_prose_of_a_numpy_style_docstring() -> None:
    doc = """Return the sum of the array elements over the given axis, which is a long line.

Parameters
----------
a : array_like
    Elements to sum. They are added with the default
    precision of the platform.
axis : int, optional
    Axis along which the sum is computed. The default is to sum all elements.

Examples
--------
Sum a small array, which is shown here::

    >>> np.sum([1, 2])
    3

Notes
-----
Arithmetic is modular when using integer types, and no error is raised on
overflow. See :func:`numpy.add` and ``out`` for details [1]_.

.. math:: x = \\sum_i a_i
"""
    assert _prose(doc).split("\n\n") == [
        "Return the sum of the array elements over the given axis, which is a long line.",
        "Elements to sum. They are added with the default precision of the platform. "
        "Axis along which the sum is computed. The default is to sum all elements.",
        "Arithmetic is modular when using integer types, and no error is raised on overflow. "
        "See numpy.add and out for details.",
    ]


def test_pool_of_real_prose_is_large_and_unique() -> None:
    pieces = [p for _, ps in harvest() for p in ps]
    assert sum(map(len, pieces)) > 3_000_000
    assert len(set(pieces)) == len(pieces)
    assert all(">>>" not in p for p in pieces)
