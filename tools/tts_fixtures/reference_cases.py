"""The reference's runs for the Qwen3-TTS golden fixtures: the reference loaded from a tiny checkpoint, its
intermediate tensors recorded, and each kind's cases and the codec's decoder and encoder cases run greedily
(a part of ``make_qwen3_tts_fixtures.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tiny_configs import CODE_GROUPS, CODEBOOK, CODEC_SEED, MAX_FRAMES, TALKER_LOGIT_STEPS


def patch_default_rope() -> None:
    """Let the package's ``default`` RoPE initializer read a config whose base lives in ``rope_parameters``.

    ``qwen_tts`` registers a ``default`` entry in transformers' ``ROPE_INIT_FUNCTIONS`` that reads
    ``config.rope_theta``; transformers 5 consults that table when it initializes any rotary module, the codec
    encoder's Mimi rotary too, and its ``MimiConfig`` keeps the base only in ``rope_parameters``, so building or
    loading the codec raises ``AttributeError``. The wrapper below computes the same standard inverse frequencies
    (``1 / theta ** (2 i / d)``) from ``rope_parameters`` for such configs and defers to the package otherwise;
    it changes no values the package computes itself.
    """
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    package_default = ROPE_INIT_FUNCTIONS["default"]
    if getattr(package_default, "_anna_fixture_shim", False):
        return

    def default(config: Any, device: Any = None, seq_len: Any = None, layer_type: Any = None) -> Any:
        if hasattr(config, "rope_theta"):
            return package_default(config, device, seq_len, layer_type)
        theta = float(config.rope_parameters["rope_theta"])
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / head_dim
        return 1.0 / (theta ** exponents), 1.0

    default._anna_fixture_shim = True  # type: ignore[attr-defined]
    ROPE_INIT_FUNCTIONS["default"] = default


def load_reference(folder: Path, device: str) -> Any:
    """The reference wrapper over ``folder``; raises ``RuntimeError`` when a saved tensor did not load unchanged
    (a name the reference does not know would leave its own random values in place)."""
    from qwen_tts import Qwen3TTSModel
    from safetensors.torch import load_file

    tts = Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager",
                                        device_map=device)
    for module, path in ((tts.model, folder / "model.safetensors"),
                         (tts.model.speech_tokenizer.model, folder / "speech_tokenizer" / "model.safetensors")):
        saved = load_file(str(path))
        loaded = module.state_dict()
        missing = sorted(set(saved) - set(loaded))
        unfilled = sorted(k for k, v in loaded.items() if k not in saved and v.is_floating_point())
        if missing or unfilled:
            raise RuntimeError(f"{path}: saved but unknown {missing[:5]}, left unloaded {unfilled[:5]}")
        for name, tensor in saved.items():
            if not torch.equal(loaded[name].detach().cpu().to(torch.float32), tensor.to(torch.float32)):
                raise RuntimeError(f"{path}: {name} changed on load")
    return tts


class Recorder:
    """Forward hooks on the reference talker and code predictor, and a wrapper of the model's ``generate``, that
    keep what each call saw and returned (read-only: nothing is altered)."""

    def __init__(self, tts: Any) -> None:
        self.talker_prefill: list[torch.Tensor] = []
        self.talker_mask: list[torch.Tensor] = []
        self.talker_logits: list[torch.Tensor] = []
        self.predictor_prefill: list[torch.Tensor] = []
        self.predictor_logits: list[torch.Tensor] = []
        self.codes: list[torch.Tensor] = []
        self.hiddens: list[torch.Tensor] = []
        model = tts.model
        self._handles = [
            model.talker.register_forward_hook(self._on_talker, with_kwargs=True),
            model.talker.code_predictor.register_forward_hook(self._on_predictor, with_kwargs=True),
        ]
        self._model = model
        self._generate: Callable[..., Any] = model.generate
        model.generate = self._wrapped_generate

    def _on_talker(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        embeds = kwargs.get("inputs_embeds")
        if embeds is not None and embeds.shape[1] > 1:
            self.talker_prefill.append(embeds.detach().float().cpu())
            self.talker_mask.append(kwargs["attention_mask"].detach().cpu())
        self.talker_logits.append(output.logits[:, -1].detach().float().cpu())

    def _on_predictor(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        embeds = kwargs.get("inputs_embeds")
        if embeds is not None and embeds.shape[1] > 1:
            self.predictor_prefill.append(embeds.detach().float().cpu())
        self.predictor_logits.append(output.logits[:, -1].detach().float().cpu())

    def _wrapped_generate(self, *args: Any, **kwargs: Any) -> Any:
        codes, hiddens = self._generate(*args, **kwargs)
        self.codes = [c.detach().cpu() for c in codes]
        self.hiddens = [h.detach().float().cpu() for h in hiddens]
        return codes, hiddens

    def reset(self) -> None:
        for items in (self.talker_prefill, self.talker_mask, self.talker_logits, self.predictor_prefill,
                      self.predictor_logits, self.codes, self.hiddens):
            items.clear()

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._model.generate = self._generate


GREEDY = {"do_sample": False, "subtalker_dosample": False, "max_new_tokens": MAX_FRAMES,
          "repetition_penalty": 1.05, "top_k": 50, "top_p": 1.0, "temperature": 0.9,
          "subtalker_top_k": 50, "subtalker_top_p": 1.0, "subtalker_temperature": 0.9}
"""Talker and code predictor greedy (the sampling fields are inert then); the released repetition penalty on."""


def tokenize(tts: Any, text: str) -> list[int]:
    return tts.processor(text=text, return_tensors="pt")["input_ids"][0].tolist()


def run_case(tts: Any, rec: Recorder, call: Callable[..., Any], tensors: dict[str, torch.Tensor], prefix: str,
             keep_wavs: bool) -> dict[str, Any]:
    """Run one reference call, keep its tensors under ``prefix/`` in ``tensors``; returns its JSON facts."""
    rec.reset()
    wavs, rate = call()
    facts: dict[str, Any] = {"sample_rate": rate, "frames": [int(c.shape[0]) for c in rec.codes],
                             "samples": [int(w.shape[0]) for w in wavs]}
    for row, codes in enumerate(rec.codes):
        tensors[f"{prefix}/codes/{row}"] = codes.to(torch.int64).contiguous()
        tensors[f"{prefix}/talker_hidden/{row}"] = rec.hiddens[row].contiguous()
        if keep_wavs:
            tensors[f"{prefix}/wav/{row}"] = torch.from_numpy(np.asarray(wavs[row], dtype=np.float32)).contiguous()
    tensors[f"{prefix}/talker_prefill_embeds"] = rec.talker_prefill[0].contiguous()
    tensors[f"{prefix}/talker_attention_mask"] = rec.talker_mask[0].to(torch.int64).contiguous()
    tensors[f"{prefix}/talker_logits"] = torch.stack(rec.talker_logits[:TALKER_LOGIT_STEPS], dim=1).contiguous()
    # the code predictor runs CODE_GROUPS - 1 times per frame; the first frame's calls
    first = rec.predictor_logits[:CODE_GROUPS - 1]
    tensors[f"{prefix}/predictor_logits_frame0"] = torch.stack(first, dim=1).contiguous()
    tensors[f"{prefix}/predictor_prefill_frame0"] = rec.predictor_prefill[0].contiguous()
    return facts


def custom_voice_cases(tts: Any, rec: Recorder, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    texts = ["Hello, world!", "The quick brown fox jumps over the lazy dog."]
    speakers = ["serena", "dylan"]
    languages = ["english", "auto"]
    instructs = ["", "Speak slowly and warmly."]
    cases: dict[str, Any] = {}
    cases["batch"] = {"text": texts, "speaker": speakers, "language": languages, "instruct": instructs,
                      "non_streaming_mode": True, **run_case(tts, rec, lambda: tts.generate_custom_voice(
                          text=texts, speaker=speakers, language=languages, instruct=instructs,
                          non_streaming_mode=True, **GREEDY), tensors, "batch", keep_wavs=True)}
    for i in range(2):
        cases[f"single{i}"] = {"text": [texts[i]], "speaker": [speakers[i]], "language": [languages[i]],
                               "instruct": [instructs[i]], "non_streaming_mode": True, **run_case(
                                   tts, rec, lambda i=i: tts.generate_custom_voice(
                                       text=texts[i], speaker=speakers[i], language=languages[i],
                                       instruct=instructs[i], non_streaming_mode=True, **GREEDY),
                                   tensors, f"single{i}", keep_wavs=False)}
    cases["streaming_text"] = {"text": [texts[1]], "speaker": ["ryan"], "language": ["english"],
                               "instruct": [""], "non_streaming_mode": False, **run_case(
                                   tts, rec, lambda: tts.generate_custom_voice(
                                       text=texts[1], speaker="ryan", language="english", instruct="",
                                       non_streaming_mode=False, **GREEDY), tensors, "streaming_text",
                                   keep_wavs=False)}
    return cases


def voice_design_cases(tts: Any, rec: Recorder, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    texts = ["Good morning; the weather is fine today.", "Hello, world!"]
    instructs = ["A bright young voice, cheerful and fast.", "A calm voice."]
    languages = ["english", "chinese"]
    cases: dict[str, Any] = {}
    cases["batch"] = {"text": texts, "instruct": instructs, "language": languages, "non_streaming_mode": True,
                      **run_case(tts, rec, lambda: tts.generate_voice_design(
                          text=texts, instruct=instructs, language=languages, non_streaming_mode=True, **GREEDY),
                          tensors, "batch", keep_wavs=True)}
    for i in range(2):
        cases[f"single{i}"] = {"text": [texts[i]], "instruct": [instructs[i]], "language": [languages[i]],
                               "non_streaming_mode": True, **run_case(
                                   tts, rec, lambda i=i: tts.generate_voice_design(
                                       text=texts[i], instruct=instructs[i], language=languages[i],
                                       non_streaming_mode=True, **GREEDY), tensors, f"single{i}", keep_wavs=False)}
    cases["streaming_text"] = {"text": [texts[0]], "instruct": [""], "language": ["auto"],
                               "non_streaming_mode": False, **run_case(
                                   tts, rec, lambda: tts.generate_voice_design(
                                       text=texts[0], instruct="", language="auto", non_streaming_mode=False,
                                       **GREEDY), tensors, "streaming_text", keep_wavs=False)}
    return cases


def reference_audio(rate: int = 24000) -> np.ndarray:
    """1.2 s at ``rate`` Hz, float32 in [-0.5, 0.5]: a 220 -> 880 Hz sweep under a slow tremolo."""
    t = np.arange(int(1.2 * rate), dtype=np.float64) / rate
    sweep = np.sin(2 * np.pi * (220 * t + (880 - 220) * t * t / (2 * 1.2)))
    return (0.5 * sweep * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def base_cases(tts: Any, rec: Recorder, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram

    audio = reference_audio()
    ref_text = "Anna turns text into speech."
    tensors["ref/audio"] = torch.from_numpy(audio)
    mels = mel_spectrogram(torch.from_numpy(audio).unsqueeze(0), n_fft=1024, num_mels=128, sampling_rate=24000,
                           hop_size=256, win_size=1024, fmin=0, fmax=12000).transpose(1, 2)
    tensors["ref/mels"] = mels[0].float().contiguous()
    icl, xvec = tts.create_voice_clone_prompt(ref_audio=[(audio, 24000), (audio, 24000)],
                                             ref_text=[ref_text, None], x_vector_only_mode=[False, True])
    tensors["ref/codes"] = icl.ref_code.detach().cpu().to(torch.int64).contiguous()
    tensors["ref/speaker_embedding"] = icl.ref_spk_embedding.detach().float().cpu().contiguous()
    # the same sweep at 16 kHz: the reference resamples it to 24 kHz (librosa, soxr HQ) for codes and x-vector
    audio16 = reference_audio(16000)
    (item16,) = tts.create_voice_clone_prompt(ref_audio=(audio16, 16000), ref_text=ref_text)
    tensors["ref16k/audio"] = torch.from_numpy(audio16)
    tensors["ref16k/codes"] = item16.ref_code.detach().cpu().to(torch.int64).contiguous()
    tensors["ref16k/speaker_embedding"] = item16.ref_spk_embedding.detach().float().cpu().contiguous()
    texts = ["Hello, world!", "Good morning; the weather is fine today."]
    languages = ["english", "auto"]
    cases: dict[str, Any] = {"ref_text": ref_text, "ref_text_ids": tokenize(tts, f"<|im_start|>assistant\n{ref_text}"
                                                                                 "<|im_end|>\n")}
    cases["batch"] = {"text": texts, "language": languages, "mode": ["icl", "x_vector_only"],
                      "non_streaming_mode": False, **run_case(tts, rec, lambda: tts.generate_voice_clone(
                          text=texts, language=languages, voice_clone_prompt=[icl, xvec], non_streaming_mode=False,
                          **GREEDY), tensors, "batch", keep_wavs=True)}
    for i, item in enumerate((icl, xvec)):
        cases[f"single{i}"] = {"text": [texts[i]], "language": [languages[i]],
                               "mode": [["icl", "x_vector_only"][i]], "non_streaming_mode": False, **run_case(
                                   tts, rec, lambda i=i, item=item: tts.generate_voice_clone(
                                       text=texts[i], language=languages[i], voice_clone_prompt=[item],
                                       non_streaming_mode=False, **GREEDY), tensors, f"single{i}", keep_wavs=False)}
    cases["icl_non_streaming_text"] = {"text": [texts[1]], "language": ["english"], "mode": ["icl"],
                                       "non_streaming_mode": True, **run_case(
                                           tts, rec, lambda: tts.generate_voice_clone(
                                               text=texts[1], language="english", voice_clone_prompt=[icl],
                                               non_streaming_mode=True, **GREEDY), tensors,
                                           "icl_non_streaming_text", keep_wavs=False)}
    return cases


def codec_decoder_case(tts: Any, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The codec alone: two code sequences (30 and 17 frames) decoded as one padded batch by the reference
    tokenizer wrapper, and the decoder's stages for the longer one."""
    gen = torch.Generator().manual_seed(CODEC_SEED + 1)
    codes = [torch.randint(0, CODEBOOK, (n, CODE_GROUPS), generator=gen) for n in (30, 17)]
    tokenizer = tts.model.speech_tokenizer
    wavs, rate = tokenizer.decode([{"audio_codes": c} for c in codes])
    decoder = tokenizer.model.decoder
    device = next(decoder.parameters()).device
    with torch.inference_mode():
        batch = codes[0].T.unsqueeze(0).to(device)  # [1, Q, T]
        quantized = decoder.quantizer.decode(batch)  # [1, codebook_dim, T]
        pre_conv = decoder.pre_conv(quantized).transpose(1, 2)  # [1, T, latent]
        pre_transformer = decoder.pre_transformer(inputs_embeds=pre_conv).last_hidden_state  # [1, T, latent]
        hidden = pre_transformer.permute(0, 2, 1)
        for blocks in decoder.upsample:
            for block in blocks:
                hidden = block(hidden)
        upsampled = hidden  # [1, latent, 4 T]
    for i, c in enumerate(codes):
        tensors[f"codec/codes/{i}"] = c.to(torch.int64).contiguous()
        tensors[f"codec/wav/{i}"] = torch.from_numpy(np.asarray(wavs[i], dtype=np.float32)).contiguous()
    tensors["codec/stage/quantized"] = quantized[0].float().cpu().contiguous()
    tensors["codec/stage/pre_conv"] = pre_conv[0].float().cpu().contiguous()
    tensors["codec/stage/pre_transformer"] = pre_transformer[0].float().cpu().contiguous()
    tensors["codec/stage/upsampled"] = upsampled[0].float().cpu().contiguous()
    return {"sample_rate": rate, "frames": [int(c.shape[0]) for c in codes],
            "samples": [int(w.shape[0]) for w in wavs]}


ENCODER_WINDOW = 4
"""Frames (25 Hz) the narrow-window encoder case's transformer attends over, so the 1.2 s audio's 30 frames slide
past it (the checkpoint's 250 never binds on fixtures this short)."""


def codec_encoder_case(tts: Any, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The codec's encoder on the reference audio and on a shorter cut of it: encoded as one padded batch
    (``encoder/codes/<i>``) and the cut alone (``encoder/alone/1``: its last frame may differ from the batch's,
    where the padding runs through the convolutions); the stages of the long one (``encoder/stage/*``: the SEANet
    features, the transformer's output, the downsampled features); and the long one through the same encoder with a
    transformer window of :data:`ENCODER_WINDOW` frames (``encoder/window/codes``)."""
    import copy

    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Encoder

    audio = reference_audio()
    tokenizer = tts.model.speech_tokenizer
    enc = tokenizer.encode([audio, audio[:15000]], sr=24000)
    for i, c in enumerate(enc.audio_codes):
        tensors[f"encoder/codes/{i}"] = c.detach().cpu().to(torch.int64).contiguous()
    alone = tokenizer.encode(audio[:15000], sr=24000).audio_codes[0]
    tensors["encoder/alone/1"] = alone.detach().cpu().to(torch.int64).contiguous()
    mimi = tokenizer.model.encoder
    valid = tokenizer.model.encoder_valid_num_quantizers
    device = next(mimi.parameters()).device
    narrow_config = copy.deepcopy(mimi.config)
    narrow_config.sliding_window = ENCODER_WINDOW
    narrow = Qwen3TTSTokenizerV2Encoder(narrow_config).to(device).eval()
    narrow.load_state_dict(mimi.state_dict(), strict=True)
    with torch.inference_mode():
        x = torch.from_numpy(audio)[None, None].to(device)  # [1, 1, N]
        conv = mimi.encoder(x)  # [1, D, ceil(N / 960)]
        transformed = mimi.encoder_transformer(conv.transpose(1, 2), return_dict=True).last_hidden_state
        downsampled = mimi.downsample(transformed.transpose(1, 2))  # [1, D, ceil(N / 1920)]
        windowed = narrow.encode(x, return_dict=True).audio_codes[0, :valid].T  # [F, Q]
    tensors["encoder/stage/conv"] = conv[0].float().cpu().contiguous()
    tensors["encoder/stage/transformer"] = transformed[0].float().cpu().contiguous()
    tensors["encoder/stage/downsampled"] = downsampled[0].float().cpu().contiguous()
    tensors["encoder/window/codes"] = windowed.detach().cpu().to(torch.int64).contiguous()
    return {"samples": [int(audio.shape[0]), 15000], "frames": [int(c.shape[0]) for c in enc.audio_codes],
            "window": ENCODER_WINDOW}
