"""Drift guard for `pip install .`: pyproject.toml declares every package, data file and runtime dependency
the code uses, in step with requirements.in (requirements.lock pins the resolved set)."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_ROOTS = ("stages", "flows")


def name(requirement: str) -> str:
    """The canonical distribution name of a requirement line (`Foo_Bar>=1 # note` -> `foo-bar`)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s<>=!~\[;#]", requirement.strip(), maxsplit=1)[0]).lower()


def requirements_in() -> set[str]:
    lines = (ROOT / "requirements.in").read_text().splitlines()
    return {name(line) for line in lines if line.strip() and not line.lstrip().startswith("#")}


def declared() -> set[str]:
    return {name(r) for r in PYPROJECT["project"]["dependencies"]}


def test_dependencies_are_those_of_requirements_in():
    test_extra = {name(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert declared() | test_extra == requirements_in()
    assert not declared() & test_extra
    assert "torch==2.13.0" in PYPROJECT["project"]["dependencies"]  # the CPU wheel; unpinned pulls CUDA


def third_party_imports() -> dict[str, str]:
    """{top-level module: a file importing it} over the installed packages' code."""
    found: dict[str, str] = {}
    for package in PACKAGE_ROOTS:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                else:
                    continue
                for module in (n.split(".")[0] for n in names):
                    if module not in sys.stdlib_module_names and module not in PACKAGE_ROOTS + ("__future__",):
                        found.setdefault(module, str(path.relative_to(ROOT)))
    return found


def test_every_imported_library_is_a_declared_dependency():
    distributions = importlib.metadata.packages_distributions()
    missing = {module: where for module, where in third_party_imports().items()
               if not {name(d) for d in distributions.get(module, [])} & declared()}
    assert not missing, f"imported but not in pyproject.toml's dependencies: {missing}"


def matches(path: Path, pattern: str) -> bool:
    """setuptools' package-data glob: `*` stays within one folder."""
    return len(path.parts) == len(Path(pattern).parts) and path.match(pattern)


def test_every_package_and_data_file_is_installed():
    config = PYPROJECT["tool"]["setuptools"]
    packages = set(find_packages(str(ROOT), include=config["packages"]["find"]["include"]))
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for root in PACKAGE_ROOTS
               for p in (ROOT / root).rglob("__init__.py")}
    assert packages == on_disk
    data = config["package-data"]
    for root in PACKAGE_ROOTS:
        for path in (ROOT / root).rglob("*"):
            if path.is_dir() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            assert any(matches(path.relative_to(ROOT / pkg.replace(".", "/")), pattern)
                       for pkg in data if path.is_relative_to(ROOT / pkg.replace(".", "/")) for pattern in data[pkg]), \
                f"{path.relative_to(ROOT)} is not package data"


def test_the_command_entry_point_exists():
    module, function = PYPROJECT["project"]["scripts"]["refinery"].split(":")
    assert (module, function) == ("flows.cli", "main")
    assert "def main(" in (ROOT / "flows" / "cli.py").read_text()
