import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.common.text.normalize import (
    NormalizeOptions,
    html_to_text,
    looks_like_html,
    normalize,
    normalize_whitespace,
    strip_control,
)

PAGE = """<!DOCTYPE html><html><head><title>T</title><style>p {color: red}</style>
<script>var tracking = "secret";</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<main><h1>Heading</h1><p>First paragraph with <b>bold</b> text &amp; an entity.</p><p>Second&nbsp;one.</p>
<ul><li>item one</li><li>item two</li></ul></main>
<footer>Copyright 2024. All rights reserved.</footer></body></html>"""

ALL_OFF = NormalizeOptions(html=False, fix_mojibake=False, nfkc=False, strip_control=False, remove_urls=False,
                           remove_emails=False, remove_symbols=False, strip_residual_tags=False)


def test_html_page_becomes_visible_main_text():
    text = normalize_whitespace(html_to_text(PAGE))
    assert "First paragraph with bold text & an entity." in text
    assert "Second one." in text
    assert "item one\nitem two" in text
    for hidden in ("tracking", "color: red", "Home", "All rights reserved", "<"):
        assert hidden not in text


def test_div_navigation_marked_by_role_or_class_is_dropped():
    page = ('<html><body><div class="related" role="navigation"><a href="i">index</a> | <a href="n">next</a></div>'
            '<div class="sphinxsidebar">Table of Contents</div><div class="body"><h1>lzma</h1>'
            '<p>This module provides classes for compressing data.</p></div>'
            '<div class="footer">&copy; Copyright 2001-2023.</div></body></html>')
    assert normalize_whitespace(html_to_text(page)) == "lzma\nThis module provides classes for compressing data."


def test_html_detection_ignores_man_page_placeholders():
    assert looks_like_html(PAGE)
    assert not looks_like_html("SYNOPSIS\n#include <stdio.h>\ncp <source> <dest>\nint main(void);")


def test_residual_tags_stripped_but_placeholders_kept():
    text, was_html = normalize("Use &lt;div&gt; like <div class='x'>this</div> with <file> and <stdio.h>.",
                               NormalizeOptions())
    assert not was_html
    assert "<div" not in text and "</div>" not in text
    assert "<file>" in text and "<stdio.h>" in text


def test_control_characters_ansi_and_overstrike():
    raw = "\x1b[32m《江雪》\x1b[m\r\nN\bNA\bAM\bME\bE\x00 and _\bu_\bn_\bd\x07\u200b"
    assert strip_control(raw) == "《江雪》\nNAME and und"


def test_mojibake_and_nfkc():
    broken = "café déjà vu".encode("utf-8").decode("latin-1")
    assert normalize(broken, NormalizeOptions())[0] == "café déjà vu"
    assert normalize("ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３", NormalizeOptions())[0] == "fullwidth ABC123"


@pytest.mark.parametrize("field, raw, gone", [
    ("remove_urls", "see https://example.com/a?b=c now", "https://"),
    ("remove_emails", "write to jane.doe@example.org today", "@"),
    ("remove_symbols", "great ★★★★★ deal >>>>>> here", "★"),
])
def test_regex_removals_are_switchable(field, raw, gone):
    assert gone not in normalize(raw, NormalizeOptions())[0]
    kept = normalize(raw, NormalizeOptions(**{**ALL_OFF.__dict__, field: False}))[0]
    assert gone in kept


def test_whitespace_collapses_but_paragraphs_survive():
    assert normalize_whitespace("  a \t b  \n\n\n\n c\u3000d ") == "a b\n\nc d"


# The shortcuts (a step skipped when the text lacks what every match needs) against the steps they skip.
def reference_normalize(text: str) -> str:
    """`normalize` with the default options, every step applied unconditionally, whitespace line by line."""
    from stages.common.text import normalize as N
    if N.looks_like_html(text):
        text = N.html_to_text(text)
    text = N._ANSI_RE.sub("", text)
    text = N._OVERSTRIKE_RE.sub("", text)
    text = N._CONTROL_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    if N._MOJIBAKE_HINT_RE.search(text):
        text = N.ftfy.fix_encoding(text)
    text = unicodedata.normalize("NFKC", N._nonstarter_run_re().sub(lambda m: m.group() + N._CGJ, text))
    text = N._URL_RE.sub(" ", N.strip_html_tags(text))
    text = N._SYMBOL_CHARS_RE.sub(" ", N._SYMBOL_RUN_RE.sub(" ", N.remove_emails(text)))
    lines = (re.sub(r"[ \t\u00a0\u3000]+", " ", line).strip() for line in text.split("\n"))
    return N._BLANK_LINES_RE.sub("\n\n", "\n".join(lines)).strip()


NOISY = st.lists(st.sampled_from(["a", "Word", " ", "  ", "\t", "\u3000", "\u00a0", "\n", "\r\n", "\x1b[1m", "\x1b[m",
                                   "N\bN", "_\bx", "\x00", "\u200b", "https://x.y/z", "WWW.a.b", "wWw.c", "ftp://q",
                                   "://", "mail@x.org", "★★★★", "-----", "中文", "\u0301", "\u0316" * 31,
                                   "\U0001d165" * 31, "\U000e0100", "é", "Ã©", "<b>", "&lt;p&gt;"]),
                 max_size=40).map("".join) | st.text(max_size=60)


@settings(max_examples=400, deadline=None)
@given(NOISY)
def test_shortcuts_give_what_the_full_steps_give(text):
    assert normalize(text, NormalizeOptions())[0] == reference_normalize(text)


def test_shortcuts_give_what_the_full_steps_give_on_real_documents(devset_texts):
    for text in devset_texts:
        assert normalize(text, NormalizeOptions())[0] == reference_normalize(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<div>", "</div>", "<p>", "<br/>", "<li>", "<ul ", ">", "<", "</", "x", "<!--", "-->",
                                 "<!doctype html>", "<B>", "<span class='a'>", "</span>"]), max_size=60).map("".join))
def test_the_nesting_bound_the_parser_guard_uses_holds(html):
    """html_to_text parses without measuring the nesting when the page has at most MAX_HTML_DEPTH `<` not
    followed by `/`: every opening tag starts at one of them, so the depth cannot be larger."""
    from stages.common.text.normalize import html_depth
    assert html_depth(html) <= html.count("<") - html.count("</")
