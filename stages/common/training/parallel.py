"""Distributed setup and the one `parallelize` step that turns the plain model into its parallel form.

The model file knows nothing of this. On a device mesh `(pp, dp, tp)`:

1. pipeline parallel: the layers are split into `pp` contiguous stages; this rank keeps its stage's
   modules (the first also the embedding, the last also the final norm and output projection) in a
   `PipelinePart`, with the model's own parameter names, so checkpoints look the same in every layout;
2. tensor parallel (`torch.distributed.tensor.parallel`): q/k/v and the MLP's w1/w3 split by output
   (column-wise), wo and w2 by input (row-wise): one all-reduce per sub-layer. Embeddings, norms and the
   output projection stay replicated;
3. activation checkpointing per block (composable API: parameter names unchanged);
4. `torch.compile` per block;
5. data parallel: DDP (optionally with a gradient-compression communication hook) or FSDP2
   (`fully_shard`, the ZeRO-3 analogue: parameters, gradients and optimizer state sharded), per block
   and then the root.

Torchtitan applies the same order (PP split, TP, AC, compile, FSDP), for the same reasons: TP must see
plain `nn.Linear`s, and FSDP must wrap whatever runs last.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from stages.common.lm.model import ModelConfig, Transformer
from stages.common.runtime.params import param

log = logging.getLogger("refinery.parallel")
DP_MODES = ("ddp", "fsdp")
PP_SCHEDULES = ("gpipe", "1f1b")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")
MESH_DIMS = ("pp", "dp", "tp")


@dataclass(frozen=True)
class ParallelParams:
    # 0 = whatever the launched processes allow (elastic runs: torchrun --nnodes=MIN:MAX)
    data_parallel_size: int = param(1, min=0)
    data_parallel_mode: str = param("ddp", choices=DP_MODES)  # ddp | fsdp (FSDP2 fully_shard: ZeRO-3-style sharding)
    tensor_parallel_size: int = param(1, min=1)
    pipeline_parallel_size: int = param(1, min=1)
    # gpipe | 1f1b; micro-batches = gradient_accumulation_steps
    pipeline_schedule: str = param("1f1b", choices=PP_SCHEDULES)
    # placement=True (these two): how the same weights are computed, not which; a checkpoint resumes across them
    activation_checkpointing: bool = param(False, placement=True)  # recompute each block's activations in backward
    compile: bool = param(False, placement=True)  # torch.compile each block
    # none | fp16 | bf16 (CUDA/NCCL only) | powersgd: gradient compression (DDP)
    ddp_comm_hook: str = param("none", choices=COMM_HOOKS)
    powersgd_rank: int = param(1, min=1)  # PowerSGD's matrix approximation rank

    # Each field's own rule (`param(..., min=, choices=)`) is checked where the caller's params are built
    # (`from_dict`, `validate`), under the caller's key; the rules across fields, which `param` cannot state,
    # are `check`'s. `prefix` is where the caller's params hold this layout (`train.parallel.`,
    # `prune.parallel.`): errors name it, and the sibling keys of the section holding it.

    def check(self, prefix: str) -> None:
        """Refuse combinations of fields that no launch can run."""
        if self.data_parallel_mode == "ddp" and self.data_parallel_size != 1 and (
                self.tensor_parallel_size > 1 or self.pipeline_parallel_size > 1):
            # DDP only handles plain (1-D) parameters; FSDP2 composes with TP's DTensors and PP stages.
            raise ValueError(f"param '{prefix}data_parallel_mode': data parallel with tensor or pipeline "
                             f"parallel needs '{prefix}data_parallel_mode: fsdp' (DDP supports only 1-D "
                             "parallelism), got ddp")
        if self.ddp_comm_hook != "none" and self.data_parallel_mode != "ddp":
            raise ValueError(f"'{prefix}ddp_comm_hook' applies to data_parallel_mode ddp only")

    @property
    def world_size(self) -> int:
        """Processes the layout needs; 0 when data_parallel_size is 0 (decided by the launch)."""
        return self.data_parallel_size * self.tensor_parallel_size * self.pipeline_parallel_size

    def resolve(self, world_size: int, prefix: str) -> ParallelParams:
        """The layout for `world_size` processes: data_parallel_size 0 becomes world / (tensor x pipeline)."""
        model_parallel = self.tensor_parallel_size * self.pipeline_parallel_size
        if self.data_parallel_size == 0:
            if world_size % model_parallel:
                raise ValueError(f"param '{prefix}data_parallel_size: 0' needs a process count that is a "
                                 f"multiple of tensor x pipeline parallel = {model_parallel}, got {world_size} "
                                 "processes")
            return dataclasses.replace(self, data_parallel_size=world_size // model_parallel)
        if self.world_size != world_size:
            raise ValueError(f"params '{prefix.rstrip('.')}': data x tensor x pipeline parallel = "
                             f"{self.data_parallel_size} x {self.tensor_parallel_size} x {self.pipeline_parallel_size} "
                             f"= {self.world_size} processes, but {world_size} processes run (set "
                             f"'{_section(prefix)}nproc_per_node: 0' to start exactly as many, or "
                             f"'{prefix}data_parallel_size: 0' to follow the launch)")
        return self

    def check_model(self, num_layers: int, num_heads: int, num_kv_heads: int, hidden_dim: int, prefix: str) -> None:
        tp, pp = self.tensor_parallel_size, self.pipeline_parallel_size
        if num_heads % tp or num_kv_heads % tp or hidden_dim % tp:
            allowed = [d for d in range(1, num_heads + 1) if not (num_heads % d or num_kv_heads % d or hidden_dim % d)]
            raise ValueError(f"param '{prefix}tensor_parallel_size': must divide the model's heads "
                             f"({num_heads}), kv heads ({num_kv_heads}) and MLP width ({hidden_dim}): one of "
                             f"{', '.join(map(str, allowed))}, got {tp}")
        if num_layers < pp:
            raise ValueError(f"param '{prefix}pipeline_parallel_size': must be at most the model's "
                             f"{num_layers} layers, got {pp}")

    def check_layout(self, num_processes: int, model: ModelConfig, num_microbatches: int, prefix: str) -> None:
        """What `parallelize` and the pipeline schedule would refuse in every worker, checked once, before any
        starts: the fields against each other (`check`), the sizes against the processes to launch
        (`num_processes`; 0 = as many as the layout needs), the model's heads, width and layers, and the
        micro-batches per step."""
        self.check(prefix)
        if num_processes:
            self.resolve(num_processes, prefix)
        self.check_model(model.num_layers, model.num_heads, model.kv_heads, model.hidden_dim, prefix)
        pp = self.pipeline_parallel_size
        if pp > 1 and self.pipeline_schedule == "1f1b" and num_microbatches < pp:
            # torch's Schedule1F1B refuses fewer micro-batches than stages
            raise ValueError(f"param '{_section(prefix)}gradient_accumulation_steps': the 1f1b pipeline schedule "
                             f"needs at least one micro-batch per stage, >= {pp} ({prefix}pipeline_parallel_size), "
                             f"got {num_microbatches}")


def _section(prefix: str) -> str:
    """The key prefix of the section holding the layout: `train.` for `train.parallel.`."""
    return prefix.rstrip(".").rpartition(".")[0] + "."


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str) -> DistEnv:
    """Join the process group torchrun set up (gloo on CPU, NCCL on GPU); without torchrun, one process."""
    want_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("param 'train.device' is cuda but no CUDA device is available")
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    dev = torch.device("cuda", local_rank) if want_cuda else torch.device("cpu")
    if want_cuda:
        torch.cuda.set_device(dev)
    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group("nccl" if want_cuda else "gloo", store=_attempt_store(rank, world), rank=rank,
                                world_size=world, device_id=dev if want_cuda else None)
    return DistEnv(rank, world, local_rank, local_world, dev)


@contextmanager
def distributed(device: str, num_threads: int = 0) -> Iterator[DistEnv]:
    """A stage's processes for the duration: joined to torchrun's process group (or one process alone), with
    torch's CPU threads set (`set_cpu_threads`). On the way out every rank waits for the others (after success
    only: a rank that failed would leave them waiting) and the process group is always destroyed."""
    env = init_distributed(device)
    set_cpu_threads(env, num_threads)
    try:
        yield env
        barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def set_cpu_threads(env: DistEnv, num_threads: int = 0) -> None:
    """torch's CPU threads per process: `num_threads`, or (0) the cores shared among the local processes."""
    if env.device.type == "cpu":
        torch.set_num_threads(num_threads or max(1, (os.cpu_count() or 1) // env.local_world_size))


def _attempt_store(rank: int, world: int) -> dist.Store:
    """The rendezvous store, under a prefix per torchrun restart.

    After torchrun restarts failed workers (`--max-restarts`), the agent's store still holds the previous
    attempt's keys, and gloo's connectFullMesh then dials the dead workers' addresses ("Connection
    refused", seen with torch 2.13 and `--standalone`). A prefix per attempt
    (TORCHELASTIC_RESTART_COUNT) gives every attempt fresh keys."""
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # torchrun hosts it; all are clients
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=not agent_store and rank == 0, timeout=timedelta(minutes=10),
                          multi_tenant=not agent_store)
    return dist.PrefixStore(f"refinery/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def build_mesh(env: DistEnv, p: ParallelParams) -> dist.DeviceMesh | None:
    """The (pp, dp, tp) mesh of a resolved layout (`ParallelParams.resolve`); None for one process."""
    if env.world_size == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh
    shape = (p.pipeline_parallel_size, p.data_parallel_size, p.tensor_parallel_size)
    return init_device_mesh(env.device.type, shape, mesh_dim_names=MESH_DIMS)


def mesh_coord(mesh: dist.DeviceMesh | None, dim: str) -> tuple[int, int]:
    """(this rank's index, size) along one mesh dimension; (0, 1) without a mesh."""
    if mesh is None:
        return 0, 1
    return mesh.get_local_rank(dim), mesh.size(mesh.mesh_dim_names.index(dim))


class PipelinePart(nn.Module):
    """One pipeline stage of a `Transformer`: a contiguous slice of its blocks, plus the embedding on
    the first stage and the final norm + output projection on the last. Parameter names are the
    model's own (`layers.<i>...`), so a checkpoint of any layout loads into any other."""

    def __init__(self, model: Transformer, first: int, last: int, num_layers: int) -> None:
        super().__init__()
        self.is_first, self.is_last = first == 0, last == num_layers
        self.tok_embeddings = model.tok_embeddings if self.is_first else None
        self.layers = nn.ModuleDict({str(i): model.layers[i] for i in range(first, last)})
        self.norm = model.norm if self.is_last else None
        self.output = model.output if self.is_last else None
        self.register_buffer("rope_cos", model.rope_cos, persistent=False)
        self.register_buffer("rope_sin", model.rope_sin, persistent=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Token ids (B, T) on the first stage, hidden states (B, T, dim) after; logits (B, T, vocab) out of
        the last stage."""
        if self.tok_embeddings is not None:
            h = self.tok_embeddings(h)
        T = h.shape[1]
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        if self.output is not None:
            h = self.output(self.norm(h))
        return h


def stage_layers(num_layers: int, num_stages: int, stage: int) -> tuple[int, int]:
    """Contiguous, balanced split of layers into stages: [first, last) of `stage`."""
    bounds = [round(i * num_layers / num_stages) for i in range(num_stages + 1)]
    return bounds[stage], bounds[stage + 1]


@dataclass
class Parallelized:
    """What the trainer drives: the local module(s) and, under pipeline parallelism, the schedule."""
    module: nn.Module  # the full model (DDP/FSDP wrapped or not) or this rank's PipelinePart
    schedule: object | None  # a torch.distributed.pipelining schedule when pipeline_parallel_size > 1
    mesh: dist.DeviceMesh | None
    is_last_stage: bool
    # Under PP with tied embeddings, the first and last stage each hold a copy of the tied matrix; their
    # gradients are summed over this group so both copies stay equal.
    tied_group: dist.ProcessGroup | None
    tied_param: nn.Parameter | None

    def set_gradient_sync(self, enabled: bool) -> None:
        """Skip (False) or do (True) data-parallel gradient reduction in the next backward, so that
        gradient accumulation communicates once per optimizer step. Pipeline stages do this themselves."""
        if self.schedule is not None:
            return
        if hasattr(self.module, "set_requires_gradient_sync"):  # FSDP2
            self.module.set_requires_gradient_sync(enabled)
        elif isinstance(self.module, nn.parallel.DistributedDataParallel):
            self.module.require_backward_grad_sync = enabled

    def sync_tied_gradients(self) -> None:
        if self.tied_group is None or self.tied_param.grad is None:
            return
        grad = self.tied_param.grad
        dist.all_reduce(grad.to_local() if hasattr(grad, "to_local") else grad, group=self.tied_group)

    def grad_params(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.grad is not None]

    def norm_params(self) -> list[nn.Parameter]:
        """Parameters whose gradients count in the global norm (the tied copy counted once, on the first
        stage; both copies are still clipped and updated alike)."""
        params = self.grad_params()
        if self.tied_group is not None and self.is_last_stage:
            params = [p for p in params if p is not self.tied_param]
        return params


def _tensor_parallel(model: Transformer, tp_mesh: dist.DeviceMesh) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(), "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(), "feed_forward.w2": RowwiseParallel()}
    for block in model.layers:
        parallelize_module(block, tp_mesh, plan)


def _data_parallel(module: nn.Module, blocks: list[nn.Module], p: ParallelParams, dp_mesh: dist.DeviceMesh,
                   device: torch.device) -> nn.Module:
    if p.data_parallel_mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for block in blocks:
            fully_shard(block, mesh=dp_mesh)
        fully_shard(module, mesh=dp_mesh)
        return module
    ddp = nn.parallel.DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None,
                                              process_group=dp_mesh.get_group())
    if p.ddp_comm_hook in ("fp16", "bf16"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hook = default_hooks.fp16_compress_hook if p.ddp_comm_hook == "fp16" else default_hooks.bf16_compress_hook
        ddp.register_comm_hook(dp_mesh.get_group(), hook)
    elif p.ddp_comm_hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(process_group=dp_mesh.get_group(),
                                            matrix_approximation_rank=p.powersgd_rank, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return ddp


def _tied_group(mesh: dist.DeviceMesh) -> dist.ProcessGroup:
    """The group {first stage, last stage} of this rank's (dp, tp) position. `new_group` is collective:
    every rank creates every group, in the same order."""
    ranks = mesh.mesh  # (pp, dp, tp) tensor of global ranks
    mine = None
    for d in range(ranks.shape[1]):
        for t in range(ranks.shape[2]):
            members = [int(ranks[0, d, t]), int(ranks[-1, d, t])]
            group = dist.new_group(members)
            if dist.get_rank() in members:
                mine = group
    return mine


def parallelize(model: Transformer, mesh: dist.DeviceMesh | None, p: ParallelParams, device: torch.device,
                num_microbatches: int, loss_fn) -> Parallelized:
    """Apply PP, TP, activation checkpointing, compile and DP to `model` (already on `device`), in that
    order. `loss_fn(logits, targets)` is the pipeline's loss on the last stage."""
    cfg = model.config
    if mesh is None:
        module = _local_transforms(model, list(model.layers), p)
        return Parallelized(module, None, None, True, None, None)
    pp_rank, pp_size = mesh_coord(mesh, "pp")
    if p.tensor_parallel_size > 1:
        _tensor_parallel(model, mesh["tp"])
    if pp_size > 1:
        first, last = stage_layers(cfg.num_layers, pp_size, pp_rank)
        module: nn.Module = PipelinePart(model, first, last, cfg.num_layers)
        blocks = list(module.layers.values())
    else:
        module, blocks = model, list(model.layers)
    module = _local_transforms(module, blocks, p)
    if p.data_parallel_size > 1:
        module = _data_parallel(module, blocks, p, mesh["dp"], device)
    if pp_size == 1:
        return Parallelized(module, None, mesh, True, None, None)

    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    stage = PipelineStage(module, pp_rank, pp_size, device, group=mesh["pp"].get_group())
    schedule_cls = ScheduleGPipe if p.pipeline_schedule == "gpipe" else Schedule1F1B
    # scale_grads: gradients are averaged over micro-batches, like gradient accumulation without PP.
    schedule = schedule_cls(stage, n_microbatches=num_microbatches, loss_fn=loss_fn, scale_grads=True)
    tied_group = tied_param = None
    if cfg.tie_embeddings:
        tied_group = _tied_group(mesh)
        part = module
        holder = part.tok_embeddings if part.is_first else part.output if part.is_last else None
        tied_param = holder.weight if holder is not None else None
        if tied_param is None:
            tied_group = None  # a middle stage holds neither copy
    return Parallelized(module, schedule, mesh, pp_rank == pp_size - 1, tied_group, tied_param)


def replicate(module: nn.Module, env: DistEnv) -> Parallelized:
    """`module` whole on every process, gradients averaged by DDP: the layout of the distillation
    fine-tunes (prune, qat), whose loss needs the student's full logits next to a frozen teacher that is
    replicated anyway. One process: the module itself."""
    if env.world_size == 1:
        return Parallelized(module, None, None, True, None, None)
    p = ParallelParams(data_parallel_size=env.world_size)
    mesh = build_mesh(env, p)
    return Parallelized(_data_parallel(module, [], p, mesh["dp"], env.device), None, mesh, True, None, None)


@contextmanager
def main_rank_cores(env: DistEnv) -> Iterator[None]:
    """For work only rank 0 does while the other local ranks wait (evaluation, writing outputs): rank 0
    gets the torch threads of every local rank for the duration."""
    before = torch.get_num_threads()
    if env.is_main and env.device.type == "cpu" and env.local_world_size > 1:
        torch.set_num_threads(before * env.local_world_size)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _local_transforms(module: nn.Module, blocks: list[nn.Module], p: ParallelParams) -> nn.Module:
    if p.activation_checkpointing:
        from torch.distributed._composable import checkpoint
        for block in blocks:
            checkpoint(block)
    if p.compile:
        for block in blocks:
            block.compile()
    return module


def pipeline_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy of a micro-batch on the last pipeline stage."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)
