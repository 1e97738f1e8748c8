"""The memory-bandwidth roofline of a decode step, and the copy bandwidth it is measured against.

Single-stream decode is bound by memory traffic: every step reads every weight once (the LM head
included; embedding tables contribute one row per token, which is negligible and excluded; of a
mixture-of-experts block only the experts the step's tokens are expected to choose),
reads and writes each sequence's recurrent (gated DeltaNet) and conv states, and reads each
sequence's K/V from the cache (and writes the new token's). Those bytes over the device's copy
bandwidth (bytes read plus bytes written per second of a large device-to-device copy, measured in
the same process) give the fastest possible step.
"""

from __future__ import annotations

import statistics
import time

import attrs
import torch
from torch import nn

from anna_core.device import Accelerator
from anna_core.layers.moe import RoutedExpertsModule
from anna_core.model import CacheSpec, SlidingWindowSpec


@attrs.frozen
class StepBytes:
    """Bytes one decode step must move, by kind (all ints)."""

    weights: int
    state: int
    kv: int

    @property
    def total(self) -> int:
        return self.weights + self.state + self.kv


def weight_bytes(model: nn.Module, batch: int = 1) -> int:
    """Bytes of every weight a decode step of ``batch`` sequences reads: all parameters except the
    embedding tables, whose rows are gathered (one row per token: negligible), not streamed. A tied LM
    head (Anna's models say so with ``lm_head`` None) is the input embedding ``embed_tokens``; it is
    streamed, so it counts. Other tables (Gemma 4's per-layer embeddings) never count. Routed experts
    (:class:`~anna_core.layers.moe.RoutedExpertsModule`) count by the share of them ``batch`` tokens are
    expected to touch (``K / E`` at batch 1). Weights kept quantized
    (:class:`~anna_core.layers.quant_linear.QuantizedLinear`, :class:`~anna_core.layers.wq_linear.WQLinear`,
    :class:`~anna_core.layers.wq_experts.WQExperts` by its share) count their packed buffers (codes, scales,
    zeros); a
    :class:`~anna_core.layers.quant_linear.QuantizedEmbedding`'s stored rows are gathered, not streamed, and its
    tied head (float32, or int8 codes and scales) is streamed.
    """
    from anna_core.layers.quant_linear import QuantizedEmbedding, QuantizedLinear
    from anna_core.layers.wq_experts import WQExperts
    from anna_core.layers.wq_linear import WQLinear

    total = sum(p.numel() * p.element_size() for p in model.parameters())
    total += sum(b.numel() * b.element_size() for m in model.modules() if isinstance(m, (QuantizedLinear, WQLinear))
                 for b in m.buffers(recurse=False))
    total += sum(t.numel() * t.element_size() for m in model.modules() if isinstance(m, QuantizedEmbedding)
                 for t in (m.head_weight, m.head_codes, m.head_scales)
                 if t is not None)  # a tied head: float32, or its int8 codes and scales (use_int8_head)
    for m in model.modules():
        if isinstance(m, WQExperts):  # quantized experts: their packed buffers, by the same share
            own = sum(b.numel() * b.element_size() for b in m.buffers(recurse=False))
            total += int(own * m.expected_hit_fraction(batch))
        elif isinstance(m, RoutedExpertsModule):
            own = sum(p.numel() * p.element_size() for p in m.parameters())
            total -= int(own * (1.0 - m.expected_hit_fraction(batch)))
    tied = getattr(model, "lm_head", "absent") is None  # Anna's models: lm_head None means tied
    seen = set()
    for name, m in model.named_modules():
        if not isinstance(m, nn.Embedding) or id(m.weight) in seen:
            continue
        seen.add(id(m.weight))
        if tied and name.rsplit(".", 1)[-1] == "embed_tokens":
            continue  # the LM head: read in full every step
        total -= m.weight.numel() * m.weight.element_size()
    return total


def decode_step_bytes(model: nn.Module, spec: CacheSpec, batch: int, context: float, dtype: torch.dtype) -> StepBytes:
    """Bytes of one decode step of ``batch`` sequences whose context holds ``context`` tokens.

    Args:
        model: the loaded model (its parameters are counted as they are stored).
        spec: its cache spec.
        batch: sequences decoded together.
        context: mean cached tokens per sequence during the step (float allowed).
        dtype: the cache dtype (KV and conv state; recurrent state is float32).
    """
    elem = torch.empty((), dtype=dtype).element_size()
    state = 0
    rec = spec.recurrent
    if rec is not None:
        h, k, v = rec.state_shape
        c, w = rec.conv_shape
        state = len(rec.layers) * batch * 2 * (h * k * v * 4 + c * w * elem)  # read and write
    kv = 0.0
    for g in spec.attention_groups:
        group = spec.groups[g]
        per_token = group.num_kv_heads * sum(group.row_bytes(dtype))  # K and V rows (quantized ones included)
        read = min(context, group.window - 1) if isinstance(group, SlidingWindowSpec) else context
        kv += len(group.layers) * batch * per_token * (read + 1)  # read the context (window), write one token
    kv = int(kv)
    return StepBytes(weights=weight_bytes(model, batch), state=state, kv=kv)


def copy_bandwidth(accel: Accelerator, nbytes: int | None = None, repeats: int = 10) -> float:
    """Median bytes/s (read + written) of a ``nbytes`` device-to-device copy on ``accel``'s device.

    Default size: 1 GiB on accelerators (far above any cache), 128 MiB on CPU. Random data, never zeros.
    """
    dev = accel.device
    if nbytes is None:
        nbytes = (1 << 30) if dev.type != "cpu" else (128 << 20)
    n = nbytes // 4
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    accel.synchronize()
    times = []
    for _ in range(repeats):
        timer = accel.timer()
        timer.start()
        dst.copy_(src)
        times.append(timer.stop() / 1e3)
    del src, dst
    return 2 * n * 4 / statistics.median(times)


def wall_clock() -> float:
    """Seconds from a monotonic high-resolution clock."""
    return time.perf_counter()
