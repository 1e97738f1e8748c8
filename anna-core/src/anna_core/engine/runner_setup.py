"""The model runner's start-up: compiling, warm-up and the capture of its decode and prefill graphs.

:class:`RunnerSetup` runs once before the first request (:meth:`~anna_core.engine.model_runner.ModelRunner.setup`):
with ``torch.compile`` asked for, a CPU ``Q8_0`` tied head computes from its int8 codes and a model that declares
``compiled_decode`` compiles its one-sequence decode step; then the warm-up (:mod:`anna_core.engine.warmup`), the
prefill graphs (:mod:`anna_core.engine.prefill_graphs`) and the decode graphs (:mod:`anna_core.engine.cuda_graphs`).
A failed capture is logged and leaves those steps eager (serving continues, only slower); when ``torch.compile`` of
the step is what fails (dynamo cannot trace every kernel plugin's launcher), the uncompiled step is captured
instead, and when the fused top-k head's modes fail, the full head's alone. :class:`SetupResult` says what was
captured, why a kind of graph was not, and the seconds each phase took.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs
import torch

from anna_core.device import Accelerator
from anna_core.engine.checkpoint_plan import CheckpointTarget
from anna_core.engine.cuda_graphs import MODES, TOPK_MODES, DecodeGraphs
from anna_core.engine.prefill_graphs import PrefillGraphs, prefill_buckets
from anna_core.engine.runner_config import RunnerConfig, inductor_mode
from anna_core.engine.topk_head import FUSED_K
from anna_core.engine.warmup import warm_up
from anna_core.layers.quant_linear import use_int8_heads
from anna_core.model import CausalLM, ModelCaches

log = logging.getLogger("anna.engine")

NOT_SET_UP = "not set up (ModelRunner.setup has not run)"
""":meth:`~anna_core.engine.model_runner.ModelRunner.graph_report`'s ``why_not`` before the set-up."""


def _capture_failed(exc: Exception) -> str:
    return f"capture failed: {type(exc).__name__}: {str(exc)[:300]}"


@attrs.define
class SetupResult:
    """What the set-up left.

    Attributes:
        decode: the captured decode graphs, or None (decode steps run eagerly).
        prefill: the captured prefill graphs, or None (prefills run eagerly).
        why_not: ``{"decode": reason | None, "prefill": reason | None}``: why a kind was not captured (None: it was).
        startup: seconds per phase (``int8_head_compile_s``, ``warmup_s``, ``prefill_graphs_s``, ``decode_graphs_s``).
    """

    decode: DecodeGraphs | None = None
    prefill: PrefillGraphs | None = None
    why_not: dict[str, str | None] = attrs.field(factory=lambda: dict.fromkeys(("decode", "prefill"), NOT_SET_UP))
    startup: dict[str, float] = attrs.field(factory=dict)


class RunnerSetup:
    """Compiles, warms up and captures the graphs of one model over its caches.

    Args:
        model: a :class:`~anna_core.model.CausalLM` module.
        caches: its allocated caches.
        accel: the device's services (graph capture, synchronization).
        device: the model's device.
        position_rows: rows of a token's position (3 for M-RoPE).
        own_positions: positions may differ from the cache index: the graphs stage them apart.
        checkpoint_target: where in-pass snapshots of a captured prefill go, or None.
        decode_graphs: builds the decode graphs (default :class:`~anna_core.engine.cuda_graphs.DecodeGraphs`).
        buckets: the prompt lengths of prefill graphs up to a length
            (default :func:`~anna_core.engine.prefill_graphs.prefill_buckets`).
    """

    def __init__(self, model: CausalLM, caches: ModelCaches, accel: Accelerator, device: torch.device, *,
                 position_rows: int, own_positions: bool, checkpoint_target: CheckpointTarget | None,
                 decode_graphs: Callable[..., DecodeGraphs] = DecodeGraphs,
                 buckets: Callable[[int], list[int]] = prefill_buckets):
        self.model = model
        self.caches = caches
        self.accel = accel
        self.device = device
        self.position_rows = position_rows
        self.own_positions = own_positions
        self.checkpoint_target = checkpoint_target
        self.decode_graphs = decode_graphs
        self.buckets = buckets

    def run(self, config: RunnerConfig, *, max_model_len: int, max_num_seqs: int, max_prefill_tokens: int | None,
            topk_head: bool) -> SetupResult:
        """Set up for ``config``: prefill graphs for prompts of up to ``max_prefill_tokens`` (default
        ``max_model_len``) where the model supports them, decode graphs for up to ``max_num_seqs`` sequences (with
        the fused top-k head's modes when ``topk_head``) where the device and ``config`` allow."""
        result = SetupResult()
        caps = self.model.capabilities
        if not config.cuda_graph:
            result.why_not = dict.fromkeys(result.why_not, "off (cuda_graph=False, --no-cuda-graph)")
        elif not self.accel.graphs:
            result.why_not = dict.fromkeys(result.why_not, f"the {self.device.type} device does not capture graphs")
        elif not caps.graph_capture:
            result.why_not = dict.fromkeys(result.why_not, "the model does not declare graph_capture (e.g. "
                                           "offloaded experts read their ids on the host)")
        clock = time.perf_counter
        startup = result.startup
        if config.compile_mode != "none":  # kept-quantized Q8_0 tied heads (CPU GGUF): from their int8 codes
            mode = inductor_mode(config.compile_mode)
            t0 = clock()
            try:
                if use_int8_heads(self.model, lambda fn: torch.compile(fn, mode=mode, dynamic=False)):
                    startup["int8_head_compile_s"] = clock() - t0
            except Exception as exc:  # noqa: BLE001 - e.g. no C++ compiler for inductor: the float32 head serves
                log.warning("compiling the int8 LM head failed, keeping the float32 head: %s: %s",
                            type(exc).__name__, str(exc)[:300])
        compiled_decode = False
        if config.compile_mode != "none" and self.device.type == "cpu" and caps.compiled_decode:
            # the batch-1 decode step as one compiled function, compiled by the warm-up's decode (run for it even
            # where warm-up is off, as on the CPU: the first request does not wait for the compiler); the C++
            # wrapper calls its kernels without Python in between
            options = {"cpp_wrapper": True, "max_autotune": config.compile_mode == "max-autotune"}
            compiled_decode = self.model.compile_decode(self.caches, lambda fn: torch.compile(fn, options=options))
        if config.warmup or compiled_decode:
            t0 = clock()
            warm_up(self.model, self.caches, self.accel, max_model_len, self.position_rows)
            startup["warmup_s"] = clock() - t0
        if config.cuda_graph and self.accel.graphs and caps.graph_capture:
            width = -(-max_model_len // self.caches.block_size)
            if config.prefill_graphs:
                t0 = clock()
                self._capture_prefill(result, min(max_model_len - 1, max_prefill_tokens or max_model_len), width)
                startup["prefill_graphs_s"] = clock() - t0
            else:
                result.why_not["prefill"] = "off (RunnerConfig.prefill_graphs=False)"
            t0 = clock()
            self._capture_decode(result, config, max_num_seqs, width, topk_head)
            startup["decode_graphs_s"] = clock() - t0
        if startup:
            pg, dg = result.prefill, result.decode
            log.info("runner set-up: warm-up %.1f s (kernel compile and autotune), prefill graphs %.1f s (%s), decode "
                     "graphs %.1f s (%s)", startup.get("warmup_s", 0.0), startup.get("prefill_graphs_s", 0.0),
                     f"{len(pg.buckets)} prompt lengths" if pg is not None else "none",
                     startup.get("decode_graphs_s", 0.0),
                     f"{len(dg.buckets)} batch sizes x {len(dg.modes)} modes" if dg is not None else "none")
        return result

    def _capture_decode(self, result: SetupResult, config: RunnerConfig, max_num_seqs: int, width: int,
                        topk_head: bool) -> None:
        """Capture the decode graphs (with ``torch.compile`` when ``config`` asks; uncompiled when that fails);
        a failed capture is logged and leaves decode steps eager."""
        vocab = self.model.vocab_size
        compile_fn = None
        if config.compile_mode != "none":
            mode = inductor_mode(config.compile_mode)

            def compile_fn(fn):
                return torch.compile(fn, mode=mode, dynamic=False)

        greedy_head = self.model.capabilities.greedy_head

        def capture(fn, fused: bool):
            with_topk: dict[str, Any] = {"modes": MODES + TOPK_MODES, "topk": FUSED_K} if fused and topk_head else {}
            graphs = self.decode_graphs(self.model, self.caches, self.accel, max_batch=max_num_seqs,
                                        max_blocks_per_seq=width, vocab_size=vocab, compile_fn=fn,
                                        position_rows=self.position_rows, staged_positions=self.own_positions,
                                        side_outputs=self.model.capabilities.side_outputs,
                                        greedy_head=fused and greedy_head, **with_topk)
            graphs.capture()
            return graphs

        # each attempt in turn: compiled (when asked) then uncompiled, with the fused heads (the top-k head's modes
        # when on, the model's greedy head when declared) then without them (a failed fused-head capture keeps the
        # full head's graphs)
        fused_options = (True, False) if topk_head or greedy_head else (False,)
        attempts = [(fn, fused) for fn in ((compile_fn, None) if compile_fn is not None else (None,))
                    for fused in fused_options]
        for n, (fn, fused) in enumerate(attempts):
            try:
                result.decode = capture(fn, fused)
                result.why_not["decode"] = None
                return
            except Exception as exc:  # noqa: BLE001 - keep serving rather than not at all
                if n == len(attempts) - 1:
                    log.warning("decode graph capture failed, running eagerly: %s: %s", type(exc).__name__, str(exc))
                    result.why_not["decode"] = _capture_failed(exc)
                elif attempts[n + 1][0] is fn:  # the same step without the fused heads
                    log.warning("decode graph capture with the fused LM head (top-k modes / greedy head) failed, "
                                "capturing the full head's modes only: %s: %s", type(exc).__name__,
                                str(exc))  # str: frees the attempt
                else:  # e.g. dynamo cannot trace a kernel plugin's launcher: the graphs still pay without compile
                    log.warning("decode graph capture with torch.compile (mode %s) failed, capturing the uncompiled "
                                "step: %s: %s", config.compile_mode, type(exc).__name__, str(exc))

    def _capture_prefill(self, result: SetupResult, max_tokens: int, width: int) -> None:
        """Capture the prefill graphs of prompts up to ``max_tokens`` with block tables of up to ``width``
        blocks (none when the model does not support padded prefills or no bucket fits); a failure is
        logged and leaves prefills eager."""
        buckets = self.buckets(max_tokens)
        if not self.model.capabilities.padded_prefill:
            result.why_not["prefill"] = "the model does not declare padded_prefill"
            return
        if not buckets:
            result.why_not["prefill"] = f"no prompt-length bucket fits one-step prompts of up to {max_tokens} tokens"
            return
        try:
            caps = self.model.capabilities
            graphs = PrefillGraphs(self.model, self.caches, self.accel, buckets=buckets, max_blocks_per_seq=width,
                                   checkpoints=self.checkpoint_target, position_rows=self.position_rows,
                                   staged_positions=self.own_positions,
                                   hidden_size=self.model.hidden_size if caps.modalities else None)
            graphs.capture()
            result.prefill = graphs
            result.why_not["prefill"] = None
        except Exception as exc:  # noqa: BLE001 - keep serving rather than not at all
            log.warning("prefill graph capture failed, prefills run eagerly: %s: %s", type(exc).__name__, str(exc))
            result.why_not["prefill"] = _capture_failed(exc)
