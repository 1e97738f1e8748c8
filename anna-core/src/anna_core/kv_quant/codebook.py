"""The Lloyd-Max codebook of one coordinate of a uniformly random unit vector (Zandieh et al., arXiv
2504.19874, section 3.1, Lemma 1 and eq. 4).

After a random rotation, each coordinate ``t`` of a unit vector in ``R^D`` has the density
``f(t) = Gamma(D/2) / (sqrt(pi) Gamma((D-1)/2)) (1 - t^2)^((D-3)/2)`` on ``[-1, 1]`` (close to
``N(0, 1/D)`` for large ``D``); the optimal ``b``-bit scalar quantizer of that density is found by the
Lloyd-Max iteration (Lloyd 1982, Max 1960): boundaries at the midpoints of neighbouring centroids,
each centroid the conditional mean of its cell. Computed here in float64 on a fine grid, on the CPU,
so every device gets the same codebook.
"""

from __future__ import annotations

import torch

_GRID = 1 << 14
_ITERS = 300


def _density(head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Grid points ``t`` over ``[-1, 1]`` (cell midpoints) and their normalised weights ``f(t) dt``."""
    t = (torch.arange(_GRID, dtype=torch.float64) + 0.5) / _GRID * 2 - 1
    log_f = 0.5 * (head_dim - 3) * torch.log1p(-t * t)
    w = torch.exp(log_f - log_f.max())
    return t, w / w.sum()


def lloyd_max_codebook(head_dim: int, bits: int) -> torch.Tensor:
    """The ``2 ** bits`` sorted centroids ``[2**bits]`` float64 of the coordinate density of ``R^head_dim``.

    Raises:
        ValueError: ``head_dim < 3`` or ``bits`` outside ``1..8``.
    """
    if head_dim < 3 or not 1 <= bits <= 8:
        raise ValueError(f"lloyd_max_codebook: head_dim >= 3 and 1 <= bits <= 8, got {head_dim}, {bits}")
    t, w = _density(head_dim)
    levels = 1 << bits
    cdf = torch.cumsum(w, 0)
    # start at the density's quantile midpoints, then iterate to the fixed point
    probs = (torch.arange(levels, dtype=torch.float64) + 0.5) / levels
    c = t[torch.searchsorted(cdf, probs).clamp(max=_GRID - 1)]
    for _ in range(_ITERS):
        cells = torch.bucketize(t, (c[1:] + c[:-1]) / 2)
        mass = torch.zeros(levels, dtype=torch.float64).index_add_(0, cells, w)
        moment = torch.zeros(levels, dtype=torch.float64).index_add_(0, cells, w * t)
        new = torch.where(mass > 0, moment / mass.clamp_min(1e-300), c)
        if torch.allclose(new, c, rtol=0, atol=1e-12):
            c = new
            break
        c = new
    return c


def mse_per_vector(head_dim: int, centroids: torch.Tensor) -> float:
    """The expected squared error ``E ||y - Q(y)||^2`` of quantizing a rotated unit vector coordinate by
    coordinate with ``centroids`` (``D`` times the per-coordinate error; the paper's ``D_mse``)."""
    t, w = _density(head_dim)
    c = centroids.to(torch.float64)
    q = c[torch.bucketize(t, (c[1:] + c[:-1]) / 2)]
    return float(head_dim * (w * (t - q) ** 2).sum())
