"""flows/ is orchestration only: no module of it brings torch in, at import or later.

Scoring models runs as a command (`python -m stages.evaluate`), so a flow run's own process stays small
and the code that computes lives with the stages.
"""
from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import flows
from tests.conftest import ROOT

FLOWS_DIR = ROOT / "flows"
MODULES = sorted(f"flows.{m.name}" for m in pkgutil.iter_modules([str(FLOWS_DIR)]))

# Imports each module named on the command line in turn, in a fresh interpreter, and stops at the first
# after which torch is in sys.modules, printing where the import came from.
PROBE = """
import importlib, sys, traceback

class Watch:
    stack = None

    def find_spec(self, name, path=None, target=None):
        if name == "torch" and Watch.stack is None:
            Watch.stack = "".join(line for line in traceback.format_stack()[:-1] if "importlib" not in line)
        return None

assert "torch" not in sys.modules, "torch is imported at interpreter start"
sys.meta_path.insert(0, Watch())
for module in sys.argv[1:]:
    importlib.import_module(module)
    if "torch" in sys.modules:
        sys.exit(f"importing {module} imported torch, from:\\n{Watch.stack}")
"""


def imported_names(path) -> set[str]:
    """Every module a file imports, at any depth (an import inside a function counts)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_the_probe_sees_every_flows_module():
    assert {"flows.registry", "flows.retrain", "flows.pipeline", "flows.serve"} <= set(MODULES)
    assert FLOWS_DIR == Path(flows.__file__).parent


def test_importing_any_flows_module_leaves_torch_unimported():
    # the stage modules flows import anywhere (also inside functions), so a lazy import is checked too
    stage_modules = sorted({n for p in FLOWS_DIR.glob("*.py") for n in imported_names(p)
                            if n.startswith("stages.") and (ROOT / (n.replace(".", "/") + ".py")).is_file()})
    proc = subprocess.run([sys.executable, "-c", PROBE, *MODULES, *stage_modules], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_no_flows_file_imports_torch_anywhere():
    offenders = {p.name: sorted(n for n in imported_names(p) if n.split(".")[0] == "torch")
                 for p in sorted(FLOWS_DIR.glob("*.py"))}
    assert not {name: found for name, found in offenders.items() if found}
