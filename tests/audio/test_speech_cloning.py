"""The voice-cloning seam of the ``speech`` task (:class:`~anna_audio.qwen3_tts.voice.VoiceCloner`): with a cloner
that returns the reference's own x-vector and reference codes, and with the checkpoint's own cloner
(:class:`~anna_audio.qwen3_tts.voice_clone.RecordingCloner`: the speaker and codec encoders) fed the reference
recording as an uploaded WAV, a Base checkpoint synthesizes in-context and x-vector-only clones whose audio equals
the reference's golden waveforms (the reference codes decoded in front and cut off); without a cloner, reference
audio is a 400 naming what is missing."""

from __future__ import annotations

import pytest
import torch
from anna_audio.qwen3_tts.voice import ClonePrompt, VoiceRequest
from anna_audio.qwen3_tts.voice_clone import RecordingCloner
from anna_audio.speech import task
from anna_core.engine.config import EngineConfig
from anna_core.errors import InvalidRequestError
from anna_core.loading import load_model

from tests.audio.test_speech_server import greedy_planner
from tests.audio.tts_golden import CHECKPOINTS, golden

pytestmark = pytest.mark.slow  # loads a model (seconds)


class GoldenCloner:
    """The reference's x-vector and codes of its reference recording, whatever audio comes in."""

    def __init__(self, tensors: dict):
        self.tensors = tensors
        self.calls: list[tuple[bytes, str | None]] = []

    def clone(self, ref_audio: bytes, ref_text: str | None) -> ClonePrompt:
        self.calls.append((ref_audio, ref_text))
        codes = self.tensors["ref/codes"] if ref_text else None
        return ClonePrompt(self.tensors["ref/speaker_embedding"], codes)


def test_cloned_voices_equal_the_reference_and_refusals():
    tensors, facts = golden("base")
    loaded = load_model(CHECKPOINTS["base"], device="cpu", dtype="float32")
    built = task.build(loaded, EngineConfig(max_num_seqs=2, num_blocks=64), None)
    built.planner = greedy_planner(loaded)
    assert isinstance(loaded.processor.cloner, RecordingCloner)  # a Base checkpoint's weights: its own cloner
    loaded.processor.cloner = None
    with pytest.raises(InvalidRequestError, match="voice cloning needs the checkpoint's speaker and codec encoders"):
        built.synthesize(VoiceRequest(text="Hi", ref_audio=b"RIFF", ref_text="Hi"))
    cloner = GoldenCloner(tensors)
    loaded.processor.cloner = cloner
    batch = facts["cases"]["batch"]
    ref_text = facts["cases"]["ref_text"]
    for row, mode in enumerate(batch["mode"]):
        request = VoiceRequest(text=batch["text"][row], language=batch["language"][row], ref_audio=b"RIFF....",
                               ref_text=ref_text if mode == "icl" else None)
        wav = built.synthesize(request, max_frames=23)
        ref = tensors[f"batch/wav/{row}"].numpy()
        assert wav.shape == ref.shape, (mode, wav.shape, ref.shape)
        torch.testing.assert_close(torch.from_numpy(wav), torch.from_numpy(ref), atol=1e-4, rtol=0)
    assert cloner.calls == [(b"RIFF....", ref_text), (b"RIFF....", None)]
    with pytest.raises(InvalidRequestError, match="send ref_audio"):
        built.synthesize(VoiceRequest(text="Hi"))
    with pytest.raises(InvalidRequestError, match="no named voices"):
        built.synthesize(VoiceRequest(text="Hi", voice="serena", ref_audio=b"x"))
    built.vocoder.close()


def _wav(samples, rate: int) -> bytes:
    import io

    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


def test_the_checkpoints_own_cloner_clones_from_an_uploaded_recording():
    """The reference recording uploaded as a WAV: the loaded Base checkpoint's cloner decodes it, encodes its codes
    and x-vector, and the synthesized audio equals the reference's golden waveforms; audio that does not decode is a
    400 on ref_audio."""
    tensors, facts = golden("base")
    loaded = load_model(CHECKPOINTS["base"], device="cpu", dtype="float32")
    built = task.build(loaded, EngineConfig(max_num_seqs=2, num_blocks=64), None)
    built.planner = greedy_planner(loaded)
    recording = _wav(tensors["ref/audio"].numpy(), 24000)
    batch = facts["cases"]["batch"]
    ref_text = facts["cases"]["ref_text"]
    for row, mode in enumerate(batch["mode"]):
        request = VoiceRequest(text=batch["text"][row], language=batch["language"][row], ref_audio=recording,
                               ref_text=ref_text if mode == "icl" else None)
        wav = built.synthesize(request, max_frames=23)
        ref = tensors[f"batch/wav/{row}"].numpy()
        assert wav.shape == ref.shape, (mode, wav.shape, ref.shape)
        torch.testing.assert_close(torch.from_numpy(wav), torch.from_numpy(ref), atol=1e-4, rtol=0)
    with pytest.raises(InvalidRequestError, match="ref_audio: ") as err:
        built.synthesize(VoiceRequest(text="Hi", ref_audio=b"not audio at all", ref_text=ref_text))
    assert err.value.param == "ref_audio"
    built.vocoder.close()
