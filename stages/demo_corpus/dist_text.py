"""Real licence text and Chinese translations from the installed distributions that requirements.lock
pins: licence, copyright and notice files of their *.dist-info folders (`licence_texts`, cut into
boilerplate documents by `licence_docs`), the sections of their project descriptions (`readme_sections`: keep
documents) and the Chinese gettext catalogs they ship (`po_catalogs`)."""
from __future__ import annotations

import functools
import importlib.metadata
import random
import re
from collections.abc import Callable
from pathlib import Path

from stages.common.runtime.params import ConfigError
from stages.demo_corpus.docstrings import _drop_near_duplicates, pack
from stages.demo_corpus.tables import T

LOCK_FILE = Path(__file__).resolve().parents[2] / "requirements.lock"
# Licences and .po catalogs are read from the fixed list CORPUS_DISTRIBUTIONS (data/sources.yaml), so that a
# new dependency (its licence, its catalogs) does not change the corpus, nor does whatever else is installed.
LICENCE_FILES = ("LICENSE", "LICENCE", "COPYING", "NOTICE")  # name prefixes, upper case, in *.dist-info
LICENCE_DOC_CHARS = (100, 3000)  # a licence document: 1-3 consecutive paragraphs, at least 100 chars
CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def corpus_distributions() -> frozenset[str]:
    """CORPUS_DISTRIBUTIONS, canonical names."""
    return frozenset(map(_canonical, T.CORPUS_DISTRIBUTIONS))


@functools.cache
def _corpus_dists() -> tuple[importlib.metadata.Distribution, ...]:
    """The installed distributions of CORPUS_DISTRIBUTIONS (each must be installed: requirements.lock pins it)."""
    try:
        return tuple(importlib.metadata.distribution(name) for name in sorted(corpus_distributions()))
    except importlib.metadata.PackageNotFoundError as e:
        raise ConfigError(f"demo_corpus: the distribution {e.name!r} that the demo corpus reads (corpus_distributions "
                          "in stages/demo_corpus/data/sources.yaml) is not installed: install requirements.lock "
                          "(make install)") from None


def _corpus_files(keep: Callable[[importlib.metadata.PackagePath], bool]) -> list[importlib.metadata.PackagePath]:
    """The files of CORPUS_DISTRIBUTIONS (as their RECORD lists them) that `keep` takes, sorted by path, each
    relative to the folder the distributions are installed in ("<name>-<version>.dist-info/LICENSE")."""
    return sorted((f for dist in _corpus_dists() for f in dist.files or () if keep(f)), key=str)


@functools.cache
def licence_texts() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(file, paragraphs) for each licence, copyright and notice file (LICENSE*, LICENCE*, COPYING*,
    NOTICE*) in the *.dist-info folders of the installed distributions, in sorted order. Paragraphs keep
    their line breaks and indentation; left out are those seen before (whitespace and case aside: many
    packages ship the same MIT or Apache text), those without a word and those over 3000 chars."""
    seen: set[str] = set()
    texts = []
    for path in _corpus_files(lambda f: f.parts[0].endswith(".dist-info")
                              and f.name.upper().startswith(LICENCE_FILES)):
        text = path.locate().read_text(encoding="utf-8", errors="replace")
        text = text.replace("\r\n", "\n").replace("\f", "").expandtabs(4)
        paras = []
        for block in re.split(r"\n[ \t]*\n", text):
            para = "\n".join(line.rstrip() for line in block.split("\n")).strip("\n")
            key = " ".join(para.split()).casefold()
            if key in seen or not re.search(r"[A-Za-z]{3}", para) or len(para) > LICENCE_DOC_CHARS[1]:
                continue
            seen.add(key)
            paras.append(para)
        if paras:
            texts.append((str(path), tuple(paras)))
    return tuple(texts)


def licence_docs(rng: random.Random) -> list[str]:
    """Boilerplate documents of real licence text (see `licence_texts`), shuffled: 1-3 consecutive
    paragraphs of a file, each paragraph used once. A document under 100 chars takes in the next
    paragraphs, of the next file if need be (so a lone copyright line joins the next licence). Near
    duplicates are left out, as in `real_articles`."""
    paras = (para for _, paras in licence_texts() for para in paras)
    docs = list(pack(paras, LICENCE_DOC_CHARS, lambda: rng.choice((1, 1, 1, 2, 2, 3)),
                     lambda cur, size, want: len(cur) >= want and size >= LICENCE_DOC_CHARS[0]))
    docs = _drop_near_duplicates(docs)  # e.g. the BSD clauses, which differ in the project's name only
    rng.shuffle(docs)
    return docs


README_CHARS = (300, 3000)  # a README document: one or more consecutive sections of a project description
# Section headings: Markdown ("## Usage") or reStructuredText (a line underlined with = - ~ ^ " or *)
README_HEADING = re.compile(r"\n(?=#{1,6} \S|[^\n]+\n[=\-~^\"*]{3,}[ \t]*\n)")
README_SKIP = re.compile(r"licen[cs]e|copyright|changelog|change log|release notes|contributors|credits|sponsors|"
                         r"thanks", re.IGNORECASE)
README_BADGES = re.compile(r"image::|\[!\[")  # badge blocks: images and links, not prose


@functools.cache
def readme_sections() -> tuple[str, ...]:
    """The sections of the project descriptions (the body of METADATA: the README as PyPI shows it) of the
    installed distributions, in sorted order, as written (Markdown or reStructuredText): real prose about
    software (what a project does, how to install and use it, its community) with its code blocks, lists
    and tables. Left out: sections whose heading speaks of licences, copyright, changes or credits (the
    boilerplate class has those) and badge blocks; sections under 300 chars join the next one. Each section is
    cut to 3000 chars at a paragraph break."""
    lo, hi = README_CHARS
    sections: list[str] = []
    for dist in _corpus_dists():
        body = (dist.read_text("METADATA") or "").replace("\r\n", "\n").partition("\n\n")[2]  # after the headers
        cur = ""
        for part in README_HEADING.split("\n" + body.strip() + "\n"):
            part = part.strip("\n")
            if not part or README_SKIP.search(part.split("\n", 1)[0]) or README_BADGES.search(part):
                continue
            cur = f"{cur}\n\n{part}" if cur else part
            if len(cur) >= lo:
                while len(cur) > hi:
                    cut = cur.rfind("\n\n", 0, hi)
                    cur = cur[:cut] if cut >= lo else cur[:hi].rsplit(" ", 1)[0]
                sections.append(cur)
                cur = ""
    return tuple(_drop_near_duplicates(sections))


PO_LINE = re.compile(r'(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+(".*")')
PO_ESCAPE = re.compile(r"\\(.)")
PO_FUZZY = re.compile(r"^\s*#,.*\bfuzzy\b", re.M)


def _po_string(quoted: str) -> str:
    return PO_ESCAPE.sub(lambda m: {"n": "\n", "t": "\t", "r": ""}.get(m[1], m[1]), quoted.strip()[1:-1])


def po_messages(text: str) -> list[str]:
    """The translations (msgstr, msgstr[n]) of a gettext .po file, in file order, stripped; not the
    header, untranslated, fuzzy or obsolete (#~) entries. Entries are separated by blank lines, as the
    gettext tools write them."""
    messages = []
    for block in re.split(r"\n\s*\n", text):
        entry: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            line = line.strip()
            if m := PO_LINE.fullmatch(line):
                key = m[1]
                entry[key] = _po_string(m[2])
            elif line.startswith('"') and key:
                entry[key] += _po_string(line)
        if entry.get("msgid") and not PO_FUZZY.search(block):
            messages += [v.strip() for k, v in entry.items() if k.startswith("msgstr") and v.strip()]
    return messages


@functools.cache
def po_catalogs() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(file, variant, messages) for each Chinese gettext catalog that the distributions ship
    (.../zh*/LC_MESSAGES/*.po), in sorted order: the translations with 2 or more Chinese
    characters, each once over all catalogs. variant: zh_TW for zh_TW/zh_HK/zh_Hant, else zh_CN."""
    seen: set[str] = set()
    catalogs = []
    for path in _corpus_files(lambda f: f.match("zh*/LC_MESSAGES/*.po")):
        variant = "zh_TW" if re.search(r"zh[_-](TW|HK|MO|Hant)", path.parent.parent.name) else "zh_CN"
        msgs = [m for m in dict.fromkeys(po_messages(path.locate().read_text(encoding="utf-8", errors="replace")))
                if len(CJK_CHAR.findall(m)) >= 2 and m not in seen]
        seen.update(msgs)
        if msgs:
            catalogs.append((str(path), variant, tuple(msgs)))
    return tuple(catalogs)
