"""Tiny random Qwen3-ASR checkpoints, saved with transformers' own ``Qwen3ASRForConditionalGeneration`` and
``Qwen3ASRProcessor``: the family's ``tiny_checkpoint`` builder (``ModelFamilySpec.tiny_checkpoint``), and
:func:`to_original_layout`, which rewrites one into the original release layout (``thinker_config``,
``thinker.*`` tensors) as the tests need."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from anna_audio.qwen3_asr.config import ENCODER_POSITIONS
from anna_audio.qwen3_asr.prompt import DEFAULT_LANGUAGES
from anna_audio.qwen3_asr.weights import original_name

AUDIO_TOKENS = ("<|audio_start|>", "<|audio_end|>", "<|audio_pad|>")
ASR_TEXT = "<asr_text>"
CONV_STD = 0.5
"""Weights std of the tiny encoder's convolutions (with HF's 0.1 every clip gives nearly the same rows)."""
CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='', audio='') -%}"
    "{%- for m in messages -%}"
    "{%- if m.content is string -%}"
    "{%- if m.role == 'system' -%}{%- set ns.system = ns.system + m.content -%}{%- endif -%}"
    "{%- else -%}{%- for part in m.content -%}"
    "{%- if m.role == 'system' and part.type == 'text' -%}{%- set ns.system = ns.system + part.text -%}"
    "{%- elif part.type == 'audio' or 'audio' in part or 'audio_url' in part -%}"
    "{%- set ns.audio = ns.audio + '<|audio_start|><|audio_pad|><|audio_end|>' -%}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endfor -%}"
    "{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n<|im_start|>user\\n' + ns.audio + '<|im_end|>\\n' -}}"
    "{%- for m in messages if m.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if m.content is string -%}{{- m.content -}}"
    "{%- else -%}{%- for part in m.content if part.type == 'text' -%}{{- part.text -}}{%- endfor -%}{%- endif -%}"
    "{%- if not (loop.last and continue_final_message is defined and continue_final_message) -%}"
    "{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""Qwen3-ASR's prompt layout (the context in the system turn, one ``<|audio_start|><|audio_pad|><|audio_end|>``
per audio in the user turn, an assistant turn that a prefill may continue), written for these tests."""


def build_tiny_checkpoint(path: str | Path, *, tie: bool = True, n_window_infer: int = 200, seed: int = 0,
                          layout: str = "hf") -> Path:
    """Save a tiny random Qwen3-ASR to ``path``: an encoder of 2 layers of width 32 (2 heads, 8 convolution
    channels, attention windows of ``n_window_infer`` mel frames), a projector to 64, and a Qwen3 decoder of 2
    layers (hidden 64, 4 query heads of dim 32, 2 KV heads).

    The tokenizer is :func:`anna_core.testing.checkpoints.build_tiny_tokenizer`'s plus ``<|audio_start|>``,
    ``<|audio_end|>``, ``<|audio_pad|>`` (special; named ``audio_bos_token`` / ``audio_eos_token`` /
    ``audio_token`` for ``Qwen3ASRProcessor``) and ``<asr_text>`` (not special); the processor
    (``preprocessor_config.json``, ``chat_template.jinja`` = :data:`CHAT_TEMPLATE`) is transformers' with the
    released feature settings.

    Args:
        tie: tie the LM head to the embeddings (as the released models).
        n_window_infer: the encoder's attention window in mel frames (a multiple of 100; the released 800).
        seed: weights seed; LayerNorm / RMSNorm weights and biases are moved off their initial values too.
        layout: ``"hf"`` or ``"original"`` (the ``hf`` checkpoint rewritten by :func:`to_original_layout`).

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: an unknown layout.
    """
    if layout not in ("hf", "original"):
        raise ValueError(f"layout must be 'hf' or 'original', got {layout!r}")
    if layout == "original":
        hf = build_tiny_checkpoint(Path(path).with_name(Path(path).name + "-hf"), tie=tie,
                                   n_window_infer=n_window_infer, seed=seed)
        return to_original_layout(hf, path)
    from anna_core.testing.checkpoints import build_tiny_tokenizer
    from anna_core.testing.oracle import hide_fla

    hide_fla()
    from transformers import (
        AutoTokenizer,
        Qwen3ASRConfig,
        Qwen3ASRFeatureExtractor,
        Qwen3ASRForConditionalGeneration,
        Qwen3ASRProcessor,
    )

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = build_tiny_tokenizer(path)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *AUDIO_TOKENS]})
    tok.add_tokens([ASR_TEXT])
    tok.save_pretrained(str(path))
    tok = AutoTokenizer.from_pretrained(str(path), audio_bos_token=AUDIO_TOKENS[0], audio_eos_token=AUDIO_TOKENS[1],
                                        audio_token=AUDIO_TOKENS[2])
    audio_id = tok.convert_tokens_to_ids(AUDIO_TOKENS[2])
    vocab = len(tok) + 2
    eos = [2, 0]
    audio = {"num_mel_bins": 128, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
             "d_model": 32, "n_window": 50, "n_window_infer": n_window_infer, "output_dim": 64,
             "downsample_hidden_size": 8, "max_position_embeddings": ENCODER_POSITIONS, "initializer_range": 0.1}
    text = {"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "tie_word_embeddings": tie, "initializer_range": 0.1}
    config = Qwen3ASRConfig(audio_config=audio, text_config=text, audio_token_id=audio_id, eos_token_id=eos,
                            pad_token_id=0, tie_word_embeddings=tie, initializer_range=0.1)
    config.architectures = ["Qwen3ASRForConditionalGeneration"]
    torch.manual_seed(seed)
    model = Qwen3ASRForConditionalGeneration(config).eval()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for name, param in model.named_parameters():
            if param.dim() == 1:  # norms start at one and biases at zero in HF: move them to test the mapping
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
            if ".audio_tower.conv" in name:  # wide convolutions, small biases: rows that depend on the audio
                param.normal_(0.0, CONV_STD if param.dim() > 1 else 0.02, generator=gen)
    model.save_pretrained(str(path))
    Qwen3ASRProcessor(feature_extractor=Qwen3ASRFeatureExtractor(), tokenizer=tok,
                      chat_template=CHAT_TEMPLATE).save_pretrained(str(path))
    (path / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 0, "eos_token_id": eos, "pad_token_id": 0}, indent=2))
    return path


def to_original_layout(src: str | Path, dst: str | Path) -> Path:
    """Rewrite the ``hf``-layout checkpoint ``src`` into the original release layout in ``dst``: the config nested in
    ``thinker_config`` (the encoder's ``max_source_positions`` 1500 instead of its 13 positions, the text model's
    ``rope_scaling`` with the released interleaved M-RoPE sections, ``support_languages``), every tensor renamed
    (:func:`anna_audio.qwen3_asr.weights.original_name`: ``thinker.*``, the projector as ``audio_tower.proj1/2``);
    tokenizer and processor files copied.

    Returns:
        ``Path(dst)``.
    """
    import shutil

    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json" and not f.name.startswith("model"):
            shutil.copy(f, dst / f.name)
    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    save_file({original_name(k): v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"),
              metadata={"format": "pt"})
    hf = json.loads((src / "config.json").read_text())
    audio = copy.deepcopy(hf["audio_config"])
    audio.pop("max_position_embeddings", None)
    audio.update(max_source_positions=1500, model_type="qwen3_asr_audio_encoder")
    text = copy.deepcopy(hf["text_config"])
    rope = text.pop("rope_parameters", None) or {"rope_type": "default", "rope_theta": 1000000.0}
    half = text["head_dim"] // 2
    section = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]  # the released 24/20/20 of 64 pairs
    text.update(model_type="qwen3_asr_text", rope_theta=rope["rope_theta"],
                rope_scaling={"rope_type": "default", "type": "default", "mrope_section": section,
                              "interleaved": True, "mrope_interleaved": True})
    thinker = {"audio_config": audio, "text_config": text, "audio_token_id": hf["audio_token_id"],
               "model_type": "qwen3_asr_thinker", "initializer_range": hf.get("initializer_range", 0.02)}
    original = {"architectures": ["Qwen3ASRForConditionalGeneration"], "model_type": "qwen3_asr",
                "support_languages": list(DEFAULT_LANGUAGES), "thinker_config": thinker}
    (dst / "config.json").write_text(json.dumps(original, indent=2))
    return dst
