"""Random weights for the codec decoder in GPU experiments (imported by the scripts beside it, which run from the
repository root as ``python3 tools/gpu_experiments/NAME.py``, so this folder is on ``sys.path``)."""

from __future__ import annotations

import torch


def randomize_codebooks(decoder: torch.nn.Module) -> torch.nn.Module:
    """Give a freshly built decoder audible random codebooks and SnakeBeta parameters, in place: ``embedding_sum``
    normal, ``alpha`` / ``beta`` uniform in [-0.5, 0.5] (the zero-initialised codebooks would decode silence).
    Returns ``decoder``."""
    with torch.no_grad():
        for name, p in decoder.named_parameters():
            if name.endswith("embedding_sum"):
                p.normal_()
            elif name.endswith(("alpha", "beta")):
                p.uniform_(-0.5, 0.5)
    return decoder
