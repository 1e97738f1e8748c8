"""Assigning a GGUF model's tensors to a meta-built model (the GGUF twin of ``load_safetensors``).

A family supplies a name map (GGUF tensor name -> parameter name, or ``None`` to ignore) and,
optionally, a transform that fixes a tensor's layout after dequantization (e.g. undoing
llama.cpp's rotary row permutation of ``attn_q`` / ``attn_k``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import nn

from anna_core.errors import ModelLoadError
from anna_core.weights.gguf_reader import GGUFModelFile

NameMap = Callable[[str], "str | None"]
Transform = Callable[[str, torch.Tensor], torch.Tensor]


def _set_param(model: nn.Module, name: str, value: torch.Tensor) -> None:
    module_name, _, attr = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    module._parameters[attr] = nn.Parameter(value, requires_grad=False)


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
    plan: dict[str, str] = {}
    unexpected, twice, mismatched, unsupported = [], [], [], []
    for gguf_name, info in gguf.tensors.items():
        target = name_map(gguf_name)
        if target is None:
            continue
        if target not in params:
            unexpected.append(gguf_name)
        elif target in plan.values():
            twice.append(gguf_name)
        else:
            plan[gguf_name] = target
            if tuple(params[target].shape) != info.shape:
                mismatched.append(f"{gguf_name}: file {list(info.shape)} vs model {list(params[target].shape)} "
                                  f"({target})")
            if info.type_name not in SUPPORTED_TYPES:
                unsupported.append(f"{gguf_name} ({info.type_name})")
    missing = sorted(set(params) - set(plan.values()))
    problems = []
    if missing:
        problems.append(f"missing tensors (model parameters not in the file): {missing}")
    if unexpected:
        problems.append(f"unexpected tensors (no matching model parameter): {sorted(unexpected)}")
    if twice:
        problems.append(f"tensors mapping to an already-loaded parameter: {sorted(twice)}")
    if mismatched:
        problems.append("shape mismatches: " + "; ".join(mismatched))
    if unsupported:
        problems.append(f"unsupported GGML types (supported: {list(SUPPORTED_TYPES)}): {unsupported}")
    if problems:
        raise ModelLoadError(f"GGUF {str(gguf.paths[0])!r} does not match the model: " + " | ".join(problems))

    from tqdm.auto import tqdm

    with tqdm(total=len(plan), desc="loading GGUF weights", unit="tensor", disable=not sys.stderr.isatty(),
              leave=False) as bar:
        for gguf_name, target in plan.items():
            value = gguf.tensor(gguf_name, dtype=torch.float32, device=device)
            if transform is not None:
                value = transform(gguf_name, value)
            _set_param(model, target, value.to(params[target].dtype).contiguous())
            bar.update(1)
