"""Lazy, tensor-by-tensor loading of (sharded) safetensors checkpoints into a meta-built model.

A family builds its model on the meta device (no memory, fast at any size), then either
:func:`load_safetensors` assigns each checkpoint tensor -- read one at a time, converted to the
parameter's dtype and moved to the device -- or :func:`materialize_dummy` fills random weights
(``--load-format dummy``). This is the gpt-fast "meta init + assign" pattern. A family supplies a
name map: checkpoint tensor name -> parameter name, or ``None`` to ignore the tensor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from anna_core.distributed.sharding import ShardReader
from anna_core.errors import ModelLoadError
from anna_core.weights.assign import NameMap, check_plan, plan_load, progress, set_param

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def checkpoint_files(root: str | Path) -> dict[str, Path]:
    """``{tensor name: file}`` of the checkpoint in ``root``.

    Uses ``model.safetensors.index.json`` when present, else ``model.safetensors``, else every
    ``*.safetensors`` file in the folder (reading their headers only).

    Raises:
        ModelLoadError: no safetensors files, an unreadable index, a shard the index names that
            does not exist, or a tensor name present in two files.
    """
    root = Path(root)
    index = root / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"{str(index)!r} is not a valid safetensors index: {exc}") from exc
        files = {name: root / shard for name, shard in weight_map.items()}
        missing = sorted({str(f.name) for f in files.values() if not f.is_file()})
        if missing:
            raise ModelLoadError(f"{str(root)!r}: shard files named in {INDEX_FILE} are missing: {missing}")
        return files
    paths = [root / SINGLE_FILE] if (root / SINGLE_FILE).is_file() else sorted(root.glob("*.safetensors"))
    if not paths:
        raise ModelLoadError(f"{str(root)!r} holds no *.safetensors weights (use --load-format dummy for random ones)")
    from safetensors import safe_open

    files: dict[str, Path] = {}
    for path in paths:
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                names = list(f.keys())
        except Exception as exc:  # safetensors raises its own error types
            raise ModelLoadError(f"cannot read safetensors file {str(path)!r}: {exc}") from exc
        for name in names:
            if name in files:
                raise ModelLoadError(f"tensor {name!r} appears in both {files[name].name} and {path.name}")
            files[name] = path
    return files


def iter_checkpoint_tensors(files: dict[str, Path], names: list[str],
                            read: Callable[[str, object], torch.Tensor] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, cpu tensor)`` for ``names``, opening each shard once, in shard order; with ``read``,
    the tensor is ``read(name, handle)`` of the lazy ``get_slice`` handle (a tensor-parallel rank's slice)."""
    from safetensors import safe_open

    by_file: dict[Path, list[str]] = {}
    for name in names:
        by_file.setdefault(files[name], []).append(name)
    for path, shard_names in by_file.items():
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in shard_names:
                    yield name, f.get_tensor(name) if read is None else read(name, f.get_slice(name))
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"cannot read tensors from {str(path)!r}: {exc}") from exc


def _host_copy(value: torch.Tensor, device: torch.device, pin: bool) -> torch.Tensor:
    """``value`` in host memory (page-locked when ``pin`` and the device has pinned memory)."""
    from anna_core.device import accelerator

    host = accelerator(device).host_empty(tuple(value.shape), value.dtype) if pin else torch.empty_like(
        value, device="cpu")
    host.copy_(value)
    return host


def load_safetensors(model: nn.Module, root: str | Path, name_map: NameMap, *, device: torch.device,
                     host: Sequence[str] = (), pin: bool = True, shards: ShardReader | None = None) -> None:
    """Assign every parameter of ``model`` from the checkpoint in ``root``.

    Each tensor is read lazily, converted to the dtype the (meta) parameter already has and moved
    to ``device``; the parameter is replaced (``assign`` semantics), so ``model`` may be built on
    the meta device. Parameters shared by two modules (tied weights) must not be in the map.

    Args:
        model: the model; its parameter names are the targets of ``name_map``.
        root: folder with ``model.safetensors.index.json`` + shards or ``model.safetensors``.
        name_map: checkpoint name -> parameter name, or None to ignore the tensor.
        device: where the weights go.
        host: parameter-name prefixes whose tensors stay in host memory instead (offloaded experts,
            :mod:`anna_core.layers.expert_offload`), page-locked when ``pin`` (on CUDA); they never touch the
            device.
        shards: a tensor-parallel rank's :class:`~anna_core.distributed.sharding.ShardReader`: each tensor is read
            as the rank's slice (the parameters hold the rank's shapes); None reads whole tensors.

    Raises:
        ModelLoadError: unreadable files; checkpoint tensors mapping to no parameter
            (unexpected), parameters without a tensor (missing), tensors mapped twice, or shape
            mismatches -- the message names every offending tensor.
    """
    files = checkpoint_files(root)
    params = dict(model.named_parameters(remove_duplicate=False))
    plan = plan_load(files, name_map, params)
    check_plan(plan, source=f"checkpoint {str(root)!r}", where="the checkpoint",
               mismatched=_shape_mismatches(files, plan.targets, params, shards))
    read = None if shards is None else (lambda name, handle: shards.read(plan.targets[name], handle))
    with progress(len(plan.targets), "loading weights") as bar:
        for ckpt_name, tensor in iter_checkpoint_tensors(files, list(plan.targets), read):
            target = plan.targets[ckpt_name]
            if host and target.startswith(tuple(host)):
                value = _host_copy(tensor.to(dtype=params[target].dtype), torch.device(device), pin)
            else:
                value = tensor.to(device=device, dtype=params[target].dtype)
            set_param(model, target, value)
            bar.update(1)


def _shape_mismatches(files: dict[str, Path], plan: dict[str, str], params: dict[str, nn.Parameter],
                      shards: ShardReader | None = None) -> list[str]:
    from safetensors import safe_open

    out: list[str] = []
    by_file: dict[Path, list[str]] = {}
    for name in plan:
        by_file.setdefault(files[name], []).append(name)
    for path, names in by_file.items():
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in names:
                shape = tuple(f.get_slice(name).get_shape())
                if shards is not None:
                    shape = shards.local_shape(plan[name], shape)
                want = tuple(params[plan[name]].shape)
                if shape != want:
                    out.append(f"{name}: checkpoint {list(shape)} vs model {list(want)} ({plan[name]})")
    return out


def cast_meta_params(model: nn.Module, dtype: torch.dtype, keep_float32: Callable[[str], bool] = lambda n: False) -> None:
    """Give every floating-point parameter ``dtype`` (those where ``keep_float32(name)`` stay float32).

    Meant for meta-built models (no data moves); also works on real tensors.
    """
    for name, param in list(model.named_parameters()):
        if not param.is_floating_point():
            continue
        want = torch.float32 if keep_float32(name) else dtype
        if param.dtype != want:
            set_param(model, name, param.detach().to(want))


def materialize_dummy(
    model: nn.Module,
    *,
    device: torch.device,
    seed: int = 0,
    init: Callable[[str, torch.Tensor, torch.Generator | None], bool] | None = None,
    std: float = 0.02,
    host: Sequence[str] = (),
    pin: bool = True,
    shards: ShardReader | None = None,
    full_shapes: Mapping[str, Sequence[int]] | None = None,
) -> None:
    """Replace every parameter of a (meta-built) model with random values on ``device``.

    Matrices and embeddings get ``normal(0, std)``; ``RMSNorm`` weights get their identity value
    (zeros when zero-centred, else ones); other vectors get zeros. ``init(name, tensor, generator)``
    may fill a tensor itself (e.g. ``A_log``) and return True to skip the default; it must draw
    from ``generator`` (seeded with ``seed``; ``None`` on the meta device), never from the global
    RNG, so that every load of the same model gets the same weights. Parameters keep their dtype.

    Parameters under the name prefixes ``host`` (offloaded experts) are drawn on ``device`` like the others, one
    tensor at a time, then copied to host memory (page-locked when ``pin``, on CUDA): the values equal those of a
    load that keeps them on the device, and the device holds at most one of them at a time.

    A tensor-parallel rank (``shards``, with ``full_shapes``: each parameter's shape in the whole model, from a
    meta-built whole model) draws every parameter at its full shape, in the same order, and keeps its slice: the
    ranks' shards together are exactly the one-device model's random weights.
    """
    from anna_core.layers.norm import RMSNorm

    device = torch.device(device)
    norm_ones = {f"{m_name}.weight" if m_name else "weight" for m_name, m in model.named_modules()
                 if isinstance(m, RMSNorm) and not m.zero_centered}
    gen = torch.Generator(device=device).manual_seed(seed) if device.type != "meta" else None
    params = list(model.named_parameters())
    with torch.no_grad(), progress(len(params), "initialising dummy weights") as bar:
        for name, param in params:
            shape = param.shape if shards is None else tuple(full_shapes[name])
            value = torch.empty(shape, dtype=param.dtype, device=device)
            if init is None or not init(name, value, gen):
                if value.dim() >= 2:
                    value.normal_(0.0, std, generator=gen)
                elif name in norm_ones:
                    value.fill_(1.0)
                else:
                    value.zero_()
            if shards is not None:
                value = shards.read(name, value).contiguous()
            if host and name.startswith(tuple(host)):
                value = _host_copy(value, device, pin)
            set_param(model, name, value)
            bar.update(1)
