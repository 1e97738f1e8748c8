"""Request intake checks: what a request must satisfy before the engine queues it (thread-safe: settings only).

:class:`RequestValidator` refuses, with an :class:`~anna_core.errors.InvalidRequestError` naming the field, what
the engine could not serve: an empty or too long prompt, token ids outside the vocabulary, stop strings without a
tokenizer, media the model does not take (:func:`~anna_core.multimodal.check_multimodal`), and sampling options
the logits processors refuse (logit bias ids, grammars that do not compile).
"""

from __future__ import annotations

from typing import Any

from anna_core.engine.logits_processors import LogitsProcessors
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import InvalidRequestError
from anna_core.model import ModelCapabilities
from anna_core.multimodal import MultiModalInputs, check_multimodal


class RequestValidator:
    """The engine's limits a request is checked against.

    Args:
        vocab_size: the model's vocabulary (token ids are ``0 <= id < vocab_size``).
        max_model_len: the longest sequence served (prompt and output), in tokens.
        capabilities: the model's declared capabilities (``modalities``, ``position_rows``).
        max_item_tokens: the most encoder rows one medium may have (the encoder budget and cache).
        tokenizer: the engine's tokenizer, or None (stop strings are then refused).
        logits_processors: checks the sampling options they serve (logit bias, grammars).
    """

    def __init__(self, *, vocab_size: int, max_model_len: int, capabilities: ModelCapabilities, max_item_tokens: int,
                 tokenizer: Any, logits_processors: LogitsProcessors):
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.capabilities = capabilities
        self.max_item_tokens = max_item_tokens
        self.tokenizer = tokenizer
        self.logits_processors = logits_processors

    def validate(self, prompt_token_ids: list[int], params: SamplingParams,
                 multimodal: MultiModalInputs | None = None) -> None:
        """Check a request.

        Raises:
            InvalidRequestError: empty or too long prompt (code ``context_length_exceeded``), bad prompt or stop
                token ids, stop strings without a tokenizer, media the model does not take or that do not fit the
                prompt or the encoder budget, or sampling options the logits processors refuse.
        """
        if not prompt_token_ids:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        if not all(isinstance(t, int) and t >= 0 for t in prompt_token_ids):
            raise InvalidRequestError("prompt token ids must be non-negative integers", param="prompt")
        vocab = self.vocab_size
        if max(prompt_token_ids) >= vocab:
            raise InvalidRequestError(f"prompt token id {max(prompt_token_ids)} is outside the vocabulary "
                                      f"of {vocab} tokens", param="prompt")
        if len(prompt_token_ids) >= self.max_model_len:
            raise InvalidRequestError(
                f"the prompt has {len(prompt_token_ids)} tokens; this model serves at most {self.max_model_len} "
                "tokens including the output", param="prompt", code="context_length_exceeded")
        if multimodal is not None:
            caps = self.capabilities
            check_multimodal(multimodal, len(prompt_token_ids), modalities=caps.modalities,
                             position_rows=caps.position_rows, max_item_tokens=self.max_item_tokens)
        bad_stop = [t for t in params.stop_token_ids if not 0 <= t < vocab]
        if bad_stop:
            raise InvalidRequestError(f"stop_token_ids entry {bad_stop[0]} is outside the vocabulary "
                                      f"(0 <= id < {vocab})", param="stop_token_ids")
        if params.stop and self.tokenizer is None:
            raise InvalidRequestError("stop strings need a tokenizer; this model was loaded without one", param="stop")
        self.logits_processors.validate(params)  # logit_bias ids, grammar compiles
