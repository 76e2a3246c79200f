"""Text normalisation for the `clean` stage: HTML to text, mojibake, NFKC, control chars, regex removals.

Every step is a pure function on `str`; `Normalizer` chains the ones switched on in params.
"""
from __future__ import annotations

import re
import unicodedata
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
HTML_TAG_RE = re.compile(rf"</?(?:{_TAG_NAMES})(?:\s[^<>]{{0,2000}})?/?>|<!--.*?-->|<!doctype[^>]*>", re.I | re.S)
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
_EMAIL_RE = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
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
_SPACES_RE = re.compile(r"[ \t\u00a0\u3000]+")
_BLANK_LINES_RE = re.compile(r"\n{3,}")


def looks_like_html(text: str) -> bool:
    if _HTML_HINT_RE.search(text, 0, 4096):
        return True
    return len(HTML_TAG_RE.findall(text, 0, 20000)) >= 5


def html_to_text(html: str) -> str:
    """Visible main text of an HTML page, one block element per line."""
    tree = LexborHTMLParser(_BLOCK_TAG_RE.sub("\n<", html))
    tree.strip_tags(list(NON_CONTENT_TAGS))
    for node in tree.css(NON_CONTENT_SELECTOR):
        node.decompose()
    root = tree.body or tree.root
    return "" if root is None else (root.text(deep=True, separator="") or "")


def strip_control(text: str) -> str:
    text = _ANSI_RE.sub("", text)
    text = _OVERSTRIKE_RE.sub("", text)
    return _CONTROL_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def normalize_whitespace(text: str) -> str:
    lines = (_SPACES_RE.sub(" ", line).strip() for line in text.split("\n"))
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
        text = unicodedata.normalize("NFKC", text)
    if opts.strip_residual_tags:
        text = HTML_TAG_RE.sub(" ", text)
    if opts.remove_urls:
        text = _URL_RE.sub(" ", text)
    if opts.remove_emails:
        text = _EMAIL_RE.sub(" ", text)
    if opts.remove_symbols:
        text = _SYMBOL_CHARS_RE.sub(" ", _SYMBOL_RUN_RE.sub(" ", text))
    return normalize_whitespace(text), was_html
