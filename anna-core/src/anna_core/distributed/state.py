"""The parallel state a rank's layers and engine are given: rank, size, process groups and collectives."""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from typing import Any

import attrs
import torch

from anna_core.errors import AnnaError, DeviceLostError

BACKENDS = {"cuda": "nccl", "xpu": "xccl", "cpu": "gloo"}
"""The collective backend per device type (XPU: XCCL where the installed torch provides it)."""

PLAN_WAIT = datetime.timedelta(days=3650)
"""How long a worker rank waits for rank 0's next plan: without end in practice (an idle server keeps its workers;
a rank 0 that dies closes its connections, which ends the wait at once)."""


@attrs.frozen
class ParallelState:
    """Where this process stands in a tensor-parallel group of ``world_size`` ranks.

    Attributes:
        rank: this process's rank, 0 (the driver: scheduler, sampling, outputs) to ``world_size - 1``.
        world_size: ranks sharing the model (1: no parallelism, every collective is the identity).
        group: the process group of the device collectives (NCCL on CUDA, gloo on the CPU).
        cpu_group: a gloo group for host tensors (the group's own on the CPU), its collectives bounded alike.
        plan_group: the gloo group that carries the scheduler's plan (host objects) from rank 0: bounded on rank 0,
            :data:`PLAN_WAIT` on the others (a worker waits for the next request as long as the server idles).

    A collective that fails (a rank exited, or did not answer within the group's timeout) raises
    :class:`~anna_core.errors.DeviceLostError`: the ranks' collectives no longer line up, so the group can compute
    nothing more (the engine degrades, :mod:`anna_core.engine.faults`).
    """

    rank: int = 0
    world_size: int = 1
    group: Any = None
    cpu_group: Any = None
    plan_group: Any = None

    @property
    def is_parallel(self) -> bool:
        return self.world_size > 1

    def shard_size(self, size: int, what: str) -> int:
        """``size / world_size``.

        Raises:
            AnnaError: ``size`` is not a multiple of ``world_size`` (``what`` names it in the message).
        """
        if size % self.world_size:
            raise AnnaError(f"tensor parallel size {self.world_size} does not divide {what} ({size})")
        return size // self.world_size

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks, in place; returns it (the identity at size 1)."""
        if self.world_size > 1:
            with _collective("all-reduce"):
                torch.distributed.all_reduce(x, group=self.group)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """``[..., n]`` on every rank -> ``[..., world_size * n]``, rank 0's columns first."""
        if self.world_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        with _collective("all-gather"):
            torch.distributed.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)

    def broadcast_object(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` (pickled over ``plan_group``) on every rank; rank 0 gets its own back."""
        box = [obj]
        with _collective("plan broadcast"):
            torch.distributed.broadcast_object_list(box, src=0, group=self.plan_group)
        return box[0]


@contextlib.contextmanager
def _collective(what: str) -> Iterator[None]:
    """Turn a failed collective into :class:`~anna_core.errors.DeviceLostError` (the group is broken)."""
    try:
        yield
    except Exception as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DeviceLostError(f"a tensor-parallel {what} failed (a rank exited or stopped answering): {text}") from exc


SINGLE = ParallelState()
"""One rank: the state of every model loaded without tensor parallelism."""


def rank_device(device: torch.device, rank: int) -> torch.device:
    """The device of ``rank``: ``cuda:rank`` / ``xpu:rank`` on an accelerator (one per rank), the CPU as is."""
    device = torch.device(device)
    return device if device.type == "cpu" else torch.device(device.type, rank)


def init_parallel(rank: int, world_size: int, device: torch.device, store: Any,
                  timeout_s: float = 600.0) -> ParallelState:
    """Join the process group of ``world_size`` ranks as ``rank``, meeting the others at ``store`` (a
    ``torch.distributed.TCPStore``: rank 0's server, the other ranks' clients; ``timeout_s`` bounds each collective,
    except a worker's wait for rank 0's next plan, which is :data:`PLAN_WAIT`).

    The device collectives use NCCL on CUDA (its NVLink SHARP / multicast left off: ``NCCL_NVLS_ENABLE=0``
    unless the environment sets it), XCCL on XPU and gloo on the CPU; the plan from rank 0 travels over a
    gloo group of its own. On an accelerator the rank's device (``rank_device``) is made current and the device
    communicator is created by a first all-reduce (a graph captured later must not be the first to use it).

    Raises:
        AnnaError: no backend for the device type in this torch build, or a bad rank / size.
    """
    if not 0 <= rank < world_size:
        raise AnnaError(f"rank {rank} is outside a tensor-parallel group of {world_size}")
    device = torch.device(device)
    backend = BACKENDS.get(device.type)
    if backend is None or not torch.distributed.is_available() or not torch.distributed.is_backend_available(backend):
        raise AnnaError(f"tensor parallelism on {device.type} needs the {backend or 'a collective'} backend, "
                        "which this torch build lacks")
    if device.type == "cuda":
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        torch.cuda.set_device(rank_device(device, rank))
    elif device.type == "xpu":
        torch.xpu.set_device(rank_device(device, rank))
    timeout = datetime.timedelta(seconds=timeout_s)
    torch.distributed.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    world = torch.distributed.group.WORLD
    cpu_group = world if backend == "gloo" else torch.distributed.new_group(backend="gloo", timeout=timeout)
    # the timeout is each rank's own: rank 0 bounds its sends, a worker waits as long as the server idles
    plan_group = torch.distributed.new_group(backend="gloo", timeout=timeout if rank == 0 else PLAN_WAIT)
    if backend != "gloo":  # create the device communicator now, not inside the first captured graph
        torch.distributed.all_reduce(torch.zeros(1, device=rank_device(device, rank)), group=world)
    return ParallelState(rank=rank, world_size=world_size, group=world, cpu_group=cpu_group, plan_group=plan_group)


def destroy_parallel(state: ParallelState) -> None:
    """Leave the process group ``state`` joined (nothing at size 1)."""
    if state.is_parallel and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
