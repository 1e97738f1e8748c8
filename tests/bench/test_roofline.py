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
