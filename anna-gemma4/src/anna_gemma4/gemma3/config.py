"""Gemma 3 text configuration, from a checkpoint's ``config.json`` or a GGUF file's metadata.

Layouts: ``Gemma3ForConditionalGeneration`` (``model_type`` ``gemma3``) nests the language model under
``text_config`` (the vision tower beside it, unused here); ``Gemma3ForCausalLM`` (``gemma3_text``) is flat.
Field meanings and defaults follow transformers 5.24's ``Gemma3TextConfig`` (the defaults matter: the
released conditional configs leave most text fields out). RoPE: transformers 5's per-layer-type
``rope_parameters``, or the 4.x fields ``rope_theta`` (global layers, default 1e6),
``rope_local_base_freq`` (sliding layers, default 1e4) and ``rope_scaling`` (global layers only).
Layer kinds: ``layer_types``, else every ``sliding_window_pattern``-th layer (default 6) is global.

GGUF (``general.architecture`` ``gemma3``, as llama.cpp writes it): the sliding layers' RoPE base 1e4 is
not stored (only ``rope.freq_base``, the global one), nor the layer pattern unless
``attention.sliding_window_pattern`` is there (an int period or a per-layer bool array, True = sliding);
the default is transformers' and llama.cpp's every-6th-layer-global.
"""

from __future__ import annotations

from typing import Any

import attrs
from anna_core.errors import ModelLoadError

from anna_gemma4.config import FULL, LAYER_TYPES, SLIDING, LayerSpec

_ROPE_TYPES = ("default", "linear")
_DEFAULTS: dict[str, Any] = dict(  # transformers 5.24's Gemma3TextConfig defaults
    vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
    num_key_value_heads=4, head_dim=256, max_position_embeddings=131_072, rms_norm_eps=1e-6, pad_token_id=0,
    eos_token_id=1, tie_word_embeddings=True, attention_bias=False, query_pre_attn_scalar=256,
    sliding_window=4096, hidden_activation="gelu_pytorch_tanh")
GLOBAL_THETA, LOCAL_THETA = 1_000_000.0, 10_000.0
DEFAULT_PATTERN = 6


@attrs.frozen
class Gemma3Config:
    """The Gemma 3 language-model hyper-parameters Anna needs.

    Attributes:
        layout: ``"conditional"`` (HF weights under ``model.language_model.`` or the 4.x
            ``language_model.model.``), ``"causal"`` (``model.``) or ``"gguf"``.
        layers: per decoder layer, its :class:`~anna_gemma4.config.LayerSpec` (one head dim and KV-head
            count for all; no KV sharing).
        rope: per layer kind, the HF rope dict (``rope_type`` ``default`` or ``linear``, ``rope_theta``,
            ``factor``).
        query_pre_attn_scalar: the softmax scale is its ``** -0.5``.
        final_logit_softcapping: ``cap * tanh(logits / cap)`` on the logits, or None.
        eos_token_id: ids from the config (may be empty).
    """

    layout: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    sliding_window: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    layers: tuple[LayerSpec, ...]
    rope: dict[str, dict[str, Any]]
    query_pre_attn_scalar: float
    final_logit_softcapping: float | None = None
    attention_bias: bool = False
    pad_token_id: int = 0
    eos_token_id: tuple[int, ...] = ()
    dtype: str | None = None

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layers)

    def layers_of(self, kind: str) -> list[int]:
        """Ids of the layers of ``kind``."""
        return [i for i, spec in enumerate(self.layers) if spec.kind == kind]

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> Gemma3Config:
        """Parse a ``config.json`` dict (either layout, transformers 4.x or 5.x fields).

        Raises:
            ModelLoadError: inconsistent or unsupported fields (bidirectional attention, attention-logit
                soft-capping, another activation or RoPE type).
        """
        nested = isinstance(config.get("text_config"), dict)
        text = config["text_config"] if nested else config
        try:
            return _from_hf(text, config, nested)
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"config.json has an invalid Gemma 3 field: {exc}") from exc

    @classmethod
    def from_gguf(cls, gguf: Any, vocab_size: int, tied: bool) -> Gemma3Config:
        """Parse a GGUF's ``gemma3.*`` metadata.

        Args:
            gguf: an :class:`anna_core.weights.gguf_reader.GGUFModelFile`.
            vocab_size: rows of ``token_embd.weight``; tied: the file has no ``output.weight``.

        Raises:
            ModelLoadError: missing or unsupported metadata.
        """
        try:
            return _from_gguf(gguf, vocab_size, tied)
        except KeyError as exc:
            raise ModelLoadError(f"the GGUF lacks the Gemma 3 metadata key {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"the GGUF has invalid Gemma 3 metadata: {exc}") from exc


def _ids(value) -> tuple[int, ...]:
    return tuple(int(e) for e in ([] if value is None else value if isinstance(value, list | tuple) else [value]))


def pattern_layer_types(num_layers: int, pattern: int) -> list[str]:
    """transformers' rule: layer ``i`` is global when ``(i + 1) % pattern == 0``."""
    if pattern < 1:
        raise ModelLoadError(f"sliding_window_pattern must be positive, got {pattern}")
    return [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]


def _layers(types: list[str], num_layers: int, head_dim: int, kv_heads: int, inter: int) -> tuple[LayerSpec, ...]:
    if len(types) != num_layers or set(types) - set(LAYER_TYPES):
        raise ModelLoadError(f"layer_types must list {num_layers} entries of {list(LAYER_TYPES)}; got {types}")
    return tuple(LayerSpec(kind=t, head_dim=head_dim, num_kv_heads=kv_heads, kv_owner=None, k_eq_v=False,
                           intermediate_size=inter) for t in types)


def _hf_rope(text: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per layer kind, the rope dict, as ``Gemma3TextConfig.convert_rope_params_to_dict`` builds it."""
    given = text.get("rope_parameters")
    if given is not None and not (isinstance(given, dict) and set(given) <= set(LAYER_TYPES)):
        raise ModelLoadError(f"rope_parameters must hold a dict per layer type {list(LAYER_TYPES)}; got {given!r}")
    rope = {k: dict(v) for k, v in (given or {}).items() if v is not None}
    scaling = text.get("rope_scaling")
    full = rope.setdefault(FULL, {"rope_type": "default"})
    if scaling:
        full.update(scaling)
    full.setdefault("rope_theta", float(text.get("rope_theta", GLOBAL_THETA)))
    sliding = rope.setdefault(SLIDING, {"rope_type": "default"})
    sliding.setdefault("rope_theta", float(text.get("rope_local_base_freq", LOCAL_THETA)))
    return _check_rope(rope)


def _check_rope(rope: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for kind, params in rope.items():
        if "type" in params:  # the 4.x key
            params.setdefault("rope_type", params.pop("type"))
        params.setdefault("rope_type", "default")
        if params["rope_type"] not in _ROPE_TYPES:
            raise ModelLoadError(f"rope_type {params['rope_type']!r} of the Gemma 3 {kind} layers is not supported "
                                 f"(supported: {list(_ROPE_TYPES)})")
        if params["rope_type"] == "linear" and "factor" not in params:
            raise ModelLoadError(f"the linear RoPE scaling of the Gemma 3 {kind} layers has no 'factor'")
    return rope


def _from_hf(text: dict[str, Any], top: dict[str, Any], nested: bool) -> Gemma3Config:
    def get(key: str) -> Any:
        value = text.get(key)
        return _DEFAULTS[key] if value is None and key in _DEFAULTS else value

    if text.get("use_bidirectional_attention"):
        raise ModelLoadError("use_bidirectional_attention=True (an embedding model) is not a causal language "
                             "model; it is not supported")
    if text.get("attn_logit_softcapping") is not None:
        raise ModelLoadError("attn_logit_softcapping is not supported by anna-gemma4 (no released Gemma 3 uses it)")
    if get("hidden_activation") != "gelu_pytorch_tanh":
        raise ModelLoadError(f"hidden_activation {get('hidden_activation')!r} is not supported "
                             "(Gemma 3 uses 'gelu_pytorch_tanh')")
    if get("sliding_window") is None:
        raise ModelLoadError("sliding_window must be set for Gemma 3")
    num_layers = int(get("num_hidden_layers"))
    types = text.get("layer_types")
    if types is None:
        types = pattern_layer_types(num_layers, int(text.get("sliding_window_pattern") or DEFAULT_PATTERN))
    layers = _layers(list(types), num_layers, int(get("head_dim")), int(get("num_key_value_heads")),
                     int(get("intermediate_size")))
    tie = top.get("tie_word_embeddings") if nested else text.get("tie_word_embeddings")
    cap = text.get("final_logit_softcapping")
    eos = top.get("eos_token_id") if nested and top.get("eos_token_id") is not None else get("eos_token_id")
    cfg = Gemma3Config(
        layout="conditional" if nested else "causal",
        vocab_size=int(get("vocab_size")), hidden_size=int(get("hidden_size")),
        intermediate_size=int(get("intermediate_size")), num_attention_heads=int(get("num_attention_heads")),
        num_key_value_heads=int(get("num_key_value_heads")), head_dim=int(get("head_dim")),
        rms_norm_eps=float(get("rms_norm_eps")), sliding_window=int(get("sliding_window")),
        max_position_embeddings=int(get("max_position_embeddings")),
        tie_word_embeddings=bool(_DEFAULTS["tie_word_embeddings"] if tie is None else tie),
        layers=layers, rope=_hf_rope(text), query_pre_attn_scalar=float(get("query_pre_attn_scalar")),
        final_logit_softcapping=None if cap is None else float(cap), attention_bias=bool(get("attention_bias")),
        pad_token_id=int(get("pad_token_id")), eos_token_id=_ids(eos),
        dtype=text.get("dtype") or text.get("torch_dtype") or top.get("dtype") or top.get("torch_dtype"))
    _validate(cfg)
    return cfg


def _gguf_layer_types(gguf: Any, num_layers: int) -> list[str]:
    pattern = gguf.arch_get("attention.sliding_window_pattern", None)
    if pattern is None:
        return pattern_layer_types(num_layers, DEFAULT_PATTERN)
    if isinstance(pattern, list | tuple):
        if len(pattern) != num_layers:
            raise ModelLoadError(f"attention.sliding_window_pattern lists {len(pattern)} layers, not {num_layers}")
        return [SLIDING if bool(p) else FULL for p in pattern]
    return pattern_layer_types(num_layers, int(pattern))


def _from_gguf(gguf: Any, vocab_size: int, tied: bool) -> Gemma3Config:
    hidden = int(gguf.arch_get("embedding_length"))
    heads = int(gguf.arch_get("attention.head_count"))
    kv_heads = gguf.arch_get("attention.head_count_kv", heads)
    if isinstance(kv_heads, list | tuple):
        if len(set(kv_heads)) != 1:
            raise ModelLoadError(f"per-layer KV head counts {sorted(set(kv_heads))} are not Gemma 3")
        kv_heads = kv_heads[0]
    num_layers = int(gguf.arch_get("block_count"))
    head_dim = int(gguf.arch_get("attention.key_length", hidden // heads))
    value_dim = int(gguf.arch_get("attention.value_length", head_dim))
    if value_dim != head_dim:
        raise ModelLoadError(f"attention.key_length {head_dim} != value_length {value_dim}")
    inter = int(gguf.arch_get("feed_forward_length"))
    full: dict[str, Any] = {"rope_type": "default", "rope_theta": float(gguf.arch_get("rope.freq_base", GLOBAL_THETA))}
    scaling = gguf.arch_get("rope.scaling.type", None)
    if scaling not in (None, "none"):
        factor = float(gguf.arch_get("rope.scaling.factor"))
        if factor != 1.0:
            full.update(rope_type=str(scaling), factor=factor)
    rope = _check_rope({SLIDING: {"rope_type": "default", "rope_theta": LOCAL_THETA}, FULL: full})
    # the scale is head_dim ** -0.5, except in the 27B (62 layers), whose query_pre_attn_scalar is
    # hidden / heads: llama.cpp's rule (transformers' GGUF loader keeps its default 256, right for every
    # released size but the 27B)
    scalar = hidden / heads if num_layers == 62 else head_dim
    cap = gguf.arch_get("final_logit_softcapping", None)
    eos = gguf.get("tokenizer.ggml.eos_token_id", None)
    cfg = Gemma3Config(
        layout="gguf", vocab_size=int(vocab_size), hidden_size=hidden, intermediate_size=inter,
        num_attention_heads=heads, num_key_value_heads=int(kv_heads), head_dim=head_dim,
        rms_norm_eps=float(gguf.arch_get("attention.layer_norm_rms_epsilon", 1e-6)),
        sliding_window=int(gguf.arch_get("attention.sliding_window")),
        max_position_embeddings=int(gguf.arch_get("context_length", _DEFAULTS["max_position_embeddings"])),
        tie_word_embeddings=tied, layers=_layers(_gguf_layer_types(gguf, num_layers), num_layers, head_dim,
                                                 int(kv_heads), inter),
        rope=rope, query_pre_attn_scalar=float(scalar), final_logit_softcapping=None if cap is None else float(cap),
        pad_token_id=int(gguf.get("tokenizer.ggml.padding_token_id", 0)), eos_token_id=_ids(eos))
    _validate(cfg)
    return cfg


def _validate(cfg: Gemma3Config) -> None:
    if cfg.num_key_value_heads < 1 or cfg.num_attention_heads % cfg.num_key_value_heads:
        raise ModelLoadError(f"num_attention_heads {cfg.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {cfg.num_key_value_heads}")
    if cfg.head_dim < 2 or cfg.head_dim % 2:
        raise ModelLoadError(f"head_dim {cfg.head_dim} must be even")
    if cfg.sliding_window < 1:
        raise ModelLoadError(f"sliding_window must be positive, got {cfg.sliding_window}")
    if cfg.query_pre_attn_scalar <= 0:
        raise ModelLoadError(f"query_pre_attn_scalar must be positive, got {cfg.query_pre_attn_scalar}")
