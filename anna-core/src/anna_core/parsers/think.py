"""Reasoning in ``<think> ... </think>`` blocks (Qwen3 / Qwen3.5, DeepSeek-R1 style).

Where reasoning starts: Qwen3.5's chat template pre-fills ``<think>\\n`` when thinking is on, so
the output begins *inside* the block; with thinking off it pre-fills an empty ``<think></think>``.
:meth:`ThinkReasoningParser.start` therefore looks at the prompt's ids: the output starts in
reasoning when the prompt's last ``<think>`` comes after its last ``</think>``. An output that
opens ``<think>`` itself enters reasoning too.

Rules: ``</think>`` ends reasoning and is dropped, as is the whitespace around it (trailing
whitespace of the reasoning, leading whitespace of the answer). An interrupt tag (a tool call's
start tag) also ends reasoning and stays in the answer. Output cut before ``</think>`` stays
reasoning. Tags are matched on the decoded text; the tokenizer must keep them in the text
(Qwen's ``<think>`` tokens are not special, so ``skip_special_tokens`` keeps them).
"""

from __future__ import annotations

from typing import Any

from anna_core.parsers.base import find_first, partial_tag_len

OPEN, CLOSE = "<think>", "</think>"


class ThinkReasoningParser:
    """Streaming ``<think>`` splitter (one instance per response choice).

    Args:
        tokenizer: :class:`anna_core.tokenizer.Tokenizer` or a transformers tokenizer, used to
            find the ids of ``<think>`` / ``</think>`` (None: decide from the text only).
    """

    def __init__(self, tokenizer: Any = None):
        hf = getattr(tokenizer, "hf", tokenizer)
        self.open_id = self._token_id(hf, OPEN)
        self.end_token_id = self._token_id(hf, CLOSE)
        self._reasoning = False
        self._at_start = True  # nothing emitted yet: an opening <think> may still come
        self._strip_content = False  # drop whitespace at the start of the answer
        self._buf = ""
        self._interrupts: tuple[str, ...] = ()

    @staticmethod
    def _token_id(hf: Any, text: str) -> int | None:
        if hf is None:
            return None
        tid = hf.convert_tokens_to_ids(text)
        return tid if isinstance(tid, int) and tid != getattr(hf, "unk_token_id", None) else None

    def start(self, prompt_token_ids: list[int], interrupt_tags: tuple[str, ...] = ()) -> None:
        """Decide from the prompt whether the output starts inside a think block."""
        self._interrupts = tuple(interrupt_tags)
        last_open = last_close = -1
        for i, t in enumerate(prompt_token_ids):
            if t == self.open_id:
                last_open = i
            elif t == self.end_token_id:
                last_close = i
        self._reasoning = last_open > last_close

    @property
    def in_reasoning(self) -> bool:
        return self._reasoning

    def feed(self, text: str) -> list[tuple[str, str]]:
        self._buf += text
        out: list[tuple[str, str]] = []
        while self._buf:
            if self._at_start and not self._reasoning:
                head = self._buf.lstrip()
                if head.startswith(OPEN):
                    self._buf = head[len(OPEN):]
                    self._reasoning, self._at_start = True, False
                    continue
                if OPEN.startswith(head):  # maybe an opening tag: wait
                    break
                self._at_start = False
            if self._reasoning:
                idx, tag = find_first(self._buf, (CLOSE, *self._interrupts))
                if tag is None:
                    hold = partial_tag_len(self._buf, (CLOSE, *self._interrupts))
                    body = self._buf[:len(self._buf) - hold]
                    keep = len(body) - len(body.rstrip())  # trailing whitespace waits for what follows
                    emit = body[:len(body) - keep]
                    self._buf = self._buf[len(emit):]
                    if emit:
                        out.append(("reasoning", emit))
                    break
                if self._buf[:idx].rstrip():
                    out.append(("reasoning", self._buf[:idx].rstrip()))
                self._reasoning, self._at_start, self._strip_content = False, False, True
                self._buf = self._buf[idx + len(CLOSE):] if tag == CLOSE else self._buf[idx:]
                continue
            if self._strip_content:
                self._buf = self._buf.lstrip()
                if not self._buf:
                    break
                self._strip_content = False
            out.append(("content", self._buf))
            self._buf = ""
        return out

    def finish(self) -> list[tuple[str, str]]:
        """Release held text: cut-off reasoning stays reasoning."""
        buf, self._buf = self._buf, ""
        if not buf:
            return []
        if self._reasoning:
            return [("reasoning", buf.rstrip())] if buf.rstrip() else []
        if self._strip_content:
            buf = buf.lstrip()
        return [("content", buf)] if buf else []
