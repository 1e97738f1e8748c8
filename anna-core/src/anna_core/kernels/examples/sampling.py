"""The sample inputs of the sampling ops."""

from __future__ import annotations

from typing import Any

import torch

from anna_core.kernels.contracts import OpExample
from anna_core.kernels.examples.sample_gen import SampleGen, as_dtype


def top_k_gumbel_sample(device: Any, dtype: Any) -> list[OpExample]:
    """Rows of a strided view (every second row of a ``[2M, V]`` buffer), Gumbel noise of seeded uniforms, a top-k
    filter (5 of 300: a masked-off id would win without it), no filter (0, and ``top_k >= V``), a temperature that is
    not a power of two (so the division rounds), and a row of ties at the ``k``-th score."""
    r = SampleGen(44, device, as_dtype(dtype))
    logits = r.randn(8, 300, scale=2.0)[::2]  # [4, 300], row stride 600
    u = torch.rand(4, 300, generator=r.gen).clamp_(min=torch.finfo(torch.float32).tiny, max=1.0 - 1e-7)
    noise = torch.log(-torch.log(u)).to(r.device)
    noise[1, 0] = -40.0  # a huge Gumbel draw on id 0: filtered out by top-k below unless it is among the top 5
    ties = torch.zeros(2, 40, dtype=logits.dtype, device=r.device)
    ties[:, 3:9] = 1.0  # six equal largest scores, top_k 4: all six kept
    tie_noise = torch.zeros(2, 40, device=r.device)
    tie_noise[0, 8] = -1.0  # the last of the six wins row 0; row 1 takes the first (no noise): id 3
    return [OpExample((logits, noise, 0.7, 5)), OpExample((logits, noise, 1.3, 0)),
            OpExample((logits, noise, 0.9, 300)), OpExample((logits[:1], noise[:1], 0.9, 1)),
            OpExample((ties, tie_noise, 0.7, 4))]
