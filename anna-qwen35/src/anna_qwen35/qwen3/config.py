"""Qwen3 hyper-parameters, read from a ``config.json`` (or the ``text_config`` of a model that embeds one)."""

from __future__ import annotations

from typing import Any

import attrs
from anna_core.errors import ModelLoadError, UnsupportedModelError
from anna_core.layers.rotary import rope_parameters_from_config

FULL_ATTENTION = "full_attention"


@attrs.frozen
class Qwen3Config:
    """The fields of transformers' ``Qwen3Config`` the forward pass needs.

    Attributes:
        head_dim: ``D`` (Qwen3 sets it apart from ``hidden_size / num_attention_heads``).
        rope_parameters: HF-style dict (``rope_type``, ``rope_theta``, scaling fields) for
            :class:`anna_core.layers.RotaryEmbedding`.
        eos_token_id: the config's EOS ids (a list; empty when it names none).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_parameters: dict[str, Any]
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    eos_token_id: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], *, tie_word_embeddings: bool | None = None) -> Qwen3Config:
        """From a parsed ``config.json`` (transformers 4.x ``rope_scaling`` or 5.x ``rope_parameters``).

        Args:
            cfg: the config dict (or a ``text_config`` dict).
            tie_word_embeddings: overrides the dict's own flag (a wrapper config may hold it at its top level).

        Raises:
            ModelLoadError: a required field is missing or not a number.
            UnsupportedModelError: sliding-window layers (``use_sliding_window`` or a ``layer_types`` entry other
                than ``full_attention``), or an activation other than SiLU.
        """
        try:
            heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            eos = cfg.get("eos_token_id")
            out = cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_parameters=rope_parameters_from_config(cfg),
                max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False) if tie_word_embeddings is None
                                         else tie_word_embeddings),
                attention_bias=bool(cfg.get("attention_bias", False)),
                eos_token_id=tuple(int(e) for e in ([] if eos is None else [eos] if isinstance(eos, int) else eos)),
            )
        except KeyError as exc:
            raise ModelLoadError(f"config.json lacks the Qwen3 field {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise ModelLoadError(f"config.json has a malformed Qwen3 field: {exc}") from exc
        layer_types = cfg.get("layer_types") or []
        if cfg.get("use_sliding_window") or any(t != FULL_ATTENTION for t in layer_types):
            raise UnsupportedModelError("Qwen3 checkpoints with sliding-window layers (use_sliding_window / "
                                        "layer_types) are not supported by anna-qwen35 yet")
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedModelError(f"Qwen3 hidden_act {act!r} is not supported (only 'silu')")
        return out
