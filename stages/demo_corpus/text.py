"""Small text helpers the generators share: English inflection, sentence splitting, Jaccard
similarity, Traditional Chinese, man-page layout (fill, header and footer lines, metavars) and the HTML
of Sphinx code blocks and API entries."""
from __future__ import annotations

import html
import re
import textwrap
from typing import TYPE_CHECKING

from stages.demo_corpus.tables import T

if TYPE_CHECKING:
    from stages.demo_corpus.docstrings import ApiDoc

S2T_CHARS = str.maketrans(T.S2T_SIMPLIFIED, T.S2T_TRADITIONAL)
S2T_SPLIT = re.compile("(" + "|".join(sorted(T.S2T_PHRASES, key=len, reverse=True)) + ")")
SENTENCE_END = re.compile(r"(?<=[.。!?])[ \t]*")
MAN_WIDTH = 78
ZH_NO_LINE_START = set("，。、；：？！）」』”’》")
# the tokens of a code block by their Pygments class (prompt, number, name, punctuation); whitespace has none
CODE_TOKEN = re.compile(r"(?P<gp>^(?:>>>|\.\.\.|\$) )|(?P<mi>\d+\b)|(?P<n>\w+)|(?P<p>[^\w\s])|\s+", re.M)


def to_traditional(text: str) -> str:
    """Taiwan-style Traditional Chinese for the templated text (see T.S2T_PHRASES, S2T_CHARS)."""
    parts = S2T_SPLIT.split(text)
    return "".join(T.S2T_PHRASES[p] if i % 2 else p.translate(S2T_CHARS) for i, p in enumerate(parts))


def _sentences(paragraph: str) -> list[str]:
    return [s for s in SENTENCE_END.split(paragraph) if s]


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun[:-1] + "ies" if noun.endswith("y") and noun[-2] not in "aeiou" else noun + "s"


_third_person = _plural  # the same spelling rules for the verbs listed


def _past(verb: str) -> str:
    if verb.endswith("e"):
        return verb + "d"
    return verb[:-1] + "ied" if verb.endswith("y") and verb[-2] not in "aeiou" else verb + "ed"


def jaccard(a: str, b: str, cjk: bool) -> float:
    """Jaccard similarity of word 3-grams (character 3-grams for zh/ja)."""
    toks = [[c for c in t if not c.isspace()] if cjk else t.split() for t in (a, b)]
    sa, sb = ({tuple(t[i:i + 3]) for i in range(max(1, len(t) - 2))} for t in toks)
    return len(sa & sb) / max(1, len(sa | sb))


def _man_wrap(text: str, indent: int, hanging: int | None = None) -> str:
    """Text filled to MAN_WIDTH columns at a man page's indentation (7 for sections, 14 for items)."""
    return textwrap.fill(text, MAN_WIDTH, initial_indent=" " * indent,
                         subsequent_indent=" " * (indent if hanging is None else hanging),
                         break_long_words=False, break_on_hyphens=False)


def _zh_wrap(text: str, indent: int, width: int = MAN_WIDTH) -> str:
    """Chinese text filled to `width` columns (a CJK character takes two), ASCII words kept whole."""
    lines, cur, cols = [], "", indent
    for tok in re.findall(r"[\x21-\x7e]+|\s+|.", text):
        w = sum(1 if ord(c) < 0x1100 else 2 for c in tok)
        if cols + w > width and cur.strip() and tok not in ZH_NO_LINE_START:
            lines.append(cur.rstrip())
            cur, cols = "", indent
            if tok.isspace():
                continue
        cur += tok
        cols += w
    lines.append(cur.rstrip())
    return "\n".join(" " * indent + line.lstrip() for line in lines if line.strip())


def _man_title_line(left: str, centre: str, right: str) -> str:
    """The header or footer line of a formatted man page: left, centred title, right."""
    width = sum(1 if ord(c) < 0x1100 else 2 for c in centre)
    gap = max(2, MAN_WIDTH - len(left) - len(right) - width)
    return f"{left}{' ' * (gap // 2)}{centre}{' ' * (gap - gap // 2)}{right}"


def _metavar(name: str, typ: str) -> str:
    """The argument of a --option from a documented parameter type ("" for a flag)."""
    t = typ.lower()
    if "bool" in t:
        return ""
    if t.startswith("{"):
        choices = re.findall(r"[\w-]+", t.split("}")[0])[:4]
        return "{" + ",".join(choices) + "}" if choices else "VALUE"
    for words, meta in T.MAN_METAVARS.items():
        if any(re.match(rf"{w}\b", t) or f" {w}" in t for w in words.split()):
            return meta
    return name.upper().replace("_", "-")[:12] or "VALUE"


def _slug(text: str, i: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug if slug and text.isascii() else f"id{i}"


def _code_html(code: str, lang: str) -> str:
    """A highlighted code block as Sphinx writes it (Pygments spans inside <pre>)."""
    spans = (f'<span class="{m.lastgroup}">{html.escape(m[0])}</span>' if m.lastgroup else m[0]
             for m in CODE_TOKEN.finditer(code))
    return T.CODE_BLOCK.substitute(lang=lang, code="".join(spans))


def _api_html(api: ApiDoc, labels: dict[str, str]) -> str:
    """An API entry of a Sphinx page (autodoc): signature with its "¶" link, description, field list."""
    esc = html.escape
    owner, func = api.name.rsplit(".", 1)
    params = api.signature or tuple(n for n, _, _ in api.params)
    sig = ", ".join(T.API_SIG_PARAM.substitute(param=esc(p)) for p in params)
    items = "".join(T.API_PARAM.substitute(name=esc(n), type=f" (<em>{esc(t)}</em>)" if t else "", text=esc(d))
                    for n, t, d in api.params)
    refs = ", ".join(T.API_REF.substitute(ref=esc(r)) for r in api.see_also)
    example = f'\n<p class="rubric">{labels["examples"]}</p>\n{_code_html(api.example, "default")}'
    return T.API_ENTRY.substitute(
        labels, kind="method" if owner.rsplit(".", 1)[-1][:1].isupper() else "function", name=esc(api.name),
        owner=esc(owner), func=esc(func), sig=sig, summary=esc(api.summary), params=items,
        description="".join(f"<p>{esc(d)}</p>\n" for d in api.description),
        returns_field=T.API_RETURNS.substitute(labels, text=esc(api.returns)) if api.returns else "",
        see_also=T.API_SEE_ALSO.substitute(labels, refs=refs) if api.see_also else "",
        example=example if api.example else "")
