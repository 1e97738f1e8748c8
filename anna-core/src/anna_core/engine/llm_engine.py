"""The synchronous engine core: add requests, step, get per-step outputs.

One step = schedule -> model runner -> update -> detokenize / stop checks -> outputs. Blocks and
state slots return to their pools the moment a request finishes, fails or is aborted. Not
thread-safe: exactly one thread (the :class:`~anna_core.engine.async_engine.AsyncEngine` loop, or
the caller of :class:`~anna_core.llm.LLM`) drives it.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

import torch

from anna_core.engine.block_manager import BlockManager, blocks_for
from anna_core.engine.cache_allocator import allocate_caches, default_kv_budget_bytes, num_blocks_for_budget
from anna_core.engine.config import EngineConfig
from anna_core.engine.detokenizer import IncrementalDetokenizer
from anna_core.engine.model_runner import ModelRunner
from anna_core.engine.outputs import RequestOutput, Usage
from anna_core.engine.request import Request
from anna_core.engine.sampling_params import SamplingParams
from anna_core.engine.scheduler import Scheduler
from anna_core.engine.state_pool import StatePool
from anna_core.engine.stop_checker import StopStringChecker
from anna_core.errors import InvalidRequestError
from anna_core.model import LoadedModel

log = logging.getLogger("anna.engine")


class LLMEngine:
    """Batched generation over one model.

    Args:
        model: a :class:`~anna_core.model.CausalLM` module on ``device``.
        tokenizer: :class:`~anna_core.tokenizer.Tokenizer` or None (then outputs carry token ids
            only and stop strings are refused).
        config: batching and cache settings.
        device / dtype: where the caches live and their dtype.
        eos_token_ids: ids that end every request unless it sets ``ignore_eos``.
        model_max_len: the checkpoint's context limit (``None``: only the config / cache bound it).
    """

    def __init__(self, model: Any, *, tokenizer: Any = None, config: EngineConfig | None = None,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 eos_token_ids: list[int] | tuple[int, ...] = (), model_max_len: int | None = None):
        self.config = config = config or EngineConfig()
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.dtype = dtype
        self.eos_token_ids = tuple(eos_token_ids)
        spec = model.cache_spec
        bs = config.block_size
        want_len = min(x for x in (config.max_model_len, model_max_len, 1 << 20) if x is not None)
        if spec.attention is None:  # bookkeeping only: no KV tensors
            num_blocks = config.num_blocks or config.max_num_seqs * blocks_for(want_len, bs)
        else:
            num_blocks = config.num_blocks
            if num_blocks is None:
                budget = (int(config.kv_cache_memory_gib * (1 << 30)) if config.kv_cache_memory_gib is not None
                          else default_kv_budget_bytes(self.device))
                num_blocks = min(num_blocks_for_budget(spec, bs, dtype, budget),
                                 config.max_num_seqs * blocks_for(want_len, bs))
        self.max_model_len = min(want_len, num_blocks * bs)
        if self.max_model_len < want_len:
            log.warning("max_model_len capped at %d tokens: the KV cache holds %d blocks of %d",
                        self.max_model_len, num_blocks, bs)
        self.caches = allocate_caches(spec, num_blocks=num_blocks if spec.attention else 0, block_size=bs,
                                      num_slots=config.max_num_seqs, device=self.device, dtype=dtype)
        self.blocks = BlockManager(num_blocks, bs)
        self.slots = StatePool(config.max_num_seqs)
        self.scheduler = Scheduler(config, self.blocks, self.slots)
        self.runner = ModelRunner(model, self.caches, self.device)
        self._requests: dict[str, Request] = {}
        self.num_generated_tokens = 0
        self.num_steps = 0
        self.started = time.perf_counter()

    @classmethod
    def from_loaded(cls, loaded: LoadedModel, config: EngineConfig | None = None) -> LLMEngine:
        return cls(loaded.model, tokenizer=loaded.tokenizer, config=config, device=loaded.device,
                   dtype=loaded.dtype, eos_token_ids=loaded.generation.eos_token_ids,
                   model_max_len=loaded.max_model_len)

    # -- requests ---------------------------------------------------------------------------

    def validate_request(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Check a request against the engine's limits (thread-safe: reads only settings).

        Raises:
            InvalidRequestError: empty or too long prompt, bad token ids, stop strings without a
                tokenizer.
        """
        if not prompt_token_ids:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        if not all(isinstance(t, int) and t >= 0 for t in prompt_token_ids):
            raise InvalidRequestError("prompt token ids must be non-negative integers", param="prompt")
        vocab = getattr(self.model, "vocab_size", None)
        if vocab is not None and max(prompt_token_ids) >= vocab:
            raise InvalidRequestError(f"prompt token id {max(prompt_token_ids)} is outside the vocabulary "
                                      f"of {vocab} tokens", param="prompt")
        if len(prompt_token_ids) >= self.max_model_len:
            raise InvalidRequestError(
                f"the prompt has {len(prompt_token_ids)} tokens; this model serves at most {self.max_model_len} "
                "tokens including the output", param="prompt", code="context_length_exceeded")
        if params.stop and self.tokenizer is None:
            raise InvalidRequestError("stop strings need a tokenizer; this model was loaded without one", param="stop")

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams | None = None,
                    *, arrival_time: float | None = None) -> None:
        """Queue a request.

        Raises:
            InvalidRequestError: see :meth:`validate_request`, or ``request_id`` is in use.
        """
        params = params or SamplingParams()
        prompt_token_ids = list(prompt_token_ids)
        self.validate_request(prompt_token_ids, params)
        if request_id in self._requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        req = Request(request_id, prompt_token_ids, params, eos_token_ids=self.eos_token_ids,
                      seed=seed % (1 << 63), arrival_time=arrival_time)
        if self.tokenizer is not None:
            req.detokenizer = IncrementalDetokenizer(self.tokenizer, prompt_token_ids, params.skip_special_tokens)
            req.stop_checker = StopStringChecker(params)
        self._requests[request_id] = req
        self.scheduler.add(req)

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """End a request now (finish reason ``"abort"``); None if it is unknown or already done."""
        req = self._requests.get(request_id)
        if req is None:
            return None
        return self._finish(req, "abort", None, "", [])

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    @property
    def num_unfinished(self) -> int:
        return len(self._requests)

    # -- the step ---------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one batched step; returns an output for every request that produced a token,
        finished or failed in it."""
        out = self.scheduler.schedule()
        if out.is_empty:
            return []
        self.num_steps += 1
        try:
            sampled = self.runner.execute(out)
        except Exception as exc:  # the model failed: fail this step's requests, keep serving others
            log.exception("engine step failed")
            msg = f"{type(exc).__name__}: {exc}"
            return [self.fail_request(s.request_id, msg) for s in out.seqs if s.request_id in self._requests]
        results = []
        for req in self.scheduler.update(out, sampled):
            try:
                results.append(self._process(req))
            except Exception as exc:  # e.g. the tokenizer failed on this request's ids
                log.exception("output processing failed for %s", req.request_id)
                results.append(self.fail_request(req.request_id, f"{type(exc).__name__}: {exc}"))
        return results

    def fail_request(self, request_id: str, message: str) -> RequestOutput:
        """End a request with finish reason ``"error"`` and ``message``."""
        req = self._requests[request_id]
        req.error = message
        return self._finish(req, "error", None, "", [])

    def _process(self, req: Request) -> RequestOutput:
        """Stop checks and text for the token just appended to ``req``."""
        token = req.output_token_ids[-1]
        n_out = len(req.output_token_ids)
        self.num_generated_tokens += 1
        if req.first_token_time is None:
            req.first_token_time = time.perf_counter()
        reason: str | None = None
        stop_reason: str | int | None = None
        if n_out > req.params.min_tokens:
            if token in req.eos_token_ids and not req.params.ignore_eos:
                reason = "stop"
            elif token in req.params.stop_token_ids:
                reason, stop_reason = "stop", token
        max_tokens = req.params.max_tokens
        if reason is None and ((max_tokens is not None and n_out >= max_tokens) or req.num_tokens >= self.max_model_len):
            reason = "length"
        delta = ""
        if req.detokenizer is not None:
            if reason != "stop" or req.params.include_stop_str_in_output:
                delta = req.detokenizer.push([token])
            if reason is not None:
                delta += req.detokenizer.flush()
            delta, matched = req.stop_checker.feed(delta, n_out)
            if matched is not None:
                reason, stop_reason = "stop", matched
            elif reason is not None:
                delta += req.stop_checker.flush()
        if reason is not None:
            return self._finish(req, reason, stop_reason, delta, [token])
        return self._output(req, delta, [token])

    def _finish(self, req: Request, reason: str, stop_reason: str | int | None, delta: str,
                delta_ids: list[int]) -> RequestOutput:
        self.scheduler.finish(req, reason, stop_reason)
        req.finished_time = time.perf_counter()
        del self._requests[req.request_id]
        return self._output(req, delta, delta_ids)

    def _output(self, req: Request, delta: str, delta_ids: list[int]) -> RequestOutput:
        req.text += delta
        metrics = {"arrival": req.arrival_time}
        if req.first_token_time is not None:
            metrics["first_token"] = req.first_token_time
        if req.finished_time is not None:
            metrics["finished"] = req.finished_time
        return RequestOutput(
            request_id=req.request_id,
            prompt_token_ids=req.prompt_token_ids,
            text=req.text,
            token_ids=list(req.output_token_ids),
            delta_text=delta,
            delta_token_ids=delta_ids,
            finished=req.finished,
            finish_reason=req.finish_reason,
            stop_reason=req.stop_reason,
            usage=Usage(prompt_tokens=req.num_prompt_tokens, completion_tokens=len(req.output_token_ids)),
            error=req.error,
            metrics=metrics,
        )

    def stats(self) -> dict[str, Any]:
        """Counters for ``/healthz`` (read them on the engine thread)."""
        return {
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "kv_blocks_used": self.blocks.num_used_blocks,
            "kv_blocks_total": self.blocks.num_blocks,
            "state_slots_used": self.slots.num_used_slots,
            "state_slots_total": self.slots.num_slots,
            "tokens_generated": self.num_generated_tokens,
            "preemptions": self.scheduler.num_preemptions,
            "steps": self.num_steps,
            "max_model_len": self.max_model_len,
            "uptime_s": time.perf_counter() - self.started,
        }
