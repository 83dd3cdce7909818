"""Scale-out: the same training code on one CPU, one GPU, or many processes (torchrun).

``init_distributed`` reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK) and
starts a process group: NCCL on GPUs, gloo on CPUs. Parallelism is applied as a function
to an unchanged model (``apply_parallelism``): DDP wraps the whole train module; FSDP2
calls ``fully_shard`` on every transformer block and then on the root, so parameters,
gradients and optimizer state are sharded across processes.

Checkpoints are always full (unsharded) state dicts gathered through
``torch.distributed.checkpoint.state_dict``, so a run saved with N processes resumes with
N (and exports) like a single-process one.

Workers die with their launcher: on Linux a process started by torchrun asks the kernel
(``prctl(PR_SET_PDEATHSIG, SIGTERM)``) for SIGTERM when its parent dies, so a torchrun killed
with SIGKILL (which it cannot forward) stops its workers through their ordinary SIGTERM exit
instead of leaving them training, re-parented, to the end. Elsewhere this is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from contextlab.errors import UserError


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str = ""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def pick_device(pref: str, local_rank: int = 0) -> torch.device:
    if pref == "auto":
        pref = "cuda" if torch.cuda.is_available() else "cpu"
    if pref == "cuda":
        if not torch.cuda.is_available():
            raise UserError("train.device is cuda but no GPU is visible; use train.device=cpu or auto")
        return torch.device("cuda", local_rank)
    if pref != "cpu":
        raise UserError(f"unknown train.device {pref!r}; use auto, cpu or cuda")
    return torch.device("cpu")


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_launcher() -> bool:
    """Under torchrun on Linux: have the kernel send this process SIGTERM when its parent (the
    torchrun agent) dies, and send it now if the parent is already gone. True when asked."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the launcher died before the kernel was asked
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def init_distributed(device_pref: str = "auto") -> DistInfo:
    die_with_launcher()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_pref, local)
    if world == 1:
        return DistInfo(device=device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return DistInfo(rank=rank, world_size=world, local_rank=local, device=device, backend=backend)


def set_determinism(info: DistInfo, deterministic: bool) -> None:
    """On CUDA: true fp32 matmuls (no TF32) and, if asked, deterministic kernels, so that a rerun or a
    resumed run repeats every bit (CPU kernels are deterministic at a fixed thread count already)."""
    if info.device.type != "cuda":
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts
    torch.use_deterministic_algorithms(
        deterministic, warn_only=True
    )  # warn where no deterministic kernel exists
    torch.backends.cudnn.deterministic = deterministic


def synchronize(info: DistInfo) -> None:
    """Wait for the device's queued work (before reading a clock)."""
    if info.device.type == "cuda":
        torch.cuda.synchronize(info.device)


def shutdown(finished: DistInfo | None = None) -> None:
    """Tear down the process group. After a run that ``finished`` on every rank, first wait for
    all ranks: a gloo rank that destroys its group while a peer is still talking to it can abort
    that peer ("terminate called without an active exception"). Not after an error: the other
    ranks may never reach the barrier (torchrun stops them)."""
    if dist.is_initialized():
        if finished is not None and finished.enabled:
            dist.barrier()
        dist.destroy_process_group()


def apply_parallelism(module: nn.Module, info: DistInfo, strategy: str) -> nn.Module:
    """Wrap ``module`` for ``strategy`` ("ddp" or "fsdp"); unchanged when single-process."""
    if not info.enabled:
        return module
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [info.device.index] if info.device.type == "cuda" else None
        return DDP(module, device_ids=ids)
    if strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(info.device.type, (info.world_size,))
        for block in module.model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(module, mesh=mesh)
        return module
    raise UserError(f"unknown train.parallel {strategy!r}; use ddp or fsdp")


def unwrap(module: nn.Module) -> nn.Module:
    return (
        module.module
        if hasattr(module, "module") and isinstance(module, nn.parallel.DistributedDataParallel)
        else module
    )


def full_state_dicts(module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Full (unsharded, CPU) model and optimizer state dicts, identical for 1 or N processes."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(unwrap(module), optimizer, options=opts)


def load_full_state_dicts(
    module: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict, optim_state: dict
) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    opts = StateDictOptions(full_state_dict=True, strict=True)
    set_state_dict(
        unwrap(module), optimizer, model_state_dict=model_state, optim_state_dict=optim_state, options=opts
    )


def all_reduce_sum(values: list[float], info: DistInfo) -> list[float]:
    if not info.enabled:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=info.device if info.backend == "nccl" else "cpu")
    dist.all_reduce(t)
    return t.tolist()


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """The torch seed of process ``rank`` > 0 (rank 0 goes on with the run's own stream): its dropout
    draws differ from the other processes'. ``step``: where a resume found no state saved for it."""
    return (seed * 1_000_003 + rank * 7_919 + step * 104_729) % (2**63 - 1)


def gather_rng_states(info: DistInfo) -> list[dict] | None:
    """Every process's torch RNG states (CPU, and its CUDA device's), in rank order; None for one process.
    A collective: every rank calls it."""
    if not info.enabled:
        return None
    mine = {"torch": torch.get_rng_state()}
    if info.device.type == "cuda":
        mine["cuda"] = torch.cuda.get_rng_state(info.device)
    states: list = [None] * info.world_size
    dist.all_gather_object(states, mine)
    return [{k: v.cpu() for k, v in s.items()} for s in states]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
