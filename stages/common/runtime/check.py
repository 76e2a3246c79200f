"""Check a workspace's params.yaml and the inputs it names, running nothing: `refinery check`, or
`python -m stages.common.runtime.check [--root DIR] [--params FILE]`.

What a stage would refuse when it starts is refused here first, before `dvc repro` removes any output:
- each section read by a stage of dvc.yaml whose command is `python -m stages.<name>` is built through
  that stage's own `Params` (unknown keys, types, ranges, and the cross-field rules in `__post_init__`,
  such as the parallel layout against the model and the processes); a stage that launches torchrun also
  works out its process count (`processes`). A top-level section that no stage reads is an unknown key;
- every dependency that no stage of dvc.yaml makes (e.g. `clean.input`) exists. Inputs that a stage
  makes are checked by the stage reading them, when it starts (`missing_input`, called by
  stages.common.runtime.atomic.check_owned_paths), since the pipeline has not made them yet.

Which stage makes what comes from dvc.yaml's outs, metrics and plots, interpolated with params.yaml as
DVC does. Errors are one line each, naming the key: `param 'clean.input': data/raw/x does not exist and no
stage in dvc.yaml makes it`. Importing this module imports no torch; checking imports the stage modules.
"""
from __future__ import annotations

import argparse
import difflib
import glob
import importlib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.common.runtime.params import ConfigError, from_dict, load_yaml, read_params, shorten, shown
from stages.common.runtime.storage import exists as storage_exists
from stages.common.runtime.storage import is_url, redact

REFERENCE_RE = re.compile(r"\$\{([^}]+)\}")
STAGE_MODULE_RE = re.compile(r"python -m (stages(?:\.\w+)+)(?:\s|$)")
ERROR_CHARS = 1000  # the most of one error line (an unknown key lists the known ones): a long value is cut


@dataclass(frozen=True)
class DvcStage:
    """One stage of dvc.yaml as written (paths not yet interpolated)."""
    name: str
    cmd: str
    deps: tuple[str, ...]
    outs: tuple[str, ...]  # outs, metrics and plots: every path the stage writes
    params: tuple[str, ...]  # params.yaml sections or keys it reads

    @property
    def module(self) -> str | None:
        """The `stages.*` module its command runs, if it is one of ours."""
        match = STAGE_MODULE_RE.match(self.cmd)
        return match.group(1) if match else None


def _paths(entries: list[Any] | None) -> tuple[str, ...]:
    """dvc.yaml list entries: `path` or `{path: {options}}`."""
    return tuple(str(next(iter(e))) if isinstance(e, dict) else str(e) for e in entries or [])


def read_dvc_stages(root: Path) -> list[DvcStage]:
    """The command stages of `<root>/dvc.yaml` (ConfigError when it is missing or not a pipeline)."""
    path = root / "dvc.yaml"
    if not path.is_file():
        raise ConfigError(f"{root}: no dvc.yaml here; run in a Refinery workspace or pass --root")
    spec = load_yaml(path, "dvc.yaml") or {}
    stages = spec.get("stages") if isinstance(spec, dict) else None
    if not isinstance(stages, dict):
        raise ConfigError(f"{path}: no `stages` mapping")
    return [DvcStage(name, str(s.get("cmd", "")), _paths(s.get("deps")),
                     _paths(s.get("outs")) + _paths(s.get("metrics")) + _paths(s.get("plots")),
                     tuple(p for p in s.get("params") or [] if isinstance(p, str)))  # dicts: other params files
            for name, s in stages.items() if isinstance(s, dict) and "cmd" in s]


def lookup(params: Mapping[str, Any], key: str) -> Any:
    """The value of a dotted key (`train.parallel.data_parallel_size`); KeyError naming it if absent."""
    value: Any = params
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(key)
        value = value[part]
    return value


def interpolate(text: str, params: Mapping[str, Any]) -> str:
    """`text` with each `${key}` replaced by its params.yaml value, as dvc.yaml interpolation does."""
    return REFERENCE_RE.sub(lambda m: str(lookup(params, m.group(1))), text)


def _overlap(a: str, b: str) -> bool:
    a, b = os.path.normpath(a), os.path.normpath(b)
    return a == b or a.startswith(b + os.sep) or b.startswith(a + os.sep)


def maker(path: str, stages: list[DvcStage], params: Mapping[str, Any]) -> str | None:
    """The stage whose outputs hold `path` (or lie under it), if any."""
    for stage in stages:
        for out in stage.outs:
            try:
                resolved = interpolate(out, params)
            except KeyError:
                continue  # reported by check_workspace; here it only cannot be a match
            if _overlap(path, resolved):
                return stage.name
    return None


def input_exists(path: str | Path) -> bool:
    """A file or folder exists; for a glob (clean.input may be one), the folder before its first wildcard.
    A URL (clean.input may be one) is asked of its file system."""
    if is_url(path):
        return storage_exists(str(path))
    parts = Path(path).expanduser().parts
    if not any(glob.has_magic(p) for p in parts):
        return os.path.lexists(Path(path).expanduser())
    plain = parts[:next(i for i, p in enumerate(parts) if glob.has_magic(p))]
    return Path(*plain).is_dir() if plain else True


def missing_input(stage: str, key: str, path: str, root: Path | None = None) -> str:
    """The one-line error for a stage input that does not exist, saying which stage makes it when the
    workspace's dvc.yaml (at `root`, default the working directory: where DVC runs the stage) knows."""
    root = Path.cwd() if root is None else root
    message = f"param '{stage}.{key}': {redact(path)} does not exist"
    if is_url(path) or not (root / "dvc.yaml").is_file() or not (root / "params.yaml").is_file():
        return message
    relative = os.path.relpath(Path(path).expanduser().resolve(), root.resolve())
    made_by = maker(relative, read_dvc_stages(root), read_params(root / "params.yaml"))
    if made_by:
        return f"{message} (made by stage {made_by!r}: run it first, `dvc repro {made_by}`)"
    return f"{message} and no stage in dvc.yaml makes it"


def _one_line(error: Exception | str) -> str:
    return shorten(" ".join(str(error).split()), ERROR_CHARS)


def check_stage_params(stage: DvcStage, params: Mapping[str, Any], params_path: Path) -> str | None:
    """Build the section a `python -m stages.<name>` stage reads through its own Params; the error, if any."""
    module = importlib.import_module(stage.module)
    params_cls = getattr(module, "Params", None)
    if params_cls is None:
        return None
    section = getattr(module, "STAGE", stage.name)
    if section not in params:
        return f"{params_path}: missing section {section!r} (read by stage {stage.name!r})"
    if not isinstance(params[section] or {}, Mapping):
        return f"param {section!r}: expected a mapping, got {shown(params[section])}"
    try:
        built = from_dict(params_cls, params[section] or {}, prefix=f"{section}.")
        processes = getattr(module, "processes", None)  # stages that launch torchrun: their process count
        if processes is not None:
            processes(built)
    except ValueError as e:  # the user's mistake, reported with the others
        return _one_line(e)
    return None


def check_stage_data(stages: list[DvcStage], params: Mapping[str, Any], root: Path) -> tuple[list[str], list[str]]:
    """(errors, notes) from each stage module's `check_data(params, context) -> [("error" | "note", line)]`,
    in pipeline order: the data it would read (clean: the first records of each source; semantic_head: the
    labels) and what it projects for the stages after it (through `context`: perplexity the tokens per tier,
    train what it needs of them). Run only once every section is valid."""
    errors: list[str] = []
    notes: list[str] = []
    def pending(path: str) -> str | None:
        """The stage that makes `path`, where it has not made it yet (its data cannot be checked)."""
        made_by = maker(path, stages, params)
        return made_by if made_by and not input_exists(root / path) else None

    # what a hook may use: every section as written, `pending`, and what earlier hooks projected
    context: dict[str, Any] = {"params": params, "root": root, "pending": pending}
    cwd = Path.cwd()
    os.chdir(root)  # relative paths in params.yaml are relative to the workspace, as when DVC runs a stage
    try:
        for stage in stages:
            module = importlib.import_module(stage.module) if stage.module else None
            hook = getattr(module, "check_data", None)
            if hook is None:
                continue
            section = getattr(module, "STAGE", stage.name)
            built = from_dict(module.Params, params[section] or {}, prefix=f"{section}.")
            try:
                findings = hook(built, context)
            except ConfigError as e:
                findings = [("error", _one_line(e))]
            for level, line in findings:
                (errors if level == "error" else notes).append(f"{stage.name}: {line}" if level == "note" else line)
    finally:
        os.chdir(cwd)
    return errors, notes


SCRATCH_KEYS = ("checkpoint_dir", "work_dir")  # folders a stage keeps across runs, which DVC does not manage


def scratch_overlaps(stages: list[DvcStage], params: Mapping[str, Any]) -> list[str]:
    """A scratch folder (a checkpoint or work folder: not a DVC output, so DVC does not keep it apart from
    the outputs) inside or around a stage's output would be wiped when that stage publishes, or wipe it."""
    errors = []
    for section, values in params.items():
        if not isinstance(values, Mapping):
            continue
        for key in SCRATCH_KEYS:
            path = values.get(key)
            if isinstance(path, str) and path and not is_url(path) and (made_by := maker(path, stages, params)):
                errors.append(f"param '{section}.{key}': {path} overlaps an output of stage {made_by!r}: "
                              "choose a folder of its own")
    return errors


def check_workspace(root: Path, params_path: Path | None = None, read_data: bool = True) -> list[str]:
    """Every mistake found in the params file (default `<root>/params.yaml`) and the inputs it names, one
    line each; empty when the pipeline can start. Relative paths are relative to `root`, where DVC runs.
    With `read_data`, once the params are valid, the stages also look at the data (`check_stage_data`);
    what they find besides mistakes is printed."""
    params_path = root / "params.yaml" if params_path is None else params_path
    params = read_params(params_path)
    stages = read_dvc_stages(root)
    errors: list[str] = []
    params_valid = True  # every section builds: the data checks can run, but those of stages missing an input
    missing_inputs: set[str] = set()
    read = {p.split(".")[0] for s in stages for p in s.params}
    read |= {m.split(".")[0] for s in stages for text in (*s.deps, *s.outs, s.cmd) for m in REFERENCE_RE.findall(text)}
    for section in params:
        if section not in read:
            close = difflib.get_close_matches(section, read, n=1)
            errors.append(f"unknown section {shown(section)} in {params_path} ("
                          + (f"did you mean {close[0]!r}? " if close else "")
                          + f"the stages read: {', '.join(sorted(read))})")
    for stage in stages:
        if stage.module and (error := check_stage_params(stage, params, params_path)):
            errors.append(error)
            params_valid = False
        for dep in stage.deps:
            try:
                path = interpolate(dep, params)
            except KeyError as e:
                errors.append(f"dvc.yaml: stage {stage.name!r} depends on {dep}, but {params_path} has no "
                              f"{e.args[0]!r}")
                continue
            if maker(path, stages, params) or input_exists(path if is_url(path) else root / path):
                continue
            path = redact(path)
            missing_inputs.add(stage.name)
            reference = REFERENCE_RE.fullmatch(dep)
            errors.append(f"param {reference.group(1)!r}: {path} does not exist and no stage in dvc.yaml makes it"
                          if reference else
                          f"dvc.yaml: stage {stage.name!r} depends on {path}: it does not exist and no stage makes it")
    errors += scratch_overlaps(stages, params)
    if params_valid and read_data:
        data_errors, notes = check_stage_data([s for s in stages if s.name not in missing_inputs], params, root)
        errors += data_errors
        for note in notes:
            print(note)
    return [_one_line(error) for error in errors]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="refinery check", description="Check params.yaml (every stage's section: keys, types, ranges, "
        "cross-field rules) and that the inputs it names exist, without running anything. Exit status 0 when "
        "the pipeline can start, 2 with one line per mistake.")
    parser.add_argument("--root", type=Path, help="the workspace: dvc.yaml, params.yaml, the data (default: "
                                                  "the folder of --params, else the current folder)")
    parser.add_argument("--params", type=Path, help="the params file to check (default: <root>/params.yaml)")
    parser.add_argument("--params-only", action="store_true", help="check params.yaml and that inputs exist, "
                                                                   "without reading the data")
    args = parser.parse_args(argv)
    root = args.root or (args.params.parent if args.params else Path.cwd())
    try:
        errors = check_workspace(root, args.params, read_data=not args.params_only)
    except ConfigError as e:  # no params file, or no pipeline to check it against
        errors = [_one_line(e)]
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors:
        sys.exit(2)
    num_stages = sum(1 for s in read_dvc_stages(root) if s.module)
    print(f"{args.params or root / 'params.yaml'}: OK ({num_stages} stage sections and the inputs they name)")


if __name__ == "__main__":
    main()
