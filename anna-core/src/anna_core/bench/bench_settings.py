"""What ``anna bench`` measures: :class:`BenchSettings`, its flags validated.

The runs are timed by :mod:`anna_core.bench.engine_bench`; the engine they time is built by
:mod:`anna_core.bench.bench_engine`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from anna_core.errors import AnnaError


@attrs.define
class BenchSettings:
    """What to benchmark (the ``anna bench`` flags).

    Raises:
        AnnaError: a non-positive length, batch or run count.
    """

    model_dir: Path
    device: str = "auto"
    dtype: str = "auto"
    load_format: str = "dummy"
    weight_quant: str = "auto"
    lm_head_quant: str = "none"
    """The LM head's quantization (a family load option: Qwen3.5's ``lm_head_quant``); ``"none"``: dense."""
    expert_quant: str = "none"
    """The MoE routed experts' quantization (``load_model(expert_quant=...)``); ``"none"``: dense."""
    batch_size: int = 1
    input_len: int = 512
    output_len: int = 256
    warmup: int = 1
    runs: int = 3
    cuda_graph: bool = True
    compile_mode: str = "none"
    fused_topk_head: bool = False
    """The fused top-k LM head where it applies (``RunnerConfig.fused_topk_head`` ``"auto"``); False (the
    default): ``"off"``."""
    async_scheduling: bool = True
    prefix_caching: bool = False
    serve_defaults: bool = False
    disable_kernels: tuple[str, ...] = ()
    profile: bool = False
    profile_steps: int = 8
    compare_hf: bool = False
    hf_output_len: int | None = None
    seed: int = 0
    logprobs: int | None = None
    timeline: bool = False
    offload: Any = None
    """An :class:`~anna_core.engine.offload.OffloadConfig` (None: the experts stay on the device)."""
    max_device_memory_gib: float | None = None
    image: Any = None
    """An :class:`~anna_core.bench.image_prompts.ImageSpec`: one image per request (None: token-id prompts)."""
    video: Any = None
    """A :class:`~anna_core.bench.video_prompts.VideoSpec`: one video per request (None: no video)."""
    offload_vision: bool = False
    tensor_parallel_size: int = 1
    """Devices the model is split over (``--tensor-parallel-size``; :mod:`anna_core.distributed`): the step bytes
    and roofline are then rank 0's (its shard's weights and caches, against one device's bandwidth)."""
    kv_cache_quantization: str = "none"
    """``--kv-cache-quantization`` of the engine (:mod:`anna_core.kv_quant`)."""
    kv_cache_quant_bits: int | None = None

    def __attrs_post_init__(self) -> None:
        for name in ("batch_size", "input_len", "output_len", "runs"):
            if getattr(self, name) < 1:
                raise AnnaError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.output_len < 2:
            raise AnnaError("--output-len must be at least 2 (one decode step after the first token)")
        if self.warmup < 0:
            raise AnnaError(f"--warmup must be non-negative, got {self.warmup}")
        if self.logprobs is not None and self.logprobs < 0:
            raise AnnaError(f"--logprobs must be non-negative, got {self.logprobs}")
        if self.serve_defaults and (self.prefix_caching or not self.async_scheduling):
            raise AnnaError("--serve-defaults builds the engine as `anna serve` does: drop --enable-prefix-caching "
                            "(on there) and --no-async-scheduling")
        if (self.image is not None or self.video is not None) and self.compare_hf:
            raise AnnaError("--compare-hf times text prompts only: leave it out with --image / --image-size / --video-*"
                            " (python -m anna_core.bench.vl_bench times HF with an image)")
        if self.image is not None and self.video is not None:
            raise AnnaError("one medium per request: --image / --image-size or --video-frames, not both")
        if self.tensor_parallel_size < 1:
            raise AnnaError(f"--tensor-parallel-size must be at least 1, got {self.tensor_parallel_size}")
        if self.tensor_parallel_size > 1 and (self.compare_hf or self.profile or self.timeline or self.image is not None
                                              or self.video is not None):
            raise AnnaError("--tensor-parallel-size above 1 times text prompts through the served path only: leave "
                            "out --compare-hf, --profile, --timeline and media (each runs the model on rank 0 alone)")

    def media_requests(self, loaded: Any, batch: int, seed: int) -> tuple[list[list[int]], list[Any]]:
        """``batch`` prompts with this benchmark's image or video each and their multimodal inputs."""
        if self.image is not None:
            from anna_core.bench.image_prompts import image_requests

            return image_requests(loaded, self.image, batch, seed)
        from anna_core.bench.video_prompts import video_requests

        return video_requests(loaded, self.video, batch, seed)
