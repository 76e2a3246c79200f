"""What the corpus is made of: the mix of records (locales, kinds, duplicates, malformed records, genres)
as shares of `num_docs`, one record (`Doc`: its line and its label) and the semantic-filter examples
picked from the records. See the package docstring for what the shares mean."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

# locale -> (label language, weight, tld)
LOCALES: dict[str, tuple[str, float, str]] = {
    "en_US": ("en", 0.33, "com"), "zh_CN": ("zh", 0.21, "cn"), "zh_TW": ("zh", 0.07, "tw"),
    "de_DE": ("de", 0.06, "de"), "fr_FR": ("fr", 0.06, "fr"), "es_ES": ("es", 0.06, "es"),
    "ru_RU": ("ru", 0.06, "ru"), "ja_JP": ("ja", 0.05, "jp"), "it_IT": ("it", 0.05, "it"),
    "pl_PL": ("pl", 0.05, "pl"),
}
CJK = {"zh", "ja"}
KIND_SHARE = {"html": 0.06, "ad": 0.05, "boilerplate": 0.06, "short": 0.03, "long": 0.005, "noisy": 0.03}
DUP_SHARE = {"exact": 0.03, "near": 0.03}
MALFORMED = ("bad_json", "bad_utf8", "not_object", "missing_text", "non_string_text", "empty", "binary",
             "oversized")
NO_ID_SHARE = 0.10
REAL_KINDS = ("article", "html", "noisy")  # English bodies drawn from the pool of real prose
# Semantic-filter examples: well-formed, non-duplicate records of these languages; every ad/boilerplate
# record is a `drop` example, and 1.5 times as many records of the keep kinds (per language) are `keep`.
SEMANTIC_LANGS = ("en", "zh")
SEMANTIC_DROP_KINDS = ("ad", "boilerplate")
SEMANTIC_KEEP_KINDS = ("article", "html", "noisy", "long")
SEMANTIC_KEEP_RATIO = 1.5

# Shares of each language's boilerplate documents by source. When the pool of real licence text runs
# out, licence documents fall back to the notices.
BOILER_MIX_EN = {"licence": 0.55, "notice": 0.2, "messages": 0.05, "templates": 0.2}
BOILER_MIX_ZH = {"po": 0.3, "messages": 0.3, "ui": 0.25, "templates": 0.15}
BOILER_LOCALES = {"en_US": 0.55, "zh_CN": 0.35, "zh_TW": 0.10}
ZH_PROSE_SHARE = 0.5  # of Chinese article/html/noisy bodies: templated prose; the rest is Faker lorem
ZH_POEM_SHARE = 0.08  # of Chinese articles (other than man pages and quotes): couplets
# --- Genres of real documentation and prose beyond articles, for the keep class of the semantic labels.
MAN_SHARE = 0.08  # of English and Chinese articles: man pages (English ones from `api_docs`)
QUOTE_SHARE = 0.05  # of English and Chinese articles: a quote or saying with an attribution line
REFERENCE_SHARE = 0.05  # of English articles: a numbered manual section holding a table (reference.py)
README_SHARE = 0.05  # of English articles: a section of a real project description (dist_text.readme_sections)
DOC_PAGE_SHARE = 0.5  # of html pages: documentation pages (Sphinx, some DocBook) instead of PAGE
DOCBOOK_SHARE = 0.2  # of documentation pages: DocBook XSL chunks, whose navigation text `clean` keeps
QUOTE_CHARS = (60, 300)
QUOTE_SOURCES_EN = {"template": 0.55, "prose": 0.4, "zen": 0.05}  # of English quotes, by source


def _counts(num_docs: int) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    n_dup = {t: round(s * num_docs) for t, s in DUP_SHARE.items()}
    n_bad = {t: max(2, round(num_docs * 0.01 / 7)) for t in MALFORMED}
    n_bad["oversized"] = min(3, max(1, num_docs // 8000))
    n_kind = {k: max(1, round(s * num_docs)) for k, s in KIND_SHARE.items()}
    n_kind["article"] = num_docs - sum(n_dup.values()) - sum(n_bad.values()) - sum(n_kind.values())
    return n_kind, n_bad, n_dup


def record_counts(num_docs: int) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(records per kind, malformed records per type, duplicates per type) for `num_docs` records; the
    fixed minimums (2 of each malformed type, 1 of each kind) need articles to stay at least half."""
    n_kind, n_bad, n_dup = _counts(num_docs)
    if n_kind["article"] < num_docs // 2:
        smallest = next(n for n in range(num_docs + 1, 10**6) if _counts(n)[0]["article"] >= n // 2)
        raise ValueError(f"param 'demo_corpus.num_docs': too few records for the mix of kinds, got {num_docs} "
                         f"(at least {smallest})")
    return n_kind, n_bad, n_dup


@dataclass
class Doc:
    kind: str
    locale: str | None
    text: str
    id: str | None  # as written in the line; None when omitted
    url: str = ""
    raw: bytes | None = None  # malformed records: the exact line
    malformed: str | None = None
    dup_of: str | None = None
    dup_type: str | None = None
    genre: str = ""  # finer than kind where the generator knows it: man_page, quote, poem, doc_page

    def line(self) -> bytes:
        if self.raw is not None:
            return self.raw
        rec = {"id": self.id} if self.id else {}
        rec.update(text=self.text, source="demo", url=self.url)
        return _dumps(rec).encode("utf-8")

    def label(self, shard: str, line: int) -> dict[str, Any]:
        lang = LOCALES[self.locale][0] if self.locale and not self.malformed else None
        return {"shard": shard, "line": line, "id": self.id, "lang": lang, "kind": self.kind,
                "malformed": self.malformed, "dup_of": self.dup_of, "dup_type": self.dup_type}


def _dumps(obj: Any) -> str:
    s = json.dumps(obj, ensure_ascii=False)
    # Escape what str.splitlines() also breaks on, so line numbers hold for any reader.
    for ch in ("\x85", "\u2028", "\u2029"):
        s = s.replace(ch, f"\\u{ord(ch):04x}")
    return s


def _even_shares(available: dict[str, int], total: int) -> dict[str, int]:
    """`total` split as evenly as `available` allows: a group with fewer than its share gives all it has and
    the rest is shared among the others (water-filling), in sorted order of the groups for ties."""
    shares, left, open_groups = dict.fromkeys(available, 0), total, sorted(available)
    while left > 0 and open_groups:
        each = max(1, left // len(open_groups))
        for g in list(open_groups):
            take = min(each, available[g] - shares[g], left)
            shares[g] += take
            left -= take
            if shares[g] == available[g]:
                open_groups.remove(g)
            if not left:
                break
    return shares


def semantic_labels(docs: list[Doc], seed: int) -> list[dict[str, Any]]:
    """Examples for the semantic filter, in stream order: every well-formed, non-duplicate en/zh ad and
    boilerplate record (drop) and, per language, 1.5 times as many well-formed, non-duplicate records of
    the keep kinds (keep), spread evenly over their genres (prose articles, man pages, quotes, poems,
    documentation pages, other html pages, noisy and long texts) as far as each genre has records: a
    filter learns "keep" from the kinds of good text a corpus holds, not mostly from prose, which is most
    of the records. `text` is the record's text as written."""
    rng = random.Random(f"{seed}:semantic_labels")
    pool = [(i, LOCALES[d.locale][0]) for i, d in enumerate(docs)
            if d.malformed is None and d.dup_of is None and d.locale and LOCALES[d.locale][0] in SEMANTIC_LANGS]
    chosen = {i for i, _ in pool if docs[i].kind in SEMANTIC_DROP_KINDS}
    for lang in SEMANTIC_LANGS:
        n_drop = sum(1 for i, lg in pool if lg == lang and i in chosen)
        by_genre: dict[str, list[int]] = {}
        for i, lg in pool:
            if lg == lang and docs[i].kind in SEMANTIC_KEEP_KINDS:
                by_genre.setdefault(docs[i].genre or docs[i].kind, []).append(i)
        shares = _even_shares({g: len(rows) for g, rows in by_genre.items()}, round(SEMANTIC_KEEP_RATIO * n_drop))
        for genre in sorted(by_genre):
            chosen.update(rng.sample(by_genre[genre], shares[genre]))
    rows = []
    for i in sorted(chosen):
        d = docs[i]
        drop = d.kind in SEMANTIC_DROP_KINDS
        rows.append({"id": d.id, "text": d.text, "lang": LOCALES[d.locale][0], "label": "drop" if drop else "keep",
                     "category": d.kind if drop else None})
    return rows
