"""The Qwen3.5 vision tower: image patches -> rows in the text model's width (transformers' ``Qwen3_5VisionModel``).

One medium (an image, or a video's frames) arrives as the processor made it: ``pixel_values``
``[N, C * tp * p * p]`` float32, its ``N = t * h * w`` patches already in spatial-merge-block order (each
2x2 block of neighbouring patches contiguous), and its patch grid ``(t, h, w)``. The tower

1. embeds each patch with the ``Conv3d`` patch embedding (kernel = stride = ``(tp, p, p)``, so one matmul
   over the flattened patch);
2. adds the learned ``side x side`` position table, bilinearly resampled (corners aligned) to the ``h x w``
   grid;
3. runs ``depth`` pre-LayerNorm ViT blocks with bidirectional attention inside each frame and a 2-D rotary
   embedding (a quarter of each head's frequencies per axis, driven by the patch's row and column);
4. merges each 2x2 block (LayerNorm per patch, concatenation, two linear layers with a GELU) into one row of
   the text model's width.

Released Qwen3.5 checkpoints have no deepstack features (``deepstack_visual_indexes: []``); a config that asks
for them is refused. Parameter names are the checkpoint's under ``model.visual.``.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import torch
import torch.nn.functional as F
from anna_core.errors import ModelLoadError, UnsupportedModelError
from torch import nn

_ACTIVATIONS = {"gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "gelu": F.gelu, "silu": F.silu}


@attrs.frozen
class VisionConfig:
    """The vision tower's hyper-parameters (transformers' ``Qwen3_5VisionConfig`` fields).

    Attributes:
        out_hidden_size: the width of a merged row (the text model's ``hidden_size``).
        num_position_embeddings: rows of the learned position table, a square ``side * side``.
        rope_theta: base of the 2-D rotary embedding.
    """

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int
    num_position_embeddings: int
    hidden_act: str = "gelu_pytorch_tanh"
    in_channels: int = 3
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def grid_side(self) -> int:
        return math.isqrt(self.num_position_embeddings)

    @property
    def patch_dim(self) -> int:
        """Values per patch: ``C * tp * p * p``."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    @classmethod
    def from_hf(cls, vision: dict[str, Any], text_hidden_size: int) -> VisionConfig:
        """Parse a checkpoint's ``vision_config`` dict.

        Raises:
            UnsupportedModelError: deepstack features, a rotary type other than ``axial``, or a non-square patch.
            ModelLoadError: missing or inconsistent fields (an output width other than the text model's, a
                non-square position table, heads that do not divide the width or leave no 2-D rotary).
        """
        if vision.get("deepstack_visual_indexes"):
            raise UnsupportedModelError(f"deepstack_visual_indexes {vision['deepstack_visual_indexes']} is not a "
                                        "Qwen3.5 vision layout (transformers' Qwen3_5VisionModel has none)")
        rope = dict(vision.get("rope_parameters") or {})
        if rope.get("rope_type", "axial") != "axial":
            raise UnsupportedModelError(f"vision rope_type {rope['rope_type']!r} is not supported (only 'axial')")
        sizes = {k: vision.get(k) for k in ("patch_size", "temporal_patch_size")}
        if any(isinstance(v, (list, tuple)) for v in sizes.values()):
            raise UnsupportedModelError(f"per-axis vision patch sizes {sizes} are not supported")
        try:
            cfg = cls(depth=int(vision["depth"]), hidden_size=int(vision["hidden_size"]),
                      intermediate_size=int(vision["intermediate_size"]), num_heads=int(vision["num_heads"]),
                      out_hidden_size=int(vision.get("out_hidden_size", text_hidden_size)),
                      num_position_embeddings=int(vision["num_position_embeddings"]),
                      hidden_act=str(vision.get("hidden_act", "gelu_pytorch_tanh")),
                      in_channels=int(vision.get("in_channels", 3)), patch_size=int(vision.get("patch_size", 16)),
                      temporal_patch_size=int(vision.get("temporal_patch_size", 2)),
                      spatial_merge_size=int(vision.get("spatial_merge_size", 2)),
                      rope_theta=float(rope.get("rope_theta", 10000.0)))
        except KeyError as exc:
            raise ModelLoadError(f"vision_config lacks the field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"vision_config has an invalid field: {exc}") from exc
        cfg._validate(text_hidden_size)
        return cfg

    def _validate(self, text_hidden_size: int) -> None:
        if self.out_hidden_size != text_hidden_size:
            raise ModelLoadError(f"vision out_hidden_size {self.out_hidden_size} != the text hidden_size "
                                 f"{text_hidden_size}")
        if self.grid_side**2 != self.num_position_embeddings:
            raise ModelLoadError(f"vision num_position_embeddings {self.num_position_embeddings} is not a square")
        if self.hidden_size % self.num_heads or self.head_dim % 4:
            raise ModelLoadError(f"vision hidden_size {self.hidden_size} / num_heads {self.num_heads} must give a "
                                 "head dim divisible by 4 (2-D rotary)")
        if self.hidden_act not in _ACTIVATIONS:
            raise ModelLoadError(f"vision hidden_act {self.hidden_act!r} is not supported ({sorted(_ACTIVATIONS)})")
        if min(self.depth, self.patch_size, self.temporal_patch_size, self.spatial_merge_size) < 1:
            raise ModelLoadError("vision depth, patch sizes and spatial_merge_size must be positive")


def merge_block_order(h: int, w: int, merge: int) -> torch.Tensor:
    """``[h * w]`` int64: the raster index of each patch in spatial-merge-block order (the order the processor
    lays patches out: block rows, block columns, then the ``merge x merge`` patches of a block)."""
    raster = torch.arange(h * w).view(h // merge, merge, w // merge, merge)
    return raster.permute(0, 2, 1, 3).reshape(-1)


class PatchEmbed(nn.Module):
    """``proj``: the checkpoint's ``Conv3d`` weight ``[E, C, tp, p, p]`` and bias ``[E]``, applied as one matmul."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        k = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
        self.proj = nn.Conv3d(cfg.in_channels, cfg.hidden_size, kernel_size=k, stride=k, bias=True)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """patches ``[N, C*tp*p*p]`` -> ``[N, E]`` (a stride-equals-kernel conv is a matmul per patch)."""
        w = self.proj.weight
        return F.linear(patches.to(w.dtype), w.flatten(1), self.proj.bias)


class VisionAttention(nn.Module):
    """``qkv`` ``[3E, E]`` (+bias), ``proj`` ``[E, E]`` (+bias); bidirectional inside each segment."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.num_heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=True)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=True)

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], segment: int) -> torch.Tensor:
        """x ``[N, E]``; cos, sin ``[N, D/2]``; ``segment``: patches per frame (attention never crosses frames)."""
        N = x.shape[0]
        q, k, v = self.qkv(x).view(N, 3, self.num_heads, self.head_dim).unbind(1)  # each [N, H, D]
        q, k = rotate(q, cos_sin), rotate(k, cos_sin)
        frames = N // segment
        # [frames, H, segment, D]: each frame attends to itself only
        q, k, v = (t.view(frames, segment, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, scale=self.head_dim**-0.5)
        return self.proj(o.transpose(1, 2).reshape(N, self.num_heads * self.head_dim))


def rotate(x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x ``[N, H, D]`` rotated over all ``D`` dims (NeoX halves) by cos, sin ``[N, D/2]``; float32 math."""
    cos, sin = cos_sin[0][:, None, :], cos_sin[1][:, None, :]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class VisionBlock(nn.Module):
    """Pre-LayerNorm ViT block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))`` (``mlp.linear_fc1|fc2``)."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=1e-6)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=1e-6)
        self.attn = VisionAttention(cfg)
        self.mlp = nn.Module()
        self.mlp.linear_fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=True)
        self.mlp.linear_fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=True)
        self._act = _ACTIVATIONS[cfg.hidden_act]

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], segment: int) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos_sin, segment)
        return x + self.mlp.linear_fc2(self._act(self.mlp.linear_fc1(self.norm2(x))))


class PatchMerger(nn.Module):
    """``norm`` (LayerNorm per patch), then each ``merge x merge`` block concatenated -> ``linear_fc1`` -> GELU ->
    ``linear_fc2`` to the text width."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.merged = cfg.hidden_size * cfg.spatial_merge_size**2
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=1e-6)
        self.linear_fc1 = nn.Linear(self.merged, self.merged, bias=True)
        self.linear_fc2 = nn.Linear(self.merged, cfg.out_hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x ``[N, E]`` in merge-block order -> ``[N / merge^2, out_hidden]``."""
        x = self.norm(x).view(-1, self.merged)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))


class VisionTower(nn.Module):
    """The tower (parameters ``patch_embed``, ``pos_embed``, ``blocks.{i}``, ``merger``, as under ``model.visual.``).

    Args:
        cfg: :class:`VisionConfig`.
    """

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.config = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.pos_embed = nn.Embedding(cfg.num_position_embeddings, cfg.hidden_size)
        self.blocks = nn.ModuleList([VisionBlock(cfg) for _ in range(cfg.depth)])
        self.merger = PatchMerger(cfg)
        spatial = cfg.head_dim // 2  # frequencies per axis: head_dim / 4
        # a plain CPU tensor (not a buffer), built the same way under a meta-device context
        self._inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, spatial, 2, dtype=torch.float32, device="cpu")
                                                  / spatial)

    def num_tokens(self, grid_thw: tuple[int, int, int]) -> int:
        """Rows of the output for a ``(t, h, w)`` patch grid: ``t * h * w / merge^2``."""
        t, h, w = grid_thw
        return t * h * w // self.config.spatial_merge_size**2

    def check_grid(self, pixel_values: torch.Tensor, grid_thw: tuple[int, int, int]) -> None:
        """Raises ValueError: ``pixel_values`` is not ``[t*h*w, C*tp*p*p]``, or ``h``/``w`` are not multiples of the
        merge size."""
        t, h, w = grid_thw
        m, cfg = self.config.spatial_merge_size, self.config
        if min(t, h, w) < 1 or h % m or w % m:
            raise ValueError(f"patch grid {grid_thw} must be positive with h, w multiples of {m}")
        if tuple(pixel_values.shape) != (t * h * w, cfg.patch_dim):
            raise ValueError(f"pixel_values {tuple(pixel_values.shape)} do not fit the grid {grid_thw}: expected "
                             f"({t * h * w}, {cfg.patch_dim})")

    def forward(self, pixel_values: torch.Tensor, grid_thw: tuple[int, int, int]) -> torch.Tensor:
        """One medium: pixel_values ``[t*h*w, C*tp*p*p]`` (merge-block order) -> ``[t*h*w / merge^2, out_hidden]``
        in the tower's dtype.

        Raises:
            ValueError: see :meth:`check_grid`.
        """
        self.check_grid(pixel_values, grid_thw)
        t, h, w = grid_thw
        order = merge_block_order(h, w, self.config.spatial_merge_size).to(pixel_values.device)
        x = self.patch_embed(pixel_values)  # [N, E]
        x = x + self._position_table(h, w)[order].repeat(t, 1).to(x.dtype)
        cos_sin = self._rotary(h, w, order)
        cos_sin = (cos_sin[0].repeat(t, 1), cos_sin[1].repeat(t, 1))  # [N, D/2] each
        for block in self.blocks:
            x = block(x, cos_sin, h * w)
        return self.merger(x)

    def _position_table(self, h: int, w: int) -> torch.Tensor:
        """``[h*w, E]`` (raster order): the ``side x side`` table resampled bilinearly, corners aligned."""
        side, table = self.config.grid_side, self.pos_embed.weight
        grid = table.float().view(side, side, -1).permute(2, 0, 1)[None]  # [1, E, side, side]
        out = F.interpolate(grid, size=(h, w), mode="bilinear", align_corners=True)
        return out[0].flatten(1).t()

    def _rotary(self, h: int, w: int, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin ``[h*w, D/2]`` float32 in merge-block order: the first ``D/4`` frequencies turn with the row,
        the next ``D/4`` with the column."""
        inv_freq = self._inv_freq.to(order.device)
        rows = torch.arange(h, device=order.device).repeat_interleave(w)[order].float()
        cols = torch.arange(w, device=order.device).repeat(h)[order].float()
        angles = torch.cat([rows[:, None] * inv_freq, cols[:, None] * inv_freq], dim=-1)  # [N, D/2]
        return angles.cos(), angles.sin()
