"""Plain records that plugins hand to the registration hooks, and the collected registry.

Nothing here imports torch: registering a plugin must stay cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import attrs


def resolve(target: str | Callable[..., Any]) -> Any:
    """Resolve a lazy ``"package.module:attr"`` string (or pass a callable through).

    Raises:
        ValueError: the string has no ``:``.
        ImportError / AttributeError: the module or attribute does not exist.
    """
    if not isinstance(target, str):
        return target
    module_name, sep, attr = target.partition(":")
    if not sep:
        raise ValueError(f"lazy target {target!r} must look like 'package.module:attr'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@attrs.frozen
class ModelFamilySpec:
    """A model family a plugin serves.

    Attributes:
        name: short family name shown in logs and ``/healthz`` (``"qwen35"``).
        model_types: ``config.json`` ``model_type`` values served (``("qwen3_5", ...)``).
        architectures: ``config.json`` ``architectures`` entries served.
        gguf_architectures: GGUF ``general.architecture`` values served.
        loader: lazy ``"module:attr"`` of a callable
            ``load(source: ModelSource, *, device, dtype, load_format) -> LoadedModel``.
        distribution: the installable distribution providing it (for error messages).
        reasoning_parser / tool_call_parser: names of the output parsers (``register_output_parsers``)
            used for this family unless ``--reasoning-parser`` / ``--tool-call-parser`` choose
            others ("" = none).
    """

    name: str
    loader: str
    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    gguf_architectures: tuple[str, ...] = ()
    distribution: str = ""
    reasoning_parser: str = ""
    tool_call_parser: str = ""


@attrs.frozen
class OutputParserSpec:
    """A reasoning or tool-call parser. ``kind`` is ``"reasoning"`` or ``"tool_call"``."""

    name: str
    kind: str
    factory: str


@attrs.frozen
class RouteSpec:
    """Extra HTTP routes: ``handlers`` resolves to a litestar handler or a list of them."""

    name: str
    handlers: str


@attrs.frozen
class DefaultModelSpec:
    """A model served when no ``--model-dir`` is given.

    Attributes:
        name: display name (``"SmolLM2-135M-Instruct Q4_1"``).
        locate: lazy ``"module:attr"`` of a callable returning the model path, or raising
            ``anna_core.errors.ModelNotInstalledError`` with install instructions.
        priority: the highest installed priority wins.
        distribution: the distribution offering it.
    """

    name: str
    locate: str
    priority: int = 0
    distribution: str = ""


# Families known to exist, so an unsupported model_type can name what to install.
KNOWN_FAMILY_DISTRIBUTIONS: dict[str, str] = {
    "qwen3_5": "anna-qwen35",
    "qwen3_5_text": "anna-qwen35",
    "qwen3_5_moe": "anna-qwen35",
    "qwen3_5_moe_text": "anna-qwen35",
    "gemma4": "anna-gemma4",
    "gemma4_text": "anna-gemma4",
    "qwen3_asr": "anna-audio",
    "qwen3_tts": "anna-audio",
    "llama": "anna-llama (examples/anna-llama)",
}
