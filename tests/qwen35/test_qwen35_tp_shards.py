"""Each rank's Qwen3.5 shard, built without a process group (building and loading run no collective): the two
ranks' slices put back together are the one-device model's weights, read from a checkpoint or drawn at random
(``--load-format dummy``), so a size-2 group with random weights serves the tokens size 1 does."""

from __future__ import annotations

import pytest
import torch
from anna_core.distributed.state import ParallelState
from anna_core.errors import ModelLoadError
from anna_core.kernels.registry import KernelRegistry
from anna_core.model_dir import inspect_model_dir
from anna_qwen35.loader import load


def _load(path, load_format, parallel=None):
    extra = {} if parallel is None else {"parallel": parallel}
    return load(inspect_model_dir(path), device=torch.device("cpu"), dtype=torch.float32, load_format=load_format,
                kernels=KernelRegistry.from_plugins(), **extra).model


@pytest.mark.parametrize("load_format", ["safetensors", "dummy"])
def test_rank_shards_put_back_are_the_whole_model(tmp_path, load_format):
    from anna_qwen35.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path, variant="dense", tie=False, vocab_size=383)  # a vocabulary 2 leaves odd
    whole = _load(path, load_format)
    ranks = [_load(path, load_format, ParallelState(rank=r, world_size=2)) for r in range(2)]
    lin = [m.model.layers[0].linear_attn for m in (whole, *ranks)]
    assert torch.equal(torch.cat([lin[1].out_proj.weight, lin[2].out_proj.weight], 1), lin[0].out_proj.weight)
    assert torch.equal(torch.cat([lin[1].A_log, lin[2].A_log]), lin[0].A_log)
    conv = [x.conv1d.weight for x in lin]  # q | k | v channels, each split by heads
    key = lin[0].key_dim
    q0, k0, v0 = conv[0].split([key, key, lin[0].value_dim])
    q1, k1, v1 = conv[1].split([key // 2, key // 2, lin[0].value_dim // 2])
    q2, k2, v2 = conv[2].split([key // 2, key // 2, lin[0].value_dim // 2])
    assert torch.equal(torch.cat([q1, q2]), q0) and torch.equal(torch.cat([k1, k2]), k0)
    assert torch.equal(torch.cat([v1, v2]), v0)
    embed = [m.model.embed_tokens.weight for m in (whole, *ranks)]
    assert embed[1].shape[0] == embed[2].shape[0] == 192  # ceil(383 / 2); the last rank's last row is padding
    assert torch.equal(torch.cat([embed[1], embed[2]])[:383], embed[0]) and not embed[2][-1].any()
    head = [m.lm_head.weight for m in (whole, *ranks)]
    assert torch.equal(torch.cat([head[1], head[2]])[:383], head[0])


def test_heads_the_size_does_not_divide_are_a_load_error(tmp_path):
    from anna_qwen35.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path, variant="dense", num_kv_heads=1)
    with pytest.raises(ModelLoadError, match="does not divide KV heads"):
        _load(path, "safetensors", ParallelState(rank=0, world_size=2))


@pytest.mark.parametrize("options", [{"expert_quant": "int8"}, {"weight_quant": "int4"}, {"lm_head_quant": "int8"}])
def test_quantized_loads_are_refused_under_tensor_parallelism(tmp_path, options):
    from anna_qwen35.tiny import build_tiny_checkpoint

    path = build_tiny_checkpoint(tmp_path, variant="moe")
    with pytest.raises(ModelLoadError, match="tensor parallelism loads dense"):
        load(inspect_model_dir(path), device=torch.device("cpu"), dtype=torch.float32, load_format="safetensors",
             kernels=KernelRegistry.from_plugins(), parallel=ParallelState(rank=0, world_size=2), **options)


@pytest.mark.parametrize("size", [3, 8])
def test_a_size_that_does_not_divide_is_refused_before_any_worker_starts(tmp_path, monkeypatch, size):
    from anna_core.distributed import launch
    from anna_core.engine.config import EngineConfig
    from anna_qwen35.tiny import build_tiny_checkpoint

    def spawn(*args, **kwargs):
        raise AssertionError("workers were spawned")

    monkeypatch.setattr(launch.WorkerGroup, "start", spawn)
    path = build_tiny_checkpoint(tmp_path, variant="dense")
    with pytest.raises(ModelLoadError, match=f"tensor parallel size {size} does not divide attention heads"):
        launch.load_engine(path, {"device": "cpu"}, "anna_core.tasks.generate:build", EngineConfig(), None,
                           tensor_parallel_size=size)
