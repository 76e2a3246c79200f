"""The Builder: every record of the corpus, in stream order (`build`). The kinds of record come from
the mixins beside this module (man pages, quotes, pages, boilerplate, malformed records, duplicates);
articles, long, short and noisy records from here."""
from __future__ import annotations

from stages.demo_corpus.boilerplate import Boilerplate
from stages.demo_corpus.duplicates import Duplicates
from stages.demo_corpus.malformed import Malformed
from stages.demo_corpus.man_pages import ManPages
from stages.demo_corpus.pages import Pages
from stages.demo_corpus.quotes import Quotes
from stages.demo_corpus.records import LOCALES, Doc, record_counts
from stages.demo_corpus.reference import Reference
from stages.demo_corpus.tables import T
from stages.demo_corpus.text import _sentences


# the locales of the drop kinds, by weight (data/mix.yaml); the other kinds have every locale (LOCALES)
LOCALE_WEIGHTS = {"ad": T.AD_LOCALES, "boilerplate": T.BOILER_LOCALES}


class Builder(ManPages, Quotes, Reference, Pages, Boilerplate, Malformed, Duplicates):
    """`Builder(seed).build(num_docs)`: the records; `content(kind)` makes one record of a kind by calling
    `_<kind>(locale)` (article, html, ad, boilerplate, short, long, noisy)."""

    def _article(self, loc: str) -> str:
        en = loc == "en_US"
        if en or loc in self.zh_slots:
            # (genre, share of articles, whether this article can be one, maker): a share it can't falls to the next
            genres = (("man_page", T.MAN_SHARE, self.api or not en, self.man_page),
                      ("quote", T.QUOTE_SHARE, True, self.quote),
                      ("reference", T.REFERENCE_SHARE, en, self.reference_section),
                      ("readme", T.README_SHARE, en and self.readmes, lambda _: self.readmes.pop()))
            r, bound = self.rng.random(), 0.0
            for genre, share, possible, make in genres:
                bound += share
                if r < bound and possible:
                    self.genre = genre
                    return make(loc)
        if loc in self.zh_slots and self.rng.random() < T.ZH_POEM_SHARE:
            self.genre = "poem"
            return self.zh_poem(loc)
        return "\n\n".join(self.paragraphs(loc))

    def _long(self, loc: str) -> str:
        target, parts, size = self.rng.randint(50_000, 148_000), [], 0
        while size < target:
            parts.append(self.paragraph(loc))
            size += len(parts[-1].encode()) + 2
        return "\n\n".join(parts)

    def _short(self, loc: str) -> str:
        s = self.sentence(loc, nb_words=self.rng.randint(1, 4))
        while len(s) >= 30:
            s = s.rsplit(" ", 1)[0] if " " in s else s[:29]
        return s

    def _noise(self, loc: str, s: str) -> str:
        rng, r = self.rng, self.rng.random()
        if r < 0.15:  # curly quotes so that ASCII sentences show mojibake too
            return f"“{s}”".encode("utf-8").decode("latin-1")
        if r < 0.3:
            return f"\x1b[{rng.choice((31, 32, 33, 36))}m{s}\x1b[0m"
        if r < 0.45:
            for _ in range(rng.randint(1, 3)):
                k = rng.randrange(len(s) + 1)
                s = s[:k] + rng.choice(T.NOISE_CONTROL_CHARS) + s[k:]
            return s
        if r < 0.55:
            return f"{s} {rng.choice(T.NOISE_SYMBOL_RUNS)}"
        return f"{s} {self.fake[loc].url()} {self.fake[loc].email()}" if r < 0.65 else s

    def _noisy(self, loc: str) -> str:
        sep = "" if LOCALES[loc][0] in T.CJK else " "
        paras = (sep.join(self._noise(loc, s) for s in _sentences(p)) for p in self.paragraphs(loc))
        return "\n\n".join(paras)

    def content(self, kind: str) -> Doc:
        weights = LOCALE_WEIGHTS.get(kind, {loc: w for loc, (_, w, _) in LOCALES.items()})
        loc = self.rng.choices(list(weights), list(weights.values()))[0]
        for _ in range(100):  # keep the text unique so that every duplicate is a labelled one
            self.genre = kind  # the generator names a finer genre where it has one (man_page, doc_page, ...)
            text = getattr(self, f"_{kind}")(loc)
            if text not in self.seen:
                break
        else:
            raise RuntimeError(f"could not make a unique {kind} doc")
        self.seen.add(text)
        return Doc(kind, loc, text, self.new_id(), self.url(loc), genre=self.genre)

    def build(self, num_docs: int) -> list[Doc]:
        """All records, in stream order."""
        n_kind, n_bad, n_dup = record_counts(num_docs)
        self.id_numbers = self.rng.sample(range(num_docs), num_docs)
        # English bodies from the pool: not the man pages, quotes, reference sections and READMEs
        english = (sum(n_kind[k] for k in T.REAL_KINDS)
                   - n_kind["article"] * (T.MAN_SHARE + T.QUOTE_SHARE + T.REFERENCE_SHARE + T.README_SHARE)) \
            * LOCALES["en_US"][1]
        self.real_share = min(1.0, len(self.real) / english)
        base = [self.content(k) for k, n in n_kind.items() for _ in range(n)]
        base += [self.malformed(t) for t, n in n_bad.items() for _ in range(n)]
        self.rng.shuffle(base)
        dups = self.duplicates(base, n_dup["exact"], n_dup["near"])
        keyed = [(float(i), d) for i, d in enumerate(base)]
        keyed += [(self.rng.uniform(i + 0.5, len(base)), d) for i, d in dups]
        keyed.sort(key=lambda kd: kd[0])  # stable, so ties keep a deterministic order
        return [d for _, d in keyed]
