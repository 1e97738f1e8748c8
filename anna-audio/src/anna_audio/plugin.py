"""Entry module of anna_audio: registers the ``transcribe`` task (``anna serve`` of a Qwen3-ASR checkpoint, and
``anna transcribe`` of anna-cli).

Only lazy ``"module:attr"`` strings and plain records here: registering must not import torch or read weights.
"""

from anna_core.hookspecs import hookimpl
from anna_core.registry import TaskOption, TaskSpec

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


@hookimpl
def register_tasks(register):
    register(TRANSCRIBE_TASK)
