"""Build the bundled demo corpus: raw JSONL shards that the `clean` stage runs on.

Deterministic from `seed` (one `random.Random`; Faker instances seeded from it; gzip mtime=0), no
downloads, in a given environment: the real prose below depends on the Python version and on the
package versions that requirements.lock pins. Shares of `num_docs` (every record written, malformed
ones included):

* kinds: html 6% (article inside a full HTML page), ad 5% and boilerplate 5% (en/zh: cookie
  notices, copyright lines, menus, terms, licences), short 3% (< 30 chars), long 0.5% (50-150 KB),
  noisy 3% (control chars, ANSI colour codes, latin-1 mojibake, symbol runs, URLs, e-mails),
  article the rest (~70%). Text is Faker lorem per locale, except English: ~70% of the English
  article/html/noisy bodies are real prose that ships with Python and the pinned packages (the prose
  of stdlib and third-party docstrings and of the `pydoc_data` help topics, ~3.9 MB, see
  `harvest`), packed into articles of 400-4000 chars, each used once and spread evenly over those
  kinds; the rest of the English text (long docs included) comes from sentence templates full of
  function words ("The {adj} {noun} of the {noun} ..."), so it reads as English, if meaningless,
  and passes the Gopher stop-word rule as real English does.
* languages (all kinds but ad/boilerplate): en 33%, zh 28% (zh_CN 21%, zh_TW 7%), de/fr/es/ru 6%
  each, ja/it/pl 5% each; ad/boilerplate are en 55% / zh 45%. Overall about en 35%, zh 30%.
* duplicates: 3% exact (same text, new id and url) and 3% near (a word/char replaced or swapped,
  a sentence appended or dropped, sometimes a whitespace change; Jaccard on word 3-grams, char
  3-grams for zh/ja, >= 0.8). Each comes after its original in the stream.
* malformed, ~1%: bad_json, bad_utf8, not_object, missing_text, non_string_text, empty, binary
  (max(2, 0.14%) each) and 1-3 oversized (> 2 MB text) records.
* 10% of well-formed records carry no `id`; originals of duplicates always have one.

Records are shuffled, duplicates slotted in after their originals, and the stream is split
contiguously into `num_shards` files: stream order is part-00000 line 1 ... last shard's last line.
The labels file has one line per record in that order; `lang` is null for malformed records and
`id` is the id written in the line (null when there is none).
"""
from __future__ import annotations

import argparse
import functools
import gzip
import html
import importlib
import inspect
import json
import logging
import random
import re
import string
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash
from datasketch import MinHash, MinHashLSH
from faker import Faker
from pydoc_data.topics import topics as PYDOC_TOPICS

from stages.common.atomic import atomic_dir, atomic_path
from stages.common.params import load_section

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Params:
    seed: int = 1234
    num_docs: int = 24000
    num_shards: int = 8
    out_dir: str = "data/raw/demo"
    labels_path: str = "data/raw/demo_labels.jsonl"


# locale -> (label language, weight, tld)
LOCALES: dict[str, tuple[str, float, str]] = {
    "en_US": ("en", 0.33, "com"), "zh_CN": ("zh", 0.21, "cn"), "zh_TW": ("zh", 0.07, "tw"),
    "de_DE": ("de", 0.06, "de"), "fr_FR": ("fr", 0.06, "fr"), "es_ES": ("es", 0.06, "es"),
    "ru_RU": ("ru", 0.06, "ru"), "ja_JP": ("ja", 0.05, "jp"), "it_IT": ("it", 0.05, "it"),
    "pl_PL": ("pl", 0.05, "pl"),
}
CJK = {"zh", "ja"}
KIND_SHARE = {"html": 0.06, "ad": 0.05, "boilerplate": 0.05, "short": 0.03, "long": 0.005, "noisy": 0.03}
DUP_SHARE = {"exact": 0.03, "near": 0.03}
MALFORMED = ("bad_json", "bad_utf8", "not_object", "missing_text", "non_string_text", "empty", "binary",
             "oversized")
NO_ID_SHARE = 0.10
REAL_KINDS = ("article", "html", "noisy")  # English bodies drawn from the pool of real prose
# Modules whose docstrings make the pool of real English prose. The corpus depends on their exact
# text, so the list is fixed and sorted, and third-party modules are ones pinned by requirements.lock
# that import quickly and silently. One that fails to import is skipped (and the corpus changes).
STDLIB_MODULES = tuple(sorted("""abc argparse array ast asyncio base64 bdb binascii bisect builtins
    bz2 calendar cmd code codecs collections colorsys concurrent.futures configparser contextlib
    contextvars copy copyreg cProfile csv ctypes dataclasses datetime decimal difflib dis doctest email
    email.message email.policy enum filecmp fileinput fnmatch fractions ftplib functools gc getopt
    gettext glob graphlib gzip hashlib heapq hmac html html.parser http.client http.cookiejar
    http.cookies http.server imaplib importlib importlib.metadata importlib.resources inspect io
    ipaddress itertools json keyword linecache locale logging logging.config logging.handlers lzma
    mailbox math mimetypes multiprocessing netrc numbers operator optparse os pathlib pdb pickle
    pickletools pkgutil platform plistlib poplib pprint profile pstats pydoc queue quopri random re
    reprlib sched secrets selectors shelve shlex shutil signal smtplib socket socketserver sqlite3 ssl
    stat statistics string struct subprocess symtable sys sysconfig tarfile tempfile textwrap threading
    time timeit token tokenize tomllib trace traceback tracemalloc types typing unicodedata unittest
    unittest.mock urllib.parse urllib.request urllib.robotparser uuid warnings wave weakref
    wsgiref.simple_server xml.dom.minidom xml.etree.ElementTree xml.sax zipfile zipimport zlib
    zoneinfo""".split()))
PACKAGE_MODULES = tuple(sorted("""alembic.op anyio attr celery click datasketch dateutil.parser
    dateutil.relativedelta dateutil.rrule dateutil.tz diskcache dulwich.porcelain dulwich.repo
    dvc.api fsspec ftfy ftfy.fixes griffe httpx humanize hypothesis hypothesis.extra.numpy
    hypothesis.strategies jinja2 jsonpatch jsonschema kombu markdown markdown_it mpmath networkx
    networkx.algorithms.approximation networkx.algorithms.bipartite networkx.algorithms.community
    networkx.algorithms.connectivity networkx.algorithms.flow networkx.algorithms.isomorphism
    networkx.utils numpy numpy.fft numpy.linalg numpy.ma numpy.polynomial.polynomial numpy.random
    numpy.strings numpy.testing packaging.specifiers packaging.version pandas pandas.api.extensions
    pandas.api.types pandas.api.typing pandas.arrays pandas.errors pandas.io.formats.style
    pandas.plotting pandas.tseries.offsets pyarrow pyarrow.compute pyarrow.csv pyarrow.dataset
    pyarrow.fs pyarrow.parquet pydantic pydantic.fields pygments pygments.formatters.html pygtrie
    pyparsing pytest redis redis.commands.core requests requests.adapters requests.sessions
    rich.console rich.progress rich.table rich.text scipy.cluster.hierarchy scipy.differentiate
    scipy.fft scipy.integrate scipy.interpolate scipy.io scipy.linalg scipy.ndimage scipy.odr
    scipy.optimize scipy.signal scipy.signal.windows scipy.sparse scipy.sparse.csgraph
    scipy.sparse.linalg scipy.spatial scipy.spatial.distance scipy.spatial.transform scipy.special
    scipy.stats scipy.stats.contingency scipy.stats.qmc sortedcontainers sqlalchemy
    sqlalchemy.engine sqlalchemy.ext.asyncio sqlalchemy.ext.hybrid sqlalchemy.orm sqlalchemy.types
    sympy sympy.combinatorics sympy.crypto sympy.diffgeom sympy.geometry sympy.logic sympy.matrices
    sympy.ntheory sympy.physics.mechanics sympy.physics.quantum sympy.physics.vector sympy.polys
    sympy.printing sympy.sets sympy.solvers sympy.stats sympy.tensor sympy.vector tabulate tomlkit
    tqdm urllib3 websockets whenever zstandard""".split()))
MIN_DOCSTRING = 300  # characters; shorter docstrings are mostly one-liners
MIN_PIECE = 100  # characters of prose kept from one docstring
MIN_NEW_TRIGRAMS = 0.1  # share of a paragraph's word 3-grams not seen before, or it is left out
ARTICLE_CHARS = (400, 4000)  # real articles: short pieces joined, long ones cut between paragraphs
ARTICLE_TARGET = 900  # an article is closed once it reaches randint(400, ARTICLE_TARGET) chars

AD_EN = ("Buy now! {pct}% off {product}!!!", "Only ${price} - limited time offer! Call {phone} today!",
         "Click here >>> {url} <<< FREE shipping on all orders!!!", "Hurry! Only {n} left in stock! Order at {url}",
         "Best {product} deals of {year}! Save up to {pct}% at {url}", "Text DEAL to {short} to get your coupon!",
         "Sign up and get {pct}% off your first order! Questions? {email}",
         "100% satisfaction guaranteed or your money back!!!")
AD_ZH = ("限时特价，点击购买！{product}仅需¥{price}！", "全场{zhe}折起，包邮到家！！！",
         "咨询热线：{phone}，官网：{url}", "新品上市，前{n}名下单立减{cut}元！", "扫码关注公众号，领取{cut}元优惠券！",
         "正品保证，假一赔十！立即抢购 >>> {url}", "加微信{wx}，获取更多优惠！", "{year}年度爆款{product}，库存仅剩{n}件！")
PRODUCTS_EN = ("wireless headphones", "smart watches", "air fryers", "running shoes", "VPN plans", "hair serum")
PRODUCTS_ZH = ("蓝牙耳机", "智能手表", "空气炸锅", "运动鞋", "补水面膜", "保健品", "扫地机器人")
MENU_EN = ("Home", "About", "Contact", "Blog", "News", "Careers", "Privacy Policy", "Terms of Use", "Sitemap")
MENU_ZH = ("首页", "关于我们", "联系我们", "新闻中心", "招聘信息", "隐私政策", "网站地图", "帮助中心")
BOILER_EN = (
    "This website uses cookies to ensure you get the best experience on our website. By continuing to "
    "browse, you agree to our use of cookies. Accept | Decline | Learn more",
    "© {year} {company}. All rights reserved.", "{nav}", "Skip to main content", "Back to top",
    "By accessing or using this website you agree to be bound by these Terms of Use. If you do not agree "
    "with any part of these terms, you must not use this website. {company} may revise these terms at any time.",
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and "
    "associated documentation files (the \"Software\"), to deal in the Software without restriction.",
    "THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.",
    "Share this article: Facebook | Twitter | LinkedIn | Email", "Subscribe to our newsletter. Unsubscribe anytime.")
BOILER_ZH = (
    "本网站使用Cookie以提升您的浏览体验。继续浏览即表示您同意我们使用Cookie。接受 | 拒绝",
    "版权所有 © {year} {company} 保留所有权利", "{nav}", "京ICP备{num}号-1", "返回顶部",
    "未经授权，禁止转载、摘编、复制或建立镜像。如有侵权，请联系我们删除。",
    "用户协议：使用本网站即表示您同意遵守本协议的全部条款。{company}保留随时修改本协议的权利。",
    "免责声明：本站部分内容来源于网络，仅供参考，不代表本站观点。", "分享到：微信 | 微博 | QQ空间")
# English fallback once the real prose runs out: sentences from templates with function words, so that
# the text reads like (meaningless) English rather than word salad. No template has a fixed run of 5
# words, so long documents do not repeat word 5-grams.
EN_TEMPLATES = (
    "The {adj} {noun} of the {noun} {past} the {noun} last {month}.",
    "{name} said that the {noun} would {verb} the {adj} {noun} by {month}.",
    "In {year}, the {noun} of {city} {past} a {adj} {noun} with {num} {nouns}.",
    "Most {nouns} in the {noun} have {past} to {verb} their {nouns}.",
    "It is {adv} {adj} to {verb} a {noun} that {verbs} {adj} {nouns}.",
    "According to {name}, the {noun} {verbs} {adv} with the {noun} and the {noun}.",
    "{org} {past} {num} {nouns} to the {noun} in {month}.",
    "There are {num} {adj} {nouns} in {city}, and each of them {verbs} a {noun}.",
    "The {noun} will be {past} at the {noun} on {weekday}.",
    "As a result, the {nouns} of the {noun} {adv} {verb} the {noun}.",
    "Residents of {city} were asked to {verb} the {noun} before the {noun} of the {noun}.",
    "This {noun} has {past} more than {num} {nouns} since {year}.",
    "For {nouns} who {verb} a {adj} {noun}, the {noun} {verbs} {adv}.",
    "{name} and {name} {past} the {noun} with a {adj} {noun}.",
    "When the {noun} {past} its {noun}, the {nouns} {adv} {past} the {adj} {noun}.",
    "The {noun} is part of a {adj} {noun} to {verb} {nouns} across the {noun}.",
    "However, not all {nouns} {verb} the {noun} of the {noun}.",
    "{org}, which {verbs} {nouns} in {city}, {past} the {noun} in {year}.",
    "Many {nouns} think that the {noun} should {verb} the {noun} of {adj} {nouns}.",
    "The {noun} and the {noun} have to be {past} before the {adj} {noun} can {verb}.",
    "\"We want to {verb} the {noun} and {verb} the {nouns},\" said {name}, who {verbs} the {noun}.",
    "Last {weekday}, the {noun} {past} that it would {verb} {num} new {nouns}.",
    "The {adj} {nouns} are {adv} {past} with the help of the {noun}.",
    "Some of the {nouns} that were {past} in {year} are still in the {noun} of {city}.",
)
EN_NOUNS = tuple("""account area article board book budget building business card center change class club
    community company council country course decision department design director district doctor
    economy event experience family farm field film friend future game garden government group guide
    hospital hotel house idea industry issue job journal kitchen lake language law leader letter
    library market meeting member method minute model museum network newspaper office officer option
    order owner paper parent park partner party patient period picture plan plant player point policy
    price problem process product program project property question radio rate record region report
    resource restaurant result river road room rule school season service shop site station story
    street student study supply system table teacher team test theater town trade training tree unit
    university value version village visitor volunteer website week window worker writer""".split())
EN_VERBS = tuple("""accept add allow announce approve ask attend change check collect complete consider create
    deliver describe design develop discuss expect explain extend finish follow help improve include
    increase introduce join launch manage mention move need open organize prepare present produce
    protect provide publish receive record reduce release remove repair replace report request require
    review share start support test train update use visit want watch welcome""".split())
EN_ADJECTIVES = tuple("""annual available basic central common current different early economic final financial
    full general good great important independent large local main major modern national natural new
    next old open original other personal popular possible private public real recent regional simple
    small social special strong successful traditional various young""".split())
EN_ADVERBS = tuple("""already also carefully clearly currently easily finally generally largely mostly often
    quickly recently regularly simply slowly still usually widely""".split())
# Not Faker's month_name()/day_of_week(): they draw a date up to *now*, so they change with the clock.
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
EN_SLOT = re.compile(r"\{(\w+)\}")
SYMBOL_RUNS = ("★★★★★", ">>>>>>", "!!!!!!!!", "=====", "~~~~~~~~", "#####", "******", "........", "<<<>>>")
CONTROL = ("\x00", "\x07", "\x08", "\x0b", "\x0c", "\x0e", "\x1b", "\x7f", "\u200b", "\ufeff")
BAD_BYTES = (b"\xff\xfe", b"\xc3\x28", b"\xe4\xb8", b"\x80\x81", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80")
SENTENCE = re.compile(r"[^.。!?\n]+[.。!?]+ ?")
SENTENCE_END = re.compile(r"(?<=[.。!?])[ \t]*")
# Docstring markup (numpy/Google/reST): section headers, references, literals, citations.
DOC_SECTION = re.compile(r"(?:\*\*)?(Parameters|Params|Arguments|Args|Other Parameters|Keyword Arguments|Returns?|"
                         r"Yields?|Raises|Warns|Attributes|Methods|Examples?|Usage|See [Aa]lso|References|"
                         r"Notes?|Explanation|Warnings?)(?:\*\*)?:{0,2}")
PROSE_SECTIONS = {None, "Notes", "Note", "Explanation", "Warning", "Warnings"}
ITEM_SECTIONS = {"Parameters", "Params", "Arguments", "Args", "Other Parameters", "Keyword Arguments", "Returns",
                 "Return", "Yields", "Yield", "Raises", "Attributes"}  # keep the items' descriptions
UNDERLINE = re.compile(r"[-=~^*#+]{3,}")
GOOGLE_ITEM = re.compile(r"\s+\*{0,2}[\w.]+(?:\s*\([^)]*\))?:\s+(\S.*)")
DOC_ROLE = re.compile(r":[\w.:-]+:`(~?)\.?([^`<]*?)\s*(?:<[^>]*>)?`")
DOC_LITERAL = re.compile(r"``([^`]+)``|(?<![\w`])`([^`<]+?)\s*(?:<[^>]*>)?`_{0,2}(?![\w`])")
DOC_CITATION = re.compile(r"\s*\[[\w#-]+\]_")
NON_WORD = re.compile(r"[\W_]+")
PROSE_END = re.compile(r"[.!?][)\"'”]?$")
PAGE = string.Template("""<!DOCTYPE html>
<html lang="$lang">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title &#8212; $site</title>
<style>
body { font-family: Georgia, serif; margin: 0 auto; max-width: 48em; }
nav a { margin-right: 1em; color: #336; } .cookie { position: fixed; bottom: 0; }
</style>
<script>
window.dataLayer = window.dataLayer || [];
function gtag(){dataLayer.push(arguments);} gtag('js', new Date()); gtag('config', 'UA-$ua-1');
</script></head>
<body>
<nav class="menu"><ul>$nav</ul></nav>
<header><a href="/" class="logo">$site</a></header>
<main><article>
<h1>$title</h1>
<p class="byline">By $author&nbsp;&#8212;&nbsp;$date</p>
$body
</article></main>
<footer><p>&copy; $year $site &amp; partners. All rights reserved.</p>
<p class="cookie">We use cookies to improve your experience. <a href="/privacy">Privacy&nbsp;policy</a></p></footer>
<script src="/static/app.js?v=$ua" defer></script>
</body></html>
""")


@dataclass
class Doc:
    kind: str
    locale: str | None
    text: str
    id: str | None  # as written in the line; None when omitted
    url: str = ""
    raw: bytes | None = None  # malformed records: the exact line
    malformed: str | None = None
    dup_of: str | None = None
    dup_type: str | None = None

    def line(self) -> bytes:
        if self.raw is not None:
            return self.raw
        rec = {"id": self.id} if self.id else {}
        rec.update(text=self.text, source="demo", url=self.url)
        return _dumps(rec).encode("utf-8")

    def label(self, shard: str, line: int) -> dict[str, Any]:
        lang = LOCALES[self.locale][0] if self.locale and not self.malformed else None
        return {"shard": shard, "line": line, "id": self.id, "lang": lang, "kind": self.kind,
                "malformed": self.malformed, "dup_of": self.dup_of, "dup_type": self.dup_type}


def _dumps(obj: Any) -> str:
    s = json.dumps(obj, ensure_ascii=False)
    # Escape what str.splitlines() also breaks on, so line numbers hold for any reader.
    for ch in ("\x85", "\u2028", "\u2029"):
        s = s.replace(ch, f"\\u{ord(ch):04x}")
    return s


def _doc_objects(mod: Any) -> Iterator[Any]:
    """The module, its public classes and functions (sorted by name) and the public methods of those
    classes that its own package defines."""
    yield mod
    package = mod.__name__.split(".")[0]
    for name in sorted(dir(mod)):
        if name.startswith("_"):
            continue
        obj = getattr(mod, name, None)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        yield obj
        if inspect.isclass(obj) and str(getattr(obj, "__module__", "")).split(".")[0] == package:
            for attr in sorted(vars(obj)):
                if not attr.startswith("_") and inspect.isroutine(member := getattr(obj, attr, None)):
                    yield member


def _unmark(text: str) -> str:
    """Plain text from reST markup: roles, literals, citations."""
    text = DOC_ROLE.sub(lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], text)
    return DOC_CITATION.sub("", DOC_LITERAL.sub(lambda m: m[1] or m[2], text))


def _prose(doc: str) -> str:
    """The prose of a docstring, one line per paragraph: the summary, description and notes, plus the
    descriptions of parameters, return values and the like. Code, examples, math, reST directives,
    references and headings are dropped."""
    out: list[str] = []
    section: str | None = None
    in_code = google = False
    for block in re.split(r"\n[ \t]*\n", doc):
        lines = block.rstrip().split("\n")
        if len(lines) > 1 and UNDERLINE.fullmatch(lines[1].strip()):  # numpy-style heading (or a title)
            head = DOC_SECTION.fullmatch(lines[0].strip())
            section, lines, google = head[1] if head else None, lines[2:], False
        elif head := DOC_SECTION.fullmatch(lines[0].strip()):  # Google-style "Args:", "See also:", "**Notes**"
            section, lines, google = head[1], lines[1:], True
        elif google and not lines[0][:1].isspace():  # which ends at the next paragraph that is not indented
            section, google = None, False
        if not lines or not lines[0].strip() or UNDERLINE.fullmatch(lines[0].strip()):
            continue
        indented = lines[0][:1].isspace()
        if indented and in_code:
            continue
        in_code = lines[-1].rstrip().endswith("::") or lines[0].lstrip().startswith("..")
        if in_code or ">>>" in block:
            continue
        if section in ITEM_SECTIONS:  # "name : type" + indented description, or Google "name (type): text"
            items: list[list[str]] = []
            for line in lines:
                if item := GOOGLE_ITEM.fullmatch(line):
                    items.append([item[1]])
                elif not line[:1].isspace():
                    items.append([])
                elif items and not line.lstrip().startswith(".."):
                    items[-1].append(line.strip())
            texts = (_unmark(" ".join(item)) for item in items)
            paragraph = " ".join(t for t in texts if len(t) >= 30 and t[0].isupper() and PROSE_END.search(t)
                                 and "\\" not in t)
        elif section in PROSE_SECTIONS and not indented and not any(
                line.lstrip().startswith(("..", ":")) or UNDERLINE.fullmatch(line.strip()) for line in lines):
            paragraph = _unmark(re.sub(r"\s*\n\s*(?!(?:[-*•]|\d+\.) )", " ", "\n".join(lines).strip()))
            if len(paragraph) < 40 or not PROSE_END.search(paragraph) or "\\" in paragraph:  # \\ : LaTeX
                continue
        else:
            continue
        if paragraph:
            out.append(paragraph)
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


def _pack(groups: Iterable[list[str]], rng: random.Random) -> list[str]:
    """Cut each group's pieces into articles of 400-4000 chars: short pieces are joined, long ones cut
    between paragraphs; a leftover under 400 chars is dropped."""
    lo, hi = ARTICLE_CHARS
    articles = []
    for group in groups:
        cur: list[str] = []
        size, target = 0, rng.randint(lo, ARTICLE_TARGET)
        for para in (p for piece in group for p in _split_long(piece.split("\n\n"), hi // 2)):
            if cur and size + len(para) > hi:
                if size >= lo:
                    articles.append("\n\n".join(cur))
                cur, size, target = [], 0, rng.randint(lo, ARTICLE_TARGET)
            cur.append(para)
            size += len(para) + 2
            if size >= target:
                articles.append("\n\n".join(cur))
                cur, size, target = [], 0, rng.randint(lo, ARTICLE_TARGET)
        if size >= lo:
            articles.append("\n\n".join(cur))
    return articles


def _module_docs(name: str) -> list[str]:
    """The docstrings of a module and its public members; none if it fails to import (then the corpus
    differs from the one built where it imports, so list only modules pinned and importable)."""
    try:
        return [inspect.getdoc(obj) or "" for obj in _doc_objects(importlib.import_module(name))]
    except Exception as exc:  # noqa: BLE001 - whatever goes wrong, the module is just not a source
        log.debug("demo corpus: skipping module %s: %r", name, exc)
        return []


def _words(text: str) -> list[str]:
    return NON_WORD.sub(" ", text.casefold()).split()


def _drop_near_duplicates(articles: list[str]) -> list[str]:
    """Keep the first of articles sharing many word 3-grams (templated docstrings, overlapping help
    topics), which the `clean` stage would drop as near duplicates although the labels say unique."""
    template = MinHash(num_perm=64, seed=1)
    lsh = MinHashLSH(threshold=0.5, num_perm=64)
    kept = []
    for text in articles:
        words = _words(text)
        m = MinHash(num_perm=64, seed=1, hashfunc=xxhash.xxh32_intdigest,
                    permutations=template.permutations, scheme=template.scheme)
        m.update_batch([" ".join(words[i:i + 3]).encode() for i in range(max(1, len(words) - 2))])
        if not lsh.query(m):
            lsh.insert(len(kept), m, check_duplication=False)
            kept.append(text)
    return kept


def _trigrams(text: str) -> set[str]:
    words = _words(text)
    return {" ".join(words[i:i + 3]) for i in range(max(1, len(words) - 2))}


@functools.cache
def harvest() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(source, prose pieces) for each stdlib module, third-party module and pydoc help topic, in that
    order: the prose of each docstring of >= MIN_DOCSTRING chars, without the paragraphs that are
    (nearly) all word 3-grams seen before (boilerplate, templated docs). Cached: it takes a few seconds."""
    seen: set[str] = set()  # word 3-grams of the paragraphs kept so far

    def new_pieces(texts: Iterable[str]) -> tuple[str, ...]:
        pieces = []
        for text in dict.fromkeys(texts):
            paras = [(p, grams) for p in text.split("\n\n")
                     if len((grams := _trigrams(p)) - seen) > len(grams) * MIN_NEW_TRIGRAMS]
            if sum(len(p) for p, _ in paras) >= MIN_PIECE:
                pieces.append("\n\n".join(p for p, _ in paras))
                seen.update(*(grams for _, grams in paras))
        return tuple(pieces)

    sources = []
    with warnings.catch_warnings():  # deprecated names warn when touched
        warnings.simplefilter("ignore")
        for name in STDLIB_MODULES + PACKAGE_MODULES:
            docs = (d for d in dict.fromkeys(_module_docs(name))
                    if len(d) >= MIN_DOCSTRING and "this platform" not in d)  # numpy: per-platform aliases
            sources.append((name, new_pieces(map(_prose, docs))))
    for key in sorted(PYDOC_TOPICS):
        sources.append((f"pydoc_data.topics:{key}", new_pieces([_prose(PYDOC_TOPICS[key])])))
    return tuple(sources)


def real_articles(rng: random.Random) -> list[str]:
    """English prose that ships with Python and the pinned packages (see `harvest`), packed into
    articles of 400-4000 chars without near duplicates, shuffled."""
    articles = _drop_near_duplicates(_pack((list(pieces) for _, pieces in harvest()), rng))
    rng.shuffle(articles)
    return articles


def _sentences(paragraph: str) -> list[str]:
    return [s for s in SENTENCE_END.split(paragraph) if s]


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun[:-1] + "ies" if noun.endswith("y") and noun[-2] not in "aeiou" else noun + "s"


def _third_person(verb: str) -> str:
    return _plural(verb)  # same spelling rules for the verbs listed


def _past(verb: str) -> str:
    if verb.endswith("e"):
        return verb + "d"
    return verb[:-1] + "ied" if verb.endswith("y") and verb[-2] not in "aeiou" else verb + "ed"


def jaccard(a: str, b: str, cjk: bool) -> float:
    """Jaccard similarity of word 3-grams (character 3-grams for zh/ja)."""
    toks = [[c for c in t if not c.isspace()] if cjk else t.split() for t in (a, b)]
    sa, sb = ({tuple(t[i:i + 3]) for i in range(max(1, len(t) - 2))} for t in toks)
    return len(sa & sb) / max(1, len(sa | sb))


class Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fake: dict[str, Faker] = {}
        for loc in LOCALES:
            self.fake[loc] = Faker(loc)
            self.fake[loc].seed_instance(self.rng.getrandbits(32))
        self.real = real_articles(self.rng)
        self.real_share = 1.0  # of English article/html/noisy bodies; set by build() to spread the pool
        self.seen: set[str] = set()
        self.id_numbers: list[int] = []

    def new_id(self, optional: bool = True) -> str | None:
        number = self.id_numbers.pop()  # shuffled, so an id says nothing about kind or position
        return f"demo-{number:06d}" if not optional or self.rng.random() >= NO_ID_SHARE else None

    def url(self, loc: str) -> str:
        section = self.rng.choice(("news", "blog", "article", "post", "docs", "p"))
        return f"https://example.{LOCALES[loc][2]}/{section}/{self.rng.randrange(10**7):07d}.html"

    def sentence(self, loc: str, nb_words: int = 8) -> str:
        s = self.fake[loc].sentence(nb_words=nb_words)
        return s.replace(".", "。") if loc.startswith("zh") else s

    def en_sentence(self) -> str:
        rng, f = self.rng, self.fake["en_US"]
        fill = {"noun": lambda: rng.choice(EN_NOUNS), "nouns": lambda: _plural(rng.choice(EN_NOUNS)),
                "verb": lambda: rng.choice(EN_VERBS), "verbs": lambda: _third_person(rng.choice(EN_VERBS)),
                "past": lambda: _past(rng.choice(EN_VERBS)), "adj": lambda: rng.choice(EN_ADJECTIVES),
                "adv": lambda: rng.choice(EN_ADVERBS), "name": f.name, "city": f.city, "org": f.company,
                "month": lambda: rng.choice(MONTHS), "weekday": lambda: rng.choice(WEEKDAYS),
                "year": lambda: str(rng.randint(1990, 2024)),
                "num": lambda: str(rng.choice((2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 40, 50, 100, 200)))}
        s = EN_SLOT.sub(lambda m: fill[m[1]](), rng.choice(EN_TEMPLATES))
        s = re.sub(r"\b([Aa]) (?=[aeiou])", r"\1n ", s)
        return s[0].upper() + s[1:]

    def paragraph(self, loc: str) -> str:
        if loc == "en_US":
            return " ".join(self.en_sentence() for _ in range(self.rng.randint(3, 7)))
        n = self.rng.randint(4, 8) * (2 if LOCALES[loc][0] in CJK else 1)  # CJK lorem sentences are short
        p = self.fake[loc].paragraph(nb_sentences=n)
        return p.replace(".", "。") if loc.startswith("zh") else p

    def paragraphs(self, loc: str) -> list[str]:
        if loc == "en_US" and self.real and self.rng.random() < self.real_share:
            return self.real.pop().split("\n\n")
        return [self.paragraph(loc) for _ in range(self.rng.randint(2, 8))]

    def _article(self, loc: str) -> str:
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

    def _ad(self, loc: str) -> str:
        rng, f, zh = self.rng, self.fake[loc], loc != "en_US"
        values = dict(pct=rng.choice((20, 30, 50, 70, 90)), price=f"{rng.randint(9, 999)}.{rng.choice((99, 95))}",
                      phone=f.phone_number(), url=f.url(), email=f.email(), n=rng.randint(2, 50),
                      year=rng.randint(2015, 2024), product=rng.choice(PRODUCTS_ZH if zh else PRODUCTS_EN),
                      zhe=rng.randint(1, 9), cut=rng.choice((5, 10, 20, 50, 100)), short=rng.randint(10000, 99999),
                      wx=f"{f.user_name()}{rng.randint(10, 999)}")
        lines = rng.sample(AD_ZH if zh else AD_EN, rng.randint(3, 6))
        return rng.choice(("\n", " ")).join(line.format(**values) for line in lines)

    def _boilerplate(self, loc: str) -> str:
        rng, zh = self.rng, loc != "en_US"
        menu = MENU_ZH if zh else MENU_EN
        values = dict(year=rng.randint(2005, 2024), company=self.fake[loc].company(),
                      num=rng.randint(10**7, 10**8 - 1), nav=" | ".join(rng.sample(menu, rng.randint(4, len(menu)))))
        pieces = rng.sample(BOILER_ZH if zh else BOILER_EN, rng.randint(3, 6))
        return "\n".join(p.format(**values) for p in pieces)

    def _html(self, loc: str) -> str:
        rng, f, esc = self.rng, self.fake[loc], html.escape
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
        menu = MENU_ZH if loc.startswith("zh") else MENU_EN
        nav = "".join(f'<li><a href="/{i}">{m}</a></li>' for i, m in enumerate(rng.sample(menu, 5)))
        date = f"{rng.randint(2005, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return PAGE.substitute(lang=LOCALES[loc][0], title=esc(self.sentence(loc, 5).rstrip(".。")),
                               site=f"example.{LOCALES[loc][2]}", ua=rng.randrange(10**6, 10**7), nav=nav,
                               author=esc(f.name()), year=rng.randint(2005, 2024), date=date, body="\n".join(body))

    def _noise(self, loc: str, s: str) -> str:
        rng, r = self.rng, self.rng.random()
        if r < 0.15:  # curly quotes so that ASCII sentences show mojibake too
            return f"“{s}”".encode("utf-8").decode("latin-1")
        if r < 0.3:
            return f"\x1b[{rng.choice((31, 32, 33, 36))}m{s}\x1b[0m"
        if r < 0.45:
            for _ in range(rng.randint(1, 3)):
                k = rng.randrange(len(s) + 1)
                s = s[:k] + rng.choice(CONTROL) + s[k:]
            return s
        if r < 0.55:
            return f"{s} {rng.choice(SYMBOL_RUNS)}"
        return f"{s} {self.fake[loc].url()} {self.fake[loc].email()}" if r < 0.65 else s

    def _noisy(self, loc: str) -> str:
        sep = "" if LOCALES[loc][0] in CJK else " "
        paras = (sep.join(self._noise(loc, s) for s in _sentences(p)) for p in self.paragraphs(loc))
        return "\n\n".join(paras)

    def content(self, kind: str) -> Doc:
        if kind in ("ad", "boilerplate"):
            loc = "en_US" if self.rng.random() < 0.55 else "zh_CN"
        else:
            loc = self.rng.choices(list(LOCALES), [w for _, w, _ in LOCALES.values()])[0]
        for _ in range(100):  # keep the text unique so that every duplicate is a labelled one
            text = getattr(self, f"_{kind}")(loc)
            if text not in self.seen:
                break
        else:
            raise RuntimeError(f"could not make a unique {kind} doc")
        self.seen.add(text)
        return Doc(kind, loc, text, self.new_id(), self.url(loc))

    def malformed(self, kind: str) -> Doc:
        rng = self.rng
        loc = rng.choice(list(LOCALES))
        doc_id = self.new_id(optional=False)
        text = self.paragraph(loc)
        rec: dict[str, Any] = {"id": doc_id, "text": text, "source": "demo", "url": self.url(loc)}
        raw = None
        if kind == "bad_json":
            s = _dumps(rec)
            raw = s[:rng.randint(30, len(s) - 2)].encode()
        elif kind == "bad_utf8":  # right after the opening quote, so it never completes a valid sequence
            b = _dumps(rec).encode()
            i = b.index(b'"text": "') + 9
            raw = b[:i] + rng.choice(BAD_BYTES) + b[i:]
        elif kind == "not_object":
            raw, doc_id = _dumps(rng.choice(([rec], [text, text], 42, 3.5, text, None, True))).encode(), None
        elif kind == "missing_text":
            body = rec.pop("text")
            if rng.random() < 0.5:
                rec["body"] = body
        elif kind == "non_string_text":
            rec["text"] = rng.choice((12345, 3.5, [text], None, {"value": text}, True))
        elif kind == "empty":
            rec["text"] = rng.choice(("", " ", "\n\n", "\t \r\n ", "\u3000\u00a0 "))
        elif kind == "binary":
            junk = bytearray(rng.randbytes(rng.randint(200, 3000)))
            step = rng.randint(2, 5)
            junk[::step] = bytes(len(range(0, len(junk), step)))  # a NUL every few bytes
            rec["text"] = junk.decode("latin-1")
        else:  # oversized
            block = "\n\n".join(self.paragraph(loc) for _ in range(20))
            rec["text"] = "\n\n".join([block] * (2_000_000 // len(block.encode()) + 2))
        return Doc("malformed", None, "", doc_id, raw=raw or _dumps(rec).encode(), malformed=kind)

    def _edit(self, loc: str, text: str, op: str, cjk: bool) -> str:
        sents = list(SENTENCE.finditer(text))
        if op == "drop" and len(sents) >= 4:
            a, b = sents[self.rng.randrange(1, len(sents))].span()
            return text[:a] + text[b:]
        spans = ([(i, i + 1) for i, c in enumerate(text) if c.isalpha()] if cjk
                 else [m.span() for m in re.finditer(r"\w+", text)])
        if op in ("append", "drop") or len(spans) < 2:
            return text + ("" if cjk else " ") + (self.en_sentence() if loc == "en_US" else self.sentence(loc))
        i = self.rng.randrange(len(spans) - 1)
        (a, b), (c, d) = spans[i], spans[i + 1]
        if op == "swap":
            return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        return text[:a] + self.fake[loc].word() + text[b:]

    def near_text(self, loc: str, text: str) -> str | None:
        cjk = LOCALES[loc][0] in CJK
        for _ in range(10):
            edited = text
            for op in self.rng.sample(("replace", "swap", "append", "drop"), self.rng.randint(1, 2)):
                edited = self._edit(loc, edited, op, cjk)
            if self.rng.random() < 0.3:
                edited = self.rng.choice((edited.replace("\n\n", "\n\n\n", 1), " " + edited, edited + "\n",
                                          edited.replace(" ", "  ", 1)))
            if edited != text and edited not in self.seen and jaccard(text, edited, cjk) >= 0.8:
                self.seen.add(edited)
                return edited
        return None

    def duplicates(self, base: list[Doc], n_exact: int, n_near: int) -> list[tuple[int, Doc]]:
        """(index of the original in `base`, duplicate) pairs; originals are well-formed and have an id."""
        rng = self.rng
        def dup(i: int, text: str, dup_type: str) -> tuple[int, Doc]:
            o = base[i]
            return i, Doc(o.kind, o.locale, text, self.new_id(), self.url(o.locale), dup_of=o.id, dup_type=dup_type)

        eligible = [i for i, d in enumerate(base) if d.malformed is None and d.id]
        dups = [dup(i, base[i].text, "exact") for i in rng.sample(eligible, n_exact)]
        near_pool = [i for i in eligible if base[i].kind in ("article", "long") and len(base[i].text) >= 300]
        for i in rng.sample(near_pool, len(near_pool)):
            if len(dups) == n_exact + n_near:
                break
            if (text := self.near_text(base[i].locale, base[i].text)) is not None:
                dups.append(dup(i, text, "near"))
        return dups

    def build(self, num_docs: int) -> list[Doc]:
        """All records, in stream order."""
        n_dup = {t: round(s * num_docs) for t, s in DUP_SHARE.items()}
        n_bad = {t: max(2, round(num_docs * 0.01 / 7)) for t in MALFORMED}
        n_bad["oversized"] = min(3, max(1, num_docs // 8000))
        n_kind = {k: max(1, round(s * num_docs)) for k, s in KIND_SHARE.items()}
        n_kind["article"] = num_docs - sum(n_dup.values()) - sum(n_bad.values()) - sum(n_kind.values())
        if n_kind["article"] < num_docs // 2:
            raise ValueError(f"num_docs={num_docs} is too small for the mix")
        self.id_numbers = self.rng.sample(range(num_docs), num_docs)
        english = sum(n_kind[k] for k in REAL_KINDS) * LOCALES["en_US"][1]
        self.real_share = min(1.0, len(self.real) / english)
        base = [self.content(k) for k, n in n_kind.items() for _ in range(n)]
        base += [self.malformed(t) for t, n in n_bad.items() for _ in range(n)]
        self.rng.shuffle(base)
        dups = self.duplicates(base, n_dup["exact"], n_dup["near"])
        keyed = [(float(i), d) for i, d in enumerate(base)]
        keyed += [(self.rng.uniform(i + 0.5, len(base)), d) for i, d in dups]
        keyed.sort(key=lambda kd: kd[0])  # stable, so ties keep a deterministic order
        return [d for _, d in keyed]


def write(docs: list[Doc], params: Params) -> tuple[int, int]:
    """Write the shards and the labels atomically; return (uncompressed, compressed) shard bytes."""
    n, k = len(docs), params.num_shards
    labels: list[dict[str, Any]] = []
    raw_size = gz_size = 0
    with atomic_dir(params.out_dir) as tmp:
        for s in range(k):
            name = f"part-{s:05d}.jsonl.gz"
            chunk = docs[s * n // k:(s + 1) * n // k]
            payload = b"".join(d.line() + b"\n" for d in chunk)
            with open(tmp / name, "wb") as fh, gzip.GzipFile("", "wb", 6, fh, mtime=0) as gz:
                gz.write(payload)
            raw_size += len(payload)
            gz_size += (tmp / name).stat().st_size
            labels.extend(d.label(name, i + 1) for i, d in enumerate(chunk))
    with atomic_path(params.labels_path) as tmp_labels:
        tmp_labels.write_text("".join(json.dumps(lab, ensure_ascii=False) + "\n" for lab in labels),
                              encoding="utf-8")
    return raw_size, gz_size


def run(params: Params) -> dict[str, int | float]:
    if params.num_shards < 1:
        raise ValueError("num_shards must be >= 1")
    log.info("building %d demo records (seed %d)", params.num_docs, params.seed)
    docs = Builder(params.seed).build(params.num_docs)
    raw_size, gz_size = write(docs, params)
    counts: Counter[str] = Counter(records=len(docs), no_id=sum(d.id is None for d in docs))
    for d in docs:
        lab = d.label("", 0)
        counts.update(f"{key}.{lab[key] or 'none'}" for key in ("kind", "lang", "dup_type", "malformed"))
    metrics: dict[str, int | float] = dict(sorted(counts.items()))
    metrics.update(bytes_uncompressed=raw_size, bytes_compressed=gz_size)
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Build the bundled demo corpus.")
    parser.add_argument("--params", default="params.yaml", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    metrics = run(load_section("demo_corpus", Params, args.params))
    log.info("demo corpus metrics: %s", json.dumps(metrics))


if __name__ == "__main__":
    main()
