"""Golden fixtures for Anna's Qwen3-TTS port, produced by the upstream reference code.

Qwen3-TTS has no transformers class, so the oracle is the reference package itself (``qwen_tts``, from the PyPI
distribution ``qwen-tts-hf`` 0.1.1.post1: the transformers-5 port of QwenLM/Qwen3-TTS, PR #360). This script

1. builds one tiny random checkpoint of each released kind (``base``, ``custom_voice``, ``voice_design``) in the
   layout of the released folders -- ``config.json``, ``generation_config.json``, ``model.safetensors`` (bf16),
   a byte-level BPE tokenizer (``vocab.json``, ``merges.txt``, ``tokenizer.json``, ``tokenizer_config.json``) and
   ``speech_tokenizer/`` (the 12 Hz codec: ``config.json``, ``model.safetensors``, ``preprocessor_config.json``);
   every tensor is drawn from a generator seeded by the checkpoint's seed and the tensor's name, so a rerun
   writes the same bytes;
2. loads each checkpoint with the reference's own loader (``Qwen3TTSModel.from_pretrained``), checks that every
   saved tensor arrived unchanged, and runs the reference on fixed inputs with greedy decoding (talker and code
   predictor ``do_sample=False``);
3. writes what it produced into ``OUT/golden/``: codec tokens per frame, waveforms, and intermediate tensors for
   debugging (the talker's prefill embeddings, its logits of the first steps, the code predictor's logits of the
   first frame, the codec decoder's stages for given codes, the speaker encoder's mel input and embedding, the
   reference audio's codes, also from a 16 kHz recording; the codec encoder's codes batched and alone, its stages,
   and its codes with a narrow transformer window), one ``<case>.safetensors`` plus one ``<case>.json`` (inputs,
   ids, lengths) each,
   and ``manifest.json`` (versions, device, dtype, seeds).

Everything runs in float32 (weights stored as bf16 values, as the released checkpoints are). It needs the
reference package and what it imports (torch, torchaudio, transformers >= 5.15, librosa, soundfile, sox,
onnxruntime, einops); ``tools/tts_fixtures/run_on_gpu.sh`` runs it on the GPU machine's image.

    python tools/tts_fixtures/make_qwen3_tts_fixtures.py --out tests/audio/fixtures/qwen3_tts --device cpu
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

# --- sizes ------------------------------------------------------------------------------------------------------

CODEBOOK = 64
"""Entries per codebook (released: 2048). The talker's first ``CODEBOOK`` ids are codes, as in the release."""
SPECIAL_ROWS = 1024
"""Talker ids past the codebook (released 3072 - 2048): the reference suppresses ``[vocab - 1024, vocab)``."""
TALKER_VOCAB = CODEBOOK + SPECIAL_ROWS
CODE_GROUPS = 4
"""Codebooks per 12.5 Hz frame (released: 16): the talker predicts the first, the code predictor the rest."""
TALKER_HIDDEN = 32
PREDICTOR_HIDDEN = 24
"""Differs from the talker's width so the ``small_to_mtp_projection`` linear exists (as in the 1.7B)."""
TEXT_HIDDEN = 48

# Codec control ids: the released offsets past the codebook (e.g. pad = 2048 + 100), moved onto the tiny codebook.
CODEC_IDS = {
    "codec_pad_id": CODEBOOK + 100, "codec_bos_id": CODEBOOK + 101, "codec_eos_token_id": CODEBOOK + 102,
    "codec_think_id": CODEBOOK + 106, "codec_nothink_id": CODEBOOK + 107, "codec_think_bos_id": CODEBOOK + 108,
    "codec_think_eos_id": CODEBOOK + 109,
}
LANGUAGES = {"english": CODEBOOK + 2, "german": CODEBOOK + 5, "spanish": CODEBOOK + 6, "chinese": CODEBOOK + 7,
             "japanese": CODEBOOK + 10, "french": CODEBOOK + 13, "beijing_dialect": CODEBOOK + 26}
SPEAKERS = {"serena": CODEBOOK + 400, "dylan": CODEBOOK + 401, "ryan": CODEBOOK + 402}
SPEAKER_DIALECTS = {"serena": False, "dylan": "beijing_dialect", "ryan": False}

KIND_SEEDS = {"base": 1101, "custom_voice": 2202, "voice_design": 3303}
CODEC_SEED = 4404
"""The three kinds share one 12 Hz codec, as the released checkpoints do."""

MAX_FRAMES = 24
"""Frames each run may generate (max_new_tokens); the codec's attention window is 8 frames, so it slides."""
TALKER_LOGIT_STEPS = 4
"""Talker steps whose raw logits are kept."""

# --- the text tokenizer -----------------------------------------------------------------------------------------

QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
               r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
"""Qwen2's pre-tokenizer split, so a tokenizer rebuilt from vocab.json / merges.txt by transformers' Qwen2Tokenizer
splits text exactly as tokenizer.json does."""
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_bos|>", "<|tts_eos|>"]
TOKENIZER_VOCAB = 384
TRAINING_TEXT = """\
assistant user assistant user assistant user assistant user
Hello, world! The quick brown fox jumps over the lazy dog. Speak slowly and warmly, with a calm voice.
A bright young voice, cheerful and fast. Good morning; the weather is fine today. Numbers: 0123456789.
Anna turns text into speech: twelve frames each second, four codebooks per frame, one waveform out.
"""


def build_tokenizer(folder: Path) -> dict[str, int]:
    """Train the byte-level BPE tokenizer on :data:`TRAINING_TEXT` and save it to ``folder``; returns the ids of
    :data:`SPECIAL_TOKENS`. Raises ``RuntimeError`` when ``assistant`` / ``user`` / a newline are not single tokens
    (the reference slices the prompt's ids at fixed offsets that assume they are)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TRAINING_TEXT] * 8, trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 unk_token=None, bos_token=None, additional_special_tokens=SPECIAL_TOKENS[1:])
    for word in ("assistant", "user", "\n"):
        if len(hf.encode(word, add_special_tokens=False)) != 1:
            raise RuntimeError(f"{word!r} is not one token of the tiny tokenizer")
    folder.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(folder))
    tok.model.save(str(folder))  # vocab.json + merges.txt, the files the released checkpoints ship too
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "Qwen2Tokenizer"
    config["model_max_length"] = 32768
    config_path.write_text(json.dumps(config, indent=2))
    return {text: hf.convert_tokens_to_ids(text) for text in SPECIAL_TOKENS}


# --- configs ----------------------------------------------------------------------------------------------------

def talker_config(text_vocab: int) -> dict[str, Any]:
    """The ``talker_config`` block of a tiny checkpoint, in the released ``config.json``'s keys."""
    return {
        "attention_bias": False, "attention_dropout": 0, "head_dim": 16, "hidden_act": "silu",
        "hidden_size": TALKER_HIDDEN, "initializer_range": 0.02, "intermediate_size": 64,
        "max_position_embeddings": 32768, "model_type": "qwen3_tts_talker", "num_attention_heads": 4,
        "num_code_groups": CODE_GROUPS, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "position_id_per_seconds": 13, "rms_norm_eps": 1e-06,
        # released: sections [24, 20, 20] of a 128-wide head; here [4, 2, 2] of a 16-wide one, interleaved
        "rope_scaling": {"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default", "type": "default"},
        "rope_theta": 1000000, "sliding_window": None, "text_hidden_size": TEXT_HIDDEN,
        "text_vocab_size": text_vocab, "use_cache": True, "use_sliding_window": False, "vocab_size": TALKER_VOCAB,
        **CODEC_IDS, "codec_language_id": dict(LANGUAGES), "spk_id": {}, "spk_is_dialect": {},
        "code_predictor_config": {
            "attention_bias": False, "attention_dropout": 0, "head_dim": 8, "hidden_act": "silu",
            "hidden_size": PREDICTOR_HIDDEN, "initializer_range": 0.02, "intermediate_size": 48,
            "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 65536,
            "max_window_layers": 28, "model_type": "qwen3_tts_talker_code_predictor", "num_attention_heads": 4,
            "num_code_groups": CODE_GROUPS, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
            "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "use_cache": True,
            "use_sliding_window": False, "vocab_size": CODEBOOK,
        },
    }


def model_config(kind: str, special: dict[str, int], text_vocab: int) -> dict[str, Any]:
    """``config.json`` of a tiny checkpoint of ``kind``. What differs per kind, as in the released configs: the
    ``tts_model_type``; CustomVoice lists speakers (``spk_id``, ``spk_is_dialect``); only Base carries a speaker
    encoder (``speaker_encoder_config``'s weights exist in Base checkpoints alone)."""
    talker = talker_config(text_vocab)
    if kind == "custom_voice":
        talker["spk_id"] = dict(SPEAKERS)
        talker["spk_is_dialect"] = dict(SPEAKER_DIALECTS)
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts", "dtype": "bfloat16",
        "assistant_token_id": None, "im_start_token_id": special["<|im_start|>"],
        "im_end_token_id": special["<|im_end|>"], "tts_pad_token_id": special["<|tts_pad|>"],
        "tts_bos_token_id": special["<|tts_bos|>"], "tts_eos_token_id": special["<|tts_eos|>"],
        # mel_dim stays 128: the reference computes 128 mel bins whatever the config says
        "speaker_encoder_config": {"enc_dim": TALKER_HIDDEN, "sample_rate": 24000, "mel_dim": 128,
                                   "enc_channels": [32, 32, 32, 32, 96], "enc_kernel_sizes": [5, 3, 3, 3, 1],
                                   "enc_dilations": [1, 2, 3, 4, 1], "enc_attention_channels": 16,
                                   "enc_res2net_scale": 8, "enc_se_channels": 16},
        "talker_config": talker, "tokenizer_type": "qwen3_tts_tokenizer_12hz", "transformers_version": "4.57.3",
        "tts_model_size": "1b7", "tts_model_type": kind,
    }


def codec_config() -> dict[str, Any]:
    """``speech_tokenizer/config.json``: the released 12 Hz codec's structure (Mimi encoder, 1920 samples per frame
    both ways, split RVQ with one semantic quantizer) at tiny widths; its decoder attends over an 8-frame window
    (released: 72)."""
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"], "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": CODE_GROUPS, "input_sample_rate": 24000, "output_sample_rate": 24000,
        "decode_upsample_rate": 1920, "encode_downsample_rate": 1920, "transformers_version": "4.57.3",
        "decoder_config": {
            "attention_bias": False, "attention_dropout": 0.0, "codebook_dim": 16, "codebook_size": CODEBOOK,
            "decoder_dim": 32, "head_dim": 8, "hidden_act": "silu", "hidden_size": 32, "intermediate_size": 64,
            "latent_dim": 32, "layer_scale_initial_scale": 0.01, "max_position_embeddings": 8000,
            "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 4,
            "num_quantizers": CODE_GROUPS, "rms_norm_eps": 1e-05, "rope_theta": 10000, "sliding_window": 8,
            "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2],
        },
        "encoder_config": {
            "_frame_rate": 12.5, "audio_channels": 1, "codebook_dim": 8, "codebook_size": CODEBOOK, "compress": 2,
            "dilation_growth_rate": 2, "head_dim": 8, "hidden_act": "gelu", "hidden_size": 16,
            "intermediate_size": 32, "kernel_size": 7, "last_kernel_size": 3, "layer_scale_initial_scale": 0.01,
            "max_position_embeddings": 8000, "model_type": "mimi", "norm_eps": 1e-05, "num_attention_heads": 2,
            "num_filters": 4, "num_hidden_layers": 1, "num_key_value_heads": 2, "num_quantizers": 2 * CODE_GROUPS,
            "num_residual_layers": 1, "num_semantic_quantizers": 1, "pad_mode": "constant",
            "residual_kernel_size": 3, "rope_theta": 10000.0, "sampling_rate": 24000, "sliding_window": 250,
            "trim_right_ratio": 1.0, "upsample_groups": 16, "upsampling_ratios": [8, 6, 5, 4],
            "use_causal_conv": True, "use_conv_shortcut": False, "use_streaming": False,
            "vector_quantization_hidden_dimension": 8,
        },
    }


GENERATION_CONFIG = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
                     "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0,
                     "subtalker_top_k": 50, "max_new_tokens": 8192}
"""``generation_config.json`` in the released checkpoints' keys (sampling on; the fixtures' runs turn it off)."""

CODEC_PREPROCESSOR = {"feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
                      "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
                      "sampling_rate": 24000, "chunk_length_s": None, "overlap": None}


# --- random weights ---------------------------------------------------------------------------------------------

DAMPED = ((re.compile(r"^decoder\.decoder\.\d+\.block\.\d+\.conv[12]\.conv\.weight$"), 0.5),)
"""Codec decoder weights drawn smaller: its residual units compound (the signal's std doubles per upsampling
block at full scale, and the waveform saturates the decoder's [-1, 1] clamp); halved, the waveform's std is
about 0.3."""


def draw(name: str, shape: torch.Size, seed: int) -> torch.Tensor:
    """A float32 tensor for parameter ``name``, from a generator seeded by ``seed`` and the name's CRC-32, rounded to
    bf16 values. Scales keep every stage's activations near unit size: matrices ~ N(0, 1/fan_in), norm weights
    ~ 1 + N(0, 0.1), log-scale activations and layer scales ~ N(0, 0.1), biases ~ N(0, 0.02), codebook usage counts
    in [0.5, 2], codebook sums and embeddings ~ N(0, 1)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    normal = torch.randn(shape, generator=gen)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "cluster_usage":
        value = 0.5 + 1.5 * torch.rand(shape, generator=gen)
    elif leaf in ("embedding_sum",) or (leaf == "weight" and "embed" in name):
        value = normal
    elif leaf in ("alpha", "beta", "scale", "gamma"):
        value = 0.1 * normal
    elif leaf == "bias":
        value = 0.02 * normal
    elif len(shape) == 1:  # RMSNorm / LayerNorm weights
        value = 1.0 + 0.1 * normal
    else:
        fan_in = math.prod(shape[1:])
        value = normal / math.sqrt(fan_in)
        for pattern, factor in DAMPED:
            if pattern.match(name):
                value = value * factor
    return value.to(torch.bfloat16).to(torch.float32)


def randomize(module: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Overwrite every parameter and persistent buffer of ``module`` with :func:`draw` values; returns the state dict."""
    state = module.state_dict()
    new = {name: draw(name, tensor.shape, seed) if tensor.is_floating_point() else tensor.clone()
           for name, tensor in sorted(state.items())}
    module.load_state_dict(new, strict=True)
    return new


def save_weights(state: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.to(torch.bfloat16).contiguous() if v.is_floating_point() else v.contiguous()
               for k, v in state.items()}, str(path), metadata={"format": "pt"})


def build_checkpoint(kind: str, folder: Path, codec_folder: Path) -> None:
    """Write the tiny ``kind`` checkpoint to ``folder`` (its codec copied from ``codec_folder``)."""
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    if folder.exists():
        shutil.rmtree(folder)
    special = build_tokenizer(folder)
    config = model_config(kind, special, TOKENIZER_VOCAB)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    torch.manual_seed(KIND_SEEDS[kind])
    model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**config))
    save_weights(randomize(model, KIND_SEEDS[kind]), folder / "model.safetensors")
    shutil.copytree(codec_folder, folder / "speech_tokenizer")


def build_codec(folder: Path) -> None:
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model

    folder.mkdir(parents=True, exist_ok=True)
    config = codec_config()
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "preprocessor_config.json").write_text(json.dumps(CODEC_PREPROCESSOR, indent=2))
    torch.manual_seed(CODEC_SEED)
    model = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**config))
    save_weights(randomize(model, CODEC_SEED), folder / "model.safetensors")


# --- running the reference --------------------------------------------------------------------------------------

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


def save_golden(folder: Path, name: str, tensors: dict[str, torch.Tensor], facts: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / f"{name}.safetensors"))
    (folder / f"{name}.json").write_text(json.dumps(facts, indent=1, ensure_ascii=False))


KIND_CASES = {"custom_voice": custom_voice_cases, "voice_design": voice_design_cases, "base": base_cases}
FOLDERS = {"base": "tiny-base", "custom_voice": "tiny-custom-voice", "voice_design": "tiny-voice-design"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="fixtures folder (checkpoints + golden/)")
    parser.add_argument("--device", default="cpu", help="torch device the reference runs on (default: cpu)")
    parser.add_argument("--kinds", default="base,custom_voice,voice_design")
    parser.add_argument("--note", default="", help="a line on the environment, kept in golden/manifest.json")
    parser.add_argument("--reuse-checkpoints", action="store_true",
                        help="run the reference on the checkpoints already in --out instead of rebuilding them")
    args = parser.parse_args(argv)
    import qwen_tts
    import transformers

    torch.use_deterministic_algorithms(True, warn_only=True)
    patch_default_rope()
    out: Path = args.out
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(FOLDERS))
    if unknown:
        parser.error(f"unknown kinds {unknown}; known: {sorted(FOLDERS)}")
    if not args.reuse_checkpoints:
        codec = out / "_codec_build"
        if codec.exists():
            shutil.rmtree(codec)
        build_codec(codec)
        for kind in kinds:
            build_checkpoint(kind, out / FOLDERS[kind], codec)
        shutil.rmtree(codec)
    golden = out / "golden"
    manifest: dict[str, Any] = {
        "reference": f"qwen_tts {qwen_tts.__version__} (PyPI qwen-tts-hf; QwenLM/Qwen3-TTS PR #360)",
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "device": args.device, "dtype": "float32 (weights: bf16 values)", "attn_implementation": "eager",
        "seeds": {**KIND_SEEDS, "codec": CODEC_SEED}, "max_new_tokens": MAX_FRAMES, "generation": GREEDY,
        "checkpoints": {kind: FOLDERS[kind] for kind in kinds}, "note": args.note,
    }
    for kind in kinds:
        tts = load_reference(out / FOLDERS[kind], args.device)
        rec = Recorder(tts)
        tensors: dict[str, torch.Tensor] = {}
        cases = KIND_CASES[kind](tts, rec, tensors)
        rec.close()
        for case in cases.values():
            if isinstance(case, dict) and "text" in case:
                case["input_ids"] = [tokenize(tts, f"<|im_start|>assistant\n{t}<|im_end|>\n<|im_start|>assistant\n")
                                     for t in case["text"]]
                if "instruct" in case:
                    case["instruct_ids"] = [tokenize(tts, f"<|im_start|>user\n{t}<|im_end|>\n") if t else None
                                            for t in case["instruct"]]
        save_golden(golden, kind, tensors, {"kind": kind, "cases": cases})
        if kind == kinds[0]:  # the kinds share one codec
            codec_tensors: dict[str, torch.Tensor] = {}
            facts = {"decoder": codec_decoder_case(tts, codec_tensors),
                     "encoder": codec_encoder_case(tts, codec_tensors)}
            save_golden(golden, "codec", codec_tensors, facts)
        print(f"{kind}: " + ", ".join(f"{name} frames {c['frames']}" for name, c in cases.items()
                                       if isinstance(c, dict) and "frames" in c), flush=True)
    (golden / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
