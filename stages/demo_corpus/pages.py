"""HTML pages: an article inside a full web page (data/html/page.html), or a documentation page,
Sphinx (navigation in div.related and div.sphinxsidebar) or DocBook XSL (navigation tables)."""
from __future__ import annotations

import html

from stages.demo_corpus.base import BuilderBase
from stages.demo_corpus.records import LOCALES
from stages.demo_corpus.tables import T
from stages.demo_corpus.text import _api_html, _code_html, _sentences, _slug, to_traditional


class Pages(BuilderBase):
    def _html(self, loc: str) -> str:
        rng, f, esc = self.rng, self.fake[loc], html.escape
        if rng.random() < T.DOC_PAGE_SHARE:
            self.genre = "doc_page"
            return self.doc_page(loc)
        body = []
        for p in self.paragraphs(loc):
            r = rng.random()
            if r < 0.15 and len(items := _sentences(p)) > 1:
                body.append("<ul>\n" + "".join(f"<li>{esc(s)}</li>\n" for s in items) + "</ul>")
            elif r < 0.3:
                body.append(f"<h2>{esc(self.sentence(loc, 4))}</h2>\n<p>{esc(p)}</p>")
            else:
                link = f' <a href="{self.url(loc)}">{esc(f.word())}&nbsp;&raquo;</a>' if r < 0.5 else ""
                body.append(f"<p>{esc(p)}{link}</p>")
        menu = T.MENU_ZH if loc.startswith("zh") else T.MENU_EN
        nav = "".join(f'<li><a href="/{i}">{m}</a></li>' for i, m in enumerate(rng.sample(menu, 5)))
        date = f"{rng.randint(2005, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return T.PAGE.substitute(lang=LOCALES[loc][0], title=esc(self.sentence(loc, 5).rstrip(".。")),
                               site=f"example.{LOCALES[loc][2]}", ua=rng.randrange(10**6, 10**7), nav=nav,
                               author=esc(f.name()), year=rng.randint(2005, 2024), date=date, body="\n".join(body))

    # --- documentation pages -----------------------------------------------------------------------------
    def doc_page(self, loc: str) -> str:
        """A documentation page: Sphinx (navigation in div.related and div.sphinxsidebar, "¶" header
        links, highlighted code blocks, for English some API entries from `api_docs`) or, for
        DOCBOOK_SHARE of them, a DocBook XSL chunk (navigation tables that `clean` keeps as text). The
        prose is the language's article text (the real pool for English)."""
        rng, f, esc = self.rng, self.fake[loc], html.escape
        zh = loc in self.zh_slots
        labels = T.DOC_LABELS["zh_CN" if zh else "en"]
        paragraphs = self.paragraphs(loc)
        docbook = rng.random() < T.DOCBOOK_SHARE
        apis = [self.api.pop() for _ in range(min(len(self.api), rng.choice((0, 1, 1, 2))))] \
            if loc == "en_US" and not docbook else []
        # seven headings: the page's title, its two neighbours, up to three sections and the chapter (the last)
        if zh or loc == "en_US":
            headings = rng.sample(T.ZH_DOC_HEADINGS if zh else T.EN_DOC_HEADINGS, 7)
        else:
            headings = [self.sentence(loc, 3).rstrip(".。") for _ in range(7)]
        project = rng.choice(T.ZH_TOOLS) if zh else f.word().capitalize()
        if loc == "zh_TW":
            labels = {k: to_traditional(v) for k, v in labels.items()}
            headings, project = [to_traditional(h) for h in headings], to_traditional(project)
        title, neighbours = headings.pop(), [headings.pop(), headings.pop()]
        if zh and project.isascii():
            title = f"{project} {title}"
        if apis:  # an API reference page, between two modules
            project, owner = apis[0].name.split(".")[0], apis[0].name.rsplit(".", 1)[0]
            title = f"{owner} — {rng.choice(T.EN_DOC_TITLES)}"
            neighbours = rng.sample(T.STDLIB_MODULES + T.PACKAGE_MODULES, 2)
        # sections: (heading, blocks); the first, the page's introduction, has none
        num_headed = min(len(paragraphs) - 1, rng.choice((1, 1, 2)))
        cuts = sorted(rng.sample(range(1, len(paragraphs)), num_headed))
        groups = [paragraphs[a:b] for a, b in zip([0, *cuts], [*cuts, len(paragraphs)])]
        sections = [(heading, [f"<p>{esc(p)}</p>" for p in g]) for heading, g in zip(["", *headings], groups)]
        if rng.random() < 0.7:  # a code block: imports of the API entries (their examples are theirs), or shell
            imports = [f">>> from {owner} import {name}" for owner, name in (a.name.rsplit(".", 1) for a in apis)
                       if not owner.rsplit(".", 1)[-1][:1].isupper()]
            code = "\n".join(imports) or "\n".join(f"$ {rng.choice(T.ZH_COMMANDS)} {rng.choice(T.ZH_OPTIONS)}"
                                                   for _ in range(rng.randint(1, 3)))
            block = (f'<pre class="{rng.choice(("programlisting", "screen"))}">{esc(code)}</pre>' if docbook
                     else _code_html(code, "python3" if code.startswith(">>>") else "console"))
            where = sections[rng.randrange(len(sections))][1]
            where.insert(rng.randint(0, len(where)), block)
        if apis:
            sections.append((headings[len(sections) - 1], [_api_html(a, labels) for a in apis]))
        prev_href, next_href = (f"{_slug(t, i + 1)}.html" for i, t in enumerate(neighbours))
        values = dict(labels, lang=LOCALES[loc][0], title=esc(title), project=esc(project), anchor=_slug(title, 0),
                      prev_title=esc(neighbours[0]), next_title=esc(neighbours[1]), prev_href=prev_href,
                      next_href=next_href, section=esc(headings[-1]))
        if docbook:
            n_chapter = rng.randint(1, 12)
            num = f"{n_chapter}.{rng.randint(1, 9)}"
            chapter_title = labels["chapter_title"].format(n=n_chapter, title=headings[-1])
            body = [T.DOCBOOK_SECTION.substitute(id=_slug(heading, i), num=num, i=i, heading=esc(heading),
                                                 blocks="".join(blocks)) if heading else "".join(blocks)
                    for i, (heading, blocks) in enumerate(sections)]
            return T.DOCBOOK_PAGE.substitute(
                values, num=num, book=esc(f"{project} {labels['documentation']}"), up_href=f"ch{n_chapter:02d}.html",
                chapter_title=esc(chapter_title), body="".join(body))
        body = [T.SPHINX_SECTION.substitute(labels, id=_slug(heading, i), heading=esc(heading),
                                            blocks="\n".join(blocks)) if heading else "\n".join(blocks)
                for i, (heading, blocks) in enumerate(sections)]
        toc = [f'<li><a class="reference internal" href="#{_slug(heading, i)}">{esc(heading)}</a></li>'
               for i, (heading, _) in enumerate(sections) if heading]
        values["version"] = f"{rng.randint(0, 5)}.{rng.randint(0, 20)}"
        year = rng.randint(2008, 2024)
        return T.SPHINX_PAGE.substitute(
            values, related=T.SPHINX_RELATED.substitute(values), hash=f"{rng.getrandbits(32):08x}",
            theme=rng.choice(T.SPHINX_THEMES), body="\n".join(body), toc_items="\n".join(toc),
            source=values["anchor"], years=f"{year - rng.randint(0, 10)}-{year}",
            authors=esc(f.company() if rng.random() < 0.5 else f"{project} developers"),
            sphinx_version=f"{rng.randint(4, 8)}.{rng.randint(0, 4)}.{rng.randint(0, 6)}")
