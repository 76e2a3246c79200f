"""Drift guard: dvc.yaml, params.yaml and each stage's Params dataclass must agree."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest
import yaml

from stages.common.runtime.params import from_dict

ROOT = Path(__file__).resolve().parents[1]
DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
STAGES = sorted(DVC["stages"])
INTERPOLATION_RE = re.compile(r"\$\{([^}]+)\}")


def lookup(key: str):
    value = PARAMS
    for part in key.split("."):
        value = value[part]
    return value


def resolve(text: str) -> str:
    return INTERPOLATION_RE.sub(lambda m: str(lookup(m.group(1))), text)


def stage_module_name(stage: str) -> str:
    match = re.fullmatch(r"python -m (stages\.\w+)", DVC["stages"][stage]["cmd"])
    assert match, f"{stage}: cmd must be `python -m stages.<name>` (got {DVC['stages'][stage]['cmd']!r})"
    return match.group(1)


def local_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """Files of the `stages.*` modules that `module` imports, transitively."""
    seen = set() if seen is None else seen
    path = ROOT / (module.replace(".", "/") + ".py")
    if module in seen or not path.is_file():
        return set()
    seen.add(module)
    files = {str(path.relative_to(ROOT))}
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("stages"):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("stages")]
        for name in names:
            files |= local_imports(name, seen)
    return files


@pytest.mark.parametrize("stage", STAGES)
def test_code_deps_match_imports(stage):
    module = stage_module_name(stage)
    deps = {resolve(d) for d in DVC["stages"][stage]["deps"]}
    code = {d for d in deps if d.startswith("stages/")}
    assert code == local_imports(module), f"{stage}: deps must list exactly the stage's own code"


@pytest.mark.parametrize("stage", STAGES)
def test_params_section_matches_dataclass(stage):
    section = DVC["stages"][stage]["params"]
    assert section == [stage], f"{stage}: reads its own params section"
    params_cls = importlib.import_module(stage_module_name(stage)).Params
    from_dict(params_cls, PARAMS[stage])  # unknown keys or wrong types raise

    def check_all_keys_present(cls, data, prefix):
        for f in dataclasses.fields(cls):
            assert f.name in data, f"params.yaml lacks {prefix}{f.name} (keep every knob visible and commented)"
            if dataclasses.is_dataclass(f.type) or (isinstance(f.default_factory, type)
                                                     and dataclasses.is_dataclass(f.default_factory)):
                check_all_keys_present(f.default_factory, data[f.name], f"{prefix}{f.name}.")

    check_all_keys_present(params_cls, PARAMS[stage], f"{stage}.")


@pytest.mark.parametrize("stage", STAGES)
def test_paths_come_from_params(stage):
    spec = DVC["stages"][stage]
    raw_paths = [d for d in spec["deps"] if not d.startswith("stages/") and d != "requirements.lock"]
    raw_paths += [next(iter(o)) if isinstance(o, dict) else o for o in spec.get("outs", [])]
    for kind in ("metrics", "plots"):
        raw_paths += [next(iter(m)) if isinstance(m, dict) else m for m in spec.get(kind, [])]
    for path in raw_paths:
        assert INTERPOLATION_RE.fullmatch(path), f"{stage}: data path {path!r} must be a ${{params}} reference"
        assert lookup(INTERPOLATION_RE.fullmatch(path).group(1)), path
