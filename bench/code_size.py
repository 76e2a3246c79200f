"""How much code each part of `stages/` is: lines of code per package (and per module of the demo corpus
generator), and the length of every stage's `run()`.

    python -m bench.code_size

A line of code is a line that holds a token other than a comment: blank lines, comments and docstrings (the
first statement of a module, class or function, when it is a string) do not count. A `run()` is measured
from its `def` to its last line. Writes bench/results/code_size.{json,md}; reads the source only.
"""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path
from typing import Any

from bench import _provenance

ROOT = Path(__file__).resolve().parents[1]
STAGES = ROOT / "stages"
MEASURES = ("stages",)
SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def code_lines(source: str) -> int:
    """Lines holding a token that is not a comment, docstrings left out."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in SKIP:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docstrings)
    return len(lines)


def run_length(source: str) -> int | None:
    """Lines of the module's top-level `run` function, `def` to last line; None if it has none."""
    return next((node.end_lineno - node.lineno + 1 for node in ast.parse(source).body
                 if isinstance(node, ast.FunctionDef) and node.name == "run"), None)


def measure() -> dict[str, Any]:
    files = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in sorted(STAGES.rglob("*.py"))}
    packages: dict[str, int] = {}
    for path, source in files.items():
        parts = path.split("/")
        # stages/<stage>.py, stages/demo_corpus/..., stages/common/<package>/...
        package = "/".join(parts[:3]) if parts[1] == "common" and len(parts) > 3 else "/".join(parts[:2])
        packages[package] = packages.get(package, 0) + code_lines(source)
    demo = {path: code_lines(source) for path, source in files.items() if path.startswith("stages/demo_corpus/")}
    runs = {path: n for path, source in files.items()
            if path.count("/") == 1 or path.endswith("/stage.py")
            if (n := run_length(source)) is not None}
    return {"packages": dict(sorted(packages.items(), key=lambda kv: -kv[1])),
            "demo_corpus_modules": dict(sorted(demo.items(), key=lambda kv: -kv[1])),
            "demo_corpus_total": sum(demo.values()),
            "run_lines": dict(sorted(runs.items(), key=lambda kv: -kv[1]))}


def markdown(r: dict[str, Any]) -> list[str]:
    lines = ["# Code size of stages/", "", *_provenance.header(r),
             "Lines of code: lines holding a token that is not a comment; docstrings, comments and blank lines "
             "left out.", "", "| package | lines of code |", "| --- | ---: |"]
    lines += [f"| `{name}` | {n:,} |" for name, n in r["packages"].items() if n]  # not the empty __init__ files
    lines += ["", f"## The demo corpus generator: **{r['demo_corpus_total']:,}** lines of code", "",
              "| module | lines of code |", "| --- | ---: |"]
    lines += [f"| `{name}` | {n:,} |" for name, n in r["demo_corpus_modules"].items()]
    lines += ["", "## Each stage's `run()`, `def` to last line", "", "| module | lines |", "| --- | ---: |"]
    lines += [f"| `{name}` | {n} |" for name, n in r["run_lines"].items()]
    return lines


def main() -> None:
    results = {**_provenance.stamp("code_size", MEASURES), **measure()}
    _provenance.write(results, markdown)
    print("\n".join(markdown(results)))


if __name__ == "__main__":
    main()
