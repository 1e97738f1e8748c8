"""Pre-quantized checkpoints for tests (issue 29): a float checkpoint's projections quantized by round-to-nearest
and packed by the formats' documented rules (GPTQ v1 / v2, AWQ GEMM, FP8 128x128 block), written here from those
rules, independently of the repacking code they test (:mod:`anna_core.weights.prequant`), together with the
*dense oracle*: the same checkpoint with each quantized projection replaced by its dequantized weight
``(q - z) * s`` (``q * s`` for FP8), computed from the codes, zero points and scales before packing.

Rules (from AutoGPTQ / GPTQModel / AutoAWQ's documented layouts): GPTQ ``qweight [K/8, N]`` int32, input rows
``8i .. 8i+7`` in one word (row ``8i + j`` in bits ``4j``); ``qzeros [G, N/8]`` output columns packed the same
way, storing ``z - 1`` in the v1 format (so v1 cannot hold a zero point of 0) and ``z`` in ``gptq_v2``;
``scales [G, N]`` float16; ``g_idx [K]`` (act-order, ``desc_act``: the columns are quantized in a permuted order
``perm``, group ``j`` being columns ``perm[j*g : (j+1)*g]``, so ``g_idx[perm[i]] = i // g`` while ``qweight``'s rows
stay in the original column order). AWQ GEMM: ``qweight [K, N/8]`` and ``qzeros [G, N/8]`` with output
column ``8c + ORDER[j]`` in bits ``4j`` (ORDER = 0, 2, 4, 6, 1, 3, 5, 7). FP8: ``weight`` float8_e4m3fn and
``weight_scale_inv [ceil(N/128), ceil(K/128)]`` float32 (the multiplier).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ's GEMM packing: nibble j of a word holds column 8c + AWQ_ORDER[j]


def rtn_int4(w: torch.Tensor, group: int, sym: bool, gen: torch.Generator,
             min_zero: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round-to-nearest 4-bit codes of w ``[N, K]``: ``(q [K, N] int, z [G, N] int, s [G, N] float16)``, with
    ``w ~ (q - z) * s`` per group of ``group`` input columns (-1: one group) and zero points in ``[min_zero, 15]``
    (GPTQ v1 stores ``z - 1`` in 4 bits, so it cannot hold a zero point of 0), some set to ``min_zero``."""
    n, k = w.shape
    g = k if group == -1 else group
    wg = w.float().t().reshape(k // g, g, n)  # [G, g, N]
    if sym:
        s = (wg.abs().amax(1) / 7.5).to(torch.float16).float()
        z = torch.full_like(s, 8)
    else:
        lo, hi = wg.amin(1), wg.amax(1)
        s = ((hi - lo) / 15).to(torch.float16).float()
        z = torch.round(-lo / s).clamp(min_zero, 15)
        z = torch.where(torch.rand(z.shape, generator=gen) < 0.1, torch.full_like(z, min_zero), z)
    q = torch.round(wg / s[:, None] + z[:, None]).clamp(0, 15)
    return q.reshape(k, n).long(), z.long(), s.to(torch.float16)


def pack_words(codes: torch.Tensor) -> torch.Tensor:
    """``[..., 8]`` codes in 0..15 -> ``[...]`` int32, code j in bits 4j..4j+3."""
    word = torch.zeros(codes.shape[:-1], dtype=torch.int64)
    for j in range(8):
        word |= codes[..., j].long() << (4 * j)
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def gptq_tensors(q: torch.Tensor, z: torch.Tensor, s: torch.Tensor, group: int, v1: bool,
                 g_idx: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """GPTQ's ``qweight``, ``qzeros``, ``scales``, ``g_idx`` of codes ``q [K, N]``, zero points and scales ``[G, N]``
    (``g_idx`` given: an act-order layer's, else ``k // group``)."""
    k, n = q.shape
    qweight = pack_words(q.reshape(k // 8, 8, n).permute(0, 2, 1))  # rows 8i..8i+7 in one word
    stored = (z - 1) if v1 else z  # the v1 format's historical offset
    qzeros = pack_words(stored.reshape(z.shape[0], n // 8, 8))
    if g_idx is None:
        g_idx = torch.zeros(k, dtype=torch.int32) if group == -1 else torch.arange(k, dtype=torch.int32) // group
    return {"qweight": qweight, "qzeros": qzeros, "scales": s, "g_idx": g_idx}


def awq_tensors(q: torch.Tensor, z: torch.Tensor, s: torch.Tensor) -> dict[str, torch.Tensor]:
    """AWQ GEMM's ``qweight``, ``qzeros``, ``scales`` of codes ``q [K, N]``, zero points and scales ``[G, N]``."""
    k, n = q.shape
    order = torch.tensor(AWQ_ORDER)
    qweight = pack_words(q.reshape(k, n // 8, 8)[..., order])
    qzeros = pack_words(z.reshape(z.shape[0], n // 8, 8)[..., order])
    return {"qweight": qweight, "qzeros": qzeros, "scales": s}


def fp8_tensors(w: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """``({"weight", "weight_scale_inv"}, dequantized [N, K] float32)`` of ``w [N, K]`` (scale ``amax / 448`` per
    128x128 block)."""
    n, k = w.shape
    nb, kb = -(-n // 128), -(-k // 128)
    pad = torch.zeros(nb * 128, kb * 128)
    pad[:n, :k] = w.float()
    blocks = pad.view(nb, 128, kb, 128)
    scale = blocks.abs().amax((1, 3)) / 448
    q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    deq = (q.float() * scale[:, None, :, None]).reshape(nb * 128, kb * 128)[:n, :k]
    return {"weight": q.reshape(nb * 128, kb * 128)[:n, :k].contiguous(), "weight_scale_inv": scale}, deq


SHARED_INPUT = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"),
                ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b"))
"""Projections of one block that read the same activations: act-order GPTQ finds their column order from the same
Hessian, so they share one ``g_idx``."""


def input_key(prefix: str) -> str:
    """The projections with the same :func:`input_key` read the same input (:data:`SHARED_INPUT`)."""
    parent, _, leaf = prefix.rpartition(".")
    return next((f"{parent}.{group[0]}" for group in SHARED_INPUT if leaf in group), prefix)


def act_order_int4(w: torch.Tensor, perm: torch.Tensor, group: int, sym: bool, gen: torch.Generator,
                   min_zero: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Act-order round-to-nearest of w ``[N, K]``: the columns quantized in the order ``perm`` ``[K]`` (groups of
    ``group`` consecutive permuted columns), as :func:`rtn_int4`. Returns ``(q [K, N]`` with rows in the original
    column order, ``z``, ``s [G, N]``, ``g_idx [K]`` int32)."""
    q_perm, z, s = rtn_int4(w[:, perm], group, sym, gen, min_zero)
    q = torch.empty_like(q_perm)
    q[perm] = q_perm
    g_idx = torch.empty(w.shape[1], dtype=torch.int32)
    g_idx[perm] = torch.arange(w.shape[1], dtype=torch.int32) // group
    return q, z, s, g_idx


NARROW = ("in_proj_b.weight", "in_proj_a.weight")
"""Qwen3.5 DeltaNet's per-value-head projections (``H_v`` rows): left dense unless :func:`build_prequant` is asked
to quantize them (as FP8 releases may)."""


def quantizable(name: str, w: torch.Tensor, layout: str, narrow: bool = False) -> bool:
    """Whether :func:`build_prequant` quantizes the checkpoint tensor ``name`` (``narrow``: :data:`NARROW` too)."""
    wanted = name.endswith("proj.weight") or name.endswith(("in_proj_qkv.weight", "in_proj_z.weight")) or (
        narrow and name.endswith(NARROW))
    if ".layers." not in name or not wanted:
        return False
    if w.dim() != 2:
        return False
    n, k = w.shape
    return layout == "fp8" or (k % 128 == 0 and n % 8 == 0)


def build_prequant(src: Path, dst: Path, qc: dict, *, layout: str, group: int = 128, sym: bool = False,
                   v1: bool = True, act_order: str | None = None, narrow: bool = False) -> tuple[Path, Path, list[str]]:
    """``(quantized checkpoint, dense oracle checkpoint, quantized tensor prefixes)`` written under ``dst`` from the
    single-file float checkpoint ``src`` with ``quantization_config`` ``qc``: the decoder projections (names with
    ``.layers.`` ending in ``proj.weight``) are quantized, those int4 cannot take (``K`` not a multiple of 128, ``N``
    not of 8) stay dense.

    Args:
        layout: ``"gptq"``, ``"awq"`` or ``"fp8"``.
        group: int4 input columns per group (-1: one group).
        sym: int4 symmetric (zero point 8).
        v1: GPTQ's v1 zero points (stored minus 1), else v2.
        act_order: GPTQ act-order (:func:`act_order_int4`) with a random column order per layer: ``"shared"``
            one order for the projections that read the same input (:func:`input_key`, as GPTQ writes them),
            ``"each"`` one per projection; None: ``g_idx = k // group``.
        narrow: also quantize the DeltaNet's ``in_proj_b`` / ``in_proj_a`` (:data:`NARROW`; int4 takes them only
            where their rows are a multiple of 8).
    """
    from safetensors.torch import load_file, save_file

    if act_order not in (None, "shared", "each") or (act_order is not None and layout != "gptq"):
        raise ValueError(f"act_order must be None, 'shared' or 'each', and only for gptq; got {act_order!r}, {layout!r}")
    gen = torch.Generator().manual_seed(0)
    perm_gen = torch.Generator().manual_seed(1)
    perms: dict[str, torch.Tensor] = {}
    quant_dir, dense_dir = dst / "quant", dst / "dense"
    for d in (quant_dir, dense_dir):
        shutil.copytree(src, d)
        for f in d.glob("*.safetensors*"):
            f.unlink()
    tensors = load_file(str(src / "model.safetensors"))
    quant, dense, prefixes = {}, {}, []
    for name, w in tensors.items():
        if not quantizable(name, w, layout, narrow):
            quant[name] = dense[name] = w
            continue
        prefix = name[: -len(".weight")]
        prefixes.append(prefix)
        if layout == "fp8":
            parts, deq = fp8_tensors(w)
        else:
            min_zero = 1 if layout == "gptq" and v1 else 0
            if act_order is not None:
                key = input_key(prefix) if act_order == "shared" else prefix
                if key not in perms:
                    perms[key] = torch.randperm(w.shape[1], generator=perm_gen)
                perm = perms[key]
                q, z, s, g_idx = act_order_int4(w, perm, group, sym, gen, min_zero)
            else:
                q, z, s = rtn_int4(w, group, sym, gen, min_zero)
                g_idx = torch.zeros(q.shape[0], dtype=torch.long) if group == -1 else torch.arange(q.shape[0]) // group
            g = g_idx.long()
            deq = ((q - z[g]).float() * s.float()[g]).t()  # W[n, k] = (q[k, n] - z[g_idx[k], n]) * s[g_idx[k], n]
            parts = (gptq_tensors(q, z, s, group, v1, g_idx if act_order else None) if layout == "gptq"
                     else awq_tensors(q, z, s))
        quant.update({f"{prefix}.{k}": v for k, v in parts.items()})
        dense[name] = deq.to(w.dtype).contiguous()
    save_file(quant, str(quant_dir / "model.safetensors"))
    save_file(dense, str(dense_dir / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    (quant_dir / "config.json").write_text(json.dumps({**config, "quantization_config": qc}))
    return quant_dir, dense_dir, prefixes



GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": False}
CASES = {  # name: (quantization_config, build_prequant keyword arguments)
    "gptq-v1-asym": (GPTQ, dict(layout="gptq")),
    "gptq-v1-sym-g-1": ({**GPTQ, "sym": True, "group_size": -1}, dict(layout="gptq", group=-1, sym=True)),
    "gptq-v2": ({**GPTQ, "checkpoint_format": "gptq_v2"}, dict(layout="gptq", v1=False)),
    "awq": ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
            dict(layout="awq")),
    "fp8": ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
             "modules_to_not_convert": ["lm_head"]}, dict(layout="fp8")),
    "autoround-gptq": ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
                        "packing_format": "auto_round:auto_gptq"}, dict(layout="gptq", sym=True)),
    "autoround-awq": ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": False,
                       "packing_format": "auto_round:auto_awq"}, dict(layout="awq")),
}
