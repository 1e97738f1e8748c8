"""The Qwen3 family passes the family conformance suite (:mod:`anna_core.testing.conformance`) on its own tiny
checkpoint, and its reasoning parser (Qwen's ``<think>`` blocks) on completions written as Qwen3 writes them."""

from anna_core.testing.conformance import FamilyConformance
from anna_core.testing.parser_streams import ParserSample
from anna_qwen35.qwen3.tiny import build_tiny_checkpoint

from tests.qwen35.parser_samples import NOT_THINKING, THINKING

QWEN3_SAMPLES = (
    ParserSample(name="thinking, then an answer", prompt=THINKING,
                 output="Paris is the capital; answer briefly.\n</think>\n\nThe capital of France is Paris.",
                 reasoning="Paris is the capital; answer briefly.", content="The capital of France is Paris."),
    ParserSample(name="thinking off, a plain answer", prompt=NOT_THINKING,
                 output="It is 21 °C in Paris < 25 °C in Nice {usually}. 🙂",
                 content="It is 21 °C in Paris < 25 °C in Nice {usually}. 🙂"),
    ParserSample(name="the output opens <think>", output="<think>Short.</think>\n\nYes.", reasoning="Short.",
                 content="Yes."),
    ParserSample(name="cut off while thinking", prompt=THINKING, output="Still thinking about </thin",
                 reasoning="Still thinking about </thin"),
)


class TestQwen3Conformance(FamilyConformance):
    family = "qwen3"
    greedy_tokens = 32
    parser_samples = QWEN3_SAMPLES

    def build_checkpoint(self, path):
        build_tiny_checkpoint(path, tie=False, attention_bias=True, seed=11)
