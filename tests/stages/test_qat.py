import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from stages import qat
from stages.common.compress.deployable import DeployLM
from stages.common.compress.quant import ActQuant, load_quant_state, read_scheme
from stages.common.lm.model import CHECKPOINT_NAME, Transformer, preset
from stages.common.training import checkpoint
from stages.common.training.checkpoint import CheckpointParams
from tests.fixtures.compress import make_inputs, tiny_qat_params
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, one_torch_thread):
    return make_inputs(tmp_path_factory.mktemp("qat_inputs"))


def test_run_writes_ptq_and_qat_and_qat_is_no_worse(inputs, tmp_path):
    params = tiny_qat_params(inputs["teacher"], inputs, tmp_path)
    metrics = qat.run(params)
    assert json.loads((tmp_path / "qat.detail.json").read_text()) == metrics
    for name in ("ptq", "qat"):
        quant_path = tmp_path / "qat" / name / "quant.safetensors"
        assert read_scheme(quant_path) == params.scheme
        loaded = DeployLM(Transformer(preset("debug", 320, max_seq_len=32)), params.scheme)
        load_quant_state(loaded, quant_path)
        assert all(m.mode == "quant" for m in loaded.modules() if isinstance(m, ActQuant))
        assert metrics[f"{name}.val_ppl_ratio"] < 1.1, name  # int8 costs little even on a tiny model
    assert metrics["qat.val_ppl.all"] <= metrics["ptq.val_ppl.all"] * 1.01


def test_an_interrupted_qat_fine_tune_resumes_to_the_same_weights(inputs, tmp_path):
    params = dataclasses.replace(tiny_qat_params(inputs["teacher"], inputs, tmp_path),
                                 checkpoint=CheckpointParams(every=2, keep=3))
    reference = qat.run(params)
    assert reference["qat.resumed_from_step"] == -1
    expected = load_file(str(tmp_path / "qat" / "qat" / CHECKPOINT_NAME))
    newest = checkpoint.list_checkpoints(tmp_path / "qat_checkpoints")[-1]
    assert newest.name == "step_00000004"
    (newest / "_SUCCESS").unlink()  # killed while writing the last checkpoint
    shutil.rmtree(tmp_path / "qat")

    resumed = qat.run(params)
    assert resumed["qat.resumed_from_step"] == 2
    got = load_file(str(tmp_path / "qat" / "qat" / CHECKPOINT_NAME))
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert resumed["qat.val_ppl.all"] == reference["qat.val_ppl.all"]
