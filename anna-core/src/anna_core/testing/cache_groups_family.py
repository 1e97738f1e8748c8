"""anna-core's own test family: :class:`~anna_core.testing.cache_groups_model.CacheGroupsLM` loaded from a
folder like any family's model, so engine, runner and graph tests need no family plugin installed.

The family (``anna_cache_groups_test``, ``config.json`` ``model_type``) is not an entry point: a test
registers :data:`PLUGIN` in a plugin manager of its own (:func:`plugin_manager`) and passes it to
:func:`anna_core.loading.load_model` (``pm=``)::

    from anna_core.loading import load_model
    from anna_core.testing.cache_groups_family import plugin_manager, write_config

    folder = write_config(tmp_path / "tiny", window=8, padded_prefill=True)
    loaded = load_model(folder, device="cpu", dtype="fp32", load_format="dummy", pm=plugin_manager())

``config.json`` keys: ``window`` (the sliding window of layer 1), ``vocab_size``, ``seed`` (the weights),
``max_position_embeddings`` and the capabilities ``padded_prefill``; ``eos_token_id`` becomes the
generation default. The weights are always :class:`CacheGroupsLM`'s seeded random ones (any load format),
float32 on the CPU: the references of :mod:`anna_core.kernels.reference` run it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec

MODEL_TYPE = "anna_cache_groups_test"
FAMILY = ModelFamilySpec(name="cache_groups_test", loader="anna_core.testing.cache_groups_family:load",
                         model_types=(MODEL_TYPE,), architectures=("AnnaCacheGroupsTestLM",),
                         distribution="anna-core (anna_core.testing)",
                         tiny_checkpoint="anna_core.testing.cache_groups_family:write_config")

DEFAULTS: dict[str, Any] = {"window": 8, "vocab_size": 64, "seed": 0, "max_position_embeddings": 4096,
                            "eos_token_id": 1, "padded_prefill": False}


class _Plugin:
    @hookimpl
    def register_model_families(self, register):
        register(FAMILY)


PLUGIN = _Plugin()
"""The plugin registering :data:`FAMILY` (``pm.register(PLUGIN, name="anna_core_test_family")``)."""


def plugin_manager(*, load_entry_points: bool = False) -> Any:
    """A fresh plugin manager holding anna-core's built-in plugin and :data:`PLUGIN`, plus every installed plugin
    with ``load_entry_points`` (so one manager loads the test family and the installed families alike)."""
    from anna_core import builtin_plugin
    from anna_core.plugins import BUILTIN_PLUGIN, make_plugin_manager

    pm = make_plugin_manager(load_entry_points=load_entry_points)
    if pm.get_plugin(BUILTIN_PLUGIN) is None:
        pm.register(builtin_plugin, name=BUILTIN_PLUGIN)
    pm.register(PLUGIN, name="anna_core_test_family")
    return pm


def write_config(folder: Path, **overrides: Any) -> Path:
    """Write the family's ``config.json`` (:data:`DEFAULTS` updated by ``overrides``) into ``folder``."""
    unknown = sorted(set(overrides) - set(DEFAULTS))
    if unknown:
        raise TypeError(f"unknown config keys {unknown}; known: {sorted(DEFAULTS)}")
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": MODEL_TYPE, "architectures": list(FAMILY.architectures), **DEFAULTS, **overrides}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def load(source: Any, *, device: Any, dtype: Any, load_format: str = "auto", kernels: Any = None,
         chat_template: str | None = None) -> Any:
    """The family's loader (:class:`~anna_core.model.LoadedModel` of a :class:`CacheGroupsLM`).

    Raises:
        ModelLoadError: a device other than the CPU or a dtype other than float32.
    """
    import torch

    from anna_core.errors import ModelLoadError
    from anna_core.model import GenerationDefaults, LoadedModel, ModelCapabilities
    from anna_core.testing.cache_groups_model import CacheGroupsLM

    device, dtype = torch.device(device), dtype if isinstance(dtype, torch.dtype) else torch.float32
    if device.type != "cpu" or dtype != torch.float32:
        raise ModelLoadError(f"the {FAMILY.name} test family runs float32 on the CPU, not {dtype} on {device}")
    cfg = {**DEFAULTS, **source.config}
    model = CacheGroupsLM(window=int(cfg["window"]), vocab_size=int(cfg["vocab_size"]), seed=int(cfg["seed"]))
    if cfg["padded_prefill"]:
        model.capabilities = ModelCapabilities(padded_prefill=True)
    eos = cfg["eos_token_id"]
    return LoadedModel(model=model.eval(), tokenizer=None,
                       generation=GenerationDefaults(eos_token_ids=[eos] if isinstance(eos, int) else list(eos)),
                       max_model_len=int(cfg["max_position_embeddings"]), family=FAMILY.name, dtype=dtype,
                       device=device)
