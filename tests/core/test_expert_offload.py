"""``OffloadedExperts`` on the CPU (copies run at once, no streams): the LRU on scripted expert choices with
exact hit / miss / prefetch counters, and every call equal to the resident ``moe_experts`` result bit for bit."""

import pytest
import torch
from anna_core.device import accelerator
from anna_core.kernels.reference.moe import moe_experts
from anna_core.layers.expert_offload import ExpertStore, OffloadedExperts
from anna_core.layers.moe import RoutedExpertsModule
from torch import nn

E, K, H, INTER = 8, 2, 16, 8


class _Ops:
    def get(self, name, **_):
        assert name == "moe_experts"
        return moe_experts


class FakeExperts(RoutedExpertsModule):
    activation = "silu"

    def __init__(self, seed: int):
        super().__init__(E, K)
        gen = torch.Generator().manual_seed(seed)
        self.ops = _Ops()
        self.gate_up_proj = nn.Parameter(torch.randn(E, 2 * INTER, H, generator=gen) * 0.3, requires_grad=False)
        self.down_proj = nn.Parameter(torch.randn(E, H, INTER, generator=gen) * 0.3, requires_grad=False)

    def forward(self, x, weights, experts):
        return moe_experts(x, self.gate_up_proj, self.down_proj, weights, experts, self.activation)


def _store(num_layers: int, cached: int, prefetch: bool = False):
    store = ExpertStore(device=torch.device("cpu"), dtype=torch.float32, num_experts=E, top_k=K,
                        gate_up_shape=(2 * INTER, H), down_shape=(H, INTER), cached_per_layer=cached,
                        prefetch=prefetch, accel=accelerator("cpu"))
    resident = [FakeExperts(seed=i) for i in range(num_layers)]
    return store, resident, [OffloadedExperts(r, store, i) for i, r in enumerate(resident)]


def _call(resident, offloaded, ids):
    ids = torch.tensor(ids, dtype=torch.int64)
    gen = torch.Generator().manual_seed(int(ids.sum()))
    x = torch.randn(ids.shape[0], H, generator=gen)
    w = torch.softmax(torch.randn(ids.shape, generator=gen), -1)
    out = offloaded(x, w, ids)
    assert torch.equal(out, resident(x, w, ids))  # the same op on the same experts: bit for bit
    return out


SCRIPT = [[[0, 1]], [[1, 2]], [[3, 4], [1, 3]], [[0, 5], [6, 7]]]


def test_lru_counters_on_a_scripted_sequence():
    store, [res], [off] = _store(1, cached=3)
    for ids in SCRIPT:
        _call(res, off, ids)
    s = store.stats
    # call 1: 0, 1 miss; call 2: 1 hits, 2 misses; call 3: 1 hits, 3 and 4 miss (evicting 0 and 2);
    # call 4: 0, 5, 6 miss (evicting 1, 3, 4), 7 misses with every slot in use: straight into the scratch
    assert (s.hits, s.misses, s.calls) == (2, 9, 4)
    assert s.bytes_copied == 9 * store.expert_bytes == 9 * (2 * INTER * H + H * INTER) * 4
    assert list(off.lru) == [0, 5, 6] and s.hit_rate == pytest.approx(2 / 11)
    assert store.report()["cached_experts_per_layer"] == 3
    assert store.device_bytes() == (E + 3) * store.expert_bytes


def test_no_cache_copies_every_chosen_expert_each_call():
    store, [res], [off] = _store(1, cached=0)
    for ids in SCRIPT + SCRIPT:
        _call(res, off, ids)
    assert (store.stats.hits, store.stats.misses) == (0, 2 * (2 + 2 + 3 + 4))
    assert not off.lru and store.stats.hit_rate == 0.0


def test_a_cache_of_every_expert_misses_each_expert_once():
    store, [res], [off] = _store(1, cached=E)
    for ids in SCRIPT + SCRIPT + [[[e, (e + 1) % E] for e in range(E)]]:
        _call(res, off, ids)
    assert store.stats.misses == E and store.stats.hits == 2 * 11 + E - E  # every later choice hits
    assert sorted(off.lru) == list(range(E))


def test_prefetch_brings_the_next_layers_usual_experts():
    store, res, off = _store(2, cached=2, prefetch=True)
    steps = [([[0, 1]], [[2, 3]]), ([[4, 5]], [[6, 7]])] * 6  # layer 0's choice -> layer 1's, alternating
    for ids0, ids1 in steps:
        _call(res[0], off[0], ids0)
        _call(res[1], off[1], ids1)
    s = store.stats
    # layer 0 misses all 24 (2 slots, alternating); layer 1 misses both experts in the first 8 steps, then each
    # pattern was seen PREFETCH_MIN_SEEN times and the last 4 steps' experts are prefetched (2 each) and hit
    assert (s.hits, s.misses, s.prefetched, s.prefetch_hits) == (8, 24 + 16, 8, 8)
    assert s.bytes_copied == (40 + 8) * store.expert_bytes
    assert not off[1].prefetched  # used


def test_prefetch_skips_prefill_sized_calls_and_is_off_when_asked():
    store, res, off = _store(2, cached=4, prefetch=True)
    wide = [[e % E, (e + 3) % E] for e in range(9)]  # 9 tokens: more than PREFETCH_MAX_TOKENS
    for _ in range(3):
        _call(res[0], off[0], wide)
        _call(res[1], off[1], wide)
    assert store.stats.prefetched == 0
    store, res, off = _store(2, cached=4, prefetch=False)
    for _ in range(6):
        _call(res[0], off[0], [[0, 1]])
        _call(res[1], off[1], [[2, 3]])
    assert store.stats.prefetched == 0 and not store.prefetch


def test_offloaded_module_holds_no_parameters():
    _, [res], [off] = _store(1, cached=2)
    assert list(off.parameters()) == [] and off.activation == "silu" and (off.num_experts, off.top_k) == (E, K)
    assert torch.equal(off.host_gate_up, res.gate_up_proj)


class _HugeMoE(nn.Module):
    def __init__(self):
        super().__init__()
        with torch.device("meta"):  # 2 layers of 8 experts, 2 TiB each: shapes only
            self.layers = nn.ModuleList([FakeExperts(seed=0) for _ in range(2)])
            for m in self.layers:
                m.gate_up_proj = nn.Parameter(torch.empty(E, 1 << 17, 1 << 19), requires_grad=False)
                m.down_proj = nn.Parameter(torch.empty(E, 1 << 19, 1 << 16), requires_grad=False)


def test_auto_on_the_cpu_offloads_only_under_an_explicit_cap():
    from anna_core.engine.offload import OffloadConfig
    from anna_core.layers.expert_offload import plan_offload

    model = _HugeMoE()
    cpu = torch.device("cpu")
    assert plan_offload(model, OffloadConfig(), device=cpu) is None  # host memory is the CPU's: nothing to gain
    plan = plan_offload(model, OffloadConfig(), device=cpu, max_device_bytes=1 << 30)
    assert plan.offloaded == (("layers.0", 0), ("layers.1", 1)) and plan.resident == ()
    assert plan.host_prefixes == ("layers.0.", "layers.1.")
    assert plan_offload(model, OffloadConfig(mode="experts", resident_layers=(0, 1)), device=cpu) is None
