"""Test-suite wide settings: no network, and hide flash-linear-attention from the HF oracle."""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# transformers routes the gated delta rule to fla's GPU kernels whenever fla is importable, even on
# CPU, and crashes; the oracle must use its torch path.
sys.modules.setdefault("fla", None)
