"""The ``moe_experts`` cases of the kernel microbenchmark: the Triton op (as dispatched, and each of its
two paths forced) vs the torch reference.

Shapes of the released MoE models (routed experts only): Qwen3.5-35B-A3B (``E = 256``, ``K = 8``,
``H = 2048``, ``I = 512``, SwiGLU) and Gemma 4 26B-A4B (``E = 128``, ``K = 8``, ``H = 2816``, ``I = 704``,
GeGLU), at ``T`` = 1 (batch-1 decode), 2 and 4 (small-batch decode), 32 (batched decode) and 2048 (a
prefill) tokens, with random top-k routing. For each case it prints, per implementation (the reference;
``triton``, the op as dispatched, with the path it took; ``triton-grouped``, the grouped GEMMs forced;
``triton-decode``, the few-token GEMVs of :mod:`anna_xpu_kernels.moe_decode` forced, up to its token limit),
the time per call (Triton on CUDA: graph replays with the L2 flushed before each call,
:func:`anna_xpu_kernels.gemv_tuning.cold_time_ms`; the reference, which reads the host, eagerly), the
bandwidth of the weights of the experts the tokens chose (each read once) over that time and its share of
the roofline (the device's bandwidth in a 256 MiB copy, :func:`copy_gbs`), the arithmetic rate, and the
largest difference from the reference.

The router cases (``moe_route``, :func:`run_route`) time, at the same models and token counts, the torch
code the routers ran before the op (softmax, ``topk``, the renormalisation, Gemma 4's scale gather, the
dtype cast), the op's torch reference and the Triton kernel (graph replays on CUDA for all three, none
reads the host), with how many rows' experts differ from the reference's and the largest weight difference.

    python -m anna_xpu_kernels.microbench --only moe [--moe-tokens 1,2,4,32,2048]
"""

from __future__ import annotations

import functools

import attrs

DEFAULT_TOKENS = (1, 2, 4, 32, 2048)


@attrs.frozen
class MoeShape:
    """The routed experts of one MoE layer."""

    num_experts: int
    top_k: int
    hidden: int
    intermediate: int
    activation: str


MODELS = {
    "Qwen3.5-35B-A3B": MoeShape(256, 8, 2048, 512, "silu"),
    "Gemma-4-26B-A4B": MoeShape(128, 8, 2816, 704, "gelu_tanh"),
}
SMOKE_MODELS = {"smoke-silu": MoeShape(8, 2, 32, 48, "silu"), "smoke-gelu": MoeShape(6, 3, 48, 16, "gelu_tanh")}
SMOKE_TOKENS = (1, 2, 5)


@attrs.frozen
class RouterShape:
    """The router of one MoE layer: ``E``, ``K`` and whether it scales per expert (Gemma 4: float32
    weights) or not (Qwen3.5: weights in the logits' dtype)."""

    num_experts: int
    top_k: int
    scaled: bool


ROUTERS = {"Qwen3.5-35B-A3B": RouterShape(256, 8, False), "Gemma-4-26B-A4B": RouterShape(128, 8, True)}
SMOKE_ROUTERS = {"smoke-qwen": RouterShape(16, 4, False), "smoke-gemma": RouterShape(8, 2, True)}


def moe_inputs(shape: MoeShape, tokens: int, device, dtype, seed: int = 0):
    """``(x, gate_up, down, weights, expert_ids)`` of one call: unit-variance activations, weights scaled
    like trained projections, top-k routing of random logits (float32 weights, int64 ids)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    e, h, i = shape.num_experts, shape.hidden, shape.intermediate

    def randn(*size):
        return torch.randn(*size, device=device, generator=gen)

    x = randn(tokens, h).to(dtype)
    gate_up = (randn(e, 2 * i, h) * h**-0.5).to(dtype)
    down = (randn(e, h, i) * i**-0.5).to(dtype)
    probs, ids = torch.topk(randn(tokens, e).softmax(-1), shape.top_k)
    return x, gate_up, down, probs / probs.sum(-1, keepdim=True), ids


def chosen_weight_bytes(shape: MoeShape, expert_ids, element_size: int) -> int:
    """Bytes of the experts' weights a call must read: each distinct chosen expert's ``3 * H * I`` values."""
    return int(expert_ids.unique().numel()) * 3 * shape.hidden * shape.intermediate * element_size


def copy_gbs(device) -> float | None:
    """The device's memory bandwidth as a large copy achieves it (bytes read + written / cold graph-replay
    time of a 256 MiB copy): the roofline the experts' weight streams are measured against; None off CUDA."""
    import torch

    from anna_xpu_kernels import gemv_tuning

    if device.type != "cuda":
        return None
    src = torch.empty(128 << 20, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    ms = gemv_tuning.cold_time_ms(lambda: dst.copy_(src), reps=4)
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def run_moe(device, dtype, models: dict[str, MoeShape], token_counts, timer) -> list[str]:
    """Benchmark every (model, T): the reference, the op as dispatched (``triton``, with the path it took),
    the grouped GEMMs forced (``triton-grouped``) and, up to the decode path's token limit, the decode
    GEMVs forced (``triton-decode``); return the printed table's lines (a first line with the roofline)."""
    import torch
    from anna_core.kernels.reference.moe import moe_experts as reference

    from anna_xpu_kernels import gemv_tuning, moe, moe_decode

    def cold(fn):  # graph replays, L2 flushed; the reference cannot be captured (it reads the host)
        return gemv_tuning.cold_time_ms(fn) * 1e3 if device.type == "cuda" else timer(fn)

    bandwidth = copy_gbs(device)
    es = torch.finfo(dtype).bits // 8
    header = ("model", "E/K/H/I", "T", "impl", "path", "us/call", "weights GB/s", "roofline %", "TFLOP/s",
              "max |err| vs reference")
    cells: list[tuple[str, ...]] = [header]
    for model, s in models.items():
        dims = f"{s.num_experts}/{s.top_k}/{s.hidden}/{s.intermediate}"
        for t in token_counts:
            args = moe_inputs(s, t, device, dtype, seed=t)
            nbytes = chosen_weight_bytes(s, args[4], es)
            flops = 2 * t * s.top_k * 3 * s.hidden * s.intermediate
            want = reference(*args, s.activation)
            auto = "decode" if moe_decode.takes(t, s.top_k, s.num_experts) else "grouped"
            impls = [("reference", "-", reference, timer), ("triton", auto, moe.moe_experts, cold),
                     ("triton-grouped", "grouped", functools.partial(moe.moe_experts, path="grouped"), cold)]
            if t <= moe_decode.MAX_TOKENS:
                impls.append(("triton-decode", "decode", functools.partial(moe.moe_experts, path="decode"), cold))
            for name, path, fn, time_it in impls:
                try:
                    got = fn(*args, s.activation)
                    diff = (got.float() - want.float()).abs().max().item()
                    err = "-" if name == "reference" else f"{diff:.2e} (rel {diff / (want.abs().max().item() or 1):.1e})"
                    us = time_it(lambda fn=fn, args=args, act=s.activation: fn(*args, act))
                except Exception as exc:  # noqa: BLE001 -- report and keep going
                    cells.append((model, dims, str(t), name, path, "-", "-", "-", "-",
                                  f"failed: {type(exc).__name__}: {exc}"[:120]))
                    continue
                gbs = nbytes / (us * 1e-6) / 1e9
                roof = f"{100 * gbs / bandwidth:.0f}" if bandwidth else "-"
                cells.append((model, dims, str(t), name, path, f"{us:.1f}", f"{gbs:.0f}", roof,
                              f"{flops / (us * 1e-6) / 1e12:.1f}", err))
            del args, want
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(col.ljust(w) for col, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(0, f"# roofline: the chosen experts' weight bytes at {bandwidth:.0f} GB/s (a 256 MiB copy)" if bandwidth
                 else "# roofline: not measured (no CUDA device)")
    return lines


def former_router(logits, top_k, expert_scale, weights_dtype):
    """The torch code both families' routers ran before ``moe_route`` (``torch.topk``; timing only)."""
    import torch

    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    if expert_scale is not None:
        weights = weights * expert_scale[ids]
    return weights.to(weights_dtype), ids


def run_route(device, dtype, routers: dict[str, RouterShape], token_counts, timer) -> list[str]:
    """Time the router of every (model, T) three ways; return the printed table's lines."""
    import torch
    from anna_core.kernels.reference.routing import moe_route as reference

    from anna_xpu_kernels import gemv_tuning, moe_route

    def graphed(fn):  # all three are sync-free: graph replays on CUDA, as in a captured step
        return gemv_tuning.cold_time_ms(fn) * 1e3 if device.type == "cuda" else timer(fn)

    header = ("model", "E/K", "T", "impl", "us/call", "rows with other experts", "max |w err| vs reference")
    cells: list[tuple[str, ...]] = [header]
    for model, r in routers.items():
        for t in token_counts:
            gen = torch.Generator(device=device).manual_seed(t)
            logits = (torch.randn(t, r.num_experts, device=device, generator=gen) * 2).to(dtype)
            scale = (torch.rand(r.num_experts, device=device, generator=gen) + 0.5).to(dtype) if r.scaled else None
            args = (logits, r.top_k, scale, torch.float32 if r.scaled else dtype)
            want_w, want_ids = reference(*args)
            for name, fn in (("torch (former)", former_router), ("reference", reference),
                             ("triton", moe_route.moe_route)):
                try:
                    got_w, got_ids = fn(*args)
                    rows = int((got_ids != want_ids).any(-1).sum().item())
                    err = (got_w.float() - want_w.float()).abs().max().item()
                    us = graphed(lambda fn=fn, args=args: fn(*args))
                except Exception as exc:  # noqa: BLE001 -- report and keep going
                    cells.append((model, f"{r.num_experts}/{r.top_k}", str(t), name, "-", "-",
                                  f"failed: {type(exc).__name__}: {exc}"[:120]))
                    continue
                cells.append((model, f"{r.num_experts}/{r.top_k}", str(t), name, f"{us:.1f}", str(rows), f"{err:.2e}"))
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(col.ljust(w) for col, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
