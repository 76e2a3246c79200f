"""dvc.yaml as the pipeline's map: its command stages as written (`read_dvc_stages`), params.yaml values by
dotted key (`lookup`), `${...}` interpolation as DVC does it (`interpolate`), and which stage makes a path
(`maker`). Read by `refinery check`, by the ownership checks a stage runs when it starts, and by the flows.
Imports only `params` (the YAML reader).
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.common.runtime.params import ConfigError, load_yaml

REFERENCE_RE = re.compile(r"\$\{([^}]+)\}")
STAGE_MODULE_RE = re.compile(r"python -m (stages(?:\.\w+)+)(?:\s|$)")


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
