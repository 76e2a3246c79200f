"""Text normalisation for the `clean` stage: HTML to text, mojibake, NFKC, control chars, regex removals.

Every step is a pure function on `str`; `Normalizer` chains the ones switched on in params.
"""
from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import ftfy
from selectolax.lexbor import LexborHTMLParser

# HTML5 element names: used both to decide that a document is HTML and to strip tags that survive
# extraction (e.g. escaped `&lt;div&gt;` in documentation). Restricting to real element names keeps
# man-page placeholders such as `<file>` or `#include <stdio.h>` intact.
HTML_ELEMENTS = (
    "a abbr address area article aside audio b base bdi bdo blockquote body br button canvas caption "
    "center cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed fieldset "
    "figcaption figure font footer form frame frameset h1 h2 h3 h4 h5 h6 head header hr html i iframe img "
    "input ins kbd label legend li link main map mark meta meter nav noscript object ol optgroup option "
    "output p param picture pre progress q rp rt ruby s samp script section select small source span "
    "strike strong style sub summary sup svg table tbody td template textarea tfoot th thead time title "
    "tr track tt u ul var video wbr"
).split()
_TAG_NAMES = "|".join(sorted(HTML_ELEMENTS, key=len, reverse=True))
# The same alternation grouped by first letter, which a regex tries several times faster. Only one name
# can match at a position, as a name must be followed by a space, `/` or `>`, so the order is free.
_TAG_NAME_TRIE = "|".join(f"{first}(?:{'|'.join(sorted((name[1:] for name in names), key=len, reverse=True))})"
                          for first, names in itertools.groupby(sorted(HTML_ELEMENTS), key=lambda name: name[0]))
# What counts as a tag. Applied with `.sub` it is quadratic on adversarial text (from every `<!--` or
# `<!doctype` without an end, the engine rescans to the end of the text), so the stage finds the same
# matches with `html_tag_spans`.
HTML_TAG_RE = re.compile(rf"</?(?:{_TAG_NAMES})(?:\s[^<>]{{0,2000}})?/?>|<!--.*?-->|<!doctype[^>]*>", re.I | re.S)
# The same element tags, plus the bare openers of comments and doctypes whose ends str.find looks up,
# by the closers (`-->`, `>`) still worth looking for.
# The lookahead only spares trying the 120 names at every `<` that cannot start a tag (`<!--` * n).
_ELEMENT_TAG = rf"<(?=[/a-z])/?(?:{_TAG_NAME_TRIE})(?:\s[^<>]{{0,2000}})?/?>"
_TAG_OR_OPENER_RES = {
    frozenset(closers): re.compile("|".join([_ELEMENT_TAG, *(opener for closer, opener in (("-->", "<!--"),
                                                                                        (">", "<!doctype"))
                                                            if closer in closers)]), re.I)
    for closers in ((), ("-->",), (">",), ("-->", ">"))
}
_HTML_HINT_RE = re.compile(r"<!doctype html|<html[\s>]|<body[\s>]|<head[\s>]", re.I)
# Opening block-level tags: a newline is inserted before each so paragraphs survive extraction.
_BLOCK_TAG_RE = re.compile(
    r"<(?=(?:p|div|br|li|ul|ol|h[1-6]|tr|table|section|article|pre|dd|dt|dl|blockquote|header|footer|"
    r"main|aside|nav|title|hr|td|th|figcaption|form|option)\b)",
    re.I,
)
# Elements whose text is never content.
NON_CONTENT_TAGS = ("script", "style", "noscript", "nav", "footer", "header", "aside", "form", "iframe", "svg",
                    "template", "button", "select", "head")
# Many real pages build navigation from plain <div>s; ARIA roles and a few conventional class names
# (Sphinx's `related` and `sphinxsidebar` among them) mark it.
NON_CONTENT_SELECTOR = ", ".join([
    *(f'[role="{role}"]' for role in ("navigation", "banner", "contentinfo", "search", "complementary")),
    *(f".{name}" for name in ("nav", "navbar", "navigation", "menu", "sidebar", "sphinxsidebar", "related",
                              "breadcrumb", "breadcrumbs", "footer", "skip-link", "cookie-banner")),
])

_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_OVERSTRIKE_RE = re.compile(r"(.)\x08")  # man-page bold/underline: "N\bN", "_\bX"
# C0/C1 controls except tab and newline; also zero-width and BOM characters.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\ufeff]")
_URL_RE = re.compile(r"\b(?:https?://|ftp://|www\.)[^\s<>\"'）)】]+", re.I)
# What counts as an e-mail address. Applied with `.sub` it is quadratic: it tries a match from every
# word boundary inside a run of address characters ("a.a.a.a..." without an `@`), rescanning the run
# each time; `remove_emails` finds the same matches in linear time. A match starts at the first word
# boundary of its run, i.e. its first letter or digit, so _EMAIL_FROM_RUN_START_RE tries a run only
# from its start (the lookbehind) and keeps the match proper in group 1.
_EMAIL_RE = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_EMAIL_FROM_RUN_START_RE = re.compile(r"(?<![\w.+-])[.+-]*(\w[\w.+-]*@[\w-]+(?:\.[\w-]+)+\b)")
# Runs of decorative symbols (★★★, >>>>>, ======, ~~~~): 4+ of the same non-word, non-space char.
_SYMBOL_RUN_RE = re.compile(r"([^\w\s])\1{3,}")
_SYMBOL_CHARS_RE = re.compile(r"[\u2190-\u21ff\u2500-\u27bf\u2b00-\u2bff\U0001f000-\U0001faff]+")
# UTF-8 read as Latin-1/cp1252 leaves a lead byte (Â..ô) followed by a continuation byte shown as a C1
# control, a Latin-1 symbol, or one of cp1252's specials (€ ‚ „ … † ‡ ‰ Š ‹ Œ Ž ‘ ’ “ ” • – — ˜ ™ š › œ ž Ÿ).
# One C-speed search decides whether ftfy's comparatively slow repair runs at all.
_MOJIBAKE_HINT_RE = re.compile(
    "[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc"
    "\u2013\u2014\u2018-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122]"
)
# COMBINING GRAPHEME JOINER: a starter that changes nothing visible (see `stream_safe`).
_CGJ = "\u034f"
# UAX #15's Stream-Safe Text Format: at most 30 non-starters in a row.
MAX_NONSTARTERS = 30
# Runs of spaces and tabs other than a lone space (which would be replaced by itself: most of the matches).
_SPACES_RE = re.compile(r"(?: [ \t\u00a0\u3000]|[\t\u00a0\u3000])[ \t\u00a0\u3000]*")
_BLANK_LINES_RE = re.compile(r"\n{3,}")


def html_tag_spans(text: str, endpos: int | None = None) -> Iterator[tuple[int, int]]:
    """Spans of HTML_TAG_RE's matches in `text[:endpos]`, in linear time.

    A comment or doctype ends at the first `-->` or `>` after its opener. When there is none, no later
    opener of that kind has one either, so one failed look-up settles all of them.
    """
    end = len(text) if endpos is None else min(endpos, len(text))
    closers = frozenset(("-->", ">"))
    pos = 0
    while (m := _TAG_OR_OPENER_RES[closers].search(text, pos, end)) is not None:
        start, stop = m.span()
        if text[start + 1] != "!":  # an element tag, matched whole
            yield start, stop
            pos = stop
            continue
        closer = "-->" if text[start + 2] == "-" else ">"
        close = text.find(closer, stop, end)
        if close < 0:
            closers -= {closer}
            pos = start + 1
        else:
            yield start, close + len(closer)
            pos = close + len(closer)


def strip_html_tags(text: str, repl: str = " ") -> str:
    """`HTML_TAG_RE.sub(repl, text)` in linear time."""
    pieces: list[str] = []
    last = 0
    for start, stop in html_tag_spans(text):
        pieces += (text[last:start], repl)
        last = stop
    return "".join(pieces) + text[last:] if pieces else text


def remove_emails(text: str, repl: str = " ") -> str:
    """`_EMAIL_RE.sub(repl, text)` in linear time."""
    if "@" not in text:
        return text
    pieces: list[str] = []
    pos = 0
    while True:
        # After a match, the regex may start the next one right at its end: the address ends with a
        # letter or digit, so when a `.`, `+` or `-` follows, that is a word boundary inside a run.
        m = _EMAIL_RE.match(text, pos) if pieces else None
        if m is not None:
            start, stop = m.span()
        elif (m := _EMAIL_FROM_RUN_START_RE.search(text, pos)) is not None:
            start, stop = m.span(1)
        else:
            break
        pieces += (text[pos:start], repl)
        pos = stop
    return "".join(pieces) + text[pos:] if pieces else text


def _is_nonstarter(ch: str) -> bool:
    """Whether `ch` decomposes to non-starters only (combining class > 0)."""
    return bool(unicodedata.combining(ch) or unicodedata.decomposition(ch)) and all(
        unicodedata.combining(c) for c in unicodedata.normalize("NFKD", ch))


class _NonstarterChars(dict):
    """`_is_nonstarter` of each character met, computed once."""

    def __missing__(self, ch: str) -> bool:
        self[ch] = value = _is_nonstarter(ch)
        return value


_nonstarter_chars = _NonstarterChars()
# Every non-starter lies at or beyond the first one (U+0300), so text with no character there has none.
_FROM_FIRST_NONSTARTER_RE = re.compile(f"[{re.escape(chr(next(c for c in range(0x110000) if _is_nonstarter(chr(c)))))}"
                                       "-\U0010ffff]")


@functools.cache
def _nonstarter_run_re() -> re.Pattern[str]:
    """30 non-starters in a row, followed by one more. Built on first use: a scan of all code points
    (~0.1 s once per process)."""
    ranges: list[list[int]] = []
    for code in range(0x110000):
        if _is_nonstarter(chr(code)):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    cls = "".join(re.escape(chr(a)) + ("" if a == b else "-" + re.escape(chr(b))) for a, b in ranges)
    return re.compile(f"[{cls}]{{{MAX_NONSTARTERS}}}(?=[{cls}])")


def stream_safe(text: str) -> str:
    """Insert a COMBINING GRAPHEME JOINER after every 30 non-starters in a row (UAX #15, Stream-Safe Text
    Format). `unicodedata.normalize` sorts each run of combining marks by insertion, quadratic in its
    length (80,000 marks take seconds, a megabyte of them hours); no language needs more than a few in a
    row, so real text is left as it is. Nearly all texts hold no non-starter at all, which their distinct
    characters tell faster than the run search does (its character class, reaching beyond the BMP, is
    tried range by range: ~60 ns a character)."""
    if not _FROM_FIRST_NONSTARTER_RE.search(text) or not any(map(_nonstarter_chars.__getitem__, set(text))):
        return text
    return _nonstarter_run_re().sub(lambda m: m.group() + _CGJ, text)


def looks_like_html(text: str) -> bool:
    if _HTML_HINT_RE.search(text, 0, 4096):
        return True
    return sum(1 for _ in itertools.islice(html_tag_spans(text, 20000), 5)) >= 5


# Elements whose end tag may be left out (the parser closes them at the next sibling) or that have none:
# they do not nest deeper when left open.
_SELF_CLOSING = frozenset("area base br col embed hr img input link meta source track wbr p li dt dd option "
                          "optgroup tr td th thead tbody tfoot rt rp colgroup caption".split())
MAX_HTML_DEPTH = 2048  # the parser's tree building slows down sharply past this nesting (32,768 <div>s: 8 s)


def html_depth(html: str) -> int:
    """Deepest element nesting the tags of `html` describe (an upper bound for sloppy HTML), in linear time."""
    depth = deepest = 0
    for start, stop in html_tag_spans(html):
        if html[start + 1] == "/":
            depth = max(0, depth - 1)
        elif html[start + 1] != "!" and html[stop - 2] != "/":
            name = html[start + 1:stop - 1].split(None, 1)[0].lower() if stop - start > 2 else ""
            if name not in _SELF_CLOSING:
                depth += 1
                deepest = max(deepest, depth)
    return deepest


def html_to_text(html: str) -> str:
    """Visible main text of an HTML page, one block element per line. Markup nested deeper than any real
    page (MAX_HTML_DEPTH) has its tags stripped instead of being parsed, which would take minutes."""
    # Each opening tag starts at a `<` not followed by `/`: fewer of those than the limit, no deeper nesting.
    if html.count("<") - html.count("</") > MAX_HTML_DEPTH and html_depth(html) > MAX_HTML_DEPTH:
        return strip_html_tags(html, "\n")
    tree = LexborHTMLParser(_BLOCK_TAG_RE.sub("\n<", html))
    tree.strip_tags(list(NON_CONTENT_TAGS))
    for node in tree.css(NON_CONTENT_SELECTOR):
        node.decompose()
    root = tree.body or tree.root
    return "" if root is None else (root.text(deep=True, separator="") or "")


def strip_control(text: str) -> str:
    text = _ANSI_RE.sub("", text) if "\x1b" in text else text
    text = _OVERSTRIKE_RE.sub("", text) if "\x08" in text else text
    return _CONTROL_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def normalize_whitespace(text: str) -> str:
    lines = (line.strip() for line in _SPACES_RE.sub(" ", text).split("\n"))  # the runs never span a newline
    return _BLANK_LINES_RE.sub("\n\n", "\n".join(lines)).strip()


@dataclass(frozen=True)
class NormalizeOptions:
    html: bool = True
    fix_mojibake: bool = True
    nfkc: bool = True
    strip_control: bool = True
    remove_urls: bool = True
    remove_emails: bool = True
    remove_symbols: bool = True
    strip_residual_tags: bool = True


def normalize(text: str, opts: NormalizeOptions) -> tuple[str, bool]:
    """Return (clean text, was_html)."""
    was_html = opts.html and looks_like_html(text)
    if was_html:
        text = html_to_text(text)
    if opts.strip_control:
        text = strip_control(text)
    if opts.fix_mojibake and _MOJIBAKE_HINT_RE.search(text):
        text = ftfy.fix_encoding(text)
    if opts.nfkc:
        text = unicodedata.normalize("NFKC", stream_safe(text))
    if opts.strip_residual_tags:
        text = strip_html_tags(text)
    if opts.remove_urls and ("://" in text or "www." in text.lower()):  # what every match holds
        text = _URL_RE.sub(" ", text)
    if opts.remove_emails:
        text = remove_emails(text)
    if opts.remove_symbols:
        text = _SYMBOL_CHARS_RE.sub(" ", _SYMBOL_RUN_RE.sub(" ", text))
    return normalize_whitespace(text), was_html
