"""What the corpus is made of: the mix of records (locales, kinds, duplicates, malformed records, genres)
as shares of `num_docs` (data/mix.yaml), one record (`Doc`: its line and its label) and the semantic-filter examples
picked from the records. See the package docstring for what the shares mean."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from stages.demo_corpus.tables import T

LOCALES: dict[str, tuple[str, float, str]] = T.LOCALES  # locale -> (label language, weight, tld)
MALFORMED: tuple[str, ...] = T.MALFORMED


def _counts(num_docs: int) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    n_dup = {t: round(s * num_docs) for t, s in T.DUP_SHARE.items()}
    n_bad = {t: max(2, round(num_docs * 0.01 / 7)) for t in MALFORMED}
    n_bad["oversized"] = min(3, max(1, num_docs // 8000))
    n_kind = {k: max(1, round(s * num_docs)) for k, s in T.KIND_SHARE.items()}
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

    @property
    def lang(self) -> str | None:
        """The label language; None for a malformed record."""
        return LOCALES[self.locale][0] if self.locale and not self.malformed else None

    def label(self, shard: str, line: int) -> dict[str, Any]:
        return {"shard": shard, "line": line, "id": self.id, "lang": self.lang, "kind": self.kind,
                "malformed": self.malformed, "dup_of": self.dup_of, "dup_type": self.dup_type}


def _dumps(obj: Any) -> str:
    s = json.dumps(obj, ensure_ascii=False)
    # Escape what str.splitlines() also breaks on, so line numbers hold for any reader.
    for ch in ("\x85", "\u2028", "\u2029"):
        s = s.replace(ch, f"\\u{ord(ch):04x}")
    return s


def _even_shares(available: dict[str, int], total: int) -> dict[str, int]:
    """`total` split as evenly as `available` allows (water-filling): the groups from the smallest up, each
    takes an even share of what is left or all it has; the remainder of an uneven split goes to the larger."""
    shares, left = {}, total
    for n, g in enumerate(sorted(available, key=lambda g: (available[g], g))):
        shares[g] = min(available[g], left // (len(available) - n))
        left -= shares[g]
    return shares


def semantic_labels(docs: list[Doc], seed: int) -> list[dict[str, Any]]:
    """Examples for the semantic filter, in stream order: every well-formed, non-duplicate en/zh ad and
    boilerplate record (drop) and, per language, 1.5 times as many well-formed, non-duplicate records of
    the keep kinds (keep), spread evenly over their genres (prose articles, man pages, quotes, poems,
    documentation pages, other html pages, noisy and long texts) as far as each genre has records: a
    filter learns "keep" from the kinds of good text a corpus holds, not mostly from prose, which is most
    of the records. `text` is the record's text as written."""
    rng = random.Random(f"{seed}:semantic_labels")
    pool = [i for i, d in enumerate(docs) if d.dup_of is None and d.lang in T.SEMANTIC_LANGS]
    chosen = {i for i in pool if docs[i].kind in T.SEMANTIC_DROP_KINDS}
    for lang in T.SEMANTIC_LANGS:
        num_keep = round(T.SEMANTIC_KEEP_RATIO * sum(docs[i].lang == lang for i in chosen))
        by_genre: dict[str, list[int]] = {}
        for i in pool:
            if docs[i].lang == lang and docs[i].kind in T.SEMANTIC_KEEP_KINDS:
                by_genre.setdefault(docs[i].genre or docs[i].kind, []).append(i)
        shares = _even_shares({g: len(rows) for g, rows in by_genre.items()}, num_keep)
        for genre in sorted(by_genre):
            chosen.update(rng.sample(by_genre[genre], shares[genre]))
    rows = []
    for d in (docs[i] for i in sorted(chosen)):
        drop = d.kind in T.SEMANTIC_DROP_KINDS
        rows.append({"id": d.id, "text": d.text, "lang": d.lang, "label": "drop" if drop else "keep",
                     "category": d.kind if drop else None})
    return rows
