"""Drift guard: dvc.yaml, params.yaml and each stage's Params dataclass must agree."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import os
import re
import typing
from pathlib import Path

import pytest
import yaml

from stages.common.runtime.params import from_dict, load_section

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


def module_file(module: str) -> Path | None:
    """The source file of a `stages.*` module: `a/b.py`, or `a/b/__init__.py` for a stage that is a package
    (the `__init__` files of the shared layers under stages/common are not listed)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    if path.is_file():
        return path
    init = ROOT / module.replace(".", "/") / "__init__.py"
    return init if init.is_file() and not module.startswith("stages.common") else None


def local_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """Files of the `stages.*` modules that `module` imports, transitively."""
    seen = set() if seen is None else seen
    path = module_file(module)
    if module in seen or path is None:
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
    code = {d for d in deps if d.startswith("stages/") and d.endswith(".py")}
    expected = local_imports(module) | local_imports(f"{module}.__main__")  # a package runs its __main__ too
    assert code == expected, f"{stage}: deps must list exactly the stage's own code"


@pytest.mark.parametrize("stage", STAGES)
def test_data_files_of_a_stage_package_are_deps(stage):
    """A stage that is a package reads data files beside its code (word lists, templates): each is a dep,
    itself or through a folder above it, so DVC reruns the stage when one changes."""
    package = ROOT / stage_module_name(stage).replace(".", "/")
    folders = [Path(resolve(d)) for d in DVC["stages"][stage]["deps"]
               if d.startswith("stages/") and not d.endswith(".py")]
    assert all((ROOT / f).exists() for f in folders), f"{stage}: a dep under stages/ does not exist"
    if not package.is_dir():
        return
    data = [p.relative_to(ROOT) for p in package.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert data, f"{stage}: a stage package without data files should be a module"
    uncovered = [str(f) for f in data if not any(f == d or d in f.parents for d in folders)]
    assert not uncovered, f"{stage}: data files not in deps: {uncovered}"


@pytest.mark.parametrize("stage", STAGES)
def test_params_section_matches_dataclass(stage):
    section = DVC["stages"][stage]["params"]
    assert section == [stage], f"{stage}: reads its own params section"
    params_cls = importlib.import_module(stage_module_name(stage)).Params
    from_dict(params_cls, PARAMS[stage])  # unknown keys or wrong types raise

    def check_all_keys_present(cls, data, prefix):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert f.name in data, f"params.yaml lacks {prefix}{f.name} (keep every knob visible and commented)"
            if dataclasses.is_dataclass(hints[f.name]):
                check_all_keys_present(hints[f.name], data[f.name], f"{prefix}{f.name}.")

    check_all_keys_present(params_cls, PARAMS[stage], f"{stage}.")


def is_path(name: str) -> bool:
    """A field naming a file or folder."""
    return name == "input" or name.endswith(("_dir", "_path"))


def required_fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def differences(code, file, prefix: str) -> list[str]:
    """Fields (nested ones by their full key) whose values differ between two instances of a dataclass."""
    out = []
    for f in dataclasses.fields(code):
        a, b = getattr(code, f.name), getattr(file, f.name)
        if dataclasses.is_dataclass(a) and type(a) is type(b):
            out += differences(a, b, f"{prefix}{f.name}.")
        elif a != b:
            out.append(f"{prefix}{f.name}: code default {a!r}, params.yaml {b!r}")
    return out


@pytest.mark.parametrize("stage", STAGES)
def test_paths_have_no_default(stage):
    """A path comes from params.yaml (dvc repro) or from the caller (tests), never from a code default that
    could point a test at the repo's data."""
    params_cls = importlib.import_module(stage_module_name(stage)).Params
    paths = {f.name for f in dataclasses.fields(params_cls) if is_path(f.name)}
    assert required_fields(params_cls) == paths, f"{stage}: exactly the path fields must be required"


@pytest.mark.parametrize("stage", STAGES)
def test_dataclass_defaults_are_the_params_yaml_section(stage):
    """Tests build Params from the code defaults, `dvc repro` from params.yaml: both must run the same
    pipeline. A nested dataclass shared by several sections gets each section's values from that section's
    field default (default_factory)."""
    params_cls = importlib.import_module(stage_module_name(stage)).Params
    from_defaults = params_cls(**{name: PARAMS[stage][name] for name in required_fields(params_cls)})
    from_file = load_section(stage, params_cls, ROOT / "params.yaml")
    drift = differences(from_defaults, from_file, f"{stage}.")
    assert not drift, "defaults differ from params.yaml:\n" + "\n".join(drift)
    assert from_defaults == from_file


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


def test_a_clone_with_the_dvc_cache_has_every_output():
    """An output DVC does not cache must be in git (metrics/), or a fresh clone that pulled the DVC cache
    would lack it and rerun the stage. Scratch folders (checkpoints, work folders) are not outputs, nor inside
    one: DVC would expect them in a clone, and delete them before each run. tests/integration/test_dvc_fresh_clone.py runs
    the clone."""
    ignored = (ROOT / ".gitignore").read_text().split()
    assert not any(line.strip("/").startswith("metrics") for line in ignored), "metrics/ must be tracked by git"
    scratch = {str(lookup(f"{stage}.{key}")) for stage in PARAMS for key in ("checkpoint_dir", "work_dir")
               if isinstance(PARAMS[stage], dict) and key in PARAMS[stage]}
    assert scratch
    for stage, spec in DVC["stages"].items():
        for kind in ("outs", "metrics", "plots"):
            for entry in spec.get(kind, []):
                path, options = next(iter(entry.items())) if isinstance(entry, dict) else (entry, {})
                resolved = resolve(path)
                inside = [s for s in scratch if s == resolved or s.startswith(resolved + "/")]
                assert not inside, f"{stage}: output {resolved} holds scratch folder {inside}"
                assert options.get("cache", True) or resolved.startswith("metrics/"), (
                    f"{stage}: {resolved} is neither cached by DVC nor tracked by git")


def test_the_checkout_has_one_pipeline_file():
    """DVC collects every dvc.yaml of a repository (in each revision too, where a symlink reads as its target's
    path): another one, such as a template of the pipeline, would break `dvc exp show` and experiments."""
    ignored = {".venv", "data", "models", "reports", ".git", ".dvc", "work", "__pycache__"}
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [name for name in subfolders if name not in ignored]
        found += [Path(folder) / name for name in names if name == "dvc.yaml"]
    assert found == [ROOT / "dvc.yaml"]
