"""The device tensors a TurboQuant attention group's ops take: rotation, QJL projection and codebooks.

Built once per attention group when its caches are allocated (:func:`anna_core.engine.cache_allocator.zeroed_caches`)
and kept in :attr:`anna_core.model.AttentionCache.quant`; every layer of the group shares them.
"""

from __future__ import annotations

import attrs
import torch

from anna_core.kv_quant.codebook import lloyd_max_codebook
from anna_core.kv_quant.layout import TurboQuantLayout


def random_rotation(head_dim: int, seed: int) -> torch.Tensor:
    """A Haar-random orthogonal matrix ``[D, D]`` float32 (QR of a seeded Gaussian matrix with the signs of R's
    diagonal folded into Q; Mezzadri 2007), computed in float64 on the CPU."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(head_dim, head_dim, generator=g, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).to(torch.float32)


def qjl_projection(head_dim: int, seed: int) -> torch.Tensor:
    """The QJL matrix ``S`` ``[D, D]`` float32 with i.i.d. ``N(0, 1)`` entries (arXiv 2504.19874, Definition 1)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(head_dim, head_dim, generator=g, dtype=torch.float64).to(torch.float32)


@attrs.frozen
class TurboQuantTables:
    """One attention group's quantizer state (all float32, on the caches' device).

    Attributes:
        rotation: ``Pi`` ``[D, D]``: a row ``x`` is rotated as ``y = x @ Pi.T`` (and back as ``y @ Pi``).
        qjl: ``S`` ``[D, D]``: the sign bits of a rotated residual ``r`` are ``r @ S.T >= 0``.
        key_centroids: ``[2 ** (bits - 1)]`` sorted Lloyd-Max centroids of the keys' MSE stage.
        value_centroids: ``[2 ** bits]`` sorted centroids of the values.
        layout: the group's :class:`~anna_core.kv_quant.layout.TurboQuantLayout`.
    """

    rotation: torch.Tensor
    qjl: torch.Tensor
    key_centroids: torch.Tensor
    value_centroids: torch.Tensor
    layout: TurboQuantLayout

    @classmethod
    def build(cls, layout: TurboQuantLayout, head_dim: int, device: torch.device | str) -> TurboQuantTables:
        """The tables of ``layout`` for heads of ``head_dim``, on ``device`` (deterministic in ``layout.seed``).

        Raises:
            AnnaError: ``head_dim`` is not a multiple of 8.
        """
        layout.check_head_dim(head_dim)

        def put(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=torch.float32).contiguous()

        return cls(rotation=put(random_rotation(head_dim, layout.seed)),
                   qjl=put(qjl_projection(head_dim, layout.seed + 1)),
                   key_centroids=put(lloyd_max_codebook(head_dim, layout.key_bits)),
                   value_centroids=put(lloyd_max_codebook(head_dim, layout.value_bits)),
                   layout=layout)

    @property
    def args(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rotation, qjl, key_centroids, value_centroids)``: the trailing arguments of the TurboQuant ops."""
        return self.rotation, self.qjl, self.key_centroids, self.value_centroids
