"""The roofline's weight bytes: embedding tables are gathered (not counted) except a tied LM head."""

from anna_core.bench.roofline import weight_bytes
from torch import nn


class _Text(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(100, 8)  # 800 params
        self.embed_tokens_per_layer = nn.Embedding(100, 32)  # 3200 params, gathered per token
        self.proj = nn.Linear(8, 8, bias=False)  # 64 params


class _LM(nn.Module):
    def __init__(self, tied: bool):
        super().__init__()
        self.model = _Text()
        self.lm_head = None if tied else nn.Linear(8, 100, bias=False)  # 800 params


def test_tied_head_counts_but_other_tables_do_not():
    assert weight_bytes(_LM(tied=True)) == (800 + 64) * 4


def test_untied_counts_no_embedding():
    assert weight_bytes(_LM(tied=False)) == (64 + 800) * 4


def test_routed_experts_count_by_the_share_a_step_touches():
    import pytest
    from anna_core.layers.moe import RoutedExpertsModule

    class _Experts(RoutedExpertsModule):
        def __init__(self):
            super().__init__(num_experts=8, top_k=2)
            self.w = nn.Parameter(torch.zeros(8, 10))  # 80 params, 10 per expert

    class _MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = _Experts()
            self.dense = nn.Linear(4, 4, bias=False)  # 16 params

    import torch

    assert weight_bytes(_MoE(), batch=1) == (16 + 20) * 4  # 2 of 8 experts
    assert weight_bytes(_MoE(), batch=2) == 16 * 4 + int(80 * 4 * (1 - 0.75**2))
    with pytest.raises(ValueError, match="top_k"):
        RoutedExpertsModule(4, 5)


def test_weight_quantized_projections_count_their_codes_and_scales():
    from anna_core.layers.wq_linear import quantize_linears

    model = _LM(tied=False)
    model.model.proj = nn.Linear(256, 8, bias=False)  # 2048 float32 params
    quantize_linears(model.model, "int4", None)
    # int4: 8 rows x 128 bytes of codes + a scale and a zero (the weight's float32) per row per 128 columns
    assert weight_bytes(model) == 800 * 4 + 8 * 128 + 8 * 2 * 2 * 4
