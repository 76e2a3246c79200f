"""The parallel layout's arithmetic and the one-process paths of `parallel.py`, on the CPU without a process
group: params validation, the process count a layout needs, the split of layers into pipeline stages, the
environment torchrun sets; `distributed()` also in a one-process gloo group. The multi-process layouts run
under torchrun in tests/integration."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from stages import train
from stages.common.lm.model import Transformer, preset
from stages.common.runtime.params import from_dict
from stages.common.training.parallel import (
    DistEnv,
    ParallelParams,
    PipelinePart,
    build_mesh,
    distributed,
    init_distributed,
    main_rank_cores,
    mesh_coord,
    parallelize,
    pipeline_loss,
    replicate,
    set_cpu_threads,
    stage_layers,
)
from tests.fixtures.lm_corpus import one_torch_thread  # noqa: F401 (fixture)
from tests.fixtures.train_inputs import PATHS

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CPU = torch.device("cpu")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
TRAIN = train.PARALLEL_PREFIX


def test_data_parallel_size_zero_follows_the_launch():
    elastic = ParallelParams(data_parallel_size=0, data_parallel_mode="fsdp", tensor_parallel_size=2)
    assert elastic.resolve(6, TRAIN).data_parallel_size == 3
    with pytest.raises(ValueError, match="multiple of tensor x pipeline parallel = 2, got 3 processes"):
        elastic.resolve(3, TRAIN)
    with pytest.raises(ValueError, match="= 2 processes, but 3 processes run"):
        ParallelParams(data_parallel_size=2).resolve(3, TRAIN)
    with pytest.raises(ValueError, match="nproc_per_node"):
        train.Params(**PATHS, parallel=ParallelParams(data_parallel_size=0)).num_processes


@pytest.mark.parametrize("overrides, message", [
    ({"tensor_parallel_size": 0}, r"^param 'train\.parallel\.tensor_parallel_size': must be >= 1, got 0$"),
    ({"powersgd_rank": 0}, r"^param 'train\.parallel\.powersgd_rank': must be >= 1, got 0$"),
    ({"data_parallel_size": -1}, r"^param 'train\.parallel\.data_parallel_size': must be >= 0, got -1$"),
    ({"data_parallel_mode": "zero3"}, r"^param 'train\.parallel\.data_parallel_mode': must be one of .*'zero3'$"),
    ({"pipeline_schedule": "interleaved"}, r"^param 'train\.parallel\.pipeline_schedule': must be one of "),
    ({"ddp_comm_hook": "int8"}, r"^param 'train\.parallel\.ddp_comm_hook': must be one of "),
], ids=["tensor_parallel_size", "powersgd_rank", "data_parallel_size", "data_parallel_mode", "pipeline_schedule",
        "ddp_comm_hook"])
def test_a_bad_layout_param_is_refused_naming_it(overrides, message):
    with pytest.raises(ValueError, match=message):  # from params.yaml
        from_dict(train.Params, {**PATHS, "parallel": overrides}, prefix="train.")
    with pytest.raises(ValueError, match=message):  # built directly
        train.Params(**PATHS, parallel=ParallelParams(**overrides))


@pytest.mark.parametrize("prefix", ["train.parallel.", "prune.parallel.", "qat.parallel."])
def test_errors_name_the_callers_key_prefix(prefix):
    """Every rule is checked once, under the key of the caller's params: a layout that prune or qat reads
    never names train's keys."""
    section = prefix.removesuffix("parallel.")
    debug = preset("debug", 97)
    refused = [
        (lambda: from_dict(ParallelParams, {"tensor_parallel_size": 0}, prefix=prefix),
         f"param '{prefix}tensor_parallel_size': must be >= 1, got 0"),
        (lambda: ParallelParams(data_parallel_size=2, tensor_parallel_size=2).check(prefix),
         f"param '{prefix}data_parallel_mode': data parallel with tensor or pipeline parallel needs "
         f"'{prefix}data_parallel_mode: fsdp'"),
        (lambda: ParallelParams(data_parallel_mode="fsdp", ddp_comm_hook="fp16").check(prefix),
         f"'{prefix}ddp_comm_hook' applies to data_parallel_mode ddp only"),
        (lambda: ParallelParams(data_parallel_size=0, tensor_parallel_size=2, data_parallel_mode="fsdp")
         .resolve(3, prefix), f"param '{prefix}data_parallel_size: 0' needs a process count"),
        (lambda: ParallelParams(data_parallel_size=2).resolve(3, prefix),
         f"params '{prefix[:-1]}': data x tensor x pipeline parallel = 2 x 1 x 1 = 2 processes, but 3 processes "
         f"run (set '{section}nproc_per_node: 0' to start exactly as many, or '{prefix}data_parallel_size: 0' "
         "to follow the launch)"),
        (lambda: ParallelParams(tensor_parallel_size=3).check_model(2, 4, 2, 64, prefix),
         f"param '{prefix}tensor_parallel_size': must divide"),
        (lambda: ParallelParams(pipeline_parallel_size=3).check_model(2, 4, 2, 64, prefix),
         f"param '{prefix}pipeline_parallel_size': must be at most"),
        (lambda: ParallelParams(pipeline_parallel_size=2).check_layout(0, debug, 1, prefix),
         f"param '{section}gradient_accumulation_steps': the 1f1b pipeline schedule needs at least one "
         f"micro-batch per stage, >= 2 ({prefix}pipeline_parallel_size), got 1"),
        (lambda: ParallelParams(data_parallel_size=2, pipeline_parallel_size=2).check_layout(4, debug, 2, prefix),
         f"'{prefix}data_parallel_mode: fsdp'"),  # check_layout runs `check` too
    ]
    for refuse, message in refused:
        with pytest.raises(ValueError) as e:
            refuse()
        assert message in str(e.value)
        assert section == "train." or "train." not in str(e.value)


def test_a_layout_needs_the_product_of_its_sizes_and_fsdp_composes_with_tensor_and_pipeline():
    layout = ParallelParams(data_parallel_size=2, data_parallel_mode="fsdp", tensor_parallel_size=2,
                            pipeline_parallel_size=3)
    assert layout.world_size == 12 and layout.resolve(12, TRAIN) is layout
    layout.check(TRAIN)
    elastic = ParallelParams(data_parallel_size=0, data_parallel_mode="fsdp", pipeline_parallel_size=2)
    assert elastic.world_size == 0 and elastic.resolve(2, TRAIN).data_parallel_size == 1  # decided by the launch
    # the model's sizes: heads 4, kv heads 2, MLP width 64, 2 layers (the debug preset)
    ParallelParams(tensor_parallel_size=2, pipeline_parallel_size=2).check_model(2, 4, 2, 64, TRAIN)
    with pytest.raises(ValueError, match=r"one of 1, 2, 4, got 8$"):
        ParallelParams(tensor_parallel_size=8).check_model(2, 4, 4, 64, TRAIN)
    with pytest.raises(ValueError, match=r"at most the model's 2 layers, got 3$"):
        ParallelParams(pipeline_parallel_size=3).check_model(2, 4, 2, 64, TRAIN)
    debug = preset("debug", 97)
    ParallelParams(pipeline_parallel_size=2, pipeline_schedule="gpipe").check_layout(0, debug, 1, TRAIN)
    with pytest.raises(ValueError, match=r"at least one micro-batch per stage, >= 2 .*got 1$"):
        ParallelParams(pipeline_parallel_size=2).check_layout(0, debug, 1, TRAIN)


@pytest.mark.parametrize("num_layers, num_stages", [(2, 2), (4, 3), (5, 2), (7, 4), (12, 5)])
def test_pipeline_stages_are_contiguous_and_balanced(num_layers, num_stages):
    bounds = [stage_layers(num_layers, num_stages, s) for s in range(num_stages)]
    assert bounds[0][0] == 0 and bounds[-1][1] == num_layers
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # no gap, no overlap
    sizes = [last - first for first, last in bounds]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_pipeline_parts_chained_compute_the_model_and_keep_its_parameter_names():
    torch.manual_seed(0)
    model = Transformer(preset("debug", 97, num_layers=3)).eval()
    parts = [PipelinePart(model, *stage_layers(3, 2, s), 3) for s in range(2)]
    assert (parts[0].is_first, parts[0].is_last, parts[1].is_first, parts[1].is_last) == (True, False, False, True)
    assert list(parts[0].layers) == ["0", "1"] and list(parts[1].layers) == ["2"]
    names = [set(p.state_dict()) for p in parts]
    assert not names[0] & names[1] and names[0] | names[1] == set(model.state_dict())
    idx = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        hidden = parts[0](idx)
        assert hidden.shape == (2, 12, 32)
        torch.testing.assert_close(parts[1](hidden), model(idx))


def test_one_process_has_no_mesh_and_runs_the_model_itself():
    env = DistEnv(0, 1, 0, 1, CPU)
    assert env.is_main and not DistEnv(1, 2, 1, 2, CPU).is_main
    assert build_mesh(env, ParallelParams()) is None and mesh_coord(None, "pp") == (0, 1)
    model = Transformer(preset("debug", 97))
    parts = parallelize(model, None, ParallelParams(), CPU, 4, pipeline_loss)
    assert parts.module is model and parts.schedule is None and parts.mesh is None and parts.is_last_stage
    assert replicate(model, env).module is model
    idx = torch.randint(0, 97, (2, 8))
    model(idx).sum().backward()
    parts.set_gradient_sync(False)  # nothing to synchronise: no error
    assert parts.norm_params() == parts.grad_params() == [p for p in model.parameters() if p.grad is not None]


def test_pipeline_loss_is_the_mean_token_cross_entropy_without_ignored_targets():
    logits = torch.randn(2, 5, 11)
    targets = torch.randint(0, 11, (2, 5))
    targets[0, :3] = -100
    expected = F.cross_entropy(logits[targets != -100], targets[targets != -100])
    torch.testing.assert_close(pipeline_loss(logits, targets), expected)


def test_the_process_layout_comes_from_torchrun_s_environment_without_joining_a_group(monkeypatch):
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    assert init_distributed("cpu") == DistEnv(0, 1, 0, 1, CPU)  # not under torchrun: one process
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert init_distributed("cpu") == DistEnv(0, 4, 1, 2, CPU)
    assert not dist.is_initialized()  # only RANK (set by torchrun) makes it join the process group
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="'train.device' is cuda but no CUDA device is available"):
            init_distributed("cuda")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_distributed_always_leaves_the_process_group(monkeypatch):
    """The stages' one way in and out: the group is destroyed after success and after an error alike."""
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    with distributed("cpu", 1) as env:  # not under torchrun: one process, no group
        assert env == DistEnv(0, 1, 0, 1, CPU) and torch.get_num_threads() == 1 and not dist.is_initialized()
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                        "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    with distributed("cpu", 1) as env:
        assert dist.is_initialized() and dist.get_world_size() == 1 and env.is_main
    assert not dist.is_initialized()
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    with pytest.raises(RuntimeError, match="failed inside"):
        with distributed("cpu", 1):
            assert dist.is_initialized()
            raise RuntimeError("failed inside")
    assert not dist.is_initialized()


def test_the_local_ranks_share_the_cores_and_rank_0_borrows_them_while_it_works_alone():
    before = torch.get_num_threads()
    env = DistEnv(0, 4, 0, 2, CPU)
    try:
        set_cpu_threads(env)
        assert torch.get_num_threads() == max(1, os.cpu_count() // 2)
        set_cpu_threads(env, 1)
        assert torch.get_num_threads() == 1
        with main_rank_cores(env):
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
        with main_rank_cores(DistEnv(1, 4, 1, 2, CPU)):
            assert torch.get_num_threads() == 1  # the other ranks wait
    finally:
        torch.set_num_threads(before)
