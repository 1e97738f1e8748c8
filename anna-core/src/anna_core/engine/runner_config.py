"""How the model runner executes steps: :class:`RunnerConfig` (graphs, ``torch.compile``, warm-up, the LM head).

Independent of :class:`~anna_core.engine.config.EngineConfig` (what is scheduled): the runner's settings only
change how a step runs, never what it computes. :meth:`~anna_core.engine.model_runner.ModelRunner.setup` reads
them.
"""

from __future__ import annotations

import attrs

from anna_core.engine.config import non_negative
from anna_core.engine.topk_head import topk_head_mode
from anna_core.errors import AnnaError

COMPILE_MODES = ("none", "default", "max-autotune")


def _compile_mode(value: str) -> str:
    if value not in COMPILE_MODES:
        raise AnnaError(f"compile_mode must be one of {COMPILE_MODES}, got {value!r}")
    return value


@attrs.define
class RunnerConfig:
    """How the runner executes steps (independent of :class:`~anna_core.engine.config.EngineConfig`).

    Attributes:
        cuda_graph: capture decode steps as device graphs where the device supports them
            (CUDA; XPU with ``torch.xpu.XPUGraph``); ignored on CPU. ``--no-cuda-graph`` sets False.
        compile_mode: ``torch.compile`` the forward + LM head before capture: ``"none"``,
            ``"default"`` or ``"max-autotune"`` (run without compile-side CUDA graphs, since the
            runner captures its own). Also: a tied LM head kept as its GGUF's ``Q8_0`` codes on the CPU computes
            from them in one compiled loop (:meth:`~anna_core.layers.quant_linear.QuantizedEmbedding.use_int8_head`:
            float32 logits, a quarter of the bytes; compiled at set-up), and a model that declares
            ``compiled_decode`` (:class:`~anna_core.model.ModelCapabilities`) runs its one-sequence decode steps
            on the CPU through one function compiled by inductor with its C++ wrapper (compiled by a warm-up
            decode at set-up, which then runs even with ``warmup`` off; a model whose compile fails decodes eagerly).
        warmup: run one prefill + decode at start-up so the first request pays no compile or
            autotune time.
        max_prefill_replays: the most fresh prompts of one step that each replay their own prefill graph
            (a step of decodes and prompts, or of several prompts; see :meth:`ModelRunner.plan`); a step with
            more prompts computes them in one eager pass, which reads the weights once for all of them.
        prefill_graphs: with ``cuda_graph``, also capture prefill graphs (:mod:`anna_core.engine.prefill_graphs`) where
            the model declares ``padded_prefill``; False leaves prefills eager and decode graphs as they are (an A/B
            switch for benchmarks).
        fused_topk_head: the fused top-k LM head (:mod:`anna_core.engine.topk_head`) for steps whose every request
            needs at most the top 64 logits, on a model that declares ``topk_head``: ``"auto"`` on accelerators
            (``--fused-topk-head``), ``"on"`` on every device (the CPU runs the op's reference), ``"off"`` never
            (the default: the untuned kernel measured slower than the full head and an argmax).

    Raises:
        AnnaError: unknown ``compile_mode``.
    """

    cuda_graph: bool = True
    compile_mode: str = attrs.field(default="none", converter=_compile_mode)
    warmup: bool = True
    max_prefill_replays: int = attrs.field(default=16, validator=non_negative)
    prefill_graphs: bool = True
    fused_topk_head: str = attrs.field(default="off", converter=topk_head_mode)


def inductor_mode(compile_mode: str) -> str:
    """The ``torch.compile`` mode of a :attr:`RunnerConfig.compile_mode` other than ``"none"``:
    ``"max-autotune"`` runs without compile-side CUDA graphs (the runner captures its own)."""
    return "max-autotune-no-cudagraphs" if compile_mode == "max-autotune" else "default"
