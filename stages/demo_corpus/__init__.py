"""Build the bundled demo corpus: raw JSONL shards and a small WARC crawl that the `clean` stage runs on.

Deterministic from `seed` (one `random.Random`; Faker instances seeded from it; gzip mtime=0), no
downloads, in a given environment: the real text below depends on the Python version and on the
package versions that requirements.lock pins. Shares of `num_docs` (every record written, malformed
ones included):

* kinds: html 6% (half an article inside a full HTML page, half a documentation page, see below),
  ad 5%, boilerplate 6%, short 3% (< 30 chars), long 0.5% (50-150 KB), noisy 3% (control chars,
  ANSI colour codes, latin-1 mojibake, symbol runs, URLs, e-mails), article the rest (~70%).
* English bodies: ~2/3 of the article/html/noisy bodies (other than man pages and quotes) are real
  prose that ships with Python and the pinned packages (the prose of stdlib and third-party
  docstrings and of the `pydoc_data` help topics, ~3.1 MB, see `harvest`), packed into articles of
  400-4000 chars, each used once and spread evenly over those kinds; the rest (long docs included)
  comes from sentence templates full of function words ("The {adj} {noun} of the {noun} ..."), so
  it reads as English, if meaningless, and passes the Gopher stop-word rule as real English does.
* Chinese bodies: half of the article/html/noisy bodies are prose from sentence templates with real
  structure, technical ("在使用{tool}时，...", commands and options in running prose, so technical is
  not boilerplate) or general (places, seasons, people), and 8% of the other articles are
  classical-style couplets from word lists, half under a header as anthologies print one (a title, often
  the poet and the poet's years: 题目:《…》 作者:…); zh_TW gets all templated Chinese in Traditional script
  (`to_traditional`). The rest, and all long docs (templated text repeats too many 10-char runs for
  `clean` at 50 KB), is Faker lorem, as is the text of the other languages.
* More genres of real documentation and prose, so that the keep class is not only articles (see
  MAN_SHARE, QUOTE_SHARE, DOC_PAGE_SHARE):
  - man pages, 8% of the en and zh articles: formatted like `man` prints them (header and footer
    lines, NAME/SYNOPSIS/DESCRIPTION/OPTIONS at 7 columns, option descriptions at 14, sometimes
    RETURN VALUE, EXAMPLES, SEE ALSO...). English ones render a real function's docstring (`api_docs`:
    one documented function in API_EVERY, whose docstring is then not in the prose pool), mostly as
    a command whose parameters are --options, sometimes as a section-3 library function (half of
    those in C: a LIBRARY line, #include and a C prototype); Chinese
    ones come from templates (名称/概述/描述/选项/示例..., three heading styles, English command and
    option names, full-sentence Chinese option descriptions).
  - quotes, 5% of the en and zh articles: 60-300 chars with an attribution line ("\n    -- Name",
    "\n\t\t-- Name, \"Work\""): en template aphorisms, general sentences of the prose pool
    (`quote_sentences`) and Zen of Python lines in frames; zh own sayings and couplets attributed
    "-- 作者《题目》", some coloured with ANSI codes as fortune files are.
  - reference sections, 5% of the en articles: a numbered manual section ("9.4. Backup utilities") whose
    body is a table of packages, commands, functions or options with one-line descriptions (`api_docs`
    summaries) as an ASCII grid, a Markdown table or aligned columns (`reference.py`).
  - READMEs, 5% of the en articles: a section of a real project description (the METADATA body of an
    installed distribution, as written: Markdown or reST with code blocks; `readme_sections`), each used
    once: prose about software that is not its licence.
  - documentation pages, half the html pages: Sphinx (navigation in div.related and
    div.sphinxsidebar, "¶" header links, Pygments code blocks, a footer div; English ones carry
    0-2 autodoc entries from `api_docs`) or, 20% of them, DocBook XSL chunks whose navigation
    tables `clean` keeps as text; en/zh labels in the page's language.
* boilerplate (en 55%, zh_CN 35%, zh_TW 10%). English: 55% real licence, copyright and notice text
  from the installed distributions' *.dist-info folders (1-3 consecutive paragraphs, each used once,
  see `licence_texts`; templated notices once it runs out), 20% templated copyright/licence notices
  (source headers, DEP-5 stanzas), 5% templated software messages (a --help text or catalog lines:
  usage, option help, errors with %s/%d/%1$s specifiers, version lines), 20% website templates
  (cookie notices, menus, terms). Chinese: 30% translations from the zh gettext catalogs that
  installed packages ship (4-12 messages, one a line, see `po_catalogs`; zh_TW mixes the few
  Traditional ones with templated messages), 30% templated software messages (as in English: a
  --help text, or catalog lines such as errors with %s/%d, "无法…", "用法：…"), 25% runs of interface
  strings (settings descriptions, package-manager messages, shell builtin help), 15% website
  templates (data/mix.yaml `boiler_mix_zh`). ads: en 55% / zh_CN 45%, from templates.
* languages (all kinds but ad/boilerplate): en 33%, zh 28% (zh_CN 21%, zh_TW 7%), de/fr/es/ru 6%
  each, ja/it/pl 5% each. Overall about en 35%, zh 30%.
* duplicates: 3% exact (same text, new id and url) and 3% near (a word/char replaced or swapped,
  a sentence appended or dropped, sometimes a whitespace change; Jaccard on word 3-grams, char
  3-grams for zh/ja, >= 0.8). Each comes after its original in the stream.
* malformed, ~1%: bad_json, bad_utf8, not_object, missing_text, non_string_text, empty, binary
  (max(2, 0.14%) each) and 1-3 oversized (> 2 MB text) records.
* 10% of well-formed records carry no `id`; originals of duplicates always have one.

Records are shuffled, duplicates slotted in after their originals; `warc_docs` html pages go into
`crawl-00000.warc.gz` (see `warc.py`: three of them as records `clean` quarantines), and the rest of
the stream is split contiguously into `num_shards` files: stream order is the WARC's responses, then
part-00000 line 1 ... last shard's last line. The labels file has one line per record in that order;
`lang` is null for malformed records and `id` is the id written in the line (null when there is none;
the WARC record id for the crawl's pages).

The semantic labels (`semantic_labels_path`) are examples for the semantic filter, in stream order:
{"id", "text" (as written), "lang" (en|zh), "label" (keep|drop), "category" (null|ad|boilerplate)}
for every well-formed, non-duplicate en/zh ad and boilerplate record (drop) and a seeded sample of
1.5 times as many well-formed, non-duplicate article/html/noisy/long records per language (keep),
spread evenly over their genres (prose, man pages, quotes, poems, documentation pages, other pages,
noisy and long texts) as far as each has records.

Layout: `stage.py` (Params, run, the CLI; `python -m stages.demo_corpus` runs it via `__main__.py`),
`records.py` (one record, the semantic labels; the mix of kinds and genres is `data/mix.yaml`),
`builder.py` (the Builder: every record in stream order) with its parts `base.py` (seeded state, prose
primitives), `man_pages.py`, `quotes.py`, `reference.py`, `pages.py`, `boilerplate.py`, `malformed.py`,
`duplicates.py`; the real-text sources
`docstrings.py` (docstrings, help topics, API docs) and `dist_text.py` (licences, .po catalogs);
`warc.py` (the crawl), `text.py` (small text helpers) and `tables.py`, which loads the word lists and templates in
`data/*.yaml` and the HTML skeletons and templates in `data/html/` into one namespace, `T`. The modules hold the
generators' logic; what they write comes from the data files. Imports only `stages.common.runtime`.
"""
from stages.demo_corpus.builder import Builder
from stages.demo_corpus.dist_text import (LOCK_FILE, _canonical, corpus_distributions, licence_docs, licence_texts,
                                          po_catalogs, po_messages)
from stages.demo_corpus.docstrings import ApiDoc, _prose, api_doc, api_docs, harvest, real_articles
from stages.demo_corpus.records import LOCALES, MALFORMED, Doc, semantic_labels
from stages.demo_corpus.stage import STAGE, Params, main, run, write
from stages.demo_corpus.text import to_traditional

__all__ = [
    "LOCALES", "LOCK_FILE", "MALFORMED", "STAGE", "ApiDoc", "Builder", "Doc", "Params", "_canonical", "_prose",
    "api_doc", "api_docs", "corpus_distributions", "harvest", "licence_docs", "licence_texts", "main",
    "po_catalogs", "po_messages", "real_articles", "run", "semantic_labels", "to_traditional", "write",
]
