"""Check a workspace's params.yaml and the inputs it names, running nothing: `refinery check`, or
`python -m stages.check [--root DIR] [--params FILE]`. The one module that imports the stages by name: it
builds each section through its stage's own `Params` and asks the stage's `check_data` about the data.

What a stage would refuse when it starts is refused here first, before `dvc repro` removes any output:
- each section read by a stage of dvc.yaml whose command is `python -m stages.<name>` is built through
  that stage's own `Params` (unknown keys, types, ranges, and the cross-field rules in `__post_init__`,
  such as the parallel layout against the model and the processes); a stage that launches torchrun also
  works out its process count (`processes`). A top-level section that no stage reads is an unknown key;
- every dependency that no stage of dvc.yaml makes (e.g. `clean.input`) exists. Inputs that a stage
  makes are checked by the stage reading them, when it starts (`missing_input`, called by
  stages.common.runtime.ownership.check_owned_paths), since the pipeline has not made them yet.

Which stage makes what comes from dvc.yaml's outs, metrics and plots, interpolated with params.yaml as
DVC does. Errors are one line each, naming the key: `param 'clean.input': data/raw/x does not exist and no
stage in dvc.yaml makes it`. Importing this module imports no torch; checking imports the stage modules.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stages.common.runtime.dvcfile import REFERENCE_RE, DvcStage, interpolate, maker, read_dvc_stages
from stages.common.runtime.ownership import input_exists
from stages.common.runtime.params import ConfigError, from_dict, read_params, shorten, shown
from stages.common.runtime.storage import exists as url_exists
from stages.common.runtime.urls import is_url, redact

ERROR_CHARS = 1000  # the most of one error line (an unknown key lists the known ones): a long value is cut


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
            if maker(path, stages, params) or input_exists(path if is_url(path) else root / path, url_exists):
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
