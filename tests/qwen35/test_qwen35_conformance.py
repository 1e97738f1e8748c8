"""anna-qwen35 passes the family conformance suite (:mod:`anna_core.testing.conformance`): a tiny random
Qwen3.5 (gated DeltaNet and full-attention layers: a recurrent and a paged cache group), and its parsers (Qwen's
``<think>`` reasoning and Qwen3-Coder's XML tool calls) on completions written as Qwen3.5 writes them."""

from types import SimpleNamespace

import pytest
from anna_core.testing.checkpoints import build_tiny_qwen35
from anna_core.testing.conformance import FamilyConformance

from tests.qwen35.parser_samples import QWEN_SAMPLES, THINKING


class TestQwen35Conformance(FamilyConformance):
    family = "qwen35"
    parser_samples = QWEN_SAMPLES

    def build_checkpoint(self, path):
        build_tiny_qwen35(path, tie=False, seed=3)


@pytest.fixture
def loaded_tokenizer_only(anna_tiny_tokenizer_dir):
    """What the parser test reads of the loaded checkpoint: its tokenizer (the tiny one of every Qwen3.5 test)."""
    from anna_core.tokenizer import Tokenizer

    return SimpleNamespace(tokenizer=Tokenizer.from_pretrained(anna_tiny_tokenizer_dir))


def test_a_family_with_parsers_but_no_samples_fails(loaded_tokenizer_only):
    class NoSamples(FamilyConformance):
        family = "qwen35"

    with pytest.raises(pytest.fail.Exception, match=r"reasoning parser 'qwen3', tool-call parser 'qwen3_coder', but "
                                                     r"NoSamples.parser_samples is empty: declare"):
        NoSamples().test_parsers_on_scripted_streams(loaded_tokenizer_only)

    class NotASample(FamilyConformance):
        family = "qwen35"
        parser_samples = ({"output": "hi", "content": "hi"},)

    with pytest.raises(pytest.fail.Exception, match=r"parser_samples\[0\] is a dict, not a ParserSample"):
        NotASample().test_parsers_on_scripted_streams(loaded_tokenizer_only)


def test_a_sample_the_parsers_disagree_with_fails(loaded_tokenizer_only):
    import attrs

    class Wrong(TestQwen35Conformance):
        parser_samples = (QWEN_SAMPLES[0], attrs.evolve(QWEN_SAMPLES[1], prompt=THINKING))

    with pytest.raises(AssertionError, match=r"^parser_samples\[1\] \(thinking off, a plain answer\): the parsers "
                                             r"made of the whole output"):
        Wrong().test_parsers_on_scripted_streams(loaded_tokenizer_only)
