"""Settings of the flows: `<workspace>/flows/config.yaml` (else the one shipped with the flows, e.g. in a workspace
made by `refinery init`), with `${section.key}` resolved against params.yaml.

The file is separate from params.yaml so that no DVC stage, experiment or `dvc exp show` column ever
depends on how the pipeline is orchestrated (see the header of flows/config.yaml).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stages.common.runtime.dvcfile import interpolate
from stages.common.runtime.params import from_dict, load_yaml, read_params

ROOT = Path(__file__).resolve().parents[1]  # the repository these flows ship in: the default workspace
WORKSPACE_ENV = "REFINERY_WORKSPACE"  # set by `flows.serve --workspace`; never a flow run parameter
CONFIG_PATH = Path("flows") / "config.yaml"


class UnresolvedReference(KeyError):
    """A `${section.key}` names a key that params.yaml does not have."""


@dataclass(frozen=True)
class RetrainConfig:
    cron: str = "0 3 * * 1"
    timezone: str = "UTC"
    raw_inputs: tuple[str, ...] = ("${clean.input}",)
    candidates: tuple[str, ...] = ("${train.model_dir}/model.safetensors", "${perplexity.model_dir}/model.safetensors")
    tokenizer: str = "${tokenizer.out_dir}"
    eval_docs: str = "${perplexity.out_dir}/docs"
    eval_set: str = "models/eval_set.jsonl"
    eval_max_docs: int = 500
    eval_max_chars: int = 4000
    min_improvement: float = 0.01
    registry: str = "models/registry.json"
    champion_dir: str = "models/champion"
    device: str = "cpu"
    num_threads: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.min_improvement < 1:
            raise ValueError(f"flows config 'retrain.min_improvement' must be in [0, 1), got {self.min_improvement}")
        if self.eval_max_docs < 1 or self.eval_max_chars < 1:
            raise ValueError("flows config 'retrain.eval_max_docs' and 'retrain.eval_max_chars' must be >= 1")
        if not self.raw_inputs or not self.candidates:
            raise ValueError("flows config 'retrain.raw_inputs' and 'retrain.candidates' must not be empty")
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"flows config 'retrain.device' must be cpu, cuda or auto, got {self.device!r}")
        if self.num_threads < 0:
            raise ValueError(f"flows config 'retrain.num_threads' must be >= 0, got {self.num_threads}")


QUICK_PROFILE = ("train.max_steps=20", "prune.calibration_batches=2", "prune.distill.steps=10", "prune.val_batches=4",
                 "qat.calibration_batches=2", "qat.distill.steps=10", "qat.val_batches=4", "export.val_batches=4",
                 "export.latency_runs=5", "export.latency_rounds=1", "export.int8_parity_batches=1",
                 "export.ort_dynamic_baseline=false")


@dataclass(frozen=True)
class FlowsConfig:
    lock_wait_s: float = 0.0
    dvc_lock_retries: int = 2
    retry_delay_s: float = 10.0
    experiments_dir: str = ".dvc/tmp/flows"
    export_stage: str = "export"
    # folders of resumable work that are not DVC outputs: an experiment's worktree gets hard links to them
    checkpoint_dirs: tuple[str, ...] = ("${train.checkpoint_dir}", "${prune.checkpoint_dir}", "${qat.checkpoint_dir}")
    # named lists of set_params overrides (the pipeline flow's `profile`)
    profiles: dict[str, list[str]] = field(default_factory=lambda: {"quick": list(QUICK_PROFILE)})
    retrain: RetrainConfig = field(default_factory=RetrainConfig)


def resolve_workspace() -> Path:
    """The DVC repository the flows run on, fixed by whoever serves them: whoever can start a run through
    the API must not choose which repository's commands it executes."""
    workspace = os.environ.get(WORKSPACE_ENV)
    return Path(workspace).resolve() if workspace else ROOT


def load_config(workspace: Path) -> FlowsConfig:
    """The workspace's flows/config.yaml, else the shipped one; unknown keys and wrong types raise ValueError
    naming the key."""
    path = workspace / CONFIG_PATH
    if not path.is_file():
        path = Path(__file__).resolve().parent / CONFIG_PATH.name
    data = load_yaml(path, "flows config") or {}
    return from_dict(FlowsConfig, data, prefix=f"{CONFIG_PATH}:")


def resolve(text: str, params: dict[str, Any]) -> str:
    """Replace each `${section.key}` in `text` with its value in `params` (as dvc.yaml interpolates)."""
    try:
        return interpolate(text, params)
    except KeyError as e:
        raise UnresolvedReference(f"params.yaml has no {e.args[0]!r} (referenced by {text!r})") from None


def resolve_present(texts: tuple[str, ...], params: dict[str, Any]) -> list[str]:
    """`resolve` each text; one naming a key that params.yaml lacks is left out (a pipeline without that stage)."""
    resolved = []
    for text in texts:
        try:
            resolved.append(resolve(text, params))
        except UnresolvedReference:
            continue
    return resolved


def workspace_params(workspace: Path) -> dict[str, Any]:
    return read_params(workspace / "params.yaml")
