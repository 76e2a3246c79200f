"""Duplicates: exact copies and near duplicates (a word or character replaced or swapped, a sentence
appended or dropped, sometimes a whitespace change; Jaccard >= 0.8), each after its original."""
from __future__ import annotations

import re

from stages.demo_corpus.base import BuilderBase
from stages.demo_corpus.records import LOCALES, Doc
from stages.demo_corpus.tables import T
from stages.demo_corpus.text import jaccard

SENTENCE = re.compile(r"[^.。!?\n]+[.。!?]+ ?")


class Duplicates(BuilderBase):
    def _edit(self, loc: str, text: str, op: str, cjk: bool) -> str:
        sents = list(SENTENCE.finditer(text))
        if op == "drop" and len(sents) >= 4:
            a, b = sents[self.rng.randrange(1, len(sents))].span()
            return text[:a] + text[b:]
        spans = ([(i, i + 1) for i, c in enumerate(text) if c.isalpha()] if cjk
                 else [m.span() for m in re.finditer(r"\w+", text)])
        if op in ("append", "drop") or len(spans) < 2:
            return text + ("" if cjk else " ") + (self.en_sentence() if loc == "en_US" else self.sentence(loc))
        i = self.rng.randrange(len(spans) - 1)
        (a, b), (c, d) = spans[i], spans[i + 1]
        if op == "swap":
            return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        return text[:a] + self.fake[loc].word() + text[b:]

    def near_text(self, loc: str, text: str) -> str | None:
        cjk = LOCALES[loc][0] in T.CJK
        for _ in range(10):
            edited = text
            for op in self.rng.sample(("replace", "swap", "append", "drop"), self.rng.randint(1, 2)):
                edited = self._edit(loc, edited, op, cjk)
            if self.rng.random() < 0.3:
                edited = self.rng.choice((edited.replace("\n\n", "\n\n\n", 1), " " + edited, edited + "\n",
                                          edited.replace(" ", "  ", 1)))
            if edited != text and edited not in self.seen and jaccard(text, edited, cjk) >= 0.8:
                self.seen.add(edited)
                return edited
        return None

    def duplicates(self, base: list[Doc], n_exact: int, n_near: int) -> list[tuple[int, Doc]]:
        """(index of the original in `base`, duplicate) pairs; originals are well-formed and have an id."""
        rng = self.rng

        def dup(i: int, text: str, dup_type: str) -> tuple[int, Doc]:
            o = base[i]
            return i, Doc(o.kind, o.locale, text, self.new_id(), self.url(o.locale), dup_of=o.id, dup_type=dup_type)

        eligible = [i for i, d in enumerate(base) if d.malformed is None and d.id]
        dups = [dup(i, base[i].text, "exact") for i in rng.sample(eligible, n_exact)]
        near_pool = [i for i in eligible if base[i].kind in ("article", "long") and len(base[i].text) >= 300]
        for i in rng.sample(near_pool, len(near_pool)):
            if len(dups) == n_exact + n_near:
                break
            if (text := self.near_text(base[i].locale, base[i].text)) is not None:
                dups.append(dup(i, text, "near"))
        return dups
