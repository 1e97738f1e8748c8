"""Tensor parallelism over the devices of one host (Megatron-style: Shoeybi et al., "Megatron-LM", 2019).

Each rank holds a slice of every sharded weight and its own heads' caches; the scheduler runs once, on rank 0,
and broadcasts its plan. The pieces, one concept per module:

* :mod:`~anna_core.distributed.state`: :class:`ParallelState` (rank, size, process groups, the collectives the
  layers use), passed to constructors; :func:`init_parallel` joins a process group.
* :mod:`~anna_core.distributed.sharding`: :class:`Shard` rules and the :class:`ShardReader` that reads only a
  rank's slices of a safetensors checkpoint (``safe_open(...).get_slice``).
* :mod:`~anna_core.distributed.layers`: row-parallel linear layers and the vocabulary-parallel embedding, and
  :func:`parallelize` which swaps them into a meta-built model.
* :mod:`~anna_core.distributed.plan_wire`: the scheduler's plan as it crosses to the workers.
* :mod:`~anna_core.distributed.engine`: :class:`TensorParallelEngine` (rank 0) and :func:`serve_steps` (the
  workers' loop).
* :mod:`~anna_core.distributed.launch`: starting one worker process per rank > 0 (``torch.multiprocessing``
  spawn) and stopping them.

A family takes part by declaring ``ModelFamilySpec.tensor_parallel`` and accepting ``parallel=`` in its loader.
"""

from anna_core.distributed.state import SINGLE, ParallelState

__all__ = ["SINGLE", "ParallelState"]
