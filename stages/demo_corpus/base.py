"""The generator's state and its prose primitives: the one seeded `random.Random`, Faker per locale,
the pools of real text (used once each), the slots of the templates, ids and urls, English and
Chinese sentences and paragraphs, couplets. The genres (builder.py and the mixins beside it) draw
everything from here, in a fixed order: the corpus depends on the order of the draws."""
from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable

from faker import Faker

from stages.demo_corpus.dist_text import licence_docs, po_catalogs, readme_sections
from stages.demo_corpus.docstrings import api_docs, quote_sentences, real_articles
from stages.demo_corpus.records import LOCALES
from stages.demo_corpus.tables import T
from stages.demo_corpus.text import _past, _plural, _third_person, to_traditional

EN_SLOT = re.compile(r"\{(\w+)\}")


class BuilderBase:
    """State and prose primitives shared by the Builder's parts (see the module docstring)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fake: dict[str, Faker] = {}
        for loc in LOCALES:
            self.fake[loc] = Faker(loc)
            self.fake[loc].seed_instance(self.rng.getrandbits(32))
        self.real = real_articles(self.rng)
        self.real_share = 1.0  # of English article/html/noisy bodies; set by build() to spread the pool
        self.licences = licence_docs(self.rng)  # real licence text for English boilerplate, used once each
        self.readmes = list(readme_sections())  # real project descriptions for English keep documents, used once each
        self.rng.shuffle(self.readmes)
        self.po = {v: [m for _, variant, msgs in po_catalogs() if variant == v for m in msgs]
                   for v in ("zh_CN", "zh_TW")}
        self.api_all = api_docs()  # every API doc, for the rows of reference tables (reused)
        self.api = self.rng.sample(self.api_all, len(self.api_all))  # for man and doc pages, used once each
        zen = T.ZEN_OF_PYTHON
        self.zen = [zen[i:i + 2] for i in range(0, len(zen) - 1, 2)]  # pairs of consecutive ones, for quotes
        self.rng.shuffle(self.zen)
        pool = quote_sentences()
        self.quote_sentences = self.rng.sample(pool, min(len(pool), 2000))  # for English quotes, used once each
        rng, f = self.rng, self.fake["en_US"]
        self.en_slots = self.choosers(T.EN_TEMPLATE_SLOTS)
        self.en_slots.update({
            "nouns": lambda: _plural(rng.choice(T.EN_NOUNS)), "verbs": lambda: _third_person(rng.choice(T.EN_VERBS)),
            "past": lambda: _past(rng.choice(T.EN_VERBS)), "name": f.name, "city": f.city, "org": f.company,
            "year": lambda: str(rng.randint(1990, 2024)),
            "num": lambda: str(rng.choice((2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 40, 50, 100, 200))),
            "Adj": lambda: rng.choice(T.EN_ADJECTIVES).capitalize(),
            "Noun": lambda: rng.choice(T.EN_NOUNS).capitalize(),
            "Nouns": lambda: _plural(rng.choice(T.EN_NOUNS)).capitalize()})
        # the Chinese templates' slots: their word lists, a name of the locale, a year as in English
        self.zh_slots = {loc: {**self.choosers(T.ZH_TEMPLATE_SLOTS), "name": self.fake[loc].name,
                               "year": self.en_slots["year"]} for loc in ("zh_CN", "zh_TW")}
        self.zh_quote_slots = self.choosers(T.ZH_SAYING_SLOTS)
        self.seen: set[str] = set()
        self.id_numbers: list[int] = []
        self.genre = ""  # of the record being made (Doc.genre)

    def choosers(self, slot_tables: dict[str, str]) -> dict[str, Callable[[], str]]:
        """{slot: a draw from its table} for a mapping of slots to table names (data/*.yaml)."""
        return {slot: functools.partial(self.rng.choice, getattr(T, table.upper()))
                for slot, table in slot_tables.items()}

    @staticmethod
    def fill(template: str, slots: dict[str, Callable[[], str]]) -> str:
        """The template with each {slot} filled by a fresh draw, a value not used before in it where
        possible; unknown names (a literal "{0}") are left as they are."""
        used: set[str] = set()

        def value(m: re.Match[str]) -> str:
            if m[1] not in slots:
                return m[0]
            for _ in range(4):
                v = slots[m[1]]()
                if v not in used:
                    break
            used.add(v)
            return v
        return EN_SLOT.sub(value, template)

    def new_id(self, optional: bool = True) -> str | None:
        number = self.id_numbers.pop()  # shuffled, so an id says nothing about kind or position
        return f"demo-{number:06d}" if not optional or self.rng.random() >= T.NO_ID_SHARE else None

    def url(self, loc: str) -> str:
        section = self.rng.choice(("news", "blog", "article", "post", "docs", "p"))
        return f"https://example.{LOCALES[loc][2]}/{section}/{self.rng.randrange(10**7):07d}.html"

    def sentence(self, loc: str, nb_words: int = 8) -> str:
        s = self.fake[loc].sentence(nb_words=nb_words)
        return s.replace(".", "。") if loc.startswith("zh") else s

    def en_sentence(self, templates: tuple[str, ...] = ()) -> str:
        """A sentence from one of the English templates (T.EN_TEMPLATES unless given), each slot a fresh draw."""
        s = EN_SLOT.sub(lambda m: self.en_slots[m[1]](), self.rng.choice(templates or T.EN_TEMPLATES))
        s = re.sub(r"\b([Aa]) (?=[aeiou])", r"\1n ", s)
        return s[0].upper() + s[1:]

    def paragraph(self, loc: str) -> str:
        if loc == "en_US":
            return " ".join(self.en_sentence() for _ in range(self.rng.randint(3, 7)))
        n = self.rng.randint(4, 8) * (2 if LOCALES[loc][0] in T.CJK else 1)  # CJK lorem sentences are short
        p = self.fake[loc].paragraph(nb_sentences=n)
        return p.replace(".", "。") if loc.startswith("zh") else p

    def zh_paragraph(self, loc: str) -> str:
        """3-7 sentences from the technical or the general Chinese templates (Traditional for zh_TW)."""
        rng = self.rng
        templates = T.ZH_TECH_TEMPLATES if rng.random() < 0.55 else T.ZH_GENERAL_TEMPLATES
        text = "".join(self.fill(t, self.zh_slots[loc]) for t in rng.sample(templates, rng.randint(3, 7)))
        return to_traditional(text) if loc == "zh_TW" else text

    def couplets(self, n: int) -> list[str]:
        """n couplets of 5- or 7-character lines from the poem word lists, one a line."""
        rng = self.rng
        leads = rng.sample(T.POEM_LEADS, 2 * n) if rng.random() < 0.5 else [""] * (2 * n)
        nouns = rng.sample(T.POEM_NOUNS, 4 * n)  # no noun twice, or short poems fail the 2-gram rule of `clean`
        verbs = [rng.choice(T.POEM_VERBS) for _ in range(2 * n)]
        half = [f"{leads[i]}{nouns[2 * i]}{verbs[i]}{nouns[2 * i + 1]}" for i in range(2 * n)]
        return [f"{half[2 * i]}，{half[2 * i + 1]}。" for i in range(n)]

    def zh_poem(self, loc: str) -> str:
        """2-4 couplets of 5- or 7-character lines from the poem word lists, half of them under a header as
        anthologies print one (a title, often the poet and the poet's years: ZH_POEM_HEADERS)."""
        rng = self.rng
        lines = self.couplets(rng.choice((2, 2, 3, 4)))
        if rng.random() < 0.5:
            born = rng.randint(600, 1900)
            author = rng.choice(T.ZH_PEN_NAMES) if rng.random() < 0.5 else self.fake[loc].name()
            lines.insert(0, rng.choice(T.ZH_POEM_HEADERS).format(
                title=f"《{rng.choice(T.POEM_NOUNS)}{rng.choice(T.ZH_QUOTE_TITLES[:5])}》", author=author,
                born=born, died=born + rng.randint(30, 85)))
        text = "\n".join(lines)
        return to_traditional(text) if loc == "zh_TW" else text

    def paragraphs(self, loc: str) -> list[str]:
        if loc == "en_US" and self.real and self.rng.random() < self.real_share:
            return self.real.pop().split("\n\n")
        if loc in self.zh_slots and self.rng.random() < T.ZH_PROSE_SHARE:
            return [self.zh_paragraph(loc) for _ in range(self.rng.randint(2, 7))]
        return [self.paragraph(loc) for _ in range(self.rng.randint(2, 8))]
