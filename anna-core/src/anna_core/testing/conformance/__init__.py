"""The conformance suites of plugins: one base class a plugin's own tests subclass. :class:`FamilyConformance`
for a model family (below); :class:`KernelConformance` for a kernel plugin (every implementation it registers
against the op's torch reference, on the op contract's sample inputs its probe accepts).

A family plugin proves in its own repository that it behaves like every family Anna serves::

    # tests/test_conformance.py of the plugin
    from anna_core.testing.conformance import FamilyConformance

    class TestMyFamilyConformance(FamilyConformance):
        family = "my_family"           # the ModelFamilySpec.name the loader must report

        def build_checkpoint(self, path):
            ...  # save a tiny random transformers model (and a tokenizer with a chat template) to path

A family that declares output parsers (``ModelFamilySpec.reasoning_parser`` / ``tool_call_parser``) also lists
completions as its models write them, with what its parsers must make of them
(:class:`~anna_core.testing.parser_streams.ParserSample`)::

        parser_samples = (
            ParserSample(prompt=THINKING,  # a prompt whose template pre-filled the reasoning block
                         output=THOUGHT + "</think>" + ANSWER + CALL,  # the text as the model writes it
                         reasoning=THOUGHT, content=ANSWER,
                         tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}], tools=[WEATHER]),
        )

pytest collects the subclass (its name starts with ``Test``) and runs every ``test_*`` method below
against the checkpoint, built once per class. HF transformers loading the same folder is the numerical
oracle (:mod:`anna_core.testing.oracle`), so a family that transformers implements needs nothing else.

What it checks (each a method; a subclass may tighten a tolerance or skip one with a reason):

* the family is chosen from ``config.json``, not from the folder's name;
* float32 logits over a prompt within ``logits_tolerance`` (relative to the logits' range) of HF's, whole
  and prefilled in chunks;
* ``greedy_tokens`` greedy tokens through the :class:`~anna_core.LLM` API equal HF ``generate``'s;
* through the engine: batched requests equal each alone, a prefix-cache hit gives the tokens and the
  top log-probabilities of a miss, chunked prefill equals one pass;
* every declared cache group gives back all it held when the requests end, and a sliding-window group
  holds a bounded number of blocks per sequence over a long generation;
* chat completions through the real HTTP app (in-process, no socket), streamed and not, give the same
  text, and the text and token counts of greedy decoding of the tokenizer's chat-templated prompt;
* the family's parsers on scripted streams: each of ``parser_samples`` goes through fresh parsers (the factories
  the family names, given the checkpoint's tokenizer) chained as the server chains them, the reasoning parser
  started on the sample's prompt; parsed whole it gives the sample's reasoning, content and tool calls, and fed
  in pieces (cut in two at every position, one character at a time, at ``parser_random_splits`` seeded random
  points, one token at a time for a sample given as token ids) it gives the same. A family without parsers skips
  this test; one that declares parsers but no samples fails it.

Tolerances: logits are compared as ``max |a - b| / (max(b) - min(b))``; the engine comparisons of top
log-probabilities use ``logprob_atol`` (GEMMs over more rows round differently even in float32).

Modules: :mod:`.family` (:class:`FamilyConformance`), :mod:`.kernels` (:class:`KernelConformance`),
:mod:`.compare` (the comparison both use); the parser checks are :mod:`anna_core.testing.parser_streams`.
"""

from anna_core.testing.conformance.compare import relative_error
from anna_core.testing.conformance.family import FamilyConformance
from anna_core.testing.conformance.kernels import KERNEL_TOLERANCES, KernelConformance

__all__ = ["KERNEL_TOLERANCES", "FamilyConformance", "KernelConformance", "relative_error"]
