"""bench/ never imports tests/: what both need (the tiny chain config, the WARC files) lives in bench/, and tests
import it as `bench.<name>`."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports_of_tests(tree: ast.Module) -> list[str]:
    """`import tests...` and `from tests... import` anywhere in the module, function bodies included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "tests"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "tests":
            found.append(f"{node.lineno}: from {node.module} import ...")
    return found


@pytest.mark.parametrize("source, expected", [
    ("import tests.fixtures.warc", ["1: import tests.fixtures.warc"]),
    ("import os, tests", ["1: import tests"]),
    ("def f():\n    from tests.flows.x import TINY", ["2: from tests.flows.x import ..."]),
    ("from tests import conftest", ["1: from tests import ..."]),
    ("from bench._tiny import TINY\nimport testsuite\nfrom .tests import x", []),
])
def test_the_check_finds_imports_of_tests_at_any_depth(source, expected):
    assert imports_of_tests(ast.parse(source)) == expected


def test_bench_never_imports_tests():
    scripts = sorted((ROOT / "bench").glob("*.py"))
    assert scripts
    offenders = {str(p.relative_to(ROOT)): found for p in scripts
                 if (found := imports_of_tests(ast.parse(p.read_text(encoding="utf-8"))))}
    assert not offenders, f"bench/ imports tests/ (move what it needs into a bench/_*.py module): {offenders}"


def test_a_bench_that_moves_a_stages_metrics_moves_its_detail_metrics_too():
    """A stage run with params.yaml's `detail_path` writes into the workspace's metrics/detail/, which DVC then
    sees as changed: a bench that points `metrics_path` elsewhere must point `detail_path` there too."""
    missing = [path.name for path in sorted((ROOT / "bench").glob("*.py"))
               if "metrics_path" in (text := path.read_text(encoding="utf-8")) and "detail_path" not in text]
    assert not missing, f"set detail_path beside metrics_path in: {', '.join(missing)}"
