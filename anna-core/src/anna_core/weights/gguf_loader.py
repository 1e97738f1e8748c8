"""Assigning a GGUF model's tensors to a meta-built model (the GGUF twin of ``load_safetensors``).

A family supplies a name map (GGUF tensor name -> parameter name, or ``None`` to ignore) and,
optionally, a transform that fixes a tensor's layout after dequantization (e.g. undoing
llama.cpp's rotary row permutation of ``attn_q`` / ``attn_k``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from anna_core.weights.assign import NameMap, check_plan, plan_load, progress, set_param
from anna_core.weights.gguf_reader import GGUFModelFile

Transform = Callable[[str, torch.Tensor], torch.Tensor]


def load_gguf(
    model: nn.Module,
    gguf: GGUFModelFile,
    name_map: NameMap,
    *,
    device: torch.device,
    transform: Transform | None = None,
) -> None:
    """Assign every parameter of ``model`` from ``gguf``, dequantized to the parameter's dtype.

    Each tensor is dequantized on ``device`` (float32 math), passed through
    ``transform(gguf_name, tensor)`` and replaces the parameter (``assign`` semantics), so
    ``model`` may be built on the meta device. Tied parameters must not be in the map.

    Raises:
        ModelLoadError: GGUF tensors mapping to no parameter (unexpected), parameters without a
            tensor (missing), tensors mapped twice, unsupported GGML types or shape mismatches;
            the message names every offending tensor.
    """
    from anna_core.weights.dequant import SUPPORTED_TYPES

    params = dict(model.named_parameters(remove_duplicate=False))
    plan = plan_load(gguf.tensors, name_map, params)
    mismatched, unsupported = [], []
    for gguf_name, target in plan.targets.items():
        info = gguf.tensors[gguf_name]
        if tuple(params[target].shape) != info.shape:
            mismatched.append(f"{gguf_name}: file {list(info.shape)} vs model {list(params[target].shape)} ({target})")
        if info.type_name not in SUPPORTED_TYPES:
            unsupported.append(f"{gguf_name} ({info.type_name})")
    more = [f"unsupported GGML types (supported: {list(SUPPORTED_TYPES)}): {unsupported}"] if unsupported else []
    check_plan(plan, source=f"GGUF {str(gguf.paths[0])!r}", where="the file", mismatched=mismatched, more=more)

    with progress(len(plan.targets), "loading GGUF weights") as bar:
        for gguf_name, target in plan.targets.items():
            value = gguf.tensor(gguf_name, dtype=torch.float32, device=device)
            if transform is not None:
                value = transform(gguf_name, value)
            set_param(model, target, value.to(params[target].dtype).contiguous())
            bar.update(1)
