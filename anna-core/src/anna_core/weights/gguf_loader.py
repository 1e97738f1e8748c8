"""Assigning a GGUF model's tensors to a meta-built model (the GGUF twin of ``load_safetensors``).

Two ways, both verifying every tensor and parameter before anything is read:

* :func:`load_gguf`: one GGUF tensor per parameter. A family supplies a name map (GGUF tensor name ->
  parameter name, or ``None`` to ignore) and, optionally, a transform that fixes a tensor's layout after
  dequantization (e.g. undoing llama.cpp's rotary row permutation of ``attn_q`` / ``attn_k``).
* :func:`load_gguf_derived`: each parameter built by a function of one or more GGUF tensors
  (:class:`GGUFDerived`), for layouts llama.cpp changes beyond a rename: experts stacked apart and
  joined, a squeezed or reordered tensor, a value stored transformed (``-exp(A_log)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import torch
from torch import nn

from anna_core.errors import ModelLoadError
from anna_core.weights.assign import LoadPlan, NameMap, check_plan, plan_load, progress, set_param
from anna_core.weights.gguf_reader import GGUFModelFile

Transform = Callable[[str, torch.Tensor], torch.Tensor]


def _only(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


@attrs.frozen
class GGUFDerived:
    """How one parameter is built from GGUF tensors.

    Attributes:
        target: the parameter's name.
        sources: the GGUF tensors it is built from (one tensor may feed several parameters).
        shapes: per source, the shape it must be stored with, in torch order; shapes equal up to leading
            ones match (llama.cpp pads a tensor's dimensions with ``ne = 1``: ``[H]`` and ``[1, H]`` are
            one shape to it).
        build: ``build(*tensors)`` -> the parameter's value, from the sources dequantized to float32 (in
            ``sources`` order); the default returns the one source as it is.
    """

    target: str
    sources: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    build: Callable[..., torch.Tensor] = _only


def _ggml_shape(shape: Sequence[int]) -> tuple[int, ...]:
    dims = list(shape)
    while len(dims) > 1 and dims[0] == 1:
        dims.pop(0)
    return tuple(dims)


def load_gguf(
    model: nn.Module,
    gguf: GGUFModelFile,
    name_map: NameMap,
    *,
    device: torch.device,
    transform: Transform | None = None,
    keep_packed: Callable[[str], bool] | None = None,
) -> int:
    """Assign every parameter of ``model`` from ``gguf``, dequantized to the parameter's dtype.

    Each tensor is dequantized on ``device`` (float32 math), passed through
    ``transform(gguf_name, tensor)`` and replaces the parameter (``assign`` semantics), so
    ``model`` may be built on the meta device. Tied parameters must not be in the map.

    With ``keep_packed``, a quantized matrix (a type of
    :data:`~anna_core.weights.gguf_blocks.AFFINE_TYPES`) whose parameter name it accepts stays quantized:
    the ``nn.Linear`` owning it becomes a :class:`~anna_core.layers.quant_linear.QuantizedLinear`, an
    ``nn.Embedding`` a :class:`~anna_core.layers.quant_linear.QuantizedEmbedding` (also the tied LM head, in
    float32); ``transform`` is then applied to the rows of the
    codes and scales, so it must only reorder or select rows (llama.cpp's q/k permutation does). Other
    tensors load as without it. Returns how many tensors stayed quantized.

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

    kept = 0
    with progress(len(plan.targets), "loading GGUF weights") as bar:
        for gguf_name, target in plan.targets.items():
            if keep_packed is not None and keep_packed(target) and _keep(model, gguf, gguf_name, target, transform,
                                                                         params[target].dtype):
                kept += 1
                bar.update(1)
                continue
            value = gguf.tensor(gguf_name, dtype=torch.float32, device=device)
            if transform is not None:
                value = transform(gguf_name, value)
            set_param(model, target, value.to(params[target].dtype).contiguous())
            bar.update(1)
    return kept


def _keep(model: nn.Module, gguf: GGUFModelFile, gguf_name: str, target: str, transform: Transform | None,
          dtype: torch.dtype) -> bool:
    """Swap the module owning ``target`` for its quantized twin holding ``gguf_name``; False where the
    tensor's type or the module's kind has none (the caller dequantizes it)."""
    from anna_core.layers.quant_linear import QuantizedEmbedding, QuantizedLinear
    from anna_core.weights.dequant import _to_uint8
    from anna_core.weights.gguf_blocks import AFFINE_TYPES, affine_blocks

    info = gguf.tensors[gguf_name]
    path, _, attr = target.rpartition(".")
    module = model.get_submodule(path) if path else model
    kind = type(module)
    if attr != "weight" or info.type_name not in AFFINE_TYPES or len(info.shape) != 2 or kind not in (
            nn.Linear, nn.Embedding):
        return False

    def rows(t: torch.Tensor) -> torch.Tensor:
        return t if transform is None else transform(gguf_name, t)

    blocks = affine_blocks(info.raw, info.ggml_type, info.shape).rows(rows)
    if kind is nn.Linear:
        new: nn.Module = QuantizedLinear(blocks, module.bias)
    else:
        raw = rows(_to_uint8(info.raw, "cpu").reshape(info.shape[0], -1))
        new = QuantizedEmbedding(raw, info.ggml_type, info.shape[1], dtype, tied_head=True)
    parent_path, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent_path) if parent_path else model, name, new)
    return True


def load_gguf_derived(
    model: nn.Module,
    gguf: GGUFModelFile,
    derived: Sequence[GGUFDerived],
    *,
    device: torch.device,
    ignore: Callable[[str], bool] | None = None,
) -> None:
    """Assign every parameter of ``model`` from ``gguf`` through ``derived`` (one entry per parameter).

    Each entry's sources are dequantized on ``device`` (float32), passed to its ``build`` and the result,
    cast to the parameter's dtype, replaces the parameter (``assign`` semantics: ``model`` may be built on
    the meta device). Tied parameters must not be listed.

    Args:
        ignore: GGUF tensor names the model does not use (e.g. a multi-token-prediction block); every
            other tensor must feed some parameter.

    Raises:
        ModelLoadError: before anything is read, for GGUF tensors an entry needs but the file lacks
            (missing), tensors no entry uses and ``ignore`` does not skip (unexpected), parameters without an
            entry or listed twice, stored shapes other than the entries', unsupported GGML types; the message
            names every offending tensor. After a build, for a value whose shape is not the parameter's.
    """
    from anna_core.weights.dequant import SUPPORTED_TYPES

    params = dict(model.named_parameters(remove_duplicate=False))
    targets: dict[str, GGUFDerived] = {}
    missing, mismatched, twice, unknown = [], [], [], []
    for entry in derived:
        if entry.target not in params:
            unknown.append(entry.target)
        elif entry.target in targets:
            twice.append(entry.target)
        else:
            targets[entry.target] = entry
        for source, shape in zip(entry.sources, entry.shapes, strict=True):
            info = gguf.tensors.get(source)
            if info is None:
                missing.append(f"{source} (for {entry.target})")
            elif _ggml_shape(info.shape) != _ggml_shape(shape):
                mismatched.append(f"{source}: file {list(info.shape)} vs model {list(shape)} ({entry.target})")
    used = {s for entry in derived for s in entry.sources}
    unexpected = [n for n in gguf.tensors if n not in used and not (ignore is not None and ignore(n))]
    unsupported = sorted(f"{n} ({gguf.tensors[n].type_name})" for n in used & set(gguf.tensors)
                         if gguf.tensors[n].type_name not in SUPPORTED_TYPES)
    more = []
    if unmapped := sorted(set(params) - set(targets)):
        more.append(f"model parameters no GGUF tensor is mapped to: {unmapped}")
    if unknown:
        more.append(f"mapped to names that are not model parameters: {sorted(unknown)}")
    if unsupported:
        more.append(f"unsupported GGML types (supported: {list(SUPPORTED_TYPES)}): {unsupported}")
    plan = LoadPlan(targets={}, missing=sorted(missing), unexpected=unexpected, twice=twice)
    check_plan(plan, source=f"GGUF {str(gguf.paths[0])!r}", where="the file", mismatched=mismatched, more=more)

    with progress(len(targets), "loading GGUF weights") as bar:
        for name, entry in targets.items():
            value = entry.build(*(gguf.tensor(s, dtype=torch.float32, device=device) for s in entry.sources))
            if tuple(value.shape) != tuple(params[name].shape):
                raise ModelLoadError(f"GGUF {str(gguf.paths[0])!r}: {name} built from {list(entry.sources)} has "
                                     f"shape {list(value.shape)}, the model needs {list(params[name].shape)}")
            set_param(model, name, value.to(params[name].dtype).contiguous())
            bar.update(1)
