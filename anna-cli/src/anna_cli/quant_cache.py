"""``anna quant-cache inspect|build|clear --model-dir DIR``: the layout cache of a pre-quantized checkpoint
(:mod:`anna_core.weights.layout_cache`; entries under ``$ANNA_CACHE_DIR/quant-layouts/``).

``inspect`` prints JSON: the checkpoint's quantization, the cache folder, whether the entry for ``--device`` /
``--dtype`` is there, and every entry built from the checkpoint's files. ``build`` repacks the checkpoint into
that entry (a no-op when it is there and valid), so the first ``anna serve`` need not; the repacking runs on the
CPU, so an entry for ``--device cuda`` can be built on a machine without one. ``clear`` removes the checkpoint's
entries (``--all``: every entry).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

DEVICES = ("auto", "cpu", "cuda", "xpu")
DTYPES = ("auto", "bf16", "fp16", "fp32")


def _device_kind(device: str) -> str:
    if device != "auto":
        return device
    from anna_core.device import resolve_device

    return resolve_device("auto").type


def _checkpoint(model_dir: Path) -> tuple[Any, Any]:
    """``(source, PrequantConfig)`` of ``model_dir``.

    Raises:
        click.ClickException: not a safetensors checkpoint, no or an unsupported ``quantization_config``.
    """
    from anna_core.errors import AnnaError
    from anna_core.model_dir import inspect_model_dir
    from anna_core.weights.prequant import read_quantization_config

    try:
        source = inspect_model_dir(model_dir)
        if source.format != "safetensors":
            raise click.ClickException(f"{model_dir} holds {source.format} weights; the layout cache is for "
                                       "pre-quantized safetensors checkpoints")
        cfg = read_quantization_config(source.config)
    except AnnaError as exc:
        raise click.ClickException(str(exc)) from exc
    if cfg is None:
        raise click.ClickException(f"{model_dir} has no quantization_config in config.json: nothing to cache")
    return source, cfg


def _serving_dtype(source: Any, device_kind: str, dtype: str) -> Any:
    import torch
    from anna_core.device import resolve_dtype

    config = source.config
    ckpt = next((c[k] for c in (config, config.get("text_config") or {}) for k in ("dtype", "torch_dtype")
                 if isinstance(c.get(k), str)), None)
    return resolve_dtype(dtype, torch.device(device_kind), ckpt)


_model_dir = click.option("--model-dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
                          help="The pre-quantized checkpoint folder.")
_device = click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
                       help="The device kind the entry is for (keys the entry; the repacking runs on the CPU).")
_dtype = click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True,
                      help="The serving dtype the entry is for (int4 scales and zeros are stored in it).")


@click.group("quant-cache")
def quant_cache() -> None:
    """The layout cache of pre-quantized checkpoints (GPTQ, AWQ, FP8, AutoRound) under $ANNA_CACHE_DIR."""


@quant_cache.command("inspect")
@_model_dir
@_device
@_dtype
def inspect_cmd(model_dir: Path, device: str, dtype: str) -> None:
    """Print the checkpoint's quantization and its cache entries as JSON."""
    from anna_core.errors import AnnaError
    from anna_core.weights.layout_cache import LayoutCache, key_material
    from anna_core.weights.safetensors_loader import checkpoint_files

    source, cfg = _checkpoint(model_dir)
    cache = LayoutCache()
    kind = _device_kind(device)
    serving = _serving_dtype(source, kind, dtype)
    try:
        files = sorted({str(p.resolve()) for p in checkpoint_files(source.root).values()})
        entry = cache.entry_dir(key_material([Path(f) for f in files], cfg, kind, serving))
    except (AnnaError, OSError, ValueError) as exc:  # a truncated or unreadable checkpoint file
        raise click.ClickException(str(exc)) from exc
    entries = [e for e in cache.entries() if set(e["sources"]) & set(files)]
    click.echo(json.dumps({"model_dir": str(source.root), "quantization": {**cfg.to_json(), "kind": cfg.kind},
                           "cache_root": str(cache.root), "device": kind,
                           "dtype": str(serving).replace("torch.", ""), "entry": str(entry),
                           "cached": any(e["path"] == str(entry) for e in entries), "entries": entries}, indent=2))


@quant_cache.command("build")
@_model_dir
@_device
@_dtype
def build_cmd(model_dir: Path, device: str, dtype: str) -> None:
    """Repack the checkpoint into its cache entry for --device / --dtype (kept when already valid)."""
    from anna_core.errors import AnnaError
    from anna_core.weights.layout_cache import LayoutCache
    from anna_core.weights.prequant_loader import build_cache_entry

    source, cfg = _checkpoint(model_dir)
    kind = _device_kind(device)
    try:
        entry, state, layers = build_cache_entry(source.root, cfg, device_kind=kind,
                                                 dtype=_serving_dtype(source, kind, dtype), cache=LayoutCache())
    except AnnaError as exc:
        raise click.ClickException(str(exc)) from exc
    if state == "unwritable":
        raise click.ClickException(f"cannot write the layout cache entry {entry} (see the warning above)")
    click.echo(json.dumps({"entry": str(entry), "state": state, "layers": layers, "kind": cfg.kind}))


@quant_cache.command("clear")
@_model_dir
@click.option("--all", "everything", is_flag=True, help="Remove every entry, not only this checkpoint's.")
def clear_cmd(model_dir: Path, everything: bool) -> None:
    """Remove the checkpoint's cache entries."""
    from anna_core.errors import AnnaError
    from anna_core.weights.layout_cache import LayoutCache
    from anna_core.weights.safetensors_loader import checkpoint_files

    cache = LayoutCache()
    if everything:
        removed = cache.clear()
    else:
        source, _ = _checkpoint(model_dir)
        try:
            files = checkpoint_files(source.root).values()
        except AnnaError as exc:  # a truncated checkpoint: its entries are those of its safetensors files
            click.echo(f"warning: {exc}; clearing the entries of its *.safetensors files", err=True)
            files = sorted(source.root.glob("*.safetensors"))
        removed = cache.clear(files)
    click.echo(json.dumps({"removed": removed, "cache_root": str(cache.root)}))
