"""Rotary position embedding (Su et al., "RoFormer", 2021), NeoX ``rotate_half`` layout.

Supported ``rope_type`` values: ``"default"``, ``"linear"`` (position interpolation, Chen et al.
2023), ``"llama3"`` (Meta's frequency-dependent scaling, as published with Llama 3.1) and
``"proportional"`` (Gemma 4's global layers: the first ``partial_rotary_factor`` share of the frequency
pairs of the whole head, with exponents over the whole head dim, the others at frequency 0), plus
Qwen's multimodal M-RoPE (``mrope_section`` / ``mrope_interleaved``): frequency ``i`` is driven by the
temporal, height or width position; for text all three are equal, so it reduces to 1-D positions.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from anna_core.errors import ModelLoadError

_SUPPORTED = ("default", "linear", "llama3", "proportional")


def rope_parameters_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """The rope dict of a parsed HF ``config.json`` (or its ``text_config``), normalised.

    Reads transformers 5.x ``rope_parameters`` or 4.x ``rope_scaling`` (a copy; the config is not
    modified), renames the old ``type`` key to ``rope_type`` (default ``"default"``) and fills
    ``rope_theta`` from the config's top-level ``rope_theta`` (default 10000.0) when absent.
    """
    rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    old_type = rope.pop("type", None)
    rope.setdefault("rope_type", old_type or "default")
    rope.setdefault("rope_theta", float(config.get("rope_theta", 10000.0)))
    return rope


def inverse_frequencies(rotary_dim: int, rope_parameters: dict[str, Any]) -> torch.Tensor:
    """``[rotary_dim // 2]`` float32 inverse frequencies on the CPU.

    For ``"proportional"`` ``rotary_dim`` is the whole head dim ``D``: frequency ``i`` is
    ``theta ** (-2i / D) / factor`` for ``i < int(partial_rotary_factor * D // 2)`` and 0 after it (those
    dims pass through unrotated: cos 1, sin 0), as transformers' ``_compute_proportional_rope_parameters``.

    Raises:
        ModelLoadError: unsupported ``rope_type`` or missing scaling fields.
    """
    rope_type = rope_parameters.get("rope_type", rope_parameters.get("type", "default"))
    if rope_type not in _SUPPORTED:
        raise ModelLoadError(f"rope_type {rope_type!r} is not supported; supported: {list(_SUPPORTED)}")
    base = float(rope_parameters.get("rope_theta", 10000.0))
    if rope_type == "proportional":
        return _proportional(rotary_dim, base, rope_parameters)
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float32, device="cpu") / rotary_dim
    inv_freq = 1.0 / (base**exponents)
    try:
        if rope_type == "linear":
            inv_freq = inv_freq / float(rope_parameters["factor"])
        elif rope_type == "llama3":
            inv_freq = _llama3_scale(inv_freq, rope_parameters)
    except KeyError as exc:
        raise ModelLoadError(f"rope_parameters of type {rope_type!r} lack the field {exc.args[0]!r}") from exc
    return inv_freq


def _proportional(head_dim: int, base: float, p: dict[str, Any]) -> torch.Tensor:
    rotated = int(float(p.get("partial_rotary_factor", 1.0)) * head_dim // 2)
    exponents = torch.arange(0, 2 * rotated, 2, dtype=torch.float32, device="cpu") / head_dim
    inv_freq = torch.cat([1.0 / (base**exponents), torch.zeros(head_dim // 2 - rotated, dtype=torch.float32, device="cpu")])
    return inv_freq / float(p.get("factor", 1.0))


def _llama3_scale(inv_freq: torch.Tensor, p: dict[str, Any]) -> torch.Tensor:
    # Long wavelengths are divided by `factor`, short ones kept, and the band between the two
    # wavelength thresholds is blended linearly in (context / wavelength).
    factor = float(p["factor"])
    low, high = float(p["low_freq_factor"]), float(p["high_freq_factor"])
    context = float(p["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    long_wave = wavelen > context / low
    short_wave = wavelen < context / high
    blend = (context / wavelen - low) / (high - low)
    blended = (1 - blend) * inv_freq / factor + blend * inv_freq
    out = torch.where(long_wave, inv_freq / factor, blended)
    return torch.where(short_wave, inv_freq, out)


def mrope_axis_of_frequency(num_freqs: int, mrope_section: list[int], interleaved: bool) -> torch.Tensor:
    """``[num_freqs]`` int64: which position axis (0 = t, 1 = h, 2 = w) drives each frequency.

    Interleaved (Qwen3.5): frequencies cycle t, h, w, t, h, w, ... while each axis has sections
    left, the remainder going to t. Otherwise (Qwen2-VL): contiguous blocks of ``mrope_section``.

    Raises:
        ModelLoadError: the sections do not fit ``num_freqs``.
    """
    if len(mrope_section) != 3 or sum(mrope_section) > num_freqs:
        raise ModelLoadError(f"mrope_section {mrope_section} does not fit {num_freqs} rotary frequencies")
    axis = torch.zeros(num_freqs, dtype=torch.int64, device="cpu")
    if interleaved:
        for a in (1, 2):
            axis[a : 3 * mrope_section[a] : 3] = a
    else:
        start = 0
        for a, n in enumerate(mrope_section):
            axis[start : start + n] = a
            start += n
    return axis


class RotaryEmbedding(nn.Module):
    """Rotates the first ``rotary_dim`` dims of each head (NeoX halves); the rest pass through.

    Args:
        head_dim: ``D``.
        rotary_dim: rotated dims (even, ``<= D``); e.g. ``D // 4`` for Qwen3.5's partial rotary.
        rope_parameters: HF-style dict (``rope_type``, ``rope_theta``, scaling fields,
            ``mrope_section``, ``mrope_interleaved``).
        ops: unused for now (a fused rotary kernel may come later).

    Raises:
        ModelLoadError: odd or oversize ``rotary_dim``, or unsupported parameters.
    """

    def __init__(self, head_dim: int, rotary_dim: int, rope_parameters: dict[str, Any], ops: Any = None):
        super().__init__()
        if rotary_dim % 2 or not 0 < rotary_dim <= head_dim:
            raise ModelLoadError(f"rotary_dim {rotary_dim} must be even and in (0, head_dim={head_dim}]")
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim
        self.ops = ops
        # Plain CPU tensors (not buffers): built the same way under a meta-device context.
        self._inv_freq = inverse_frequencies(rotary_dim, rope_parameters)
        section = rope_parameters.get("mrope_section")
        self._mrope_axis = (
            mrope_axis_of_frequency(rotary_dim // 2, list(section), bool(rope_parameters.get("mrope_interleaved")))
            if section else None
        )
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        hit = self._on_device.get(device)
        if hit is None:
            axis = None if self._mrope_axis is None else self._mrope_axis.to(device)
            hit = self._on_device[device] = (self._inv_freq.to(device), axis)
        return hit

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: ``[T]`` or ``[3, T]`` (M-RoPE t/h/w) -> cos, sin ``[T, rotary_dim // 2]`` float32."""
        inv_freq, axis = self._tables(positions.device)
        if positions.dim() == 1:
            angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
        else:
            if axis is None:
                raise ValueError("3-D (t, h, w) positions need mrope_section in rope_parameters")
            # per frequency i, the position of the axis driving it: [T, F]
            pos = positions.to(torch.float32).t().index_select(1, axis)
            angles = pos * inv_freq[None, :]
        return torch.cos(angles), torch.sin(angles)

    def rotate(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """x: ``[T, N, D]`` (any number of heads ``N``) rotated by ``cos_sin`` from :meth:`cos_sin`
        (``[T, rotary_dim // 2]`` each). Math in float32; the output keeps x's dtype.

        Lets a model compute ``cos_sin`` once per forward pass and share it across its layers, and
        rotate q and k heads that sit side by side in one call.
        """
        cos, sin = cos_sin[0][:, None, :], cos_sin[1][:, None, :]  # [T, 1, rotary_dim/2]
        return self._rotate(x, cos, sin)

    def widen(self, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos_sin`` laid out for :meth:`rotate_wide`: ``(cos, sin)`` ``[T, 1, rotary_dim]`` float32, cos
        repeated for both halves and sin negated on the first half. Once per forward pass: each rotation is
        then two products and a sum, instead of the half-by-half expression's ten ops."""
        cos, sin = cos_sin[0][:, None, :], cos_sin[1][:, None, :]  # [T, 1, rotary_dim/2]
        return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)

    def rotate_wide(self, x: torch.Tensor, wide: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """:meth:`rotate` with :meth:`widen`'s tables: x ``[T, N, D]`` -> rotated, x's dtype; the same
        values bit for bit (``x1 cos + x2 (-sin)`` is ``x1 cos - x2 sin`` in IEEE arithmetic)."""
        half, r = self.rotary_dim // 2, self.rotary_dim
        head = x if r == self.head_dim else x[..., :r]
        swapped = torch.cat((head[..., half:], head[..., :half]), dim=-1)  # [x2, x1]
        rot = head * wide[0] + swapped * wide[1]  # float32 (the tables are), as rotate computes
        if rot.dtype != x.dtype:
            rot = rot.to(x.dtype)
        return rot if r == self.head_dim else torch.cat((rot, x[..., r:]), dim=-1)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = self.rotary_dim // 2
        x1 = x[..., :half].float()
        x2 = x[..., half : self.rotary_dim].float()
        rot = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)
        if self.rotary_dim == self.head_dim:
            return rot
        return torch.cat((rot, x[..., self.rotary_dim :]), dim=-1)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: ``[T]`` int64 (or ``[3, T]``); q: ``[T, H, D]``; k: ``[T, H_kv, D]`` -> rotated (q, k).

        ``cos_sin``: optional ``self.cos_sin(positions)`` computed once by the caller (e.g. per forward
        pass, shared by all layers); when given, ``positions`` is not read. Math in float32; outputs
        keep the inputs' dtypes.
        """
        if cos_sin is None:
            cos_sin = self.cos_sin(positions)
        return self.rotate(q, cos_sin), self.rotate(k, cos_sin)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}"
