"""One response choice: engine outputs -> parsed reasoning, content, tool calls and logprobs.

:class:`ChatChoice` feeds each output's text delta through the reasoning parser, then the
answer part through the tool-call parser, and turns the result into an OpenAI ``delta``
(streaming) while accumulating the full ``message``. Non-streaming feeds the final text once
through the same parsers, so both paths parse the same text. :class:`CompletionChoice` does the
same for text completions (no parsers).
"""

from __future__ import annotations

from typing import Any

import attrs

from anna_core.engine.outputs import RequestOutput, TokenLogprob
from anna_core.parsers.base import (
    ParsedDelta,
    ReasoningParser,
    ToolCallDelta,
    ToolCallParser,
)
from anna_core.server import responses
from anna_core.server.tools import ToolSetup


def _call_delta(c: ToolCallDelta) -> dict[str, Any]:
    if c.name is not None:
        return {"index": c.index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
    return {"index": c.index, "function": {"arguments": c.arguments}}


class ChatChoice:
    """State of choice ``index`` of a chat completion.

    Args:
        index: the choice index.
        reasoning: a reasoning parser already ``start``-ed on the prompt, or None.
        split_reasoning: put reasoning in its own field (``--reasoning-format deepseek``); False
            keeps the raw text inline in ``content``.
        tool_parser: a tool-call parser, or None (no tools / ``tool_choice: none``).
        tools: the request's tool settings (decides the finish reason).
        include_reasoning: send the reasoning at all.
        token_text: logprob token strings (None: the request asked for no logprobs).
    """

    def __init__(self, index: int, *, reasoning: ReasoningParser | None, split_reasoning: bool,
                 tool_parser: ToolCallParser | None, tools: ToolSetup, include_reasoning: bool = True,
                 token_text: responses.TokenText | None = None):
        self.index = index
        self.reasoning = reasoning if split_reasoning else None
        self.tool_parser = tool_parser
        self.tools = tools
        self.include_reasoning = include_reasoning
        self.token_text = token_text
        self.total = ParsedDelta()
        self.calls: list[dict[str, Any]] = []
        self.logprobs: list[TokenLogprob] = []

    def _parse(self, text: str, final: bool) -> ParsedDelta:
        out = ParsedDelta()
        segments = [("content", text)] if self.reasoning is None else self.reasoning.feed(text)
        if final and self.reasoning is not None:
            segments += self.reasoning.finish()
        for kind, part in segments:
            if kind == "reasoning":
                out.reasoning += part
            elif self.tool_parser is None:
                out.content += part
            else:
                content, calls = self.tool_parser.feed(part)
                out.content += content
                out.tool_calls += calls
        if final and self.tool_parser is not None:
            content, calls = self.tool_parser.finish()
            out.content += content
            out.tool_calls += calls
        if not self.include_reasoning:
            out.reasoning = ""
        self.total.extend(out)
        for c in out.tool_calls:
            if c.name is not None:
                self.calls.append({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}})
            self.calls[c.index]["function"]["arguments"] += c.arguments
        return out

    def push(self, out: RequestOutput) -> dict[str, Any] | None:
        """The streamed choice for one engine output (None when it adds nothing)."""
        parsed = self._parse(out.delta_text, final=out.finished)
        self.logprobs += out.logprobs
        delta: dict[str, Any] = {}
        if parsed.reasoning:
            delta["reasoning_content"] = delta["reasoning"] = parsed.reasoning
        if parsed.content:
            delta["content"] = parsed.content
        if parsed.tool_calls:
            delta["tool_calls"] = [_call_delta(c) for c in parsed.tool_calls]
        lp = responses.chat_logprobs(out.logprobs, self.token_text) if self.token_text and out.logprobs else None
        if not delta and lp is None:
            return None
        return responses.chat_delta_choice(self.index, delta, None, lp)

    def finish_reason(self, engine_reason: str | None) -> str | None:
        """OpenAI's reason: ``tool_calls`` when the model chose to call (auto / required)."""
        if self.calls and engine_reason == "stop" and self.tools.choice in ("auto", "required"):
            return "tool_calls"
        return engine_reason

    def collect(self, out: RequestOutput) -> None:
        """Non-streaming: keep the logprobs of an output (the text is parsed once at the end)."""
        self.logprobs += out.logprobs

    def message_choice(self, final: RequestOutput) -> dict[str, Any]:
        """The non-streamed choice: the final text parsed in one piece."""
        self._parse(final.text, final=True)
        message: dict[str, Any] = {"role": "assistant",
                                   "content": self.total.content if self.total.content or not self.calls else None}
        if self.total.reasoning:
            message["reasoning_content"] = message["reasoning"] = self.total.reasoning
        if self.calls:
            message["tool_calls"] = self.calls
        lp = responses.chat_logprobs(self.logprobs, self.token_text) if self.token_text else None
        return {"index": self.index, "message": message, "logprobs": lp,
                "finish_reason": self.finish_reason(final.finish_reason)}


class CompletionChoice:
    """State of one text-completion choice (``echo`` prepends ``prefix``).

    Args:
        echo_logprobs: with ``echo`` and ``logprobs``, the ``logprobs`` count: the logprobs object starts with the
            prompt's tokens (:func:`~anna_core.server.responses.echo_logprobs`); else None.
        prompt_logprobs: vLLM's ``prompt_logprobs`` count: the choice carries ``prompt_logprobs``
            (:func:`~anna_core.server.responses.vllm_prompt_logprobs`); else None.
        echo_only: ``echo`` with ``max_tokens`` 0: the generated token is dropped (text, logprobs, ids), the finish
            reason is ``length``.
    """

    def __init__(self, index: int, prefix: str = "", token_text: responses.TokenText | None = None,
                 return_token_ids: bool = False, *, echo_logprobs: int | None = None,
                 prompt_logprobs: int | None = None, echo_only: bool = False):
        self.index = index
        self.prefix = prefix
        self.token_text = token_text
        self.return_token_ids = return_token_ids
        self.echo_logprobs = echo_logprobs
        self.prompt_logprobs = prompt_logprobs
        self.echo_only = echo_only
        self.text = ""
        self.logprobs: list[TokenLogprob] = []
        self._offset = 0
        self._prompt_sent = False

    def _prompt_parts(self, out: RequestOutput) -> tuple[dict[str, Any] | None, list[Any] | None]:
        """The echoed prompt's logprobs object and vLLM's ``prompt_logprobs`` of ``out`` (each None if not asked)."""
        entries, text = out.prompt_logprobs, self.token_text
        if entries is None or text is None:
            return None, None
        echo = (responses.echo_logprobs(out.prompt_token_ids, entries, text, self.echo_logprobs)
                if self.echo_logprobs is not None else None)
        vllm = (responses.vllm_prompt_logprobs(entries, text, self.prompt_logprobs)
                if self.prompt_logprobs is not None else None)
        return echo, vllm

    def push(self, out: RequestOutput) -> dict[str, Any] | None:
        if self.echo_only:  # the prompt alone: the generated token is dropped
            out = attrs.evolve(out, delta_text="", delta_token_ids=[], logprobs=[])
        text = out.delta_text
        if self.prefix and not self.text:
            text = self.prefix + text
        self.text += text
        lp, prompt_lp = None, None
        if not self._prompt_sent and out.prompt_logprobs is not None:  # the first output after the prompt
            self._prompt_sent = True
            lp, prompt_lp = self._prompt_parts(out)
            if lp is not None and lp["tokens"]:
                self._offset = lp["text_offset"][-1] + len(lp["tokens"][-1])
        if self.token_text is not None and out.logprobs:
            gen = responses.completion_logprobs(out.logprobs, self.token_text, self._offset)
            self._offset = gen["text_offset"][-1] + len(gen["tokens"][-1])
            self.logprobs += out.logprobs
            lp = gen if lp is None else responses.join_logprobs(lp, gen)
        token_ids = out.delta_token_ids if self.return_token_ids else None
        if not text and lp is None and not token_ids and prompt_lp is None:
            return None
        return responses.completion_choice(self.index, text, None, lp, token_ids=token_ids,
                                           prompt_logprobs=prompt_lp)

    def collect(self, out: RequestOutput) -> None:
        """Non-streaming: keep the logprobs of an output."""
        if not self.echo_only:
            self.logprobs += out.logprobs

    def final_choice(self, final: RequestOutput) -> dict[str, Any]:
        if self.echo_only:
            final = attrs.evolve(final, text="", token_ids=[], finish_reason="length")
        self.text = self.prefix + final.text
        lp = responses.completion_logprobs(self.logprobs, self.token_text, 0) if self.token_text else None
        echo, prompt_lp = self._prompt_parts(final)
        if echo is not None:
            lp = responses.join_logprobs(echo, lp)
        token_ids = final.token_ids if self.return_token_ids else None
        return responses.completion_choice(self.index, self.text, final.finish_reason, lp, token_ids=token_ids,
                                           prompt_logprobs=prompt_lp)
