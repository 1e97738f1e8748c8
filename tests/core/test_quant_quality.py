"""The quantized-versus-dense measures of :mod:`anna_core.testing.quant_quality` (what families' ``--weight-quant``
/ ``--expert-quant`` tests bound), on core's tiny test family: a model agrees fully with itself, and a perturbed
copy's KL divergence is torch's ``kl_div`` along the dense continuation."""

import pytest
import torch
from anna_core.testing.quant_quality import Agreement, DenseRun, QualityBounds
from anna_core.testing.runner import prefill_logits

from ._tiny_family import load_tiny, write_tiny_config

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 130, 64, 11, 200]
EXACT = QualityBounds(min_greedy_equal=16, min_top1=1.0, max_mean_kl=1e-6, max_kl=1e-6)


def test_a_model_agrees_with_itself_and_a_perturbed_copy_is_measured(tmp_path):
    model = load_tiny(write_tiny_config(tmp_path / "tiny")).model
    dense = DenseRun.of(model, PROMPT, 16)
    assert len(dense.tokens) == 16 and dense.logits.shape == (16, 256)
    same = Agreement.of(model, dense)
    assert same.greedy_equal == 16 and same.top1 == 1.0 and abs(same.max_kl) < 1e-6
    EXACT.check(same)

    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * p.std() * 2)
    worse = Agreement.of(model, dense)
    logits = prefill_logits(model, PROMPT + dense.tokens)[len(PROMPT) - 1:-1]
    kl = torch.nn.functional.kl_div(logits.log_softmax(-1), dense.logits.log_softmax(-1), log_target=True,
                                    reduction="none").sum(-1)  # KL(p_dense || p_perturbed) per position
    assert worse.mean_kl == pytest.approx(kl.mean().item(), rel=1e-5) and worse.mean_kl > 1e-3
    assert worse.greedy_equal < 16 and worse.top1 < 1.0
    assert worse.max_kl == pytest.approx(kl.max().item(), rel=1e-5)
    assert worse.top1 == (logits.argmax(-1) == dense.logits.argmax(-1)).float().mean().item()
    with pytest.raises(AssertionError, match="Agreement"):
        EXACT.check(worse)
