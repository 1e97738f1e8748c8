"""Gemma 4 text configuration, parsed from a checkpoint's ``config.json``.

Two layouts: ``Gemma4ForConditionalGeneration`` (``model_type`` ``gemma4``) nests the language model
under ``text_config`` (vision and audio towers beside it, unused here); ``Gemma4ForCausalLM``
(``gemma4_text``) is flat. Field meanings follow transformers' ``Gemma4TextConfig``.

Per-layer attention geometry comes in two forms:

* the released one: ``head_dim`` / ``num_key_value_heads`` for sliding layers, ``global_head_dim``
  (default 512) for full-attention layers, and ``num_global_key_value_heads`` for them when
  ``attention_k_eq_v``;
* the one transformers 5.24's ``save_pretrained`` writes: ``per_layer_config``, a sparse map from a
  layer index (a string, possibly zero-padded) to overrides of ``head_dim`` / ``num_key_value_heads``,
  with no ``global_head_dim`` key.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
from anna_core.errors import ModelLoadError

log = logging.getLogger("anna.gemma4")

SLIDING = "sliding_attention"
FULL = "full_attention"
LAYER_TYPES = (SLIDING, FULL)
_PER_LAYER_KEYS = {"head_dim", "num_key_value_heads"}
_ACTIVATIONS = ("gelu_pytorch_tanh",)
_ROPE_TYPES = ("default", "proportional")  # what transformers' Gemma 4 configs use; both rotate the whole head


@attrs.frozen
class LayerSpec:
    """One decoder layer's shape.

    Attributes:
        kind: ``"sliding_attention"`` or ``"full_attention"``.
        head_dim: q/k/v head dim ``D`` of the layer.
        num_kv_heads: K/V heads ``H_kv``.
        kv_owner: the layer whose K/V this layer reads (KV sharing; it has no K/V projections of its
            own), or None.
        k_eq_v: V is the K projection (before ``k_norm``): the layer has no ``v_proj``.
        intermediate_size: the dense MLP's inner width (doubled on KV-shared layers with
            ``use_double_wide_mlp``).
    """

    kind: str
    head_dim: int
    num_kv_heads: int
    kv_owner: int | None
    k_eq_v: bool
    intermediate_size: int


@attrs.frozen
class Gemma4Config:
    """The language-model hyper-parameters Anna needs.

    Attributes:
        layout: ``"conditional"`` (weights under ``model.language_model.``) or ``"causal"`` (``model.``).
        layers: per decoder layer, its :class:`LayerSpec`.
        rope: per layer kind, the HF rope dict (``rope_type`` ``default`` / ``proportional``, ...).
        hidden_size_per_layer_input: per-layer-embedding width ``P`` (0: no per-layer embeddings).
        final_logit_softcapping: ``cap * tanh(logits / cap)`` on the logits, or None.
        placeholder_token_ids: media placeholder ids (image, video, audio) of the conditional layout;
            text-only serving embeds them as ``pad_token_id``, as transformers does without media.
        eos_token_id: ids from the config (may be empty).
    """

    layout: str
    vocab_size: int
    hidden_size: int
    num_attention_heads: int
    rms_norm_eps: float
    sliding_window: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    layers: tuple[LayerSpec, ...]
    rope: dict[str, dict[str, Any]]
    hidden_size_per_layer_input: int = 0
    vocab_size_per_layer_input: int = 0
    final_logit_softcapping: float | None = None
    enable_moe_block: bool = False
    num_experts: int = 0
    top_k_experts: int = 0
    moe_intermediate_size: int = 0
    attention_bias: bool = False
    pad_token_id: int = 0
    placeholder_token_ids: tuple[int, ...] = ()
    eos_token_id: tuple[int, ...] = ()
    dtype: str | None = None

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layers)

    def layers_of(self, kind: str) -> list[int]:
        """Ids of the layers of ``kind``."""
        return [i for i, spec in enumerate(self.layers) if spec.kind == kind]

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> Gemma4Config:
        """Parse a ``config.json`` dict (either layout, either per-layer form).

        Raises:
            ModelLoadError: missing, inconsistent or unsupported fields (bidirectional text attention,
                another activation, per-layer overrides other than head dim / KV heads).
        """
        nested = isinstance(config.get("text_config"), dict)
        text = config["text_config"] if nested else config
        try:
            return _parse(text, config, nested)
        except KeyError as exc:
            raise ModelLoadError(f"config.json lacks the Gemma 4 field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"config.json has an invalid Gemma 4 field: {exc}") from exc


def _ids(value) -> tuple[int, ...]:
    return tuple(int(e) for e in ([] if value is None else value if isinstance(value, list) else [value]))


def _layer_types(text: dict[str, Any], num_layers: int) -> list[str]:
    types = text.get("layer_types")
    if types is None:  # transformers' default: five sliding layers, then one full
        types = [SLIDING if (i + 1) % 6 else FULL for i in range(num_layers)]
    types = list(types)
    if len(types) != num_layers or set(types) - set(LAYER_TYPES):
        raise ModelLoadError(f"layer_types must list {num_layers} entries of {list(LAYER_TYPES)}; got {types}")
    if types[-1] != FULL:  # transformers forces it too
        log.warning("the last Gemma 4 layer must be full attention; treating layer %d as full", num_layers - 1)
        types[-1] = FULL
    return types


def _per_layer_overrides(text: dict[str, Any], types: list[str]) -> dict[int, dict[str, Any]]:
    """Per layer, its head dim / KV head overrides, from either config form."""
    if "per_layer_config" in text:
        raw = text["per_layer_config"] or {}
        out = {}
        for key, values in raw.items():
            layer = int(key)
            if not 0 <= layer < len(types):
                raise ModelLoadError(f"per_layer_config names layer {key!r}, outside 0..{len(types) - 1}")
            unknown = sorted(set(values) - _PER_LAYER_KEYS)
            if unknown:
                raise ModelLoadError(f"per_layer_config overrides {unknown} of layer {layer}; anna-gemma4 reads "
                                     f"only {sorted(_PER_LAYER_KEYS)}")
            out[layer] = dict(values)
        return out
    full = {"head_dim": int(text.get("global_head_dim") or 512)}
    global_kv = text.get("num_global_key_value_heads")
    if text.get("attention_k_eq_v", False) and global_kv is not None:
        full["num_key_value_heads"] = int(global_kv)
    return {i: dict(full) for i, t in enumerate(types) if t == FULL}


def _kv_owners(types: list[str], num_shared: int) -> list[int | None]:
    """Per layer, the layer whose K/V it reads (the last unshared layer of its kind), as transformers'
    ``kv_sharing_modes``; None for the layers that compute their own."""
    n = len(types)
    if not 0 <= num_shared < n:
        raise ModelLoadError(f"num_kv_shared_layers {num_shared} must be in [0, {n}) (some layer must compute K/V)")
    first_shared = n - num_shared
    owners: list[int | None] = [None] * n
    for i in range(first_shared, n):
        sources = [j for j in range(first_shared) if types[j] == types[i]]
        if not sources:
            raise ModelLoadError(f"KV-shared layer {i} ({types[i]}) has no earlier {types[i]} layer to read from")
        owners[i] = sources[-1]
    return owners


def _parse(text: dict[str, Any], top: dict[str, Any], nested: bool) -> Gemma4Config:
    num_layers = int(text["num_hidden_layers"])
    types = _layer_types(text, num_layers)
    act = text.get("hidden_activation", "gelu_pytorch_tanh")
    if act not in _ACTIVATIONS:
        raise ModelLoadError(f"hidden_activation {act!r} is not supported (Gemma 4 uses 'gelu_pytorch_tanh')")
    if text.get("use_bidirectional_attention") == "all":
        raise ModelLoadError("use_bidirectional_attention='all' is not a causal language model; it is not supported")
    heads = int(text["num_attention_heads"])
    hidden = int(text["hidden_size"])
    head_dim = int(text.get("head_dim") or 256)  # transformers' defaults
    kv_heads = int(text.get("num_key_value_heads") or 4)
    overrides = _per_layer_overrides(text, types)
    owners = _kv_owners(types, int(text.get("num_kv_shared_layers") or 0))
    k_eq_v = bool(text.get("attention_k_eq_v", False))
    double_wide = bool(text.get("use_double_wide_mlp", False))
    inter = int(text["intermediate_size"])
    layers = []
    for i, kind in enumerate(types):
        o = overrides.get(i, {})
        layers.append(LayerSpec(
            kind=kind, head_dim=int(o.get("head_dim", head_dim)), num_kv_heads=int(o.get("num_key_value_heads", kv_heads)),
            kv_owner=owners[i], k_eq_v=k_eq_v and kind == FULL,
            intermediate_size=inter * (2 if double_wide and owners[i] is not None else 1)))
    rope = _rope(text)
    moe = bool(text.get("enable_moe_block", False))
    tie_source = top if nested else text
    placeholders = () if not nested else tuple(
        int(top[k]) for k in ("image_token_id", "video_token_id", "audio_token_id") if top.get(k) is not None)
    cap = text.get("final_logit_softcapping")
    cfg = Gemma4Config(
        layout="conditional" if nested else "causal",
        vocab_size=int(text["vocab_size"]),
        hidden_size=hidden,
        num_attention_heads=heads,
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        sliding_window=int(text.get("sliding_window", 512)),
        max_position_embeddings=int(text.get("max_position_embeddings", 131072)),
        tie_word_embeddings=bool(tie_source.get("tie_word_embeddings", True)),
        layers=tuple(layers),
        rope=rope,
        hidden_size_per_layer_input=int(text.get("hidden_size_per_layer_input") or 0),
        vocab_size_per_layer_input=int(text.get("vocab_size_per_layer_input") or text["vocab_size"]),
        final_logit_softcapping=None if cap is None else float(cap),
        enable_moe_block=moe,
        num_experts=int(text["num_experts"]) if moe else 0,
        top_k_experts=int(text["top_k_experts"]) if moe else 0,
        moe_intermediate_size=int(text["moe_intermediate_size"]) if moe else 0,
        attention_bias=bool(text.get("attention_bias", False)),
        pad_token_id=int(text.get("pad_token_id") or 0),
        placeholder_token_ids=placeholders,
        # the outer config's list (released: [1, 106], <eos> and <end_of_turn>) over the text config's one id
        eos_token_id=_ids(top.get("eos_token_id") if nested and top.get("eos_token_id") is not None
                          else text.get("eos_token_id")),
        dtype=text.get("dtype") or text.get("torch_dtype") or top.get("dtype") or top.get("torch_dtype"),
    )
    _validate(cfg)
    return cfg


def _rope(text: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rope = text.get("rope_parameters")
    if rope is None:  # transformers' defaults
        rope = {SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
                FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}}
    if not isinstance(rope, dict) or not all(isinstance(rope.get(k), dict) for k in LAYER_TYPES):
        raise ModelLoadError(f"rope_parameters must hold a dict per layer type {list(LAYER_TYPES)}; got {rope!r}")
    for kind in LAYER_TYPES:
        rope_type = rope[kind].get("rope_type", "default")
        if rope_type not in _ROPE_TYPES:
            raise ModelLoadError(f"rope_type {rope_type!r} of the {kind} layers is not supported by anna-gemma4 "
                                 f"(supported: {list(_ROPE_TYPES)})")
    return {k: dict(rope[k]) for k in LAYER_TYPES}


def _validate(cfg: Gemma4Config) -> None:
    for i, layer in enumerate(cfg.layers):
        if layer.num_kv_heads < 1 or cfg.num_attention_heads % layer.num_kv_heads:
            raise ModelLoadError(f"layer {i}: num_attention_heads {cfg.num_attention_heads} is not a multiple of its "
                                 f"{layer.num_kv_heads} KV heads")
        if layer.head_dim < 2 or layer.head_dim % 2:
            raise ModelLoadError(f"layer {i}: head_dim {layer.head_dim} must be even")
        owner = layer.kv_owner
        if owner is not None and (cfg.layers[owner].head_dim, cfg.layers[owner].num_kv_heads) != (
                layer.head_dim, layer.num_kv_heads):
            raise ModelLoadError(f"KV-shared layer {i} and its source layer {owner} differ in K/V geometry")
    for kind in LAYER_TYPES:
        geometry = {(cfg.layers[i].head_dim, cfg.layers[i].num_kv_heads) for i in cfg.layers_of(kind)}
        if len(geometry) > 1:
            raise ModelLoadError(f"the {kind} layers differ in head dim / KV heads {sorted(geometry)}; "
                                 "anna-gemma4 needs one geometry per layer type (one cache group each)")
    if cfg.enable_moe_block and not 0 < cfg.top_k_experts <= cfg.num_experts:
        raise ModelLoadError(f"top_k_experts {cfg.top_k_experts} must be in [1, num_experts={cfg.num_experts}]")
    if cfg.sliding_window < 1:
        raise ModelLoadError(f"sliding_window must be positive, got {cfg.sliding_window}")
