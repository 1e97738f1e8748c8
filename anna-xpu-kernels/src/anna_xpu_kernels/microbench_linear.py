"""The ``linear`` cases of the kernel microbenchmark: Triton GEMV vs ``F.linear`` (cuBLAS) at decode shapes.

Every distinct weight shape one decode step of a Qwen3.5 text model multiplies (read from its
``config.json``), with the projections merged as Anna runs them: gated DeltaNet ``in_proj``
(qkv + z + b + a rows) and ``out_proj``, attention qkv (query and output gate, keys, values) and
``o_proj``, MLP gate+up and down, and the LM head. For each shape and row count M it prints the
time per call on CUDA from graph replays with the L2 flushed before each call
(:func:`anna_xpu_kernels.gemv_tuning.cold_time_ms`: no host launch overhead, weights read from memory), the achieved
bandwidth (weight + activations read, output written, over that time) and the largest absolute
difference from a float32 ``F.linear`` of the same (rounded) inputs; then, per model, the time of
all the GEMVs of one decode step (each shape times the layers that use it).

Then the fusions at one row (:mod:`anna_xpu_kernels.fused_linear`): each block's residual add +
RMSNorm fused into its input projection, the SwiGLU product fused into ``down`` (prologues) or into
the merged gate/up projection (epilogue), or both into gate/up (the MLP's norm, projection and
product), against the two launches they replace, and the time saved per decode step by each kind.

    python -m anna_xpu_kernels.microbench --only linear [--linear-rows 1,4,32]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

DEFAULT_MODELS = ("Qwen3.5-0.8B", "Qwen3.5-2B", "Qwen3.5-9B")


@attrs.frozen
class GemvShape:
    """One weight ``[n, k]`` used ``count`` times per decode step by the layers ``names``."""

    n: int
    k: int
    count: int
    names: str


def decode_gemv_shapes(text_config: dict[str, Any]) -> list[GemvShape]:
    """The distinct ``[N, K]`` weights of one Qwen3.5 decode step, merged as Anna runs them.

    Raises:
        KeyError: the config lacks a Qwen3.5 text field.
    """
    c = text_config
    hidden = c["hidden_size"]
    h_k, h_v = c["linear_num_key_heads"], c["linear_num_value_heads"]
    d_k, d_v = c["linear_key_head_dim"], c["linear_value_head_dim"]
    h_q, h_kv, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    inter, vocab = c["intermediate_size"], c["vocab_size"]
    kinds = c.get("layer_types") or []
    n_lin = sum(1 for t in kinds if t == "linear_attention")
    n_full = sum(1 for t in kinds if t == "full_attention")
    n_layers = c["num_hidden_layers"]
    uses = [
        ("in_proj", 2 * h_k * d_k + 2 * h_v * d_v + 2 * h_v, hidden, n_lin),
        ("out_proj", hidden, h_v * d_v, n_lin),
        ("qkv", 2 * h_q * d + 2 * h_kv * d, hidden, n_full),
        ("o_proj", hidden, h_q * d, n_full),
        ("gate_up", 2 * inter, hidden, n_layers),
        ("down", hidden, inter, n_layers),
        ("lm_head", vocab, hidden, 1),
    ]
    merged: dict[tuple[int, int], tuple[int, list[str]]] = {}
    for name, n, k, count in uses:
        total, names = merged.get((n, k), (0, []))
        merged[(n, k)] = (total + count, names + [name])
    return [GemvShape(n, k, count, "+".join(names)) for (n, k), (count, names) in merged.items()]


def load_models(config_dir: Path, models: tuple[str, ...], shapes_of=None) -> dict[str, list[Any]]:
    """``{model: shapes_of(text_config)}`` from ``config_dir/<model>/config.json`` (the ``text_config``
    part); ``shapes_of`` defaults to :func:`decode_gemv_shapes`."""
    shapes_of = shapes_of or decode_gemv_shapes
    out = {}
    for model in models:
        cfg = json.loads((config_dir / model / "config.json").read_text())
        out[model] = shapes_of(cfg.get("text_config", cfg))
    return out


SMOKE_MODELS = {"smoke": [GemvShape(48, 40, 3, "a"), GemvShape(37, 75, 1, "b")]}
"""Tiny shapes (odd N and K) for a run under the interpreter."""


def run_linear(device, dtype, models: dict[str, list[GemvShape]], row_counts, timer) -> list[str]:
    """Benchmark every (model shape, M); return the printed lines (a table, then per-model totals)."""
    import torch
    import torch.nn.functional as F

    from anna_xpu_kernels import gemv, gemv_tuning

    es = torch.finfo(dtype).bits // 8
    impls = {"cuBLAS": F.linear, "triton": gemv.linear}
    if device.type == "cuda":  # graph-replayed, L2 flushed: no host overhead, weights from memory

        def timer(fn):
            return gemv_tuning.cold_time_ms(fn) * 1e3

    header = ("model", "layers", "N x K", "M", "impl", "us/call", "TB/s", "max |err| vs fp32")
    cells: list[tuple[str, ...]] = [header]
    totals: dict[tuple[str, int, str], float] = {}
    seen: dict[tuple[int, int, int], dict[str, float]] = {}
    for model, shapes in models.items():
        for s in shapes:
            for m in row_counts:
                nbytes = (s.n * s.k + m * s.k + m * s.n) * es
                times = seen.get((s.n, s.k, m))
                if times is None:
                    gen = torch.Generator(device=device).manual_seed(s.n * 31 + s.k)
                    w = (torch.randn(s.n, s.k, device=device, generator=gen) * s.k ** -0.5).to(dtype)
                    x = torch.randn(m, s.k, device=device, generator=gen).to(dtype)
                    want = F.linear(x.float(), w.float())
                    times = {}
                    for name, fn in impls.items():
                        y = fn(x, w, None)
                        err = (y.float() - want).abs().max().item()
                        us = timer(lambda fn=fn, x=x, w=w: fn(x, w, None))
                        times[name] = us
                        cells.append((model, s.names, f"{s.n} x {s.k}", str(m), name, f"{us:.1f}",
                                      f"{nbytes / (us * 1e-6) / 1e12:.2f}", f"{err:.2e}"))
                    del w, x, want
                    seen[(s.n, s.k, m)] = times
                for name, us in times.items():
                    totals[(model, m, name)] = totals.get((model, m, name), 0.0) + s.count * us
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(col.ljust(w) for col, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("# all GEMVs of one decode step (each shape x the layers using it, weights read once each):")
    for model, shapes in models.items():
        weight_bytes = sum(s.count * s.n * s.k for s in shapes) * es
        for m in row_counts:
            t_ref, t_tri = totals[(model, m, "cuBLAS")], totals[(model, m, "triton")]
            lines.append(f"{model} M={m}: cuBLAS {t_ref:.0f} us ({weight_bytes / (t_ref * 1e-6) / 1e12:.2f} TB/s), "
                         f"triton {t_tri:.0f} us ({weight_bytes / (t_tri * 1e-6) / 1e12:.2f} TB/s), "
                         f"speedup {t_ref / t_tri:.2f}x")
    return lines


@attrs.frozen
class FusedShape:
    """One fused case: ``kind`` ``"add_rms_norm"`` (weight ``[n, k]`` after the residual add and
    norm), ``"silu_mul"`` (weight ``[n, k]`` after the SwiGLU product of ``2k`` values),
    ``"silu_mul_out"`` (a merged gate/up weight ``[n, k]`` with the SwiGLU product after it) or
    ``"add_rms_norm_silu_out"`` (both: the MLP's ``add_rms_norm_linear_act_mul``), used ``count``
    times per decode step by ``names``."""

    kind: str
    n: int
    k: int
    count: int
    names: str


def decode_fused_shapes(text_config: dict[str, Any]) -> list[FusedShape]:
    """The projections of one Qwen3.5 decode step that a prologue fusion serves: each block's input
    projection after its residual add + norm (DeltaNet ``in_proj``, attention qkv, MLP gate+up) and
    the MLP's ``down`` after the SwiGLU product.

    Raises:
        KeyError: the config lacks a Qwen3.5 text field.
    """
    by_name = {name: s for s in decode_gemv_shapes(text_config) for name in s.names.split("+")}
    kinds = text_config.get("layer_types") or []
    counts = {"in_proj": sum(1 for t in kinds if t == "linear_attention"),
              "qkv": sum(1 for t in kinds if t == "full_attention"), "gate_up": text_config["num_hidden_layers"]}
    out = [FusedShape("add_rms_norm", by_name[name].n, by_name[name].k, count, name)
           for name, count in counts.items() if count]
    down = by_name["down"]
    out.append(FusedShape("silu_mul", down.n, down.k, text_config["num_hidden_layers"], "down"))
    gate_up = by_name["gate_up"]
    out.append(FusedShape("silu_mul_out", gate_up.n, gate_up.k, text_config["num_hidden_layers"], "gate_up"))
    out.append(FusedShape("add_rms_norm_silu_out", gate_up.n, gate_up.k, text_config["num_hidden_layers"], "gate_up"))
    return out


SMOKE_FUSED = {"smoke": [FusedShape("add_rms_norm", 37, 75, 2, "a"), FusedShape("silu_mul", 40, 24, 2, "b"),
                         FusedShape("silu_mul_out", 48, 24, 2, "c"), FusedShape("add_rms_norm_silu_out", 48, 75, 2, "d")]}
"""Tiny fused cases (odd N and K) for a run under the interpreter."""


def run_fused(device, dtype, models: dict[str, list[FusedShape]], timer, rows: int = 1) -> list[str]:
    """Time each fused GEMV against its two unfused launches (Triton ``add_rms_norm`` or ``silu_and_mul``
    then the GEMV; for the ``silu_mul_out`` epilogue the GEMV then ``silu_and_mul``; for
    ``add_rms_norm_silu_out`` ``add_rms_norm`` then the GEMV with the epilogue) at ``rows`` activation
    rows; return the printed lines: one row per case starting with ``fused``, then per model the time
    saved per decode step and kind (``{model} fused M=1 {kind}: ... us saved``; kinds are alternatives
    for the same projections, e.g. three for gate/up, so they are not summed)."""
    import torch

    from anna_xpu_kernels import activations, fused_linear, gemv, gemv_tuning, norms

    if device.type == "cuda":

        def timer(fn):
            return gemv_tuning.cold_time_ms(fn) * 1e3

    header = ("fused", "model", "layers", "N x K", "M", "unfused us", "fused us", "saved us", "max |fused - unfused|")
    cells: list[tuple[str, ...]] = [header]
    saved: dict[tuple[str, str], float] = {}
    for model, shapes in models.items():
        for s in shapes:
            gen = torch.Generator(device=device).manual_seed(s.n * 31 + s.k)
            w = (torch.randn(s.n, s.k, device=device, generator=gen) * s.k ** -0.5).to(dtype)
            if s.kind == "add_rms_norm":
                x, r = (torch.randn(rows, s.k, device=device, generator=gen).to(dtype) for _ in range(2))
                nw = torch.randn(s.k, device=device, generator=gen).to(dtype)

                def unfused(x=x, r=r, nw=nw, w=w):
                    h, _ = norms.add_rms_norm(x, r, nw, 1e-6, True)
                    return gemv.linear(h, w, None)

                def fused(x=x, r=r, nw=nw, w=w):
                    return fused_linear.add_rms_norm_linear(x, r, nw, 1e-6, True, w, fuse=True)[0]
            elif s.kind == "add_rms_norm_silu_out":
                x, r = (torch.randn(rows, s.k, device=device, generator=gen).to(dtype) for _ in range(2))
                nw = torch.randn(s.k, device=device, generator=gen).to(dtype)

                def unfused(x=x, r=r, nw=nw, w=w):
                    h, _ = norms.add_rms_norm(x, r, nw, 1e-6, True)
                    return fused_linear.linear_act_mul(h, w)

                def fused(x=x, r=r, nw=nw, w=w):
                    return fused_linear.add_rms_norm_linear_act_mul(x, r, nw, 1e-6, True, w, fuse=True)[0]
            elif s.kind == "silu_mul_out":
                x = torch.randn(rows, s.k, device=device, generator=gen).to(dtype)

                def unfused(x=x, w=w):
                    return activations.silu_and_mul(gemv.linear(x, w, None))

                def fused(x=x, w=w):
                    return fused_linear.linear_act_mul(x, w)
            else:
                x = torch.randn(rows, 2 * s.k, device=device, generator=gen).to(dtype)

                def unfused(x=x, w=w):
                    return gemv.linear(activations.silu_and_mul(x), w, None)

                def fused(x=x, w=w):
                    return fused_linear.act_mul_linear(x, w, fuse=True)
            err = (fused().float() - unfused().float()).abs().max().item()
            t_un, t_fu = timer(unfused), timer(fused)
            saved[(model, s.kind)] = saved.get((model, s.kind), 0.0) + s.count * (t_un - t_fu)
            cells.append(("fused", model, f"{s.kind}+{s.names}", f"{s.n} x {s.k}", str(rows), f"{t_un:.1f}",
                          f"{t_fu:.1f}", f"{t_un - t_fu:.1f}", f"{err:.2e}"))
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(col.ljust(w) for col, w in zip(row, widths)) for row in cells]
    lines.append("")
    lines.append("# time saved per decode step by each kind of fusion (each case x the layers using it):")
    lines.extend(f"{model} fused M={rows} {kind}: {us:.0f} us saved" for (model, kind), us in saved.items())
    return lines
