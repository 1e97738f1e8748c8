"""Gemma 4's thinking channel, ``<|channel>thought ... <channel|>`` -> reasoning and answer.

Gemma 4 writes its reasoning in a *channel*: ``<|channel>`` opens it, the channel's name
(``thought``) follows, then the reasoning text, and ``<channel|>`` closes it; the answer comes after.
Where reasoning starts is decided from the prompt's ids (:meth:`Gemma4ReasoningParser.start`): when
the prompt's last ``<|channel>`` comes after its last ``<channel|>`` the chat template pre-filled the
channel and the output starts inside it -- with the channel name still to come when ``<|channel>`` is
the prompt's very last token, after it otherwise. ``prefilled=True`` / ``False`` overrides that
decision (a tokenizer without these tokens, a template that pre-fills differently). An output that
opens a channel itself enters it, wherever it does (Gemma may think again between tool calls).

Rules: the markup (``<|channel>``, the channel name, ``<channel|>``) is dropped, and so is the
whitespace around the reasoning (after the name, before ``<channel|>``) and at the start of the
answer after it. Only the ``channels`` names (``thought``) hold reasoning, as does a channel without
a name; another channel's text is answer (the whitespace after its name dropped, its text and what
follows its ``<channel|>`` kept as written). Output cut before ``<channel|>`` stays reasoning. A
tool-call start tag inside the channel stays reasoning (Gemma closes the channel before calling; a
call the model sketches while thinking is not a call): pass ``honor_interrupts=True`` to let an
interrupt tag end the channel, as the ``<think>`` parser does. Tags are matched on the decoded text,
so the detokenizer must keep them (they are special tokens in Gemma's tokenizer: generate with
``skip_special_tokens`` off).
"""

from __future__ import annotations

from typing import Any

from anna_core.parsers.base import find_first, partial_tag_len

OPEN, CLOSE = "<|channel>", "<channel|>"
CHANNELS = ("thought",)


def _token_id(hf: Any, text: str) -> int | None:
    if hf is None or not hasattr(hf, "convert_tokens_to_ids"):
        return None
    tid = hf.convert_tokens_to_ids(text)
    return tid if isinstance(tid, int) and tid != getattr(hf, "unk_token_id", None) else None


class Gemma4ReasoningParser:
    """Streaming splitter of Gemma 4's thinking channel (one instance per response choice).

    Args:
        tokenizer: :class:`anna_core.tokenizer.Tokenizer` or a transformers tokenizer, used to find
            the ids of ``<|channel>`` / ``<channel|>`` (None: only ``prefilled`` decides).
        channels: the channel names that hold reasoning.
        prefilled: whether the output starts inside the channel (None: decide from the prompt).
        honor_interrupts: let ``start``'s interrupt tags end the channel (see the module doc).
    """

    def __init__(self, tokenizer: Any = None, *, channels: tuple[str, ...] = CHANNELS,
                 prefilled: bool | None = None, honor_interrupts: bool = False):
        hf = getattr(tokenizer, "hf", tokenizer)
        self.open_id = _token_id(hf, OPEN)
        self.end_token_id = _token_id(hf, CLOSE)
        self.channels = tuple(channels)
        self.prefilled = prefilled
        self.honor_interrupts = honor_interrupts
        self._mode = "content"  # content | name (channel name to come) | reasoning
        self._strip = False  # drop the whitespace at the start of what comes next
        self._buf = ""
        self._interrupts: tuple[str, ...] = ()

    def start(self, prompt_token_ids: list[int], interrupt_tags: tuple[str, ...] = ()) -> None:
        """Decide from the prompt (or ``prefilled``) whether the output starts inside the channel."""
        self._interrupts = tuple(t for t in interrupt_tags if t) if self.honor_interrupts else ()
        last_open = last_close = -1
        for i, t in enumerate(prompt_token_ids):
            if self.open_id is not None and t == self.open_id:
                last_open = i
            elif self.end_token_id is not None and t == self.end_token_id:
                last_close = i
        inside = last_open > last_close if self.prefilled is None else self.prefilled
        if not inside:
            self._mode = "content"
        elif self.prefilled is None and last_open == len(prompt_token_ids) - 1:
            self._mode = "name"
        else:
            self._mode, self._strip = "reasoning", True

    @property
    def in_reasoning(self) -> bool:
        return self._mode != "content"

    def feed(self, text: str) -> list[tuple[str, str]]:
        self._buf += text
        out: list[tuple[str, str]] = []
        while self._buf:
            if not getattr(self, f"_step_{self._mode}")(out):
                break
        return out

    def finish(self) -> list[tuple[str, str]]:
        """Release held text: cut-off reasoning stays reasoning, a cut-off channel name is dropped."""
        buf, self._buf = self._buf, ""
        if self._strip:
            buf = buf.lstrip()
        if self._mode == "name":
            return []
        if self._mode == "reasoning":
            return [("reasoning", buf.rstrip())] if buf.rstrip() else []
        return [("content", buf)] if buf else []

    # -- modes: each returns whether it consumed something (False: wait for more text) ---------

    def _step_name(self, out: list[tuple[str, str]]) -> bool:
        for name in self.channels:
            if self._buf.startswith(name):
                self._buf = self._buf[len(name):]
                self._mode, self._strip = "reasoning", True
                return True
        if any(name.startswith(self._buf) for name in self.channels):
            return False  # maybe a channel name: wait
        n = 0
        while n < len(self._buf) and (self._buf[n].isalnum() or self._buf[n] in "_-"):
            n += 1
        if n == len(self._buf):
            return False  # the name goes on
        # a nameless channel holds reasoning; another channel's text is answer
        self._mode = "reasoning" if n == 0 else "content"
        self._buf, self._strip = self._buf[n:], True
        return True

    def _step_reasoning(self, out: list[tuple[str, str]]) -> bool:
        if self._strip:
            self._buf = self._buf.lstrip()
            if not self._buf:
                return False
            self._strip = False
        tags = (CLOSE, *self._interrupts)
        idx, tag = find_first(self._buf, tags)
        if tag is None:
            body = self._buf[:len(self._buf) - partial_tag_len(self._buf, tags)]
            emit = body.rstrip()  # trailing whitespace waits for what follows
            self._buf = self._buf[len(emit):]
            if emit:
                out.append(("reasoning", emit))
            return False
        if self._buf[:idx].rstrip():
            out.append(("reasoning", self._buf[:idx].rstrip()))
        self._buf = self._buf[idx + len(CLOSE):] if tag == CLOSE else self._buf[idx:]
        self._mode, self._strip = "content", True
        return True

    def _step_content(self, out: list[tuple[str, str]]) -> bool:
        if self._strip:
            self._buf = self._buf.lstrip()
            if not self._buf:
                return False
            self._strip = False
        idx, tag = find_first(self._buf, (OPEN, CLOSE))
        if tag is None:
            hold = partial_tag_len(self._buf, (OPEN, CLOSE))
            emit = self._buf[:len(self._buf) - hold]
            self._buf = self._buf[len(emit):]
            if emit:
                out.append(("content", emit))
            return False
        if idx:
            out.append(("content", self._buf[:idx]))
        self._buf = self._buf[idx + len(tag):]
        if tag == OPEN:
            self._mode = "name"
        # else a stray close (the end of a non-reasoning channel): markup, dropped
        return True
