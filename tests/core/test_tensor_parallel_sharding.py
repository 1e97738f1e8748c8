"""The pieces of tensor parallelism that need no second process: which slices a rank reads (from a real
safetensors file, through ``get_slice``), the plan's wire form, the refusals, and a worker that dies before the
group forms."""

from __future__ import annotations

import pytest
import torch
from anna_core.distributed.plan_wire import to_wire
from anna_core.distributed.sharding import Shard, ShardReader
from anna_core.distributed.state import ParallelState
from anna_core.engine.request import Request
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.sched_output import ScheduledSeq, SchedulerOutput
from anna_core.errors import AnnaError, ModelLoadError, UnsupportedModelError
from safetensors import safe_open
from safetensors.torch import save_file

from tests.core._tiny_family import load_tiny, write_tiny_config


def rank(r: int, n: int = 2) -> ParallelState:
    return ParallelState(rank=r, world_size=n)


def test_segments_split_each_part_by_heads():
    # a fused q | k | v of 4, 4, 8 rows: rank 1 of 2 holds rows 2-3 of q, 6-7 of k, 12-15 of v
    shard = Shard(0, segments=(4, 4, 8))
    assert shard.ranges(16, rank(0)) == [(0, 2), (4, 6), (8, 12)]
    assert shard.ranges(16, rank(1)) == [(2, 4), (6, 8), (12, 16)]
    with pytest.raises(ModelLoadError, match="does not divide a part of 3 rows"):
        Shard(0, segments=(3, 5)).ranges(8, rank(0))
    with pytest.raises(ModelLoadError, match="do not add up"):
        Shard(0, segments=(4, 4)).ranges(16, rank(0))


def test_padded_vocabulary_ranges():
    shard = Shard(0, pad=True)
    assert [shard.ranges(11, rank(r, 3)) for r in range(3)] == [[(0, 4)], [(4, 8)], [(8, 11)]]
    assert shard.local_size(11, 3) == 4


def test_reader_reads_each_ranks_slices(tmp_path):
    gen = torch.Generator().manual_seed(0)
    full = {"qkv.weight": torch.randn(16, 6, generator=gen), "o.weight": torch.randn(6, 8, generator=gen),
            "embed.weight": torch.randn(5, 6, generator=gen), "norm.weight": torch.randn(6, generator=gen),
            "experts.gate_up": torch.randn(3, 8, 6, generator=gen)}
    save_file(full, str(tmp_path / "m.safetensors"))
    rules = [(r"^qkv\.", Shard(0, segments=(4, 4, 8))), (r"^o\.", Shard(1)), (r"^embed\.", Shard(0, pad=True)),
             (r"^experts\.gate_up$", Shard(1, segments=(4, 4)))]
    parts = {}
    with safe_open(str(tmp_path / "m.safetensors"), framework="pt") as f:
        for r in range(2):
            reader = ShardReader(rules, rank(r))
            parts[r] = {name: reader.read(name, f.get_slice(name)) for name in full}
            for name, t in parts[r].items():
                assert tuple(t.shape) == reader.local_shape(name, full[name].shape)
    q, k, v = full["qkv.weight"].split([4, 4, 8])
    assert torch.equal(parts[1]["qkv.weight"], torch.cat([q[2:], k[2:], v[4:]]))
    assert torch.equal(torch.cat([parts[0]["o.weight"], parts[1]["o.weight"]], 1), full["o.weight"])
    assert torch.equal(parts[1]["embed.weight"][:2], full["embed.weight"][3:])
    assert torch.equal(parts[1]["embed.weight"][2], torch.zeros(6))  # the padded row of a 5-row vocabulary
    assert torch.equal(parts[0]["norm.weight"], full["norm.weight"])  # replicated
    gate, up = full["experts.gate_up"].split(4, dim=1)
    assert torch.equal(parts[0]["experts.gate_up"], torch.cat([gate[:, :2], up[:, :2]], 1))


def test_wire_copies_requests_without_host_parts():
    req = Request("r1", [1, 2, 3], SamplingParams(max_tokens=4), seed=7)
    req.output_token_ids = [9]
    req.detokenizer, req.grammar = object(), object()
    req.block_hashes = [b"x"]
    out = SchedulerOutput(seqs=[ScheduledSeq(req, 3, [9], [[0]], 0, True)], preempted=["gone"])
    wire = to_wire(out)
    light = wire.seqs[0].request
    assert light is not req and light.detokenizer is None and light.grammar is None and light.block_hashes == []
    assert light.all_token_ids == [1, 2, 3, 9] and light.seed == 7 and wire.seqs[0].token_ids == [9]
    assert wire.preempted == [] and req.detokenizer is not None  # rank 0's request untouched


def test_family_without_tensor_parallel_is_refused(tmp_path):
    with pytest.raises(UnsupportedModelError, match="does not declare tensor parallelism"):
        load_tiny(write_tiny_config(tmp_path), parallel=rank(0))


def test_group_size_must_divide():
    with pytest.raises(AnnaError, match="does not divide KV heads"):
        rank(0, 4).shard_size(2, "KV heads")


class _Exited:
    exitcode = 1


def test_a_worker_that_dies_before_joining_fails_the_start_at_once():
    from anna_core.distributed.launch import _await_workers, _store

    store = _store(0, 2, 10.0, master=True)
    with pytest.raises(AnnaError, match="rank 1 exited \\(code 1\\) before joining"):
        _await_workers(store, [_Exited()], timeout_s=30.0)


class _ImportedMain:
    exitcode = 87


def test_a_worker_that_imported_an_unguarded_main_says_to_guard_it():
    from anna_core.distributed.launch import MAIN_REIMPORTED_EXIT, _await_workers, _store

    assert _ImportedMain.exitcode == MAIN_REIMPORTED_EXIT
    store = _store(0, 2, 10.0, master=True)
    with pytest.raises(AnnaError, match='rank 1 could not start.*under `if __name__ == "__main__":`'):
        _await_workers(store, [_ImportedMain()], timeout_s=30.0)


def test_a_failed_collective_is_a_lost_rank_that_degrades_the_engine():
    from anna_core.engine.faults import StepFailures, classify_failure
    from anna_core.errors import DeviceLostError

    broken = ParallelState(rank=0, world_size=2)  # no process group: every collective fails
    for collective in (lambda: broken.all_reduce(torch.ones(2)), lambda: broken.all_gather_last(torch.ones(2)),
                       lambda: broken.broadcast_object("plan")):
        with pytest.raises(DeviceLostError, match="a rank exited or stopped answering") as err:
            collective()
        assert classify_failure(err.value) == "device"
    failures = StepFailures(max_consecutive=3)
    assert failures.failed(err.value, new_prompts=True) is not None  # at once, even in a step of new prompts
