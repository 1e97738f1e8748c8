"""Reusable model layers that call kernel ops through an :class:`anna_core.kernels.OpTable`.

``norm.RMSNorm``, ``rotary.RotaryEmbedding``, ``mlp.SwiGLUMLP``, ``attention.PagedAttention``.
"""

from anna_core.layers.attention import PagedAttention
from anna_core.layers.mlp import SwiGLUMLP
from anna_core.layers.norm import RMSNorm
from anna_core.layers.rotary import RotaryEmbedding

__all__ = ["PagedAttention", "RMSNorm", "RotaryEmbedding", "SwiGLUMLP"]
