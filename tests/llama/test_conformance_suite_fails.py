"""The family conformance suite can fail: run through pytester on the tiny Llama of anna-llama, with the
loaded Anna model broken after loading (one weight perturbed) it fails the HF-parity tests and still passes
the tests that compare Anna with itself; with the wrong family name it fails the family test. The parser test
skips anna-llama, which declares no output parsers, saying so."""

import pytest

pytest_plugins = ["pytester"]

HEADER = '''
import pytest
import torch
from anna_core.testing.checkpoints import build_tiny_tokenizer
from anna_core.testing.conformance import FamilyConformance
from anna_llama.tiny import build_tiny_llama
'''

CLASS = '''

class Test{name}Llama(FamilyConformance):
    family = "{family}"
    chat = False

    def build_checkpoint(self, path):
        build_tiny_llama(path, vocab_size=322, tie=False, seed=5)
        build_tiny_tokenizer(path)

    @pytest.fixture(scope="class")
    @classmethod
    def conformance_loaded(cls, conformance_checkpoint):
        from anna_core.loading import load_model

        loaded = load_model(conformance_checkpoint, device="cpu", dtype="fp32")
        if {broken}:
            with torch.no_grad():
                next(p for n, p in loaded.model.named_parameters() if "mlp" in n).mul_(1.5)
        return loaded
'''


@pytest.fixture(scope="module")
def llama_modeling_loaded():
    """transformers' Llama modeling imported before the pytester fixture snapshots sys.modules: it drops what the
    in-process run imports, and a later test importing them again registers torch's distributed ops twice, which
    crashes. A fixture, not a module-level import: that import brings in triton, which must wait until
    tests/xpu_kernels/conftest.py has set up Triton's interpreter (collection comes before any test runs)."""
    import transformers.models.llama.modeling_llama  # noqa: F401


def test_the_suite_fails_a_broken_model_and_a_wrong_family(llama_modeling_loaded, pytester):
    pytester.makepyfile(test_broken=HEADER + CLASS.format(name="Perturbed", family="llama", broken=True)
                        + CLASS.format(name="Misnamed", family="qwen35", broken=False))
    # one in-process run (a second one in the same process re-imports torch's extensions and crashes)
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider", "-k",
                                          "logits or family or batched or prefix or parsers")
    reports = result.reprec.getreports("pytest_runtest_logreport")
    got = {tuple(r.nodeid.split("::")[-2:]): r.outcome for r in reports if r.when == "call"}
    broken, misnamed = "TestPerturbedLlama", "TestMisnamedLlama"
    assert got[(broken, "test_logits_match_hf_whole_and_chunked")] == "failed"
    assert got[(broken, "test_family_is_chosen_from_config_not_the_folder_name")] == "passed"
    assert got[(broken, "test_batched_requests_equal_each_alone")] == "passed"
    assert got[(broken, "test_prefix_hit_equals_miss")] == "passed"
    assert got[(misnamed, "test_family_is_chosen_from_config_not_the_folder_name")] == "failed"
    # anna-llama declares no output parsers: the parser test says so and skips (it fails a family that declares
    # parsers but no samples: tests/qwen35/test_qwen35_conformance.py)
    skipped = [r for r in reports if r.when == "call" and r.nodeid.endswith("TestPerturbedLlama::"
                                                                              "test_parsers_on_scripted_streams")]
    assert [r.outcome for r in skipped] == ["skipped"]
    assert "declares no reasoning or tool-call parser" in str(skipped[0].longrepr)
    assert got[(misnamed, "test_logits_match_hf_whole_and_chunked")] == "passed"
