"""Incremental detokenization that never emits half a UTF-8 character.

Byte-level BPE tokens can end in the middle of a multi-byte character (an emoji or CJK character
often spans two or three tokens); decoding such a prefix yields U+FFFD. Tokenizers that mark word
starts (SentencePiece ``▁``) decode a lone token without its leading space. So each step decodes a
small window -- the tokens already emitted since the last boundary plus the new ones -- and emits
only the text past the window's old text, holding everything back while the window's text ends in
U+FFFD. ``flush`` releases what is held (a genuinely invalid byte sequence then shows as U+FFFD).
"""

from __future__ import annotations

from typing import Any

_REPLACEMENT = "\ufffd"
# Prompt tokens decoded before the first output token, so the first word gets its leading space.
_PROMPT_CONTEXT = 4


class IncrementalDetokenizer:
    """Turns generated ids into text, a step at a time.

    Args:
        tokenizer: anything with ``decode(ids, skip_special_tokens=...) -> str``
            (:class:`anna_core.tokenizer.Tokenizer`).
        prompt_token_ids: the prompt (its last few ids give the first output token its context).
        skip_special_tokens: drop special tokens from the text.
    """

    def __init__(self, tokenizer: Any, prompt_token_ids: list[int], skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._ids: list[int] = list(prompt_token_ids[-_PROMPT_CONTEXT:])
        self._prefix = 0  # window start
        self._read = len(self._ids)  # ids before this were emitted
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_ids: list[int]) -> str:
        """Add generated ids; returns the new, complete text (possibly ``""``)."""
        self._ids.extend(token_ids)
        new = self._decode(self._ids[self._prefix:])
        if new.endswith(_REPLACEMENT):  # an incomplete character: wait for the next token
            return ""
        old = self._decode(self._ids[self._prefix:self._read])
        delta = new[len(_common_prefix(old, new)):]
        if not delta:  # only skipped special tokens: move the boundary past them
            self._read = len(self._ids)
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        if self._prefix > 64:  # keep the id buffer short
            del self._ids[:self._prefix]
            self._read -= self._prefix
            self._prefix = 0
        self.text += delta
        return delta

    def flush(self) -> str:
        """Text held back (an incomplete character at the end); call once the request ends."""
        old = self._decode(self._ids[self._prefix:self._read])
        new = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        delta = new[len(_common_prefix(old, new)):]
        self.text += delta
        return delta


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]
