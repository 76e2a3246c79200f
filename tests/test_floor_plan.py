"""The floor plan of `stages`, read from the source: every import of a `stages.*` module, at the top of a file
or inside a function, keeps the rules the packages state.

- a module of `stages/common/<package>/` imports its own package and the ones its `__init__`'s `IMPORTS` names
  (`"lm.tiers"`: that module only);
- a stage (`stages/<name>.py`, or the package `stages/<name>/`) imports `stages.common` and itself, never
  another stage: only `stages/check.py` loads the stages, by name, to check params.yaml with their own code;
- nothing under `stages/common/` imports a module by a name computed at run time (`importlib`, `__import__`),
  but for the executor, which re-imports the function it was handed from the module `python -m` ran.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKER = "stages/check.py"
# (file, function): the dynamic imports allowed below stages/, each with its reason in the module
DYNAMIC_IMPORT_ALLOWED = {("stages/common/runtime/executor.py", "_importable")}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of each `stages.*` import in `path`; `from a import b` gives `a.b`, which
    is a module or a name in `a` (both are held to the rules of `a`'s package)."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return [(line, name) for line, name in found if name == "stages" or name.startswith("stages.")]


def package_rules(root: Path) -> dict[str, tuple[str, ...]]:
    """Each package of stages/common and its `IMPORTS`, read from its `__init__` without importing it."""
    rules = {}
    for init in sorted((root / "stages" / "common").glob("*/__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        values = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "IMPORTS" for t in n.targets)]
        rules[init.parent.name] = values[0] if values else None
    return rules


def _within(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def dynamic_imports(path: Path) -> list[tuple[int, str]]:
    """(line, enclosing function) of each `importlib.import_module(...)`, `import_module(...)`, `__import__(...)`
    or `importlib.util.spec_from_file_location(...)` call in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if isinstance(child, ast.Call):
                f = child.func
                called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if called in ("import_module", "__import__", "spec_from_file_location"):
                    found.append((child.lineno, function))
            visit(child, function)
    visit(tree, "<module>")
    return found


def violations(root: Path) -> list[str]:
    """Every import under `<root>/stages` that breaks the floor plan, one line each."""
    rules = package_rules(root)
    problems = [f"stages/common/{p}/__init__.py: no IMPORTS" for p, r in rules.items() if r is None]
    for path in sorted((root / "stages").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        parts = path.relative_to(root / "stages").parts
        if parts[0] == "common" and len(parts) > 2:
            package = parts[1]
            allowed = [f"stages.common.{package}", *(f"stages.common.{m}" for m in rules.get(package) or ())]
            # `from stages.common.lm import tiers` reads as stages.common.lm.tiers; the package itself
            # (`stages.common.lm`) runs its __init__, which imports nothing
            ok = lambda name: any(_within(name, m) for m in allowed) or name in (  # noqa: E731
                "stages", "stages.common", *(m.rsplit(".", 1)[0] for m in allowed if m.count(".") > 2))
            for line, kind in dynamic_imports(path):
                if (rel, kind) not in DYNAMIC_IMPORT_ALLOWED:
                    problems.append(f"{rel}:{line}: imports a module by a computed name (in {kind})")
        elif parts[0] == "common":
            ok = lambda name: name in ("stages", "stages.common")  # noqa: E731 (stages/common/__init__.py)
        else:
            stage = f"stages.{Path(parts[0]).stem}" if parts[0] != "__init__.py" else "stages"
            ok = lambda name, stage=stage: (_within(name, "stages.common") or _within(name, stage)  # noqa: E731
                                            or name == "stages")
        for line, name in imported_names(path, root):
            if not ok(name):
                problems.append(f"{rel}:{line}: imports {name}")
    return problems


def test_every_import_keeps_the_floor_plan():
    assert violations(ROOT) == []


def test_only_the_checker_loads_stages_by_name():
    assert [rel for rel in map(lambda p: p.relative_to(ROOT).as_posix(), sorted((ROOT / "stages").rglob("*.py")))
            if not rel.startswith(("stages/common/", "stages/demo_corpus/")) and dynamic_imports(ROOT / rel)] \
        == [CHECKER]


@pytest.mark.parametrize("source, expected", [
    ("from stages.common.lm.model import Transformer\n", "imports stages.common.lm.model"),  # a floor up
    ("def f():\n    from stages.common.training import trainer\n", "imports stages.common.training.trainer"),
    ("from stages.clean import Params\n", "imports stages.clean"),  # the top floor
    ("import importlib\nmod = importlib.import_module('stages.clean')\n", "by a computed name (in <module>)"),
    ("from stages.common.lm.tiers import TIERS\nfrom ..runtime.params import param\n", None),  # allowed
])
def test_a_broken_rule_is_reported(tmp_path, source, expected):
    """The check itself can fail: a copy of the tree with one module of `report` changed."""
    for init in (ROOT / "stages" / "common").glob("*/__init__.py"):
        target = tmp_path / init.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(init.read_text())
    (tmp_path / "stages" / "__init__.py").write_text("")
    (tmp_path / "stages" / "common" / "__init__.py").write_text("")
    (tmp_path / "stages" / "common" / "report" / "probe.py").write_text(source)
    found = violations(tmp_path)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith("stages/common/report/probe.py:") and expected in found[0]
