"""The one fingerprint (stages.common.runtime.digest): the params less their placement-only fields, the
inputs, and the code the stage imports, read from the source wherever the checkout lies."""
import dataclasses
import importlib.util
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from stages import clean, prune, qat, train
from stages.common.compress.distill import DistillParams
from stages.common.runtime.digest import fingerprint, stage_code
from stages.common.runtime.params import param
from stages.common.training.checkpoint import CheckpointParams
from stages.common.training.optim import OptimParams

ROOT = Path(__file__).resolve().parents[3]


@dataclasses.dataclass(frozen=True)
class Inner:
    rate: float = 0.1
    every: int = param(10, min=1, placement=True)


@dataclasses.dataclass(frozen=True)
class P:
    threshold: float = param(0.5, gt=0.0)
    num_workers: int = param(0, min=0, placement=True)
    inner: Inner = dataclasses.field(default_factory=Inner)
    cadence: Inner = param(default_factory=Inner, placement=True)


def module_at(root: Path, name: str) -> ModuleType:
    """The module `name` of the checkout at `root`, not executed: all `fingerprint` needs of a stage."""
    path = root.joinpath(*name.split(".")).with_suffix(".py")
    return importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path))


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def test_placement_only_fields_leave_it_alone_and_the_others_change_it():
    base = fingerprint(P(), [], clean)
    assert fingerprint(P(num_workers=8, inner=Inner(every=3), cadence=Inner(rate=9.0)), [], clean) == base
    assert fingerprint(P(threshold=0.6), [], clean) != base
    assert fingerprint(P(inner=Inner(rate=0.2)), [], clean) != base


def test_inputs_count_by_size_and_time_or_by_the_bytes_given(tmp_path):
    data = tmp_path / "part-0.parquet"
    data.write_text("a")
    base = fingerprint(P(), [data, b"weights"], clean)
    assert fingerprint(P(), [str(data), b"weights"], clean) == base
    assert fingerprint(P(), [data, b"weights2"], clean) != base
    data.write_text("ab")
    assert fingerprint(P(), [data, b"weights"], clean) != base


TRAIN_PATHS = {"tokens_dir": "tokens", "model_dir": "model", "checkpoint_dir": "ckpt", "metrics_path": "train.json",
               "detail_path": "train.detail.json",
               "steps_path": "steps.csv", "val_path": "val.csv"}
CLEAN_PATHS = {"input": "raw", "out_dir": "out", "metrics_path": "clean.json",
               "detail_path": "clean.detail.json", "reasons_plot_path": "reasons.csv",
               "work_dir": "work"}
COMPRESS_PATHS = {"tokens_dir": "tokens", "out_dir": "out", "metrics_path": "m.json",
                  "detail_path": "m.detail.json", "checkpoint_dir": "ckpt"}
TRAIN_PARALLEL = train.Params(**TRAIN_PATHS).parallel


@pytest.mark.parametrize("stage, params, placement, meaningful", [
    (train, train.Params(**TRAIN_PATHS),
     {"model_dir": "elsewhere", "checkpoint_dir": "ckpt2", "device": "cpu", "num_threads": 3,
      "nproc_per_node": TRAIN_PARALLEL.data_parallel_size, "progress_bar": False, "log_every": 1, "max_bad_steps": 9, "peak_flops": 1e12,
      "checkpoint": CheckpointParams(every=7, keep=5), "eval": train.EvalParams(every=3, windows=2),
      "parallel": dataclasses.replace(TRAIN_PARALLEL, compile=True, activation_checkpointing=True)},
     {"seed": 1, "tokens_dir": "other_tokens", "optim": OptimParams(lr=0.5),
      "parallel": dataclasses.replace(TRAIN_PARALLEL, data_parallel_size=TRAIN_PARALLEL.data_parallel_size + 1)}),
    (prune, prune.Params(teacher_dir="teacher", **COMPRESS_PATHS),
     {"teacher_dir": "teacher2", "tokens_dir": "tokens2", "device": "cpu", "num_threads": 3, "nproc_per_node": 4,
      "max_restarts": 0, "progress_bar": False, "val_batches": 2, "checkpoint": CheckpointParams(every=3)},
     {"seed": 1, "precision": "fp32", "method": "magnitude", "distill": DistillParams(steps=7)}),
    (qat, qat.Params(model_dir="model", **COMPRESS_PATHS),
     {"model_dir": "model2", "out_dir": "out2", "num_threads": 3, "nproc_per_node": 4, "progress_bar": False,
      "val_batches": 2, "checkpoint": CheckpointParams(every=3)},
     {"seed": 1, "calibration_batches": 2, "distill": DistillParams(steps=7)}),
    (clean, clean.Params(**CLEAN_PATHS),
     {"executor": "ray", "address": "auto", "num_workers": 8},
     {"seed": 1, "batch_size": 7}),
])
def test_the_stages_mark_what_only_places_work(stage, params, placement, meaningful):
    base = fingerprint(params, [b"data"], stage)
    assert fingerprint(dataclasses.replace(params, **placement), [b"data"], stage) == base
    for key, value in meaningful.items():
        assert fingerprint(dataclasses.replace(params, **{key: value}), [b"data"], stage) != base, key


def test_an_edit_to_code_the_stage_imports_changes_it_wherever_the_checkout_lies(tmp_path):
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "stages", tmp_path / "a" / "stages", ignore=ignore)
    shutil.copytree(tmp_path / "a" / "stages", tmp_path / "b" / "stages")
    params = train.Params(**TRAIN_PATHS)
    base = fingerprint(params, [], module_at(tmp_path / "a", "stages.train"))
    assert fingerprint(params, [], module_at(tmp_path / "b", "stages.train")) == base

    with open(tmp_path / "b" / "stages" / "common" / "text" / "dedup.py", "a") as f:  # train never imports it
        f.write("\n# an edit\n")
    assert fingerprint(params, [], module_at(tmp_path / "b", "stages.train")) == base
    with open(tmp_path / "b" / "stages" / "common" / "training" / "trainer.py", "a") as f:
        f.write("\n# an edit\n")
    assert fingerprint(params, [], module_at(tmp_path / "b", "stages.train")) != base


def test_imports_are_followed_through_modules_functions_and_relative_imports(tmp_path):
    write(tmp_path, {
        "stages/__init__.py": "",
        "stages/stage.py": "from stages.common import helper\nfrom stages.common.helper import f\n",
        "stages/common/__init__.py": "",
        "stages/common/helper.py": "def f():\n    from .deep import g\n    return g()\n",
        "stages/common/deep.py": "import stages.common.leaf as leaf\n\ndef g():\n    return leaf.VALUE\n",
        "stages/common/leaf.py": "VALUE = 1\n",
        "stages/other.py": "VALUE = 2\n",
    })
    stage = module_at(tmp_path, "stages.stage")
    root, files = stage_code(stage)
    assert root == tmp_path.resolve()
    assert [f.relative_to(root).as_posix() for f in files] == [
        "stages/__init__.py", "stages/common/__init__.py", "stages/common/deep.py", "stages/common/helper.py",
        "stages/common/leaf.py", "stages/stage.py"]
    base = fingerprint(P(), [], stage)
    (tmp_path / "stages" / "other.py").write_text("VALUE = 3\n")
    assert fingerprint(P(), [], stage) == base
    (tmp_path / "stages" / "common" / "leaf.py").write_text("VALUE = 3\n")
    assert fingerprint(P(), [], stage) != base

    as_main = module_at(tmp_path, "stages.stage")  # `python -m stages.stage`: named __main__, its spec says which
    as_main.__name__ = "__main__"
    assert fingerprint(P(), [], as_main) == fingerprint(P(), [], stage)


SCRIPT = """
import dataclasses, importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from stages import clean
from stages.common.runtime.digest import fingerprint
from stages.common.runtime.params import param

@dataclasses.dataclass(frozen=True)
class Inner:
    rate: float = 0.1
    every: int = param(10, min=1, placement=True)

@dataclasses.dataclass(frozen=True)
class P:
    threshold: float = param(0.5, gt=0.0)
    num_workers: int = param(0, min=0, placement=True)
    inner: Inner = dataclasses.field(default_factory=Inner)
    cadence: Inner = param(default_factory=Inner, placement=True)

print(fingerprint(P(), [b"data"], clean))
"""


def test_it_is_the_same_in_another_process_whatever_that_imported():
    def in_subprocess(*imports: str) -> str:
        done = subprocess.run([sys.executable, "-c", SCRIPT, *imports], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, check=True)
        return done.stdout.strip()

    here = fingerprint(P(), [b"data"], clean)  # this process imported every stage above, and pytest's modules
    assert in_subprocess() == here
    assert in_subprocess("stages.semantic_filter", "stages.tokenizer", "stages.common.text.dedup") == here
