"""Entry module of anna-audio: the ``qwen3_asr`` family and the ``transcribe`` task (``anna serve`` of a Qwen3-ASR
checkpoint, ``anna transcribe``); the ``qwen3_tts`` family and the ``speech`` task (``anna serve`` of a Qwen3-TTS
checkpoint, ``anna speak``). Registration only: lazy ``"module:attr"`` strings and plain records, no torch
import here."""

from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec, TaskOption, TaskSpec

TRANSCRIBE_TASK = TaskSpec(
    name="transcribe",
    engine="anna_audio.transcribe.task:build",
    serving="anna_audio.transcribe.task:start",
    routes="anna_audio.transcribe.routes:ROUTES",
    description="speech in, text out: POST /v1/audio/transcriptions (OpenAI's transcription API)",
    distribution="anna-audio",
    options=(
        TaskOption("asr_max_inference_batch_size", "Most audio windows the audio encoder runs at once "
                   "(default: the model's).", kind="int", stage="load"),
        TaskOption("asr_aligner_dir", "A Qwen3 forced-aligner checkpoint folder: word and segment timestamps "
                   "(timestamp_granularities[]) come from it.", kind="path"),
    ),
)

SPEECH_TASK = TaskSpec(
    name="speech",
    engine="anna_audio.speech.task:build",
    serving="anna_audio.speech.task:start",
    routes="anna_audio.speech.routes:ROUTES",
    description="text in, speech out: POST /v1/audio/speech (OpenAI's speech API)",
    distribution="anna-audio",
)


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
            # transcribe: anna serve / anna transcribe; generate: the decoder as a language model (LLM, anna bench)
            tasks=("transcribe", "generate"),
            load_options=("asr_max_inference_batch_size",),  # bounds the audio encoder's batch
            tiny_checkpoint="anna_audio.qwen3_asr.tiny:build_tiny_checkpoint",
        )
    )
    register(
        ModelFamilySpec(
            name="qwen3_tts",
            loader="anna_audio.qwen3_tts.loader:load",
            model_types=("qwen3_tts",),
            architectures=("Qwen3TTSForConditionalGeneration",),
            distribution="anna-audio",
            tasks=("speech",),  # anna serve / anna speak
        )
    )


@hookimpl
def register_tasks(register):
    register(TRANSCRIBE_TASK)
    register(SPEECH_TASK)
