"""The reference implementation measured beside ``python -m anna_audio.tts_bench --reference``, in its process.

The reference is ``qwen_tts`` (PyPI ``qwen-tts-hf``, the transformers-5 port of QwenLM/Qwen3-TTS; it imports only where
torchaudio, onnxruntime and sox are installed: tools/tts_fixtures/README.md). It is imported when
:func:`load_reference` runs, never with this module. The benchmark's checkpoint folder gives its configuration: the
folder's ``config.json`` built as a VoiceDesign model (talker, code predictor and codec are the same for every kind;
the reference's Base path needs reference audio) with the reference's own random initialisation, and
``speech_tokenizer/config.json`` as the 12 Hz codec whose decoder makes the audio.

A request is the benchmark's synthetic text: ``text_tokens`` random text ids (seeded per request) between the chat
wrapping ids the benchmark's own prompts use. :meth:`ReferenceTTS.synthesize` runs ``n`` requests as one call, as the
reference batches (padded; every request's audio comes back together): ``generate`` (talker and code predictor,
sampling with the released defaults, at most ``frames + 1`` talker steps, EOS made a suppressed id so no request
stops early; the reference still cuts each request's codes at a sampled codec EOS, so ``frames_made`` may be fewer)
and the codec decoder's ``chunked_decode`` of each request's codes. The reference does not stream: its first audio is
its whole audio.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from anna_audio.tts_bench import FRAME_S

SAMPLING = {"do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9, "repetition_penalty": 1.05,
            "subtalker_dosample": True, "subtalker_top_k": 50, "subtalker_top_p": 1.0, "subtalker_temperature": 0.9}
"""The released sampling defaults (``anna_audio.qwen3_tts.sampling.DEFAULTS``), passed explicitly."""


class ReferenceUnavailable(RuntimeError):
    """``qwen_tts`` cannot be imported here (the message says why and where it runs)."""


def require_reference() -> Any:
    """Import ``qwen_tts`` (the package module).

    Raises:
        ReferenceUnavailable: it is not installed, or one of its imports fails.
    """
    try:
        import qwen_tts
    except (ImportError, OSError, RuntimeError) as exc:  # OSError: a native library (libsox, torchaudio's) missing
        raise ReferenceUnavailable(
            f"the reference implementation (qwen_tts, PyPI qwen-tts-hf) does not import here: {exc}; it runs where "
            "torchaudio, onnxruntime and sox are installed (tools/tts_fixtures/README.md: its wheels in .whl_tts/, "
            "installed with tools/gpu_experiments/tts_bench.sh)") from exc
    return qwen_tts


@contextlib.contextmanager
def _default_rope_reads_rope_parameters() -> Iterator[None]:
    """While the reference is built: its ``default`` RoPE initializer (registered in transformers' table, reading
    ``config.rope_theta``) also accepts a config whose base lives in ``rope_parameters`` only (the codec's Mimi
    rotary), with the standard inverse frequencies ``1 / theta ** (2 i / d)``; the table is restored after. The
    same adaptation as tools/tts_fixtures/make_qwen3_tts_fixtures.py's ``patch_default_rope``, scoped."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    package = ROPE_INIT_FUNCTIONS.get("default")
    if package is None:
        yield
        return

    def default(config: Any, device: Any = None, seq_len: Any = None, layer_type: Any = None) -> Any:
        if hasattr(config, "rope_theta"):
            return package(config, device, seq_len, layer_type)
        theta = float(config.rope_parameters["rope_theta"])
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / head_dim
        return 1.0 / (theta ** exponents), 1.0

    ROPE_INIT_FUNCTIONS["default"] = default
    try:
        yield
    finally:
        ROPE_INIT_FUNCTIONS["default"] = package


class ReferenceTTS:
    """The reference model and codec decoder on one device (made by :func:`load_reference`).

    Args:
        model: ``qwen_tts``'s ``Qwen3TTSForConditionalGeneration``.
        decoder: the 12 Hz codec's decoder (``Qwen3TTSTokenizerV2Model(...).decoder``).
        config: the checkpoint's ``config.json`` as read.
        device: where both live.
    """

    def __init__(self, model: Any, decoder: Any, config: dict[str, Any], device: torch.device):
        from anna_core.device import accelerator

        self.model = model
        self.decoder = decoder
        self.config = config
        self.device = device
        self.accel = accelerator(device)

    def _input_ids(self, n: int, text_tokens: int) -> list[torch.Tensor]:
        """``n`` requests' ids ``[1, L]`` int64: chat wrapping around ``text_tokens`` random text ids (as the
        benchmark's synthetic prompts are made)."""
        c = self.config
        vocab = c["talker_config"]["text_vocab_size"]
        wrap = [c["im_start_token_id"], 11, 12]
        ids = []
        for i in range(n):
            words = torch.randint(10, vocab, (text_tokens,), generator=torch.Generator().manual_seed(i)).tolist()
            ids.append(torch.tensor([wrap + words + [c["im_end_token_id"], 13] + wrap], device=self.device))
        return ids

    @torch.inference_mode()
    def synthesize(self, n: int, frames: int, text_tokens: int) -> dict[str, Any]:
        """``n`` requests in one call (see the module docstring): ``{"requests", "frames_made": [per request],
        "generate_s", "decode_s", "wall_s"}`` (seconds on the host clock, the device synchronized).

        Raises:
            ValueError: ``n``, ``frames`` or ``text_tokens`` below 1.
        """
        if min(n, frames, text_tokens) < 1:
            raise ValueError(f"n, frames and text_tokens must be positive, got {n}, {frames}, {text_tokens}")
        ids = self._input_ids(n, text_tokens)
        never = self.config["talker_config"]["codec_pad_id"]  # a suppressed control id: no request stops early
        self.accel.synchronize()
        t0 = time.perf_counter()
        codes, _ = self.model.generate(input_ids=ids, instruct_ids=[None] * n, languages=["auto"] * n,
                                       non_streaming_mode=True, max_new_tokens=frames + 1, eos_token_id=never,
                                       **SAMPLING)
        self.accel.synchronize()
        t1 = time.perf_counter()
        for c in codes:
            if c.shape[0]:
                self.decoder.chunked_decode(c.to(self.device).t()[None].long())  # [1, G, F]
        self.accel.synchronize()
        t2 = time.perf_counter()
        return {"requests": n, "frames_made": [int(c.shape[0]) for c in codes], "generate_s": t1 - t0,
                "decode_s": t2 - t1, "wall_s": t2 - t0}


def load_reference(model_dir: str | Path, device: torch.device | str, dtype: torch.dtype) -> ReferenceTTS:
    """The reference at the configuration of ``model_dir`` (``config.json``, ``speech_tokenizer/config.json``) with
    its own random weights (seeded), on ``device`` in ``dtype``.

    Raises:
        ReferenceUnavailable: ``qwen_tts`` does not import here.
        OSError / ValueError: a configuration file missing or unreadable.
    """
    require_reference()
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    folder, device = Path(model_dir), torch.device(device)
    config = json.loads((folder / "config.json").read_text())
    codec = json.loads((folder / "speech_tokenizer" / "config.json").read_text())
    torch.manual_seed(0)
    with _default_rope_reads_rope_parameters(), torch.device(device):
        model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**{**config, "tts_model_type": "voice_design"}))
        decoder = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**codec)).decoder
    return ReferenceTTS(model.to(dtype).eval(), decoder.to(dtype).eval(), config, device)


def measure(reference: ReferenceTTS, *, frames: int, text_tokens: int, concurrency: int, runs: int
            ) -> dict[str, Any]:
    """The benchmark's figures for the reference: a short warm-up call, ``runs`` single requests (the fastest
    reported), then ``concurrency`` requests in one call. Laid out as the benchmark's own report: ``one``
    (``first_audio_s`` = ``latency_s``: not streamed; ``rtf`` = latency / the longest request's audio seconds) and
    ``concurrent`` (every request's latency is the call's), plus each call's details.

    Raises:
        ValueError: a non-positive argument.
    """
    if min(frames, text_tokens, concurrency, runs) < 1:
        raise ValueError("frames, text_tokens, concurrency and runs must be positive")
    reference.synthesize(1, min(frames, 4), text_tokens)  # warm-up: first-call allocations, kernel choices
    singles = [reference.synthesize(1, frames, text_tokens) for _ in range(runs)]
    batch = reference.synthesize(concurrency, frames, text_tokens)
    one = min(singles, key=lambda r: r["wall_s"])
    audio_s = max(one["frames_made"]) * FRAME_S
    latencies = [batch["wall_s"]] * concurrency
    crowd = {"mean": statistics.fmean(latencies), "p50": statistics.median(latencies), "max": max(latencies)}
    return {
        "implementation": "qwen_tts", "device": str(reference.device),
        "dtype": str(next(reference.model.parameters()).dtype).replace("torch.", ""), "frames": frames,
        "streamed": False,
        "one": {"first_audio_s": one["wall_s"], "latency_s": one["wall_s"],
                "rtf": one["wall_s"] / audio_s if audio_s else None, "runs": singles},
        "concurrent": {"requests": concurrency, "latency_s": crowd, "first_audio_s": crowd,
                       "latency_vs_one": batch["wall_s"] / one["wall_s"], "call": batch},
    }
