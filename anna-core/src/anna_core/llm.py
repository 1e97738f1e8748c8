"""``LLM``: offline batched generation from Python.

    from anna_core import LLM, SamplingParams
    llm = LLM("path/to/model")
    [out] = llm.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=8))
    print(out.text)
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from anna_core.engine.config import EngineConfig
from anna_core.engine.defaults import sampling_params_with_defaults
from anna_core.engine.offload import OffloadConfig
from anna_core.engine.outputs import RequestOutput
from anna_core.engine.sampling_params import SamplingParams
from anna_core.errors import AnnaError, InvalidRequestError
from anna_core.loading import load_model
from anna_core.model import LoadedModel
from anna_core.model_dir import inspect_model_dir, select_family
from anna_core.multimodal import MultiModalInputs
from anna_core.plugins import model_families, task_for
from anna_core.registry import resolve
from anna_core.tasks import generate as generate_task

Prompt = str | list[int]
Media = Mapping[str, Sequence[Any]]
"""Decoded media of one prompt by modality: ``{"image": [PIL images]}``."""


def _runner_config(device: Any, cuda_graph: bool, compile_mode: str, warmup: bool | None) -> Any:
    from anna_core.engine.model_runner import RunnerConfig

    return RunnerConfig(cuda_graph=cuda_graph, compile_mode=compile_mode,
                        warmup=device.type != "cpu" if warmup is None else warmup)


class LLM:
    """A loaded model plus the ``generate`` task's engine (:func:`anna_core.tasks.generate.build`),
    driven synchronously.

    Args:
        model_dir: model folder or GGUF file.
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"xpu"``.
        dtype: ``"auto"``, ``"bf16"``, ``"fp16"`` or ``"fp32"``.
        load_format / gguf_file / chat_template / weight_quant: see :func:`anna_core.loading.load_model`
            (``weight_quant="auto"``: a GGUF's quantized matrices stay quantized on the CPU; ``"none"``
            dequantizes them).
        cuda_graph / compile_mode / warmup: the runner's set-up, as ``anna serve`` does it
            (:class:`~anna_core.engine.model_runner.RunnerConfig`): decode and prefill graphs captured where the
            device has them (CUDA, XPU; nothing on the CPU), no ``torch.compile``, and a warm-up prefill and
            decode on an accelerator (``warmup=None``: on unless the device is the CPU). On a GPU this makes
            construction take longer (Triton compiles and autotunes the kernels, graphs are captured per
            batch and prompt-length bucket: seconds to a couple of minutes, see BENCHMARKS.md) so that every
            request runs the fast path; ``cuda_graph=False, warmup=False`` skips both (eager steps).
        offload_mode / resident_expert_layers / resident_expert_layer_indices / cached_experts_per_layer /
            expert_prefetch: expert offload of a MoE model, as the CLI flags of the same names
            (:meth:`anna_core.engine.offload.OffloadConfig.from_flags`); ``max_device_memory_gib`` (an engine option)
            is also the memory ``offload_mode="auto"`` compares the weights with.
        offload_vision: keep a vision-language model's vision tower on the CPU (``--offload-vision``): media are
            encoded there and their rows copied to the device.
        family_options: options the model's family declares for its loader (``ModelFamilySpec.load_options``,
            e.g. Qwen3-ASR's ``{"asr_max_inference_batch_size": 8}``); see ``load_model``.
        tensor_parallel_size: split the model over this many devices of the host (``--tensor-parallel-size``;
            :mod:`anna_core.distributed`): one worker process per rank past 0 is spawned, rank ``r`` on
            ``cuda:r`` (``xpu:r``; on the CPU every rank on the CPU, over gloo) and this process is rank 0.
            Call :meth:`close` (or use the ``LLM`` as a context manager) to stop the workers. The workers import
            the main module (``spawn``): in a script, create the ``LLM`` under ``if __name__ == "__main__":``.
        expert_quant: ``"none"``, ``"int4"``, ``"int8"`` or ``"fp8"``: a MoE model's routed experts quantized at
            load (``--expert-quant``; families that declare it: Qwen3.5 MoE, Gemma 4); see ``load_model``.
        **engine_options: :class:`~anna_core.engine.config.EngineConfig` fields
            (``max_num_seqs``, ``max_prefill_tokens``, ``prefill_chunk_size``, ``block_size``,
            ``num_blocks``, ``kv_cache_memory_gib``, ``max_device_memory_gib``, ``max_model_len``,
            ``enable_prefix_caching``, ``prompt_cache_size``, ...).

    Raises:
        OffloadConfigError: an offload setting out of range or contradicting the model.
        ModelLoadError: see ``load_model``.
        UnsupportedModelError: no installed family serves the checkpoint (see ``load_model``), or its
            family's tasks do not include ``generate`` (raised before any weights load).
    """

    def __init__(self, model_dir: str | Path, device: str = "auto", dtype: Any = "auto", *,
                 load_format: str = "auto", gguf_file: str | None = None, chat_template: str | None = None,
                 weight_quant: str = "auto", cuda_graph: bool = True, compile_mode: str = "none",
                 warmup: bool | None = None, offload_mode: str = "auto", resident_expert_layers: int | None = None,
                 resident_expert_layer_indices: str | list[int] | None = None, cached_experts_per_layer: int = 0,
                 expert_prefetch: bool = True, offload_vision: bool = False,
                 family_options: dict[str, Any] | None = None, tensor_parallel_size: int = 1,
                 expert_quant: str = "none", **engine_options: Any):
        family = select_family(inspect_model_dir(model_dir, gguf_file=gguf_file), model_families())
        task = task_for(family, name="generate")
        build = resolve(task.engine)
        config = EngineConfig(**engine_options)
        offload = OffloadConfig.from_flags(offload_mode, resident_expert_layers, resident_expert_layer_indices,
                                           cached_experts_per_layer, expert_prefetch)
        options = dict(dtype=dtype, load_format=load_format, gguf_file=gguf_file, chat_template=chat_template,
                       offload=offload, max_device_memory_gib=config.max_device_memory_gib, weight_quant=weight_quant,
                       offload_vision=offload_vision, family_options=family_options, expert_quant=expert_quant)
        self._workers = None
        if tensor_parallel_size == 1:
            loaded = load_model(model_dir, device=device, **options)
            self._setup(loaded, build(loaded, config, _runner_config(loaded.device, cuda_graph, compile_mode, warmup)))
            return
        from anna_core.device import resolve_device
        from anna_core.distributed.launch import load_engine

        runner = _runner_config(resolve_device(device), cuda_graph, compile_mode, warmup)
        loaded, engine, self._workers = load_engine(model_dir, {"device": device, **options}, task.engine, config,
                                                    runner, tensor_parallel_size=tensor_parallel_size)
        self._setup(loaded, engine)

    @classmethod
    def from_loaded(cls, loaded: LoadedModel, *, cuda_graph: bool = True, compile_mode: str = "none",
                    warmup: bool | None = None, **engine_options: Any) -> LLM:
        """Wrap an already loaded text-generation model (tests, custom loaders): its engine is built by
        :func:`anna_core.tasks.generate.build`, without looking the family's tasks up; the runner is set
        up as in the constructor."""
        self = cls.__new__(cls)
        self._workers = None
        runner = _runner_config(loaded.device, cuda_graph, compile_mode, warmup)
        self._setup(loaded, generate_task.build(loaded, EngineConfig(**engine_options), runner))
        return self

    def _setup(self, loaded: LoadedModel, engine: Any) -> None:
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.engine = engine
        self._ids = itertools.count()
        self._closed = False

    def close(self) -> None:
        """Stop a tensor-parallel group's workers (nothing for one device); the LLM cannot generate afterwards
        (:meth:`generate` / :meth:`chat` raise :class:`~anna_core.errors.AnnaError`)."""
        from anna_core.distributed.launch import close_engine

        self._closed = True
        workers, self._workers = self._workers, None
        close_engine(self.engine, workers)

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_default_sampling_params(self) -> SamplingParams:
        """``SamplingParams`` from the checkpoint's ``generation_config.json`` defaults."""
        return sampling_params_with_defaults(self.loaded.generation)

    def _encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidRequestError("this model has no tokenizer; pass token ids", param="prompt")
            return self.tokenizer.encode(prompt, add_special_tokens=True)
        if not all(isinstance(t, int) for t in prompt):
            raise InvalidRequestError("a prompt is a string or a list of token ids", param="prompt")
        return list(prompt)

    def generate(self, prompts: Prompt | list[Prompt],
                 sampling_params: SamplingParams | list[SamplingParams] | None = None, *,
                 multimodal: MultiModalInputs | list[MultiModalInputs | None] | None = None,
                 media: Media | list[Media | None] | None = None,
                 mm_processor_kwargs: Mapping[str, Any] | None = None) -> list[RequestOutput]:
        """Generate for each prompt, all batched together.

        Args:
            prompts: a string (tokenized raw, no chat template), a list of token ids, or a list of
                those.
            sampling_params: one for all prompts, one per prompt, or None for the checkpoint's
                defaults (``generation_config.json``).
            multimodal: the media of a single prompt, or one entry (None: text) per prompt, for a model
                that takes media (:mod:`anna_core.multimodal`: placeholder ranges index the prompt's ids).
            media: decoded media of a single prompt (``{"image": [PIL images], "video": [DecodedVideo or lists of
                PIL frames]}``), or one entry (None: text) per prompt, prepared by the model's processor
                (``LoadedModel.processor``): each prompt holds one placeholder token per medium (Qwen3.5:
                ``<|image_pad|>``, ``<|video_pad|>``; Qwen3-ASR: ``<|audio_pad|>`` for ``{"audio": [[N] float32 16 kHz
                waveforms]}``), which the processor expands. Not together with ``multimodal``.
            mm_processor_kwargs: the processor's settings for every prompt's media (Qwen3.5: ``min_pixels``,
                ``max_pixels`` for images; ``fps``, the rate of a frame list, and ``max_frames`` for videos).

        Returns:
            One finished :class:`RequestOutput` per prompt, in input order.

        Raises:
            AnnaError: the LLM was closed (:meth:`close`).
            InvalidRequestError: bad prompt, params or media (e.g. a prompt longer than ``max_model_len``,
                media for a text-only model), or a request that can never fit the device's memory under
                ``max_estimated_usage_ratio`` (code ``insufficient_memory``; :mod:`anna_core.engine.memory_admission`);
                nothing runs then.
        """
        if self._closed:
            raise AnnaError("this LLM is closed; create a new LLM to generate")
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        encoded = [self._encode(p) for p in prompts]
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(encoded)
        if len(params) != len(encoded):
            raise InvalidRequestError(f"{len(params)} sampling params for {len(encoded)} prompts")
        if multimodal is not None and not isinstance(multimodal, list) and len(encoded) != 1:
            raise InvalidRequestError(f"one MultiModalInputs is for one prompt; for {len(encoded)} prompts pass a "
                                      "list with an entry (or None) per prompt", param="multimodal")
        if media is not None:
            if multimodal is not None:
                raise InvalidRequestError("pass media or multimodal, not both", param="media")
            encoded, multimodal = self._process(encoded, media, mm_processor_kwargs)
        inputs = multimodal if isinstance(multimodal, list) else [multimodal] * len(encoded)
        if len(inputs) != len(encoded):
            raise InvalidRequestError(f"{len(inputs)} multimodal entries for {len(encoded)} prompts", param="multimodal")
        return self._run(encoded, params, inputs)

    def _process(self, prompts: list[list[int]], media: Media | list[Media | None],
                 options: Mapping[str, Any] | None) -> tuple[list[list[int]], list[MultiModalInputs | None]]:
        """Each prompt's media through the model's processor: expanded ids and their inputs."""
        per_prompt = media if isinstance(media, list) else [media]
        if len(per_prompt) != len(prompts):
            raise InvalidRequestError(f"{len(per_prompt)} media entries for {len(prompts)} prompts", param="media")
        processor = self.loaded.processor
        if processor is None and any(per_prompt):
            raise InvalidRequestError("this model takes text only; the request carries media", param="media")
        out_ids, out_mm = [], []
        for ids, m in zip(prompts, per_prompt):
            ids, mm = (ids, None) if not m else processor.process(ids, m, options)
            out_ids.append(ids)
            out_mm.append(mm)
        return out_ids, out_mm

    def chat(self, messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
             sampling_params: SamplingParams | list[SamplingParams] | None = None, *,
             add_generation_prompt: bool = True, chat_template_kwargs: dict[str, Any] | None = None,
             mm_processor_kwargs: Mapping[str, Any] | None = None) -> list[RequestOutput]:
        """Generate replies to one conversation (a list of ``{"role", "content"}`` messages) or a
        list of conversations, rendered with the checkpoint's chat template.

        A message's ``content`` may be a list of parts: ``{"type": "text", "text": ...}`` and, for a model that
        takes images, ``{"type": "image", "image": <PIL image>}``, and for one that takes videos,
        ``{"type": "video", "video": <DecodedVideo or list of PIL frames>}`` (the template sees ``{"type": "image"}``
        / ``{"type": "video"}`` and writes the model's placeholder; the media go to :meth:`generate`'s ``media`` in
        order, with ``mm_processor_kwargs``).

        Raises:
            AnnaError: the LLM was closed (:meth:`close`).
            InvalidRequestError: no tokenizer or chat template, the template rejected the messages, or images for
                a model that takes none.
        """
        if self._closed:
            raise AnnaError("this LLM is closed; create a new LLM to generate")
        if self.tokenizer is None:
            raise InvalidRequestError("this model has no tokenizer; chat needs one", param="messages")
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts, media = [], []
        for conv in conversations:
            conv, found = _take_media(conv)
            if found and self.loaded.processor is None:  # before the template sees media parts
                raise InvalidRequestError("this model takes text only; the request carries media", param="messages")
            prompts.append(self.tokenizer.encode(self.tokenizer.apply_chat_template(
                conv, add_generation_prompt=add_generation_prompt, **(chat_template_kwargs or {})),
                add_special_tokens=False))
            media.append(found or None)
        if not any(media):
            return self.generate(prompts, sampling_params)
        return self.generate(prompts, sampling_params, media=media, mm_processor_kwargs=mm_processor_kwargs)

    def _run(self, prompts: list[list[int]], params: list[SamplingParams],
             media: list[MultiModalInputs | None] | None = None) -> list[RequestOutput]:
        ids = [f"llm-{next(self._ids)}" for _ in prompts]
        media = media or [None] * len(prompts)
        added = []
        try:
            for request_id, prompt, p, mm in zip(ids, prompts, params, media):
                self.engine.add_request(request_id, prompt, p, multimodal=mm)
                added.append(request_id)
            final: dict[str, RequestOutput] = {}
            while self.engine.has_unfinished():
                for out in self.engine.step():
                    if out.finished:
                        final[out.request_id] = out
        finally:
            for request_id in added:  # only does something if we were interrupted
                self.engine.abort_request(request_id)
        return [final[i] for i in ids]


def _take_media(conversation: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[Any]]]:
    """The conversation with each ``{"type": "image", "image": obj}`` / ``{"type": "video", "video": obj}`` part
    as ``{"type": "image"}`` / ``{"type": "video"}``, and the media by modality, in order (no key for none)."""
    media: dict[str, list[Any]] = {}
    out = []
    for msg in conversation:
        content = msg.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind in ("image", "video") and kind in part:
                    media.setdefault(kind, []).append(part[kind])
                    part = {"type": kind}
                parts.append(part)
            msg = {**msg, "content": parts}
        out.append(msg)
    return out, media
