import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from stages.common.runtime.params import ConfigError, load_section
from stages.common.text.normalize import NormalizeOptions, normalize
from stages.common.text.readers import iter_raw, parse_raw
from stages.demo_corpus import (
    MALFORMED,
    Builder,
    Params,
    _prose,
    api_doc,
    api_docs,
    harvest,
    licence_texts,
    main,
    po_catalogs,
    po_messages,
    run,
    tables,
    to_traditional,
)
from stages.demo_corpus.records import Doc, _even_shares, semantic_labels
from stages.demo_corpus.tables import T
from stages.demo_corpus import dist_text
from stages.demo_corpus.dist_text import readme_sections
from stages.demo_corpus.warc import WARC_MALFORMED, WARC_NAME

# Genres of the keep class beyond articles (see the module docstring), recognised by their layout.
MAN = re.compile(r"^(?:NAME|名称|名稱)(?:（NAME）)?\n", re.M)
QUOTE = re.compile(r"\n(?:\x1b\[33m)?(?:    |\t\t)--(?:\x1b\[32m| )\S[^\n]*\Z")
SPHINX = 'class="sphinxsidebar"'


def genre(text: str) -> str:
    if SPHINX in text:
        return "sphinx"
    if 'class="navheader"' in text:
        return "docbook"
    if "<html" in text:
        return "html"
    if MAN.search(text):
        return "man"
    return "quote" if QUOTE.search(text) and len(text) <= 320 else "other"


def _build(root: Path, seed: int = 7) -> Params:
    params = Params(seed=seed, num_docs=600, num_shards=3, out_dir=str(root / "demo"),
                    labels_path=str(root / "labels.jsonl"), semantic_labels_path=str(root / "semantic.jsonl"),
                    metrics_path=str(root / "metrics.json"), detail_path=str(root / "metrics.detail.json"))
    run(params)
    return params


def _files(params: Params) -> dict[str, bytes]:
    paths = sorted(Path(params.out_dir).glob("*.warc.gz")) + sorted(Path(params.out_dir).glob("part-*.jsonl.gz")) \
        + [Path(params.labels_path), Path(params.semantic_labels_path)]
    return {p.name: p.read_bytes() for p in paths}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Params, list[bytes], list[dict]]:
    params = _build(tmp_path_factory.mktemp("a"))
    lines = warc_lines(Path(params.out_dir) / WARC_NAME)
    lines += [line for name, data in _files(params).items() if name.startswith("part-")
              for line in gzip.decompress(data).split(b"\n")[:-1]]
    labels = [json.loads(line) for line in Path(params.labels_path).read_text(encoding="utf-8").splitlines()]
    return params, lines, labels


def warc_lines(path: Path) -> list[bytes]:
    """The WARC's responses as the JSON lines they replace ({"id": record id, "text": body}), read with warcio
    (a reader independent of clean's)."""
    from warcio.archiveiterator import ArchiveIterator
    with open(path, "rb") as f:
        return [json.dumps({"id": r.rec_headers.get_header("WARC-Record-ID"),
                            "text": r.content_stream().read().decode("utf-8", "replace")}).encode()
                for r in ArchiveIterator(f) if r.rec_type == "response"]


def test_same_seed_same_bytes(corpus, tmp_path: Path) -> None:
    params = corpus[0]
    assert WARC_NAME in _files(params)
    assert _files(_build(tmp_path)) == _files(params)
    assert (Path(params.out_dir) / "_SUCCESS").is_file()
    assert _files(_build(tmp_path / "other", seed=8)) != _files(params)


def test_labels_describe_the_records(corpus) -> None:
    _, lines, labels = corpus
    assert len(lines) == len(labels) == 600
    assert {lab["malformed"] for lab in labels} == set(MALFORMED) | set(WARC_MALFORMED) | {None}
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
    # a small corpus gets real prose for (nearly) every prose article: man pages, quotes, reference sections and
    # READMEs are articles of other genres, and noisy or long texts are not the pool's paragraphs as written
    pool = {p for _, pieces in harvest() for piece in pieces for p in piece.split("\n\n")}
    prose = [d for d in Builder(7).build(600) if d.locale == "en_US" and d.genre == "article" and not d.malformed]
    real = [d for d in prose if d.text.split("\n\n")[0] in pool]
    assert len(prose) > 80 and len(real) / len(prose) >= 0.95


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
    assert sum(map(len, pieces)) > 2_500_000
    assert len(set(pieces)) == len(pieces)
    assert all(">>>" not in p for p in pieces)


def test_api_docs_are_kept_out_of_the_prose_pool() -> None:
    """The documented functions that man pages and documentation pages render are many, and their
    text is not in the pool of articles (or `clean` would find near duplicates)."""
    apis = api_docs()
    assert len(apis) > 500 and len({a.name for a in apis}) == len(apis)
    assert all(len(a.params) >= 2 and a.summary for a in apis)
    pool = {p for _, pieces in harvest() for piece in pieces for p in piece.split("\n\n")}
    assert not pool & {d for a in apis for d in a.description}


def test_api_doc_of_numpy_and_google_docstrings() -> None:
    numpy_doc = """Count the items of a sequence that match a pattern, quickly.

The pattern is matched against the string form of each item, which is
computed once per item.

Parameters
----------
items : sequence of str
    The items to count. Each item is converted with `str` first.
pattern : str, optional
    A regular expression. The default matches every item.
flags : int
    Flags of the :mod:`re` module.

Returns
-------
int
    How many items match the pattern, zero for an empty sequence.

See Also
--------
numpy.count_nonzero : Count non-zero values.
len, sum

Examples
--------
>>> count(["a", "b"], "a")
1
"""
    api = api_doc("pkg.count", None, numpy_doc)
    assert api is not None and api.summary == "Count the items of a sequence that match a pattern, quickly."
    assert api.description == ("The pattern is matched against the string form of each item, which is computed "
                               "once per item.",)
    assert api.params == (("items", "sequence of str", "The items to count. Each item is converted with str first."),
                          ("pattern", "str, optional", "A regular expression. The default matches every item."),
                          ("flags", "int", "Flags of the re module."))
    assert api.returns == "How many items match the pattern, zero for an empty sequence."
    assert api.see_also == ("numpy.count_nonzero", "len", "sum")
    assert api.example == '>>> count(["a", "b"], "a")\n1' and api.signature is None
    google_doc = """Add two numbers together, which is a long enough summary.

Args:
    a (int): The first number to add.
    b: The second number, which defaults to two.

Returns:
    int: The sum of the two numbers, never negative.
"""
    def add(a, b=2):  # noqa: ANN001, ANN202
        return a + b
    api = api_doc("pkg.add", add, google_doc)
    assert api is not None and api.params == (("a", "int", "The first number to add."),
                                              ("b", "", "The second number, which defaults to two."))
    assert api.returns == "The sum of the two numbers, never negative." and api.signature == ("a", "b=2")
    assert api_doc("pkg.f", None, "Do it.\n\nParameters\n----------\nx : int\n    The value to use.\n") is None


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The semantic labels of a larger build, where every genre has several examples."""
    root = tmp_path_factory.mktemp("large")
    params = Params(seed=11, num_docs=3000, num_shards=1, out_dir=str(root / "demo"),
                    labels_path=str(root / "labels.jsonl"), semantic_labels_path=str(root / "semantic.jsonl"),
                    metrics_path=str(root / "metrics.json"), detail_path=str(root / "metrics.detail.json"))
    run(params)
    return [json.loads(line) for line in Path(params.semantic_labels_path).read_text(encoding="utf-8").splitlines()]


def test_semantic_keep_class_has_documentation_genres(large) -> None:
    """The keep class is not mostly articles: man pages, quotes and documentation pages, in English and
    Chinese, each a good share of it (spread over genres, where a random sample would be ~75% prose)."""
    keep = Counter((r["lang"], genre(r["text"])) for r in large if r["label"] == "keep")
    for lang in ("en", "zh"):
        total = sum(n for (lg, _), n in keep.items() if lg == lang)
        assert 0.10 * total <= keep[lang, "man"] <= 0.30 * total, keep
        assert 0.05 * total <= keep[lang, "quote"] <= 0.25 * total, keep
        assert keep[lang, "sphinx"] + keep[lang, "docbook"] >= 0.05 * total and keep[lang, "html"] >= 3, keep
        assert keep[lang, "other"] <= 0.6 * total, keep
    drop = Counter(genre(r["text"]) for r in large if r["label"] == "drop")
    assert drop["sphinx"] == drop["docbook"] == drop["quote"] == 0


def test_man_pages(large) -> None:
    pages = [r for r in large if r["label"] == "keep" and genre(r["text"]) == "man"]
    summaries = {a.summary.rstrip(".").lower() for a in api_docs()}
    for r in pages:
        text = r["text"]
        lines = text.split("\n")
        if r["lang"] == "en":  # a docstring rendered: its summary is the NAME line's
            heads = [line for line in lines if line and not line[0].isspace()]
            assert heads.index("NAME") < heads.index("SYNOPSIS") < heads.index("DESCRIPTION")
            assert "OPTIONS" in heads or "PARAMETERS" in heads
            name = " ".join(line.strip() for line in text.split("NAME\n", 1)[1].split("\n\n")[0].split("\n"))
            assert name.split(" - ", 1)[1].lower() in summaries
            assert re.search(r"^ {7}(?:--?\w|\w+)", text, re.M) and re.search(r"^ {14}\S", text, re.M)
            description = re.search(r"^DESCRIPTION\n(.*?)\n(?=\S)", text, re.M | re.S)[1]
            assert all(len(line) <= 80 or " " not in line.strip() for line in description.split("\n"))
        else:  # options with full-sentence Chinese descriptions at 14 columns
            assert re.search(r"^ {7}-", text, re.M)
            assert re.search(r"^ {14}[^\n]*[\u4e00-\u9fff][^\n]*[。]$", text, re.M)


def test_quotes(large) -> None:
    quotes = [r["text"] for r in large if r["label"] == "keep" and genre(r["text"]) == "quote"]
    assert quotes and all(60 <= len(q) <= 300 for q in quotes)
    zh = [q for q in quotes if re.search(r"[\u4e00-\u9fff]", q)]
    assert zh and all(re.search(r"--(?:\x1b\[32m| )\S+《[^》]+》", q.rsplit("\n", 1)[1]) for q in zh)


def test_documentation_pages(large) -> None:
    """Sphinx pages carry their navigation where `clean` strips it, and "¶" links and code blocks in
    the text it keeps; DocBook pages carry it in tables, which it keeps."""
    pages = [r["text"] for r in large if r["label"] == "keep" and genre(r["text"]) == "sphinx"]
    assert len(pages) >= 5
    for page in pages:
        assert '<div class="related" role="navigation"' in page and '<div class="footer" role="contentinfo">' in page
        text = normalize(page, NormalizeOptions())[0]
        assert "¶" in text and "Quick search" not in text and "快速搜索" not in text
    assert any("<pre>" in page for page in pages) and any('class="py function"' in page for page in pages)


def test_software_messages_are_a_small_part_of_english_boilerplate(large) -> None:
    en = [r["text"] for r in large if r["category"] == "boilerplate" and r["lang"] == "en"]
    cli = [t for t in en if re.search(r"^(?:usage|Usage):|^  -\w, --|%s|%d", t, re.M)]
    assert len(cli) <= 0.12 * len(en)


def test_chinese_messages_mix_help_texts_and_catalog_lines() -> None:
    """Chinese software messages are, like real catalogs, both one program's --help text (usage line
    first) and catalog lines in any order (errors with format specifiers)."""
    builder = Builder(5)
    docs = [builder.messages("zh_CN").split("\n") for _ in range(300)]
    assert 0.2 * len(docs) < sum(lines[0].startswith(("用法", "  或者")) for lines in docs) < 0.6 * len(docs)
    assert sum(any("%" in line for line in lines) for lines in docs) > 0.4 * len(docs)


def test_chinese_interface_strings() -> None:
    """Settings descriptions, package-manager messages and shell-builtin help blocks (summary, indented
    description, exit status), in Traditional script for zh_TW."""
    builder = Builder(5)
    docs = [builder.ui_strings("zh_CN") for _ in range(200)]
    assert sum("    退出状态：" in d for d in docs) > 0.2 * len(docs)
    assert sum(bool(re.search(r"^(如果为 TRUE|若设为 true|是否|启用后)", d, re.M)) for d in docs) > 0.3 * len(docs)
    assert sum("软件包" in d for d in docs) > 0.2 * len(docs)
    assert all(len(d.split("\n")) >= 3 for d in docs)
    traditional = [builder.ui_strings("zh_TW") for _ in range(50)]
    assert sum("軟體" in d or "狀態" in d or "設" in d for d in traditional) > 0.5 * len(traditional)


def test_semantic_labels(corpus) -> None:
    """Every well-formed, non-duplicate en/zh ad/boilerplate record is a drop example; about 1.5 times
    as many prose records per language are keep examples; ids and text are those of the records."""
    params, lines, labels = corpus
    rows = [json.loads(line) for line in Path(params.semantic_labels_path).read_text(encoding="utf-8").splitlines()]
    assert {r["label"] for r in rows} == {"keep", "drop"} and {r["lang"] for r in rows} == {"en", "zh"}
    text_by_id = {lab["id"]: json.loads(line)["text"] for line, lab in zip(lines, labels)
                  if lab["id"] and not lab["malformed"]}
    kind_by_id = {lab["id"]: lab["kind"] for lab in labels if lab["id"]}
    drop_ids = {lab["id"] for lab in labels if lab["kind"] in ("ad", "boilerplate") and not lab["dup_of"]
                and lab["lang"] in ("en", "zh")}
    assert {r["id"] for r in rows if r["label"] == "drop"} - {None} == drop_ids - {None}
    for r in rows:
        assert set(r) == {"id", "text", "lang", "label", "category"}
        if r["id"] is not None:
            assert r["text"] == text_by_id[r["id"]]
            assert (r["label"] == "drop") == (kind_by_id[r["id"]] in ("ad", "boilerplate"))
            if r["label"] == "keep":
                assert kind_by_id[r["id"]] in ("article", "html", "noisy", "long")
        assert r["category"] == (None if r["label"] == "keep" else kind_by_id.get(r["id"], r["category"]))
    for lang in ("en", "zh"):
        drop = sum(r["lang"] == lang and r["label"] == "drop" for r in rows)
        keep = sum(r["lang"] == lang and r["label"] == "keep" for r in rows)
        assert drop >= 10 and keep == round(1.5 * drop)



def test_keep_examples_are_spread_evenly_over_the_genres() -> None:
    assert _even_shares({"prose": 1000, "man_page": 40, "quote": 300}, 600) == {
        "prose": 280, "man_page": 40, "quote": 280}
    assert _even_shares({"a": 5, "b": 5}, 100) == {"a": 5, "b": 5}  # fewer records than asked: all of them
    assert sum(_even_shares({"a": 7, "b": 9, "c": 100}, 50).values()) == 50
    genres = ["prose"] * 900 + ["man_page"] * 60 + ["quote"] * 40
    docs = [Doc("article", "en_US", f"text {i}", f"d{i}", genre=g) for i, g in enumerate(genres)]
    docs += [Doc("ad", "en_US", f"ad {i}", f"a{i}", genre="ad") for i in range(100)]
    rows = semantic_labels(docs, 0)
    by_id = {d.id: d.genre for d in docs}
    chosen = Counter(by_id[r["id"]] for r in rows if r["label"] == "keep")
    assert chosen == {"man_page": 55, "quote": 40, "prose": 55}  # a random sample would take ~135 prose

def test_real_text_comes_from_the_fixed_distributions_only() -> None:
    """Another package installed beside the lock, or newly pinned in it, must not change the corpus."""
    from stages.demo_corpus import LOCK_FILE, _canonical, corpus_distributions

    for name, _ in licence_texts():
        dist = name.split("/", 1)[0][: -len(".dist-info")].rsplit("-", 1)[0]
        assert _canonical(dist) in corpus_distributions(), name
    pinned = {_canonical(line.split("==")[0]) for line in LOCK_FILE.read_text().splitlines() if "==" in line}
    assert corpus_distributions() <= pinned  # each still pinned, so its text is what the lock says


def test_a_corpus_distribution_not_installed_is_a_one_line_error(monkeypatch) -> None:
    """The demo reads licences and catalogs from a fixed list of distributions: one that is missing would change
    the corpus, so it stops the stage with an error that names it."""
    monkeypatch.setattr(dist_text, "corpus_distributions", lambda: frozenset({"refinery-no-such-dist"}))
    dist_text._corpus_dists.cache_clear()
    try:
        with pytest.raises(ConfigError, match="'refinery-no-such-dist'.*not installed.*requirements.lock"):
            dist_text._corpus_dists()
    finally:
        dist_text._corpus_dists.cache_clear()


def test_boilerplate_has_real_licence_and_po_text(large) -> None:
    drop_text = "\n".join(r["text"] for r in large if r["category"] == "boilerplate")
    paragraphs = [p for _, ps in licence_texts() for p in ps if len(p) >= 200]
    messages = [m for _, variant, ms in po_catalogs() if variant == "zh_CN" for m in ms if len(m) >= 4]
    assert len(paragraphs) > 300 and len(messages) > 100  # the pools shipped with the pinned packages
    assert sum(p in drop_text for p in paragraphs) >= 3
    assert sum(m in drop_text.split("\n") for m in messages) >= 5
    assert "%s" in drop_text and re.search(r"^\s*-\w, --\w", drop_text, re.M)  # templated software messages


def test_po_messages_parses_catalog_entries() -> None:
    po = '''msgid ""
msgstr ""
"Project-Id-Version: demo\\n"

#: a.py:1
msgid "Cannot open %s"
msgstr "无法打开 %s"

#, fuzzy
msgid "Old"
msgstr "旧的"

msgid "Line one"
msgstr ""
"第一行\\n"
"第二行 \\"引号\\""

msgid "%d file"
msgid_plural "%d files"
msgstr[0] "%d 个文件"

msgid "Untranslated"
msgstr ""
#~ msgid "Obsolete"
#~ msgstr "过时"
'''
    assert po_messages(po) == ["无法打开 %s", "第一行\n第二行 \"引号\"", "%d 个文件"]


def test_traditional_variant() -> None:
    assert to_traditional("配置文件已损坏，请重新生成") == "設定檔已損壞，請重新生成"
    assert to_traditional("长江下游的万里江山") == "長江下游的萬里江山"


def test_metrics_file_counts_the_records(corpus) -> None:
    params, lines, labels = corpus
    metrics = json.loads(Path(params.detail_path).read_text(encoding="utf-8"))
    assert metrics["records"] == len(lines) == 600
    assert metrics["no_id"] == sum(lab["id"] is None for lab in labels)
    for key in ("kind", "lang", "dup_type", "malformed"):
        assert sum(v for k, v in metrics.items() if k.startswith(f"{key}.")) == 600, key
    assert metrics["kind.malformed"] == sum(lab["malformed"] is not None for lab in labels)
    assert 0 < metrics["bytes_compressed"] < metrics["bytes_uncompressed"]


def _params_file(tmp_path: Path, **section: object) -> Path:
    values = dict(seed=3, num_docs=600, num_shards=2, out_dir=str(tmp_path / "demo"),
                  labels_path=str(tmp_path / "labels.jsonl"), semantic_labels_path=str(tmp_path / "semantic.jsonl"),
                  metrics_path=str(tmp_path / "metrics.json"), detail_path=str(tmp_path / "metrics.detail.json"))
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"demo_corpus": {**values, **section}}), encoding="utf-8")
    return path


@pytest.mark.parametrize(("section", "message"), [
    ({"num_docs": 20}, "param 'demo_corpus.num_docs': too few records for the mix"),
    ({"num_docs": 0}, "param 'demo_corpus.num_docs': must be >= 1"),
    ({"num_shards": 0}, "param 'demo_corpus.num_shards': must be >= 1"),
    ({"metrics_path": ""}, "param 'demo_corpus.metrics_path': must not be empty"),
    ({"seed": "one"}, "param 'demo_corpus.seed': expected an integer"),
    ({"num_doc": 600}, "unknown param 'demo_corpus.num_doc'"),
])
def test_params_are_checked_before_any_work(tmp_path: Path, section: dict, message: str, capsys) -> None:
    path = _params_file(tmp_path, **section)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        load_section("demo_corpus", Params, path)
    assert "\n" not in str(err.value)
    with pytest.raises(SystemExit) as exit_info:  # the command: one line on stderr, status 2
        main(["--params", str(path)])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("error: ") and message in stderr and stderr.count("\n") == 1
    assert not (tmp_path / "demo").exists() and not (tmp_path / "metrics.json").exists()


def test_cli_writes_every_output(tmp_path: Path) -> None:
    main(["--params", str(_params_file(tmp_path))])
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["_SUCCESS", WARC_NAME, "part-00000.jsonl.gz",
                                                                      "part-00001.jsonl.gz"]
    assert json.loads((tmp_path / "metrics.detail.json").read_text(encoding="utf-8"))["records"] == 600
    headline = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))
    assert sorted(headline) == ["input_mb", "num_docs", "num_duplicates", "num_malformed"]
    assert headline["num_docs"] == 600
    assert len((tmp_path / "labels.jsonl").read_text(encoding="utf-8").splitlines()) == 600


def frozen(value: object) -> bool:
    """No list anywhere inside (mappings aside, which hold the tables by name)."""
    if isinstance(value, dict):
        return all(map(frozen, value.values()))
    return not isinstance(value, list) and (not isinstance(value, tuple) or all(map(frozen, value)))


def test_data_files_are_immutable_tables() -> None:
    """YAML lists load as tuples (hashable, immutable, equal to the literals they replaced) and no table is
    empty; the Traditional character table maps each Simplified character once."""
    for path in sorted(tables.DATA_DIR.glob("*.yaml")):
        for key, value in tables.load(path.name).items():
            assert value, f"{path.name}: {key} is empty"
            assert frozen(value), f"{path.name}: {key} holds a list"
    assert len(T.S2T_SIMPLIFIED) == len(T.S2T_TRADITIONAL) == len(set(T.S2T_SIMPLIFIED))
    assert T.STDLIB_MODULES == tuple(sorted(T.STDLIB_MODULES))
    assert T.CORPUS_DISTRIBUTIONS == tuple(sorted(T.CORPUS_DISTRIBUTIONS))


SLOT = re.compile(r"\{(\w+)\}")


def test_template_slots_are_known() -> None:
    """Every {slot} of the sentence templates names a slot the Builder fills (a typo in a data file would
    otherwise be written into the corpus verbatim)."""
    builder = Builder(5)
    en = set(builder.en_slots)
    for template in T.EN_TEMPLATES + T.EN_APHORISMS + T.EN_WORKS:
        assert set(SLOT.findall(template)) <= en, template
    zh = set(builder.zh_slots["zh_CN"])
    for template in T.ZH_TECH_TEMPLATES + T.ZH_GENERAL_TEMPLATES:
        assert set(SLOT.findall(template)) <= zh, template
    for template in T.ZH_SAYINGS:
        assert set(SLOT.findall(template)) <= set(builder.zh_quote_slots), template


def test_html_skeletons_take_the_values_the_pages_give() -> None:
    """The skeletons are read byte for byte: placeholders intact, no newline added at the end."""
    assert set(T.SPHINX_RELATED.get_identifiers()) <= set(T.SPHINX_PAGE.get_identifiers()) | {
        "navigation", "index", "modules", "next", "previous", "documentation", "section"}
    assert not T.SPHINX_RELATED.template.endswith("\n") and T.PAGE.template.endswith("</body></html>\n")
    assert T.DOCBOOK_PAGE.template.startswith('<?xml version="1.0"') and "\\\n" not in T.SPHINX_PAGE.template
    assert {"lang", "title", "site", "nav", "body"} <= set(T.PAGE.get_identifiers())


def test_the_warc_holds_html_pages_and_records_clean_quarantines(corpus) -> None:
    params, _, labels = corpus
    warc_labels = [lab for lab in labels if lab["shard"] == WARC_NAME]
    assert labels[:len(warc_labels)] == warc_labels  # the WARC sorts first: the stream starts with it
    assert 10 <= len(warc_labels) <= 60 and all(lab["id"].startswith("<urn:uuid:") for lab in warc_labels)
    assert all(lab["kind"] == "html" and not lab["dup_of"] for lab in warc_labels[:-3])
    assert [lab["malformed"] for lab in warc_labels[-3:]] == list(WARC_MALFORMED)
    warc_ids = {lab["id"] for lab in warc_labels}
    assert not warc_ids & {lab["id"] for lab in labels[len(warc_labels):]}
    assert not warc_ids & {lab["dup_of"] for lab in labels}  # no duplicate points into the WARC
    skipped = Counter()
    raws = list(iter_raw([str(Path(params.out_dir) / WARC_NAME)], skipped=skipped))
    parsed = [parse_raw(raw, 10**6) for raw in raws]
    assert [(raw.index, r.id) for raw, r in zip(raws, parsed)] == [(lab["line"], lab["id"]) for lab in warc_labels]
    assert [getattr(r, "reason", None) for r in parsed[-3:]] == [f"invalid:{m}" for m in WARC_MALFORMED]
    assert skipped == {"warc_skipped.warcinfo": 1, "warc_skipped.request": len(warc_labels)}


def test_reference_sections_readmes_c_man_pages_and_poem_headers(large) -> None:
    """Keep examples of what users' corpora hold beyond prose: manual sections holding a table (grid, Markdown
    or columns), sections of real project READMEs, C library man pages; Chinese poems under anthology headers."""
    en_keep = [r["text"] for r in large if r["label"] == "keep" and r["lang"] == "en"]
    reference = [t for t in en_keep if re.match(r"\d+(?:\.\d+)+\. \S", t)]
    assert len(reference) >= 5
    assert all(re.search(r"^(?:\+-+\+|\|.*\||\S+ {2,}\S)", t, re.M) for t in reference)
    readmes = set(readme_sections())
    assert sum(t in readmes for t in en_keep) >= 5
    assert not any(re.search(r"licen[cs]e|copyright", t.split("\n", 1)[0], re.I) for t in readmes)
    assert any("\nLIBRARY\n" in t and "#include <" in t for t in en_keep)
    poems = [r["text"] for r in large if r["label"] == "keep" and r["lang"] == "zh" and re.match(r"(?:题目:)?《", r["text"])]
    # a title, and for some the poet (with the years, or after the title) before the first couplet
    assert any(re.match(r"(?:题目:)?《[^》]+》(?: |\n(?:作者[:：])?)[^，\n]+\n", t) for t in poems), poems[:3]
