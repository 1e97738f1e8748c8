"""Starting the worker processes of a tensor-parallel group (ranks 1 .. N-1; the caller is rank 0).

Each worker is a ``torch.multiprocessing`` spawn process: it joins the process group, loads its shard of the
model with the caller's load options, builds the same engine and runs
:func:`~anna_core.distributed.engine.serve_steps` until rank 0 stops it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import torch

from anna_core.distributed.state import ParallelState, destroy_parallel, init_parallel, rank_device
from anna_core.errors import AnnaError, ModelLoadError, UnsupportedModelError

log = logging.getLogger("anna.distributed")

JOIN_TIMEOUT_S = 300.0
"""How long the workers may take to start (spawn, import torch and Anna) and reach the rendezvous."""
COLLECTIVE_TIMEOUT_S = 600.0
"""How long a collective of a step may wait for the other ranks (a worker's wait for the next plan has no bound:
:data:`~anna_core.distributed.state.PLAN_WAIT`)."""
WORKER_NAME = "anna-tp-rank"
"""The worker processes' name prefix (with the rank)."""
MAIN_REIMPORTED_EXIT = 87
"""A worker's exit code when, importing the caller's main module at spawn, it was asked to start a group itself:
the caller's script builds its ``LLM`` without an ``if __name__ == "__main__":`` guard."""


@attrs.frozen
class WorkerSpec:
    """What every worker rebuilds (picklable).

    Attributes:
        model_dir: the checkpoint.
        load_options: keyword arguments of :func:`anna_core.loading.load_model` besides ``model`` / ``device``
            / ``parallel`` (dtype, load format, chat template, ...).
        device: the device type of the group (``"cuda"``, ``"xpu"``, ``"cpu"``); rank ``r`` serves on
            ``rank_device(device, r)``.
        build: lazy ``"module:attr"`` of the task's engine builder (``build(loaded, config, runner, **options)``).
        config / runner / task_options: the engine and runner configurations and the task's options, as rank 0's.
        world_size: ranks in the group.
        port: the port of rank 0's rendezvous store (on 127.0.0.1).
        num_threads: torch's intra-op threads per worker (CPU).
        timeout_s: how long a step's collective may wait (seconds), as rank 0's.
    """

    model_dir: str
    load_options: dict[str, Any]
    device: str
    build: str
    config: Any
    runner: Any
    task_options: dict[str, Any]
    world_size: int
    port: int
    num_threads: int
    timeout_s: float = COLLECTIVE_TIMEOUT_S


JOINED = "anna/joined/"
"""Rendezvous-store key prefix a worker sets (with its rank) once it reaches the store."""
JOIN_POLL_S = 0.2


def _store(port: int, world_size: int, timeout_s: float, master: bool) -> Any:
    """Rank 0's rendezvous store (``master``: a server on a free port of 127.0.0.1 when ``port`` is 0) or a client
    of it."""
    return torch.distributed.TCPStore("127.0.0.1", port, world_size, master, timeout=timedelta(seconds=timeout_s),
                                      wait_for_workers=False)


def _await_workers(store: Any, processes: list[Any], timeout_s: float) -> None:
    """Wait until every worker has reached the store; a worker that exits first fails the start at once.

    Raises:
        AnnaError: a worker exited before joining, or not all joined within ``timeout_s``.
    """
    keys = [f"{JOINED}{rank}" for rank in range(1, len(processes) + 1)]
    deadline = time.monotonic() + timeout_s
    while not store.check(keys):
        for rank, p in enumerate(processes, start=1):
            if p.exitcode == MAIN_REIMPORTED_EXIT:
                raise AnnaError(f"tensor-parallel rank {rank} could not start: the workers are spawned and import "
                                "the main module, which builds the group again. In a script, create the LLM (and "
                                'run the rest) under `if __name__ == "__main__":`')
            if p.exitcode is not None:
                raise AnnaError(f"tensor-parallel rank {rank} exited (code {p.exitcode}) before joining the group; "
                                "its error is logged above")
        if time.monotonic() > deadline:
            raise AnnaError(f"the tensor-parallel workers did not join within {timeout_s:.0f} s")
        time.sleep(JOIN_POLL_S)


def _worker_main(rank: int, spec: WorkerSpec) -> None:
    """A worker's life. It leaves the caller's process group first: a Ctrl-C or a signal to the group stops rank 0,
    which then stops the workers in order (a worker killed first would fail rank 0's last collectives)."""
    from anna_core.distributed.engine import serve_steps
    from anna_core.loading import load_model
    from anna_core.registry import resolve

    if os.name == "posix":
        os.setsid()
    torch.set_num_threads(spec.num_threads)
    store = _store(spec.port, spec.world_size, JOIN_TIMEOUT_S, master=False)
    store.set(f"{JOINED}{rank}", "1")
    parallel = init_parallel(rank, spec.world_size, torch.device(spec.device), store, spec.timeout_s)
    try:
        loaded = load_model(spec.model_dir, device=str(rank_device(torch.device(spec.device), rank)),
                            parallel=parallel, **spec.load_options)
        engine = resolve(spec.build)(loaded, spec.config, spec.runner, **spec.task_options)
        serve_steps(engine)
    finally:
        destroy_parallel(parallel)


class WorkerGroup:
    """The worker processes of a group and rank 0's :class:`ParallelState`.

    Use :meth:`start`; :meth:`close` (after the engine's own ``close``) joins the workers and leaves the group.
    """

    def __init__(self, processes: list[Any], parallel: ParallelState):
        self.processes = processes
        self.parallel = parallel

    @classmethod
    def start(cls, model_dir: str | Path, *, tensor_parallel_size: int, device: str, load_options: dict[str, Any],
              build: str, config: Any, runner: Any, task_options: dict[str, Any] | None = None,
              timeout_s: float = COLLECTIVE_TIMEOUT_S) -> WorkerGroup:
        """Spawn ranks ``1 .. tensor_parallel_size - 1`` and join the group as rank 0; ``timeout_s`` bounds each
        collective of a step (seconds).

        Called in a worker while it imports the caller's main module (a script without an
        ``if __name__ == "__main__":`` guard), it ends that worker with :data:`MAIN_REIMPORTED_EXIT` instead of
        spawning again, and the caller's start fails saying so.

        Raises:
            AnnaError: a size below 2, more ranks than devices, no collective backend for the device, or a worker
                that exited (or did not start within :data:`JOIN_TIMEOUT_S`) before joining.
        """
        if multiprocessing.current_process().name.startswith(WORKER_NAME):  # spawn names it before the import
            sys.stderr.write(f"{multiprocessing.current_process().name}: the main module builds a tensor-parallel "
                             'group when imported; guard it with `if __name__ == "__main__":`\n')
            raise SystemExit(MAIN_REIMPORTED_EXIT)
        device_type = torch.device(device).type
        if tensor_parallel_size < 2:
            raise AnnaError(f"a tensor-parallel group has at least 2 ranks, got {tensor_parallel_size}")
        if device_type == "cuda" and tensor_parallel_size > torch.cuda.device_count():
            raise AnnaError(f"--tensor-parallel-size {tensor_parallel_size} needs as many GPUs; "
                            f"{torch.cuda.device_count()} are visible")
        store = _store(0, tensor_parallel_size, JOIN_TIMEOUT_S, master=True)
        spec = WorkerSpec(str(model_dir), dict(load_options), device_type, build, config, runner,
                          dict(task_options or {}), tensor_parallel_size, store.port, torch.get_num_threads(),
                          timeout_s)
        ctx = torch.multiprocessing.get_context("spawn")
        processes = []
        for rank in range(1, tensor_parallel_size):
            p = ctx.Process(target=_worker_main, args=(rank, spec), daemon=True, name=f"{WORKER_NAME}{rank}")
            p.start()
            processes.append(p)
        try:
            _await_workers(store, processes, JOIN_TIMEOUT_S)
            parallel = init_parallel(0, tensor_parallel_size, torch.device(device_type), store, timeout_s)
        except BaseException:
            for p in processes:
                p.kill()
            raise
        log.info("tensor parallel group of %d ranks on %s", tensor_parallel_size, device_type)
        return cls(processes, parallel)

    def close(self, timeout_s: float = 30.0) -> None:
        """Join the workers (killing any still alive after ``timeout_s``) and leave the group."""
        for p in self.processes:
            p.join(timeout_s)
            if p.is_alive():
                log.warning("%s did not stop; killing it", p.name)
                p.kill()
                p.join()
        destroy_parallel(self.parallel)

    def kill(self) -> None:
        """Stop the workers now (rank 0 failed before they could be told to) and leave the group."""
        for p in self.processes:
            p.kill()
            p.join()
        destroy_parallel(self.parallel)



def load_engine(model_dir: str | Path, load_kwargs: dict[str, Any], build: str, config: Any, runner: Any, *,
                tensor_parallel_size: int = 1, task_options: dict[str, Any] | None = None,
                timeout_s: float = COLLECTIVE_TIMEOUT_S) -> tuple[Any, Any, WorkerGroup | None]:
    """Load the model and build its task's engine, on one device or over a tensor-parallel group:
    ``(rank 0's LoadedModel, engine, workers or None)``. ``anna serve`` / ``generate`` / ``bench`` and ``LLM``
    build through it; :func:`close_engine` stops the workers.

    Args:
        load_kwargs: :func:`anna_core.loading.load_model`'s keyword arguments (``device`` among them).
        build: lazy ``"module:attr"`` of the task's engine builder; config / runner / task_options: its arguments.
        tensor_parallel_size: devices to split the model over (1: none; rank ``r`` on ``cuda:r`` / ``xpu:r``).
        timeout_s: how long a step's collective may wait for the other ranks (seconds; an idle group waits for the
            next request without a bound).

    Raises:
        AnnaError: ``tensor_parallel_size`` below 1 or above the devices visible, or what loading and building
            raise (on rank 0; the workers are stopped then).
        UnsupportedModelError / ModelLoadError: (before any worker starts) the family does not declare tensor
            parallelism, the checkpoint is a GGUF file, or the size does not divide what the family shards.
    """
    from anna_core.device import resolve_device
    from anna_core.loading import load_model
    from anna_core.registry import resolve

    if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
        raise AnnaError(f"tensor_parallel_size must be a positive integer, got {tensor_parallel_size!r}")
    task_options = dict(task_options or {})
    if tensor_parallel_size == 1:
        loaded = load_model(model_dir, **load_kwargs)
        return loaded, resolve(build)(loaded, config, runner, **task_options), None
    options = dict(load_kwargs)
    check_group_size(model_dir, options.get("gguf_file"), tensor_parallel_size)
    device = resolve_device(options.pop("device", "auto"))
    group = WorkerGroup.start(model_dir, tensor_parallel_size=tensor_parallel_size, device=str(device),
                              load_options=options, build=build, config=config, runner=runner,
                              task_options=task_options, timeout_s=timeout_s)
    try:
        loaded = load_model(model_dir, device=str(rank_device(device, 0)), parallel=group.parallel, **options)
        engine = resolve(build)(loaded, config, runner, **task_options)
    except BaseException:
        group.kill()
        raise
    return loaded, engine, group


def check_group_size(model_dir: str | Path, gguf_file: str | None, tensor_parallel_size: int) -> None:
    """Refuse a group the checkpoint cannot be split over, in the caller before any worker is spawned.

    Raises:
        UnsupportedModelError: the checkpoint's family does not declare ``tensor_parallel``.
        ModelLoadError: a GGUF checkpoint (tensor parallelism loads safetensors), or the family's
            ``tensor_parallel_check`` finds a head count or width that ``tensor_parallel_size`` does not divide.
    """
    from anna_core.model_dir import inspect_model_dir, select_family
    from anna_core.plugins import model_families
    from anna_core.registry import resolve

    source = inspect_model_dir(model_dir, gguf_file=gguf_file)
    family = select_family(source, model_families())
    if not family.tensor_parallel:
        raise UnsupportedModelError(f"--tensor-parallel-size {tensor_parallel_size}: the {family.name!r} family "
                                    f"({family.distribution or 'a plugin'}) does not declare tensor parallelism")
    if source.format == "gguf":
        raise ModelLoadError("tensor parallelism loads dense safetensors (or dummy) weights, not a GGUF file; "
                             "serve the model's safetensors checkpoint")
    if family.tensor_parallel_check:
        resolve(family.tensor_parallel_check)(source.config, tensor_parallel_size)


def close_engine(engine: Any, workers: WorkerGroup | None) -> None:
    """Stop a tensor-parallel group's workers (``engine``: rank 0's, its steps over); nothing without workers. A
    group that cannot be told any more (a worker died) is killed."""
    if workers is None:
        return
    try:
        engine.close()
    except Exception as exc:  # the collective failed: a worker is gone
        log.warning("the tensor-parallel workers could not be told to stop (%s); killing them", exc)
        workers.kill()
        return
    workers.close()
