"""Man pages, formatted as `man` prints them: English ones render a real function's docstring (an
API doc) as a command or a library function; Chinese ones come from templates (data/man_pages.yaml)."""
from __future__ import annotations

import functools

from stages.demo_corpus.base import BuilderBase
from stages.demo_corpus.docstrings import ApiDoc
from stages.demo_corpus.tables import T
from stages.demo_corpus.text import _man_title_line, _man_wrap, _metavar, _zh_wrap, to_traditional


# A man page as its generator makes it: its lines, reference ("LS(1)"), the title and the footer's left part and
# date (what `man` prints above and below the sections)
Page = tuple[list[str], str, str, str, str]


class ManPages(BuilderBase):
    def man_page(self, loc: str) -> str:
        """A formatted man page: English from an API doc (see `_man_en`), Chinese from templates; most
        between a header line (reference, title, reference) and a footer line (source, date, reference)."""
        lines, ref, title, source, date = self._man_en(self.api.pop()) if loc == "en_US" else self._man_zh(loc)
        text = "\n".join(lines).rstrip()
        if self.rng.random() < 0.8:
            text = f"{_man_title_line(ref, title, ref)}\n\n{text}\n\n{_man_title_line(source, date, ref)}"
        return to_traditional(text) if loc == "zh_TW" else text

    def _man_en(self, api: ApiDoc) -> Page:
        """The man page of a documented function: as a command (section 1; its parameters become
        --options) or, when its signature is known, sometimes as a library function (section 3; half of
        those as C: a LIBRARY line, #include and a C prototype)."""
        rng = self.rng
        parts = api.name.split(".")
        project, func = parts[0], parts[-1]
        library = api.signature is not None and rng.random() < 0.3
        c_style = library and rng.random() < 0.5  # a C library function: LIBRARY, #include, a C prototype
        if c_style:
            cmd, sec, title = func, rng.choice(("2", "3", "3")), T.MAN_TITLES_LIB[0]
        elif library:
            cmd, sec, title = api.name, rng.choice(("3", "3", "3py")), rng.choice(T.MAN_TITLES_LIB)
        else:
            cmd = func.replace("_", "-") if rng.random() < 0.6 else f"{project}-{func.replace('_', '-')}"
            sec, title = "1", rng.choice(T.MAN_TITLES_CLI)
        ref = f"{cmd if library else cmd.upper()}({sec})"
        summary = api.summary.rstrip(".")
        if summary[1:2].islower():
            summary = summary[0].lower() + summary[1:]
        out = ["NAME", _man_wrap(f"{cmd} - {summary}", 7), ""]
        if c_style:
            library_line = rng.choice(T.MAN_C_LIBRARIES).format(project=project, Project=project.capitalize())
            out += ["LIBRARY", _man_wrap(library_line, 7), ""]
        out.append("SYNOPSIS")
        options = []
        for name, typ, _ in api.params:
            flag = f"-{name}" if len(name) == 1 else f"--{name.replace('_', '-')}"
            options.append(f"{flag} {meta}" if (meta := _metavar(name, typ)) else flag)
        if c_style:
            args = ", ".join(f"{rng.choice(T.MAN_C_TYPES)} {a.split('=')[0].split(':')[0].strip().lstrip('*')}"
                             for a in api.signature or ())
            ret = rng.choice(T.MAN_C_TYPES)
            out += [f"       #include <{project}/{parts[-2]}.h>", "",
                    _man_wrap(f"{ret}{'' if ret.endswith('*') else ' '}{func}({args or 'void'});", 7, 8 + len(func))]
        elif library:
            cut = -2 if len(parts) >= 3 and parts[-2][:1].isupper() else -1  # a method is called on its class
            owner, call = ".".join(parts[:cut]), ".".join(parts[cut:])
            out += [f"       from {owner} import {parts[cut]}", "",
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
        version = f"{rng.randint(0, 3)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
        date = f"{rng.choice(T.MONTHS)} {rng.randint(2015, 2024)}"
        return out, ref, title.format(project=project.capitalize()), f"{project} {version}", date

    def _man_zh(self, loc: str) -> Page:
        """A Chinese man page from the templates: a program (English name) with its purpose, 3-8 options
        with full-sentence descriptions, description paragraphs and some of the optional sections."""
        rng, f = self.rng, self.fake[loc]
        prog, purpose, zharg, sec = rng.choice(T.ZH_MAN_PROGS)
        name_h, syn_h, desc_h, opt_h, ex_h, *optional_h = rng.choice(T.ZH_MAN_HEADINGS)
        options = rng.sample(T.ZH_MAN_OPTIONS, rng.randint(3, 8))
        long_opts = [f"--{o[1]}" for o in options]
        path = rng.choice(T.ZH_MAN_PATHS).format(prog=prog)
        env = rng.choice(T.ZH_MAN_ENV).format(PROG=prog.upper().replace("-", "_"))
        others = [f"{p}({s})" for p, _, _, s in T.ZH_MAN_PROGS if p != prog]  # for SEE ALSO
        option = functools.partial(rng.choice, long_opts)
        slots = self.choosers(T.ZH_MAN_SLOTS)
        slots.update(prog=lambda: prog, zharg=lambda: zharg, opt=option, opt2=option, path=lambda: path,
                     env=lambda: env, ver=lambda: f"{rng.randint(1, 4)}.{rng.randint(0, 20)}", name=f.name,
                     name_en=self.fake["en_US"].name,
                     see_also=lambda: ", ".join(rng.sample(others, rng.randint(1, 4))))
        out = [name_h, f"       {prog} - {purpose}", "", syn_h]
        if rng.random() < 0.5:
            out.append(f"       {prog} [选项]... [{zharg}]...")
        else:
            flags = "".join(o[0] for o in options if o[0] and not o[2])
            out.append(f"       {prog} " + (f"[-{flags}] " if flags else "") + f"{zharg}...")
        out += ["", desc_h]
        sentences = [rng.choice(T.ZH_MAN_FIRST_SENTENCES).format(prog=prog, purpose=purpose)]
        sentences += [self.fill(t, slots) for t in rng.sample(T.ZH_MAN_DESC, rng.randint(2, 5))]
        cut = rng.randint(1, len(sentences) - 1)
        out += [_zh_wrap("".join(sentences[:cut]), 7), "", _zh_wrap("".join(sentences[cut:]), 7), "", opt_h]
        for short, long, arg, desc in options:
            meta = (arg if rng.random() < 0.5 else T.ZH_OPTION_ARGS[arg]) if arg else ""
            spec = f"--{long}={meta}" if meta else f"--{long}"
            if short:
                spec = f"-{short} {meta}, {spec}" if meta and rng.random() >= 0.5 else f"-{short}, {spec}"
            text = self.fill(desc, slots)
            if rng.random() < 0.35:
                text += self.fill(rng.choice(T.ZH_MAN_OPTION_NOTES), slots)
            out += [f"       {spec}", _zh_wrap(text, 14), ""]
        if rng.random() < 0.6:
            out.append(ex_h)
            usable = [o for o in long_opts if o not in ("--help", "--version")] or [""]
            for i in range(rng.randint(1, 3)):
                out.append("       " + " ".join(w for w in (prog, rng.choice(usable), rng.choice(T.ZH_MAN_ARGS)) if w))
                how = self.fill(rng.choice(T.ZH_MAN_EXAMPLE_TEXTS["next" if i else "first"]), slots)
                out += [_zh_wrap(how, 14), ""]
        for heading, (share, item, texts) in zip(optional_h, T.ZH_MAN_OPTIONAL_SECTIONS):
            if rng.random() < share:
                lines = [f"       {self.fill(item, slots)}"] if item else []
                text = self.fill(rng.choice(getattr(T, texts.upper())), slots)
                out += [heading, *lines, _zh_wrap(text, 14 if item else 7), ""]
        source = f"{rng.choice(T.ZH_MAN_SOURCES).format(prog=prog)} {rng.randint(1, 9)}.{rng.randint(0, 40)}"
        date = rng.choice(T.ZH_MAN_DATES).format(year=rng.randint(2008, 2024), month=rng.randint(1, 12),
                                                 day=rng.randint(1, 28))
        return out, f"{prog.upper()}({sec})", rng.choice(T.ZH_MAN_TITLES[sec]), source, date
