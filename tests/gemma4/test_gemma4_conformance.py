"""anna-gemma4 passes the family conformance suite (:mod:`anna_core.testing.conformance`): a tiny random
Gemma 4 of the E2B style (sliding-window and global groups, KV sharing, per-layer inputs), prompts longer
than its 16-token window."""

from anna_core.testing.conformance import FamilyConformance

from tests.gemma4.tiny import WINDOW, build_tiny_gemma4


class TestGemma4Conformance(FamilyConformance):
    family = "gemma4"
    prompt_length = 3 * WINDOW

    def build_checkpoint(self, path):
        build_tiny_gemma4(path, variant="e2b", layout="causal", seed=4)
