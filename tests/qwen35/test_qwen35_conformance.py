"""anna-qwen35 passes the family conformance suite (:mod:`anna_core.testing.conformance`): a tiny random
Qwen3.5 (gated DeltaNet and full-attention layers: a recurrent and a paged cache group)."""

from anna_core.testing.checkpoints import build_tiny_qwen35
from anna_core.testing.conformance import FamilyConformance


class TestQwen35Conformance(FamilyConformance):
    family = "qwen35"

    def build_checkpoint(self, path):
        build_tiny_qwen35(path, tie=False, seed=3)
