"""The drop kinds: ads, and boilerplate (real licence text and .po translations, templated notices,
software messages, Chinese interface strings, website boilerplate)."""
from __future__ import annotations

import functools
from collections.abc import Callable

from stages.demo_corpus.base import BuilderBase
from stages.demo_corpus.tables import T
from stages.demo_corpus.text import _plural, to_traditional


class Boilerplate(BuilderBase):
    def _ad(self, loc: str) -> str:
        rng, f, zh = self.rng, self.fake[loc], loc != "en_US"
        values = dict(pct=rng.choice((20, 30, 50, 70, 90)), price=f"{rng.randint(9, 999)}.{rng.choice((99, 95))}",
                      phone=f.phone_number(), url=f.url(), email=f.email(), n=rng.randint(2, 50),
                      year=rng.randint(2015, 2024), product=rng.choice(T.PRODUCTS_ZH if zh else T.PRODUCTS_EN),
                      zhe=rng.randint(1, 9), cut=rng.choice((5, 10, 20, 50, 100)), short=rng.randint(10000, 99999),
                      wx=f"{f.user_name()}{rng.randint(10, 999)}")
        lines = rng.sample(T.AD_ZH if zh else T.AD_EN, rng.randint(3, 6))
        return rng.choice(("\n", " ")).join(line.format(**values) for line in lines)

    def _boilerplate(self, loc: str) -> str:
        mix = T.BOILER_MIX_EN if loc == "en_US" else T.BOILER_MIX_ZH
        source = self.rng.choices(list(mix), list(mix.values()))[0]
        if source == "licence" and self.licences:
            return self.licences.pop()
        if source in ("licence", "notice"):  # templated notices once the real licence text is used up
            return self.notice()
        make = {"po": self.po_doc, "messages": self.messages, "ui": self.ui_strings, "templates": self.site_boilerplate}
        return make[source](loc)

    def site_boilerplate(self, loc: str) -> str:
        """3-6 pieces of the website templates: cookie notices, copyright lines, menus, terms."""
        rng, zh = self.rng, loc != "en_US"
        menu = T.MENU_ZH if zh else T.MENU_EN
        values = dict(year=rng.randint(2005, 2024), company=self.fake[loc].company(),
                      num=rng.randint(10**7, 10**8 - 1), nav=" | ".join(rng.sample(menu, rng.randint(4, len(menu)))))
        pieces = rng.sample(T.BOILER_ZH if zh else T.BOILER_EN, rng.randint(3, 6))
        text = "\n".join(p.format(**values) for p in pieces)
        return to_traditional(text) if loc == "zh_TW" else text

    def notice(self) -> str:
        """2-3 copyright/licence notices from the templates (source headers, DEP-5 stanzas, credits)."""
        rng, f = self.rng, self.fake["en_US"]
        spdx, licname, _ = rng.choice(T.LICENCES)

        def years() -> str:
            start = rng.randint(1995, 2022)
            return str(start) if rng.random() < 0.4 else f"{start}-{rng.randint(start + 1, 2024)}"
        slots = {"years": years, "holder": lambda: f.company() if rng.random() < 0.5 else f.name(),
                 "licname": lambda: licname, "spdx": lambda: spdx, "url": f.url,
                 "project": lambda: f.word().capitalize() + rng.choice(("", "lib", "kit", "db", ".js", "py")),
                 "paths": lambda: " ".join(rng.sample(T.NOTICE_PATHS, rng.randint(1, 3))),
                 "thing": functools.partial(rng.choice, T.NOTICE_THINGS)}
        return "\n\n".join(self.fill(t, slots) for t in rng.sample(T.EN_NOTICES, rng.randint(2, 3)))

    def option_line(self, option: tuple[str, str, str, str, str], zh: bool) -> str:
        """One option of a --help text, e.g. "  -j, --jobs=N        run N jobs in parallel"."""
        rng = self.rng
        short, long, arg, en_help, zh_help = option
        if arg and rng.random() < 0.3:
            spec = f"-{short} {arg}, --{long} {arg}"
        else:
            spec = (f"    --{long}" if rng.random() < 0.15 else f"-{short}, --{long}") + (f"={arg}" if arg else "")
        head = rng.choice(("  ", "  ", "  ", " ", "")) + spec
        width = rng.choice((22, 24, 26, 30))
        text = zh_help if zh else en_help
        return f"{head:<{width}}{text}" if len(head) < width - 1 else f"{head}\n{' ' * width}{text}"

    def messages(self, loc: str) -> str:
        """Software messages from the templates: one program's --help text (3-13 lines), or 4-12 lines of a message
        catalog (errors with format specifiers, usage, option help, version and licence lines)."""
        rng, zh, f = self.rng, loc != "en_US", self.fake[loc]
        spdx, _, licurl = rng.choice(T.LICENCES)
        prog, zharg = rng.choice(T.CLI_PROGS), rng.choice(T.ZH_ARGS)
        arg, ARG = rng.choice(T.CLI_ARGS), rng.choice(T.CLI_METAVARS)
        holder = f.company if rng.random() < 0.5 else f.name
        obj = functools.partial(rng.choice, T.ZH_OBJECTS if zh else T.EN_OBJECTS)
        slots: dict[str, Callable[[], str]] = {
            "prog": lambda: prog, "obj": obj, "objs": lambda: _plural(obj()),
            "objverb": functools.partial(rng.choice, T.ZH_OBJECT_VERBS), "lopt": lambda: rng.choice(T.CLI_OPTIONS)[1],
            "flags": lambda: "".join(sorted(rng.sample("abcdfhilnqrsvx", rng.randint(2, 6)))),
            "zharg": lambda: zharg, "arg": lambda: arg, "ARG": lambda: ARG,
            "ver": lambda: f"{rng.randint(0, 9)}.{rng.randint(0, 40)}"
                           + (f".{rng.randint(0, 9)}" if rng.random() < 0.5 else ""),
            "year": lambda: str(rng.randint(1998, 2024)), "holder": holder, "lic": lambda: spdx,
            "licurl": lambda: licurl, "name": f.name, "email": f.email, "url": f.url}
        texts = dict(msg=T.ZH_MESSAGES, usage=T.ZH_USAGE, desc=T.ZH_DESCRIPTIONS, ver=T.ZH_VERSION_LINES) if zh else \
            dict(msg=T.EN_MESSAGES, usage=T.EN_USAGE, desc=T.EN_DESCRIPTIONS, ver=T.EN_VERSION_LINES)
        texts["opt"] = T.CLI_OPTIONS
        if rng.random() < 0.4:  # one program's --help: usage, description, option and version lines, in this order
            counts = dict(usage=rng.randint(1, 2), desc=rng.randint(0, 2), opt=rng.randint(2, 7),
                          ver=rng.choice((0, 0, 1, 2)))
            picks = [(kind, item) for kind, n in counts.items() for item in rng.sample(texts[kind], n)]
        else:  # lines of a message catalog, in any order
            kinds = rng.choices(list(T.CATALOG_LINES), list(T.CATALOG_LINES.values()), k=rng.randint(4, 12))
            picks = [(kind, rng.choice(texts[kind])) for kind in kinds]
        text = "\n".join(self.option_line(t, zh) if kind == "opt" else self.fill(t, slots) for kind, t in picks)
        return to_traditional(text) if loc == "zh_TW" else text

    def ui_strings(self, loc: str) -> str:
        """2-4 runs of interface strings: settings/property descriptions, package-manager and
        authentication messages, a shell builtin's help block, a --help exit-status block."""
        rng = self.rng
        slots = self.choosers(T.ZH_UI_SLOTS)
        slots["arg"] = functools.partial(rng.choice, T.ZH_ARGS + ("任务说明符",))
        runs = []
        for kind in rng.choices(list(T.ZH_UI_RUNS), list(T.ZH_UI_RUNS.values()), k=rng.randint(2, 4)):
            if kind == "settings":
                runs += [self.fill(t, slots) for t in rng.sample(T.ZH_SETTINGS, rng.randint(3, 8))]
            elif kind == "package":
                runs += rng.sample(T.ZH_PACKAGE_MESSAGES, rng.randint(3, 8))
            elif kind == "exit":
                runs += rng.choice(T.ZH_EXIT_STATUS)
            else:
                runs.append(self.builtin_help(slots))
        text = "\n".join(runs)
        return to_traditional(text) if loc == "zh_TW" else text

    def builtin_help(self, slots: dict[str, Callable[[], str]]) -> str:
        """A shell builtin's help: synopsis, summary, indented description, options, exit status."""
        rng = self.rng
        name, synopsis, summary = rng.choice(T.ZH_BUILTINS)
        lines = [f"{name}: {name} {synopsis}"] if rng.random() < 0.5 else []
        lines += [summary, "    "]
        lines += ["    " + self.fill(t, slots) for t in rng.sample(T.ZH_BUILTIN_LINES, rng.randint(1, 4))]
        if rng.random() < 0.6:
            flags = rng.sample("acdefklnprsuvxLP", rng.randint(2, 5))
            lines += ["    ", "    选项："] + [f"      -{flag}\t{self.fill(rng.choice(T.ZH_BUILTIN_OPTIONS), slots)}"
                                              for flag in flags]
        lines += ["    ", "    退出状态：", "    " + self.fill(rng.choice(T.ZH_BUILTIN_STATUS), slots)]
        return "\n".join(lines)

    def po_doc(self, loc: str) -> str:
        """4-12 translations from the Chinese .po catalogs that installed packages ship, one a line. The
        Traditional catalogs are small, so zh_TW takes 1-3 of theirs among templated messages."""
        rng, pool = self.rng, self.po[loc]
        lines = rng.sample(pool, min(len(pool), rng.randint(1, 3) if loc == "zh_TW" else rng.randint(4, 12)))
        if loc == "zh_TW":
            lines += self.messages(loc).split("\n")
            rng.shuffle(lines)
        return "\n".join(lines)
