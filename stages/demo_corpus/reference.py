"""Reference sections of a manual: a numbered heading, a sentence or two, and a table of packages,
commands, functions or options with one-line descriptions (the summaries of `api_docs`), drawn as an
ASCII grid (long descriptions wrapped onto continuation rows), a Markdown table or aligned columns.
Tables are text that pipes, digits and short lines fill, as menus and ads are too: the keep class needs them."""
from __future__ import annotations

import textwrap

from stages.demo_corpus.base import BuilderBase
from stages.demo_corpus.tables import T

DESCRIPTION_WIDTH = 38


class Reference(BuilderBase):
    def reference_section(self, loc: str) -> str:
        rng = self.rng
        things = rng.choice(T.REFERENCE_THINGS)
        number = ".".join(str(rng.randint(1, 12)) for _ in range(rng.choice((2, 3, 3))))
        columns = rng.choice(T.REFERENCE_COLUMNS)
        rows = [columns] + [self._reference_row(columns) for _ in range(rng.randint(4, 10))]
        style = rng.random()
        table = self._grid(rows) if style < 0.45 else self._markdown(rows) if style < 0.7 else self._columns(rows)
        caption = rng.choice(T.REFERENCE_CAPTIONS).format(num=f"{number.split('.')[0]}.{rng.randint(1, 30)}",
                                                        things=things, Things=things.capitalize())
        parts = [f"{number}. {things.capitalize()}", " ".join(self.en_sentence() for _ in range(rng.randint(1, 2))),
                 caption, table]
        if rng.random() < 0.5:
            parts.append(self.paragraph(loc))
        return "\n\n".join(parts)

    def _reference_row(self, columns: tuple[str, ...]) -> tuple[str, ...]:
        rng = self.rng
        api = rng.choice(self.api_all)
        project, func = api.name.split(".")[0], api.name.split(".")[-1]
        name = {"function": f"{func}()", "option": f"--{func.replace('_', '-')}"}.get(
            columns[0], func.replace("_", "-"))
        middle = {"popcon": lambda: f"V:{rng.randint(0, 900)}, I:{rng.randint(1, 999)}",
                  "size": lambda: str(rng.randint(8, 40000)),
                  "version": lambda: f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
                  "package": lambda: project, "header": lambda: f"<{project}.h>",
                  "default": lambda: rng.choice(("0", "1", "none", "auto", "true", "false", "-")),
                  "since": lambda: f"{rng.randint(1, 4)}.{rng.randint(0, 12)}"}
        return (name, *(middle[c]() for c in columns[1:-1]), api.summary.rstrip("."))

    @staticmethod
    def _grid(rows: list[tuple[str, ...]]) -> str:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)] + [DESCRIPTION_WIDTH]
        rule = "+" + "+".join("-" * w for w in widths) + "+"
        out = [rule]
        for row in rows:
            wrapped = textwrap.wrap(row[-1], DESCRIPTION_WIDTH) or [""]
            for k, piece in enumerate(wrapped):
                cells = [c if k == 0 else "" for c in row[:-1]] + [piece]
                out.append("|" + "|".join(c.ljust(w) for c, w in zip(cells, widths)) + "|")
            out.append(rule)
        return "\n".join(out)

    @staticmethod
    def _markdown(rows: list[tuple[str, ...]]) -> str:
        lines = ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join([lines[0], "|" + "|".join("---" for _ in rows[0]) + "|", *lines[1:]])

    @staticmethod
    def _columns(rows: list[tuple[str, ...]]) -> str:
        widths = [max(len(r[i]) for r in rows) + 2 for i in range(len(rows[0]) - 1)]
        return "\n".join("".join(c.ljust(w) for c, w in zip(r, widths)) + r[-1] for r in rows)
