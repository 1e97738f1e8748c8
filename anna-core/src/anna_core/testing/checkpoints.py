"""Tiny random checkpoints for tests and plugin authors, built with transformers' own classes.

Everything is seeded and takes well under a second or two on a CPU. The oracle-side imports hide
``fla`` first (see :func:`anna_core.testing.oracle.hide_fla`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from anna_core.testing.oracle import hide_fla

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
THINK, END_THINK = "<think>", "</think>"

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}"
    "{%- endif %}"
)
"""A Qwen-style ChatML template (``enable_thinking`` as in Qwen3.5's)."""

_TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. Anna serves language models over an HTTP API.
Hello, world! How are you today? I am fine, thank you. 0123456789 + - * / = ( ) [ ] { } < > .
Tokens are pieces of text; a tokenizer turns text into numbers and numbers back into text.
user assistant system tool: think answer question reply stream chat completion model weights.
Unicode: cafe\u0301 na\u00efve \u00fcber \u65e5\u672c\u8a9e \U0001F600 -- emoji and accents survive a byte-level round trip.
"""

TINY_TOKENIZER_VOCAB = 320


def build_tiny_tokenizer(path: str | Path, vocab_size: int = TINY_TOKENIZER_VOCAB) -> Any:
    """Train a byte-level BPE tokenizer on a fixed text and save it (with a chat template) to ``path``.

    Ids: ``<|endoftext|>`` 0, ``<|im_start|>`` 1, ``<|im_end|>`` 2 (special), byte alphabet and
    merges up to ``vocab_size``, then ``<think>`` and ``</think>`` (added, not special). The EOS
    token is ``<|im_end|>``. Returns the transformers tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[ENDOFTEXT, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([_TRAINING_TEXT] * 4, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=ENDOFTEXT, unk_token=None, bos_token=None,
        additional_special_tokens=[IM_START],
    )
    hf.add_tokens([THINK, END_THINK])
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(str(path))
    return hf


def text_config_kwargs(
    *, vocab_size: int, hidden_size: int, num_layers: int, num_heads: int, num_kv_heads: int, head_dim: int,
    linear_num_key_heads: int, linear_num_value_heads: int, linear_head_dim: int, intermediate_size: int,
    layer_types: list[str] | None, tie: bool, initializer_range: float, eos_ids: list[int],
) -> dict[str, Any]:
    """``Qwen3_5TextConfig`` keyword arguments of a tiny Qwen3.5 text stack (rotary on a quarter of each head, the
    M-RoPE sections of the released models); the dense builder below and anna-qwen35's MoE builder share them."""
    rotary_half = int(head_dim * 0.25) // 2
    section = [rotary_half - 2 * (rotary_half // 3), rotary_half // 3, rotary_half // 3]
    if layer_types is None:
        layer_types = ["linear_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]
    return dict(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        head_dim=head_dim, linear_num_key_heads=linear_num_key_heads, linear_num_value_heads=linear_num_value_heads,
        linear_key_head_dim=linear_head_dim, linear_value_head_dim=linear_head_dim, linear_conv_kernel_dim=4,
        layer_types=layer_types, max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=tie,
        initializer_range=initializer_range, eos_token_id=eos_ids[0], pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": section, "mrope_interleaved": True},
    )


def tiny_vision_config(out_hidden_size: int) -> dict[str, int]:
    """The smallest Qwen3.5 vision config the layouts with a tower carry when only the text model is exercised:
    one block of width 32, 4x4 patches, 2x2 merging into ``out_hidden_size``."""
    return dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=out_hidden_size,
                patch_size=4, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)


def build_tiny_qwen35(
    path: str | Path,
    *,
    layout: str = "text",
    tie: bool = True,
    num_kv_heads: int = 2,
    linear_num_key_heads: int = 2,
    linear_num_value_heads: int = 4,
    num_layers: int = 4,
    layer_types: list[str] | None = None,
    vocab_size: int = 384,
    hidden_size: int = 64,
    mtp: bool = False,
    max_shard_size: str | None = None,
    tokenizer: bool = True,
    seed: int = 0,
) -> Path:
    """Save a tiny random Qwen3.5 checkpoint with transformers' ``save_pretrained``.

    Args:
        path: output folder (created).
        layout: ``"text"`` (``Qwen3_5ForCausalLM``, weights ``model.*``) or ``"vl"``
            (``Qwen3_5ForConditionalGeneration`` with a tiny vision tower, ``model.language_model.*``).
        tie: tie the LM head to the embeddings.
        num_kv_heads: attention KV heads (4 query heads, head_dim 32, rotary on 8 dims).
        linear_num_key_heads, linear_num_value_heads: gated DeltaNet heads (value heads may outnumber).
        num_layers, layer_types: default alternates linear / full attention, starting linear.
        mtp: add synthetic ``mtp.*`` tensors (HF never writes them) in an extra shard.
        max_shard_size: e.g. ``"200KB"`` to write a sharded checkpoint with an index.
        tokenizer: also write :func:`build_tiny_tokenizer` files and ``generation_config.json``.
        seed: weights seed; all parameters (norms, ``dt_bias`` too) are randomised.

    Returns:
        ``Path(path)``.
    """
    if layout not in ("text", "vl"):
        raise ValueError(f"layout must be 'text' or 'vl', got {layout!r}")
    hide_fla()
    from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    eos_ids = [2, 0]  # <|im_end|>, <|endoftext|> of the tiny tokenizer
    text_kwargs = text_config_kwargs(
        vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers, num_heads=4,
        num_kv_heads=num_kv_heads, head_dim=32, linear_num_key_heads=linear_num_key_heads,
        linear_num_value_heads=linear_num_value_heads, linear_head_dim=16, intermediate_size=2 * hidden_size,
        layer_types=layer_types, tie=tie, initializer_range=0.1, eos_ids=eos_ids,
    )
    if layout == "text":
        config = Qwen3_5TextConfig(**text_kwargs)
        config.architectures = ["Qwen3_5ForCausalLM"]
        cls = Qwen3_5ForCausalLM
    else:
        config = Qwen3_5Config(text_config=text_kwargs, vision_config=tiny_vision_config(hidden_size),
                               tie_word_embeddings=tie)
        config.architectures = ["Qwen3_5ForConditionalGeneration"]
        cls = Qwen3_5ForConditionalGeneration
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for param in model.parameters():
            if param.dim() == 1:  # norms start at 0/1 and dt_bias at 1 in HF; move them off those values
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(path), **kwargs)
    if mtp:
        _add_mtp_tensors(path, hidden_size, seed)
    if tokenizer:
        build_tiny_tokenizer(path)
        (path / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": 0, "eos_token_id": eos_ids, "pad_token_id": 0}, indent=2))
    return path


def _add_mtp_tensors(path: Path, hidden: int, seed: int) -> None:
    """Write a multi-token-prediction head's tensors the way released Qwen3.5 checkpoints name them."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed + 2)
    tensors = {
        "mtp.fc.weight": torch.randn(hidden, 2 * hidden, generator=gen),
        "mtp.norm.weight": torch.randn(hidden, generator=gen),
        "mtp.pre_fc_norm_embedding.weight": torch.randn(hidden, generator=gen),
        "mtp.pre_fc_norm_hidden.weight": torch.randn(hidden, generator=gen),
        "mtp.layers.0.mlp.gate_proj.weight": torch.randn(2 * hidden, hidden, generator=gen),
    }
    shard = "model-mtp.safetensors"
    save_file(tensors, str(path / shard), metadata={"format": "pt"})
    index_path = path / "model.safetensors.index.json"
    if index_path.is_file():
        index = json.loads(index_path.read_text())
    else:  # turn the single-file checkpoint into an indexed one
        from safetensors import safe_open

        with safe_open(str(path / "model.safetensors"), framework="pt") as f:
            index = {"metadata": {}, "weight_map": {name: "model.safetensors" for name in f.keys()}}
    index["weight_map"].update({name: shard for name in tensors})
    index_path.write_text(json.dumps(index, indent=2))


VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Qwen-VL's vision special tokens, added to the tiny tokenizer by :func:`build_tiny_qwen35_vl` in this order."""

VL_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}",
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' or part['type'] == 'video_url' %}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}")
""":data:`CHAT_TEMPLATE` rendering a content list's image and video parts as Qwen3.5's template does
(``<|vision_start|><|image_pad|><|vision_end|>``, ``<|vision_start|><|video_pad|><|vision_end|>``) and its text
parts as they are."""


def build_tiny_qwen35_vl(path: str | Path, *, tie: bool = True, hidden_size: int = 64, num_layers: int = 4,
                         vision_depth: int = 2, patch_size: int = 8, moe: bool = False, seed: int = 0) -> Path:
    """Save a tiny random ``Qwen3_5ForConditionalGeneration`` that takes images, with transformers' classes.

    The text model is :func:`build_tiny_qwen35`'s (``moe``: a ``Qwen3_5MoeForConditionalGeneration`` whose layers
    have 8 routed experts, top-2, of width 32 and a shared expert of width 48; router weights drawn wide, so the
    top-k choice has clear margins); the vision tower has ``vision_depth`` blocks of width 32 (2
    heads), ``patch_size`` x ``patch_size`` patches, 2x2 merging and a 4x4 learned position table. The tokenizer
    is :func:`build_tiny_tokenizer`'s plus the :data:`VISION_TOKENS` (special; ``config.json`` names their ids) with
    :data:`VL_CHAT_TEMPLATE`, and
    ``preprocessor_config.json`` is a ``Qwen2VLImageProcessorPil``'s for these patch sizes (pixel bounds
    ``(2 * patch)^2 .. (16 * patch)^2``, mean and std 0.5). All parameters are randomised (seeded).

    Returns:
        ``Path(path)``.
    """
    hide_fla()
    import transformers
    from transformers import Qwen2VLImageProcessorPil

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(path)
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, *VISION_TOKENS]})
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    tokenizer.save_pretrained(str(path))
    start, end, image, video = tokenizer.convert_tokens_to_ids(list(VISION_TOKENS))
    eos_ids = [2, 0]
    text = text_config_kwargs(
        vocab_size=384, hidden_size=hidden_size, num_layers=num_layers, num_heads=4, num_kv_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_head_dim=16, intermediate_size=2 * hidden_size,
        layer_types=None, tie=tie, initializer_range=0.1, eos_ids=eos_ids,
    )
    if moe:
        del text["intermediate_size"]
        text.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
    vision = dict(depth=vision_depth, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=hidden_size,
                  patch_size=patch_size, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)
    kind = "Qwen3_5Moe" if moe else "Qwen3_5"
    config = getattr(transformers, f"{kind}Config")(
        text_config=text, vision_config=vision, tie_word_embeddings=tie, image_token_id=image, video_token_id=video,
        vision_start_token_id=start, vision_end_token_id=end)
    config.architectures = [f"{kind}ForConditionalGeneration"]
    torch.manual_seed(seed)
    model = getattr(transformers, f"{kind}ForConditionalGeneration")(config).eval()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed + 1)
        for name, param in model.named_parameters():
            if param.dim() == 1:  # norms start at 0/1 and dt_bias at 1 in HF; move them off those values
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
            if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
                param.normal_(0.0, 0.1, generator=gen)  # HF leaves them uninitialised until its init pass
            if name.endswith("mlp.gate.weight"):
                param.normal_(0.0, 0.8, generator=gen)
    model.save_pretrained(str(path))
    factor = 2 * patch_size
    Qwen2VLImageProcessorPil(patch_size=patch_size, temporal_patch_size=2, merge_size=2, min_pixels=factor**2,
                             max_pixels=(8 * factor)**2, image_mean=[0.5] * 3, image_std=[0.5] * 3,
                             ).save_pretrained(str(path))
    (path / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 0, "eos_token_id": eos_ids, "pad_token_id": 0}, indent=2))
    return path


RELEASED_IMAGE_PIXELS = (65536, 16777216)
"""``(min, max)`` pixels of an image in the released Qwen3-VL / Qwen3.5 preprocessor configs
(``size.shortest_edge`` / ``size.longest_edge``)."""
RELEASED_VIDEO_PIXELS = (4096, 25165824)
"""``(min, max)`` pixels of a clip in the released video preprocessor configs (all frames together)."""


def write_vl_shape_folder(config_dir: str | Path, path: str | Path, *,
                          image_pixels: tuple[int, int] = RELEASED_IMAGE_PIXELS,
                          video_pixels: tuple[int, int] = RELEASED_VIDEO_PIXELS) -> Path:
    """A folder for a vision-language benchmark on random weights (``--load-format dummy``) at the shape of
    ``config_dir/config.json`` (a Qwen3.5 config with a ``vision_config``, e.g. a released one): that config with
    its vision token ids pointed at :func:`build_tiny_tokenizer`'s tokenizer plus the :data:`VISION_TOKENS` (and
    :data:`VL_CHAT_TEMPLATE`), a ``preprocessor_config.json`` for the tower's patch sizes with ``image_pixels``
    bounds and mean / std 0.5, and a ``video_preprocessor_config.json`` (2 fps, at most 768 frames,
    ``video_pixels`` bounds). No weights are written.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: the config has no ``vision_config``.
    """
    config = json.loads((Path(config_dir) / "config.json").read_text())
    vision = config.get("vision_config")
    if not vision:
        raise ValueError(f"{config_dir}/config.json has no vision_config")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(path)
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, *VISION_TOKENS]})
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    tokenizer.save_pretrained(str(path))
    ids = tokenizer.convert_tokens_to_ids(list(VISION_TOKENS))
    config.update(zip(("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id"), ids))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    patch, temporal, merge = vision["patch_size"], vision["temporal_patch_size"], vision["spatial_merge_size"]
    # the file as transformers' Qwen2-VL image processor writes it (plain JSON: any transformers release reads it)
    (path / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "do_convert_rgb": True, "do_resize": True, "resample": 3,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3, "patch_size": patch, "temporal_patch_size": temporal, "merge_size": merge,
        "size": {"shortest_edge": image_pixels[0], "longest_edge": image_pixels[1]}}, indent=2))
    (path / "video_preprocessor_config.json").write_text(json.dumps({
        "size": {"shortest_edge": video_pixels[0], "longest_edge": video_pixels[1]}, "patch_size": patch,
        "temporal_patch_size": temporal, "merge_size": merge, "fps": 2, "max_frames": 768,
        "image_mean": [0.5] * 3, "image_std": [0.5] * 3}, indent=2))
    return path


def copy_with_tensors(src: str | Path, dst: str | Path, edit: Callable[[dict[str, torch.Tensor]], Any]) -> Path:
    """Copy the single-file checkpoint folder ``src`` to ``dst`` (which must not exist), letting ``edit(tensors)``
    change its ``model.safetensors`` tensor dict in place (drop, add, reshape a tensor: a load error's test case);
    ``dst``."""
    import shutil

    from safetensors.torch import load_file, save_file

    dst = Path(dst)
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst
