"""Entry module of anna-audio: registration only (no torch import here)."""

from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec


@hookimpl
def register_model_families(register):
    register(
        ModelFamilySpec(
            name="qwen3_asr",
            loader="anna_audio.qwen3_asr.loader:load",
            # both checkpoint layouts (converted `-hf` and the original `thinker_config` release) share the type
            model_types=("qwen3_asr",),
            architectures=("Qwen3ASRForConditionalGeneration",),
            distribution="anna-audio",
            load_options=("asr_max_inference_batch_size",),  # bounds the audio encoder's batch
            tiny_checkpoint="anna_audio.qwen3_asr.tiny:build_tiny_checkpoint",
        )
    )
