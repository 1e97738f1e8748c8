"""HF transformers as the numerical oracle for family tests.

Transformers routes the gated delta rule to ``fla``'s GPU kernels whenever ``fla`` is importable,
which crashes on CPU; :func:`hide_fla` makes it unimportable before transformers is imported.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch


def hide_fla() -> None:
    """Make ``fla`` (flash-linear-attention) and its submodules unimportable in this process."""
    for name in [n for n in sys.modules if n == "fla" or n.startswith("fla.")]:
        sys.modules[name] = None  # type: ignore[assignment]
    sys.modules["fla"] = None  # type: ignore[assignment]


def hf_model(path: str | Path, dtype: torch.dtype = torch.float32) -> Any:
    """The checkpoint at ``path`` as an HF model (the class named in its ``config.json``), in eval mode."""
    hide_fla()
    import transformers

    config = json.loads((Path(path) / "config.json").read_text())
    arch = (config.get("architectures") or ["AutoModelForCausalLM"])[0]
    cls = getattr(transformers, arch, None) or transformers.AutoModelForCausalLM
    model = cls.from_pretrained(str(path), dtype=dtype)
    return model.eval()


def hf_reference_logits(path: str | Path, input_ids: list[int], model: Any = None) -> torch.Tensor:
    """Float32 logits ``[T, vocab]`` of HF's forward pass over one sequence ``input_ids``."""
    model = model if model is not None else hf_model(path)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([input_ids]), use_cache=False)
    return out.logits[0].float()


def hf_greedy(path: str | Path, input_ids: list[int], max_new_tokens: int, model: Any = None) -> list[int]:
    """``max_new_tokens`` greedy tokens from HF ``generate`` (EOS disabled, so exactly that many)."""
    model = model if model is not None else hf_model(path)
    from transformers import GenerationConfig

    gen = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, min_new_tokens=0,
                           eos_token_id=None, pad_token_id=0)
    out = _generate_without_eos(model, gen, torch.tensor([input_ids]),
                                attention_mask=torch.ones(1, len(input_ids), dtype=torch.long))
    return out[0, len(input_ids):].tolist()


def hf_greedy_inputs(model: Any, inputs: dict[str, torch.Tensor], n: int) -> list[int]:
    """``n`` greedy tokens from HF ``generate`` over one request's model inputs (``inputs``: what its processor
    returns, ``input_ids`` ``[1, P]`` among them; EOS disabled, so exactly ``n``)."""
    from transformers import GenerationConfig

    gen = GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None, pad_token_id=0)
    out = _generate_without_eos(model, gen, **inputs)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


def _generate_without_eos(model: Any, gen: Any, *args: Any, **inputs: Any) -> torch.Tensor:
    """``model.generate(*args, **inputs, generation_config=gen)`` without gradients, the model's own EOS ids cleared
    for the call."""
    # generate() fills fields left at their defaults (eos_token_id None) from the model's own generation
    # config, which may name EOS ids (a GGUF's tokenizer.ggml.eos_token_id): clear them for the call
    defaults = model.generation_config
    saved = defaults.eos_token_id
    defaults.eos_token_id = None
    try:
        with torch.no_grad():
            return model.generate(*args, **inputs, generation_config=gen)
    finally:
        defaults.eos_token_id = saved
