"""Quotes and sayings with an attribution line: English template aphorisms, sentences of the prose
pool and Zen of Python lines in frames; Chinese sayings and couplets, some coloured as fortune files are."""
from __future__ import annotations

from stages.demo_corpus.base import BuilderBase
from stages.demo_corpus.tables import T
from stages.demo_corpus.text import to_traditional


class Quotes(BuilderBase):
    def quote(self, loc: str) -> str:
        """A quote or saying of QUOTE_CHARS chars (the first of 20 tries that fits, else the last), with an
        attribution line ("\n    -- Name")."""
        lo, hi = T.QUOTE_CHARS
        for _ in range(20):
            text = self._quote_en() if loc == "en_US" else self._quote_zh(loc)
            if lo <= len(text) <= hi:
                break
        return to_traditional(text) if loc == "zh_TW" else text

    def _quote_en(self) -> str:
        rng = self.rng
        source = rng.choices(list(T.QUOTE_SOURCES_EN), list(T.QUOTE_SOURCES_EN.values()))[0]
        if source == "zen" and self.zen:
            a, b = self.zen.pop()
            body = rng.choice(T.ZEN_FRAMES).format(a=a[0].lower() + a[1:], b=b[0].lower() + b[1:], A=a,
                                                 noun=rng.choice(T.EN_NOUNS))
            body = body if body.endswith(".") else body + "."
            return body + rng.choice(("\n    -- Tim Peters", '\n\t\t-- Tim Peters, "The Zen of Python"'))
        if source == "prose" and self.quote_sentences:
            module, body = self.quote_sentences.pop()
        else:
            module, body = "", " ".join(self.en_sentence(T.EN_APHORISMS) for _ in range(rng.choice((1, 1, 2, 2, 3))))
        form = rng.choice(T.QUOTE_ATTRIBUTION_EN if module else T.QUOTE_ATTRIBUTION_EN[:-1])
        born = rng.randint(1600, 1950)
        return body + form.format(name=self.fake["en_US"].name(), module=module, born=born,
                                  died=born + rng.randint(30, 95),
                                  work=self.fill(rng.choice(T.EN_WORKS), self.en_slots))

    def _quote_zh(self, loc: str) -> str:
        rng = self.rng
        if rng.random() < 0.35:
            body = "\n".join(self.couplets(rng.choice((2, 2, 3))))
        else:
            body = "".join(self.fill(t, self.zh_quote_slots) for t in rng.sample(T.ZH_SAYINGS, rng.randint(2, 4)))
        author = rng.choice(T.ZH_PEN_NAMES) if rng.random() < 0.2 else self.fake[loc].name()
        title = f"《{rng.choice(T.POEM_NOUNS)}{rng.choice(T.ZH_QUOTE_TITLES)}》"
        if rng.random() < 0.3:  # as fortune files colour it
            return f"{body}\n\x1b[33m    --\x1b[32m{author}{title}\x1b[m"
        return f"{body}\n    -- {author}{title}"
