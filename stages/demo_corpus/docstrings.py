"""Real English text that ships with Python and the pinned packages: the prose of stdlib and
third-party docstrings and of the `pydoc_data` help topics (`harvest`, packed into articles by
`real_articles`), documented functions parsed into API docs for man pages and documentation pages
(`api_docs`) and general sentences of the prose pool for quotes."""
from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import itertools
import logging
import random
import re
import textwrap
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pydoc_data.topics import topics as PYDOC_TOPICS
from typing import Any

import xxhash

from stages.demo_corpus.tables import T
from stages.demo_corpus.text import SENTENCE_END, _sentences

log = logging.getLogger(__name__)

MIN_DOCSTRING = 300  # characters; shorter docstrings are mostly one-liners
MIN_PIECE = 100  # characters of prose kept from one docstring
MIN_NEW_TRIGRAMS = 0.1  # share of a paragraph's word 3-grams not seen before, or it is left out
ARTICLE_CHARS = (400, 4000)  # real articles: short pieces joined, long ones cut between paragraphs
ARTICLE_TARGET = 900  # an article is closed once it reaches randint(400, ARTICLE_TARGET) chars
# Docstring markup (numpy/Google/reST): section headers (data/docstrings.yaml), references, literals, citations.
SECTIONS: dict[str, tuple[str, str]] = T.DOCSTRING_SECTIONS  # heading -> (API doc section, what the prose keeps)
DOC_SECTION = re.compile(r"(?:\*\*)?(" + "|".join(map(re.escape, SECTIONS)) + r")(?:\*\*)?:{0,2}")
UNDERLINE = re.compile(r"[-=~^*#+]{3,}")
DOC_ROLE = re.compile(r":[\w.:-]+:`(~?)\.?([^`<]*?)\s*(?:<[^>]*>)?`")
DOC_LITERAL = re.compile(r"``([^`]+)``|(?<![\w`])`([^`<]+?)\s*(?:<[^>]*>)?`_{0,2}(?![\w`])")
DOC_CITATION = re.compile(r"\s*\[[\w#-]+\]_")
NON_WORD = re.compile(r"[\W_]+")
PROSE_END = re.compile(r"[.!?][)\"'”]?$")
# API docs (man pages, documentation pages): docstring sections by name, and the items of a section.
API_SECTIONS = {name: section for name, (section, _) in SECTIONS.items()}
ITEM_NUMPY = re.compile(r"\*{0,2}(\w+)\s+:\s*(.*)")  # "axis : int, optional"
ITEM_GOOGLE = re.compile(r"\*{0,2}(\w+)\*{0,2}\s*(?:\(([^)]*)\))?:\s+(\S.*)")  # "axis (int): The axis."
ITEM_BARE = re.compile(r"\*{0,2}(\w+)")  # "axis"
DOC_EMPHASIS = re.compile(r"(?<!\w)\*{1,2}([^*\s](?:[^*]*[^*\s])?)\*{1,2}(?!\w)")  # *word*, **word**
SIGNATURE_LINE = re.compile(r"[\w.]+\(.*\)(?:\s*->.*)?")
API_MARKUP = re.compile(r"[{}|]|\$|\w\(\w*\)\s*=")  # sets, tables, math, formulas
API_EVERY = 2  # one documented function in API_EVERY (by a hash of its name) is a candidate API doc
MIN_API_PARAMS = 2
MAX_API_PARAMS = 10
MIN_NEW_API_TRIGRAMS = 0.5


def _doc_objects(mod: Any) -> Iterator[tuple[str, Any]]:
    """(dotted name, object) for the module, its public classes and functions (sorted by name) and the
    public methods of those classes that its own package defines."""
    yield mod.__name__, mod
    package = mod.__name__.split(".")[0]
    for name in sorted(dir(mod)):
        if name.startswith("_"):
            continue
        obj = getattr(mod, name, None)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        yield f"{mod.__name__}.{name}", obj
        if inspect.isclass(obj) and str(getattr(obj, "__module__", "")).split(".")[0] == package:
            for attr in sorted(vars(obj)):
                if not attr.startswith("_") and inspect.isroutine(member := getattr(obj, attr, None)):
                    yield f"{mod.__name__}.{name}.{attr}", member


def _unmark(text: str) -> str:
    """Plain text from reST markup: roles, literals, citations."""
    text = DOC_ROLE.sub(lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], text)
    return DOC_CITATION.sub("", DOC_LITERAL.sub(lambda m: m[1] or m[2], text))


def _prose(doc: str) -> str:
    """The prose of a docstring, one line per paragraph: the summary, description and notes, plus the
    descriptions of parameters, return values and the like. Code, examples, math, reST directives,
    references and headings are dropped."""
    out = []
    for head, lines in _doc_sections(doc):
        keep = SECTIONS.get(head, ("", "text"))[1]  # the text before the first heading, or an unknown heading
        if keep == "text":
            out += filter(None, (_api_text(para, 40) for para in _paragraphs(lines)))
        elif keep == "items" and (texts := [d for _, _, d in _api_items(lines) if len(d) >= 30 and d[0].isupper()]):
            out.append(" ".join(texts))
    return "\n\n".join(out)


def _split_long(paragraphs: list[str], size: int) -> Iterator[str]:
    """The paragraphs, those longer than 2 * `size` cut between sentences into parts of about `size`."""
    for para in paragraphs:
        if len(para) <= 2 * size:
            yield para
            continue
        part = ""
        for sent in SENTENCE_END.split(para):
            if part and len(part) + len(sent) > size:
                yield part
                part = ""
            part = f"{part} {sent}" if part else sent
        if part:
            yield part


def pack(paras: Iterable[str], chars: tuple[int, int], goal: Callable[[], int],
         full: Callable[[list[str], int, int], bool], sep: int = 0, redraw: bool = False,
         keep_rest: bool = False) -> Iterator[str]:
    """Documents of consecutive paragraphs, each closed once `full(paragraphs, size, goal)`: size is their
    length (`sep` more each), goal a fresh `goal()` per document. A paragraph that would take a document
    over chars[1] starts the next one (a draft under chars[0] is dropped; with a fresh goal if `redraw`);
    `keep_rest`: the last draft too, if it has chars[0]."""
    lo, hi = chars
    cur: list[str] = []
    size, target = 0, goal()
    for para in paras:
        if cur and size + len(para) > hi:
            if size >= lo:
                yield "\n\n".join(cur)
            cur, size, target = [], 0, goal() if redraw else target
        cur.append(para)
        size += len(para) + sep
        if full(cur, size, target):
            yield "\n\n".join(cur)
            cur, size, target = [], 0, goal()
    if keep_rest and size >= lo:
        yield "\n\n".join(cur)


def _pack(groups: Iterable[list[str]], rng: random.Random) -> list[str]:
    """Cut each group's pieces into articles of 400-4000 chars: short pieces are joined, long ones cut
    between paragraphs; a leftover under 400 chars is dropped."""
    lo, hi = ARTICLE_CHARS
    return [article for group in groups
            for article in pack((p for piece in group for p in _split_long(piece.split("\n\n"), hi // 2)),
                                ARTICLE_CHARS, lambda: rng.randint(lo, ARTICLE_TARGET),
                                lambda _, size, target: size >= target, sep=2, redraw=True, keep_rest=True)]


def _module_docs(name: str) -> list[tuple[str, Any, str]]:
    """(dotted name, object, docstring) for a module and its public members; none if it fails to import
    (then the corpus differs from the one built where it imports, so list only modules pinned and
    importable)."""
    try:
        # Some packages log at INFO while they import (alembic lists its plugins): reading their docstrings
        # is not news, so their records stop at WARNING here; ours are unaffected.
        previous = logging.root.manager.disable
        logging.disable(logging.INFO)
        try:
            module = importlib.import_module(name)
        finally:
            logging.disable(previous)
        return [(qual, obj, inspect.getdoc(obj) or "") for qual, obj in _doc_objects(module)]
    except Exception as exc:  # noqa: BLE001 - whatever goes wrong, the module is just not a source
        log.debug("demo corpus: skipping module %s: %r", name, exc)
        return []


def _drop_near_duplicates(articles: list[str]) -> list[str]:
    """Keep the first of articles sharing many word 3-grams (templated docstrings, overlapping help
    topics), which the `clean` stage would drop as near duplicates although the labels say unique."""
    from datasketch import MinHash, MinHashLSH  # here: its import (scipy) costs ~0.7 s, `refinery check` imports us

    template = MinHash(num_perm=64, seed=1)
    lsh = MinHashLSH(threshold=0.5, num_perm=64)
    kept = []
    for text in articles:
        m = MinHash(num_perm=64, seed=1, hashfunc=xxhash.xxh32_intdigest,
                    permutations=template.permutations, scheme=template.scheme)
        m.update_batch([gram.encode() for gram in _trigrams(text)])  # a set: MinHash ignores order and repeats
        if not lsh.query(m):
            lsh.insert(len(kept), m, check_duplication=False)
            kept.append(text)
    return kept


def _trigrams(text: str) -> set[str]:
    words = NON_WORD.sub(" ", text.casefold()).split()
    return {" ".join(words[i:i + 3]) for i in range(max(1, len(words) - 2))}


@dataclass(frozen=True)
class ApiDoc:
    """A documented function or method, parsed from its numpy- or Google-style docstring: the raw
    material of the man pages and of the API entries of the documentation pages."""
    name: str  # dotted: module.function or module.Class.method
    summary: str
    description: tuple[str, ...]  # prose paragraphs (extended summary and notes)
    params: tuple[tuple[str, str, str], ...]  # (name, type, description)
    returns: str  # description of the (first) return value, or ""
    see_also: tuple[str, ...]  # names
    example: str  # the first doctest block, or ""
    signature: tuple[str, ...] | None  # "name=default" per parameter; None when it has none to show


def _doc_sections(doc: str) -> list[tuple[str, list[str]]]:
    """(heading, lines) of each section of a numpy- or Google-style docstring, in order: heading "" for
    the text before the first heading and after a Google section, "?" for a heading SECTIONS does not
    name."""
    out: list[tuple[str, list[str]]] = [("", [])]
    lines = doc.split("\n")
    google, i = False, 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if stripped and not line[:1].isspace():
            head = DOC_SECTION.fullmatch(stripped)
            numpy = UNDERLINE.fullmatch(following) and not UNDERLINE.fullmatch(stripped)  # a heading, underlined
            if numpy or (head and stripped.endswith(":")):  # or Google-style "Args:"
                out.append((head[1] if head else "?", []))
                google = not numpy
                i += 2 if numpy else 1
                continue
            if google:  # a Google section ends at the next line that is not indented
                out.append(("", []))
                google = False
        out[-1][1].append(line)
        i += 1
    return out


def _api_sections(doc: str) -> dict[str, list[str]]:
    """The lines of each API doc section ("params", "returns", ...; "" for the text outside sections)."""
    out: dict[str, list[str]] = {"": []}
    for head, lines in _doc_sections(doc):
        out.setdefault(API_SECTIONS.get(head, "other") if head else "", []).extend(lines)
    return out


def _paragraphs(lines: list[str]) -> list[list[str]]:
    return [list(para) for blank, para in itertools.groupby(lines, lambda line: not line.strip()) if not blank]


def _api_text(lines: list[str], min_chars: int) -> str:
    """One paragraph as plain running text, or "" when it is code, math, a directive or too short."""
    if lines[0][:1].isspace() or any(line.lstrip().startswith(("..", ">>>", ":")) for line in lines):
        return ""
    text = DOC_EMPHASIS.sub(r"\1", _unmark(" ".join(line.strip() for line in lines)))
    if (len(text) < min_chars or "::" in text or "\\" in text or not text[0].isalpha()
            or not PROSE_END.search(text) or API_MARKUP.search(text)):
        return ""
    return text


def _api_items(lines: list[str]) -> list[tuple[str, str, str]]:
    """(name, type, description) of the items of a Parameters/Returns section, numpy style ("name :
    type" and an indented description) or Google style ("name (type): description"); the description
    is the first paragraph, in plain text, or "" where that is not running text. Lines that name
    several items, or none, are skipped."""
    items: list[tuple[str, list[str]]] = []
    for line in textwrap.dedent("\n".join(lines)).split("\n"):
        if line.strip() and not line[:1].isspace():
            items.append((line.strip(), []))
        elif items:
            items[-1][1].append(line.strip())
    out = []
    for head, body in items:
        desc = next(iter(_paragraphs(body)), [])
        if m := ITEM_NUMPY.fullmatch(head):
            name, typ = m[1], m[2]
        elif (m := ITEM_GOOGLE.fullmatch(head)) and (m[2] or len(m[3]) >= 50 or PROSE_END.search(m[3])):
            name, typ, desc = m[1], m[2] or "", [m[3], *desc]
        elif m:  # "name: type", numpy-like
            name, typ = m[1], m[3]
        elif m := ITEM_BARE.fullmatch(head):
            name, typ = m[1], ""
        else:
            continue
        out.append((name, _unmark(typ).strip(), _api_text(desc, 12) if desc else ""))
    return out


def _signature(obj: Any, params: list[str]) -> tuple[str, ...] | None:
    """The documented parameters as the signature shows them ("axis=None"), None where it is unknown
    or shows something that changes between runs (an object's address)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    shown = {name: str(p) for name, p in sig.parameters.items()}
    out = tuple(shown.get(name, name) for name in params)
    if any(" at 0x" in s or len(s) > 60 or "\n" in s for s in out):
        return None
    return out


def api_doc(name: str, obj: Any, doc: str) -> ApiDoc | None:
    """The ApiDoc of a function or method whose docstring has a one-sentence summary and at least
    MIN_API_PARAMS parameters described in running text; None otherwise."""
    sections = _api_sections(doc)
    paras = _paragraphs(sections[""])
    if paras and SIGNATURE_LINE.fullmatch(" ".join(line.strip() for line in paras[0])):  # compiled code
        paras = paras[1:]
    if not paras or not (summary := _api_text(paras[0], 20)) or len(summary) > 200:
        return None
    params = [(n, t, d) for n, t, d in _api_items(sections.get("params", []))
              if n and d and n not in ("self", "cls", "args", "kwargs")][:MAX_API_PARAMS]
    if len(params) < MIN_API_PARAMS:
        return None
    description = [t for para in paras[1:] + _paragraphs(sections.get("notes", [])) if (t := _api_text(para, 40))]
    returns = next((d for _, _, d in _api_items(sections.get("returns", [])) if d), "")
    see_also = []
    for line in textwrap.dedent("\n".join(sections.get("see", []))).split("\n"):
        if line[:1].isspace():
            continue
        for ref in re.split(r"\s*,\s*", _unmark(re.split(r"\s+:|:\s", line)[0]).strip()):
            if re.fullmatch(r"~?[A-Za-z_][\w.]*", ref) and ref.lstrip("~") not in see_also:
                see_also.append(ref.lstrip("~"))
    example: list[str] = []
    for line in textwrap.dedent("\n".join(sections.get("examples", []))).split("\n"):
        if line.startswith(">>>") or (example and line.strip()):
            example.append(line.rstrip())
        elif example:
            break
    if len(example) > 10 or any(len(line) > 90 or " at 0x" in line for line in example):
        example = []
    return ApiDoc(name, summary, tuple(description), tuple(params), returns, tuple(see_also[:6]),
                  "\n".join(example), _signature(obj, [n for n, _, _ in params]))


@functools.cache
def _harvest() -> tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[ApiDoc, ...]]:
    """(prose sources, API docs): see `harvest` and `api_docs`. One pass, so that no text is in both."""
    seen: set[str] = set()  # word 3-grams of the paragraphs and API docs kept so far

    def new(grams: set[str], share: float) -> bool:  # more than `share` of them not seen before
        return len(grams - seen) > len(grams) * share

    def new_pieces(texts: Iterable[str]) -> tuple[str, ...]:
        pieces = []
        for text in dict.fromkeys(texts):
            paras = [(p, grams) for p in text.split("\n\n") if new(grams := _trigrams(p), MIN_NEW_TRIGRAMS)]
            if sum(len(p) for p, _ in paras) >= MIN_PIECE:
                pieces.append("\n\n".join(p for p, _ in paras))
                seen.update(*(grams for _, grams in paras))
        return tuple(pieces)

    sources, apis = [], []
    with warnings.catch_warnings():  # deprecated names warn when touched
        warnings.simplefilter("ignore")
        for name in T.STDLIB_MODULES + T.PACKAGE_MODULES:
            docs = []
            for qual, obj, doc in _module_docs(name):
                if len(doc) < MIN_DOCSTRING or "this platform" in doc or doc in docs:  # numpy: per-platform aliases
                    continue
                if inspect.isroutine(obj) and xxhash.xxh32_intdigest(qual.encode()) % API_EVERY == 0:
                    if api := api_doc(qual, obj, doc):  # kept out of the prose either way
                        grams = _trigrams(" ".join([api.summary, *api.description, *(d for _, _, d in api.params)]))
                        if new(grams, MIN_NEW_API_TRIGRAMS):
                            # without the paragraphs seen before, like the prose (shared notes)
                            description = tuple(d for d in api.description if new(_trigrams(d), MIN_NEW_TRIGRAMS))
                            seen.update(grams)
                            apis.append(dataclasses.replace(api, description=description))
                        continue
                docs.append(doc)
            sources.append((name, new_pieces(map(_prose, docs))))
    for key in sorted(PYDOC_TOPICS):
        sources.append((f"pydoc_data.topics:{key}", new_pieces([_prose(PYDOC_TOPICS[key])])))
    return tuple(sources), tuple(apis)


def harvest() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(source, prose pieces) for each stdlib module, third-party module and pydoc help topic, in that
    order: the prose of each docstring of >= MIN_DOCSTRING chars, without the paragraphs that are
    (nearly) all word 3-grams seen before (boilerplate, templated docs), and without the docstrings
    that `api_docs` takes. Cached: it takes a few seconds."""
    return _harvest()[0]


def api_docs() -> tuple[ApiDoc, ...]:
    """Functions and methods documented with parameters (see `api_doc`), one in API_EVERY of those of
    the harvested modules (by a hash of the name), in module order, without near repeats (more than
    half of their word 3-grams seen before). Their docstrings are not in `harvest`."""
    return _harvest()[1]


def real_articles(rng: random.Random) -> list[str]:
    """English prose that ships with Python and the pinned packages (see `harvest`), packed into
    articles of 400-4000 chars without near duplicates, shuffled."""
    articles = _drop_near_duplicates(_pack((list(pieces) for _, pieces in harvest()), rng))
    rng.shuffle(articles)
    return articles


QUOTE_STARTS = frozenset(T.QUOTE_STARTS)
QUOTE_SENTENCE_SKIP = re.compile(r"[\d()\[\]{}<>=_`*/\\|#@$%^~:;\"]|\w\.\w|\w[A-Z]|(?i:\b(?:"
                                 + "|".join(map(re.escape, T.QUOTE_SKIP_WORDS)) + r")\b)")


@functools.cache
def quote_sentences() -> tuple[tuple[str, str], ...]:
    """(module, sentence) for the sentences of the prose pool that read as general statements, for
    quotes: 50-220 chars, 8-40 words, no code, digits or API words, at least one stop word."""
    out = []
    for source, pieces in harvest():
        for piece in pieces:
            for para in piece.split("\n\n"):
                for sent in _sentences(para):
                    sent = sent.strip()
                    if (50 <= len(sent) <= 220 and sent.split()[0] in QUOTE_STARTS and sent.endswith(".")
                            and 8 <= len(sent.split()) <= 40 and not QUOTE_SENTENCE_SKIP.search(sent)
                            and re.search(r"\b(?:the|to|of|and|that|have|with|be)\b", sent)):
                        out.append((source.split(":")[0], sent))
    return tuple(out)
