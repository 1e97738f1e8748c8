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


def _lazy(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a lazy 'package.module:attr' "
                         f"string, got {value!r}")


def _lazy_or_empty(instance: Any, attribute: Any, value: Any) -> None:
    if value != "":
        _lazy(instance, attribute, value)


@attrs.frozen
class ModelFamilySpec:
    """A model family a plugin serves.

    Attributes:
        name: short family name shown in logs and ``/healthz`` (``"qwen35"``).
        model_types: ``config.json`` ``model_type`` values served (``("qwen3_5", ...)``).
        architectures: ``config.json`` ``architectures`` entries served.
        gguf_architectures: GGUF ``general.architecture`` values served.
        loader: lazy ``"module:attr"`` of a callable
            ``load(source: ModelSource, *, device, dtype, load_format, kernels, chat_template) -> LoadedModel``;
            it is passed ``weight_quant`` too when ``--weight-quant`` is not ``auto`` (a loader that keeps
            weights quantized takes it, default ``"auto"``).
        distribution: the installable distribution providing it (for error messages).
        reasoning_parser / tool_call_parser: names of the output parsers (``register_output_parsers``)
            used for this family unless ``--reasoning-parser`` / ``--tool-call-parser`` choose
            others ("" = none).
        tasks: the tasks (``register_tasks`` names) this family's models serve, the main one first
            (``anna serve`` serves it unless ``--task`` picks another). Default: ``("generate",)``.
        expert_offload: its loader takes ``offload=`` (an :class:`anna_core.layers.expert_offload.OffloadPlan`
            factory, see :func:`anna_core.loading.load_model`) and can keep routed experts in host memory
            (``--offload-mode``). A family that does not declare it is refused ``--offload-mode experts``.
        vision_offload: its loader takes ``offload_vision=True`` and then keeps a vision tower on the CPU (encoding
            there, the rows copied to the device; ``--offload-vision``). A family that does not declare it is
            refused ``--offload-vision``.
        tensor_parallel: its loader takes ``parallel=`` (an :class:`anna_core.distributed.ParallelState` of a group
            of several ranks) and then builds and loads only that rank's shard of the model (sharding declared
            with :mod:`anna_core.distributed`; ``--tensor-parallel-size``). A family that does not declare it is
            refused tensor parallelism.
        tensor_parallel_check: lazy ``"module:attr"`` of ``check(config: dict, size: int) -> None``, which raises
            :class:`~anna_core.errors.ModelLoadError` when ``size`` ranks do not divide what the family shards
            (heads, KV heads, widths) of the checkpoint's ``config.json``; ``load_engine`` calls it before it spawns
            any worker. "" = the refusal comes from the loader, after the workers started.
        load_options: keyword options its loader takes beyond the common ones, which
            :func:`anna_core.loading.load_model` passes from its ``family_options`` (e.g. Qwen3-ASR's
            ``("asr_max_inference_batch_size",)``); an option the family does not list is refused there.
        tiny_checkpoint: lazy ``"module:attr"`` of ``build(path: Path, **overrides) -> Path``, which writes a
            tiny random checkpoint of the family (config, weights, tokenizer with a chat template) that its
            loader loads, into the folder ``path``, and returns ``path``; ``overrides`` are the builder's own
            keyword arguments (``seed``, ``tie``, ...). Tests of other plugins build one with the
            ``tiny_checkpoint(family, **overrides)`` fixture of :mod:`anna_core.testing`. "" = none offered.

    Raises:
        ValueError: ``tasks`` is empty or names a task twice; ``tiny_checkpoint`` is not "" nor a lazy string.
    """

    name: str
    loader: str
    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    gguf_architectures: tuple[str, ...] = ()
    distribution: str = ""
    reasoning_parser: str = ""
    tool_call_parser: str = ""
    tasks: tuple[str, ...] = attrs.field(default=("generate",), converter=tuple)
    expert_offload: bool = False
    vision_offload: bool = False
    tensor_parallel: bool = False
    tensor_parallel_check: str = attrs.field(default="", validator=_lazy_or_empty)
    load_options: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    tiny_checkpoint: str = attrs.field(default="", validator=_lazy_or_empty)

    @tasks.validator
    def _check_tasks(self, _attribute: Any, value: tuple[str, ...]) -> None:
        if not value or len(set(value)) != len(value) or not all(isinstance(t, str) and t for t in value):
            raise ValueError(f"family {self.name!r}: tasks must be distinct non-empty names, got {value!r}")


OPTION_KINDS = ("str", "int", "float", "path", "flag")
"""Value kinds of a :class:`TaskOption`."""
OPTION_STAGES = ("build", "load")
"""Where a :class:`TaskOption`'s value goes: the task's ``build``, or the family's loader."""


@attrs.frozen
class TaskOption:
    """A setting of a task that ``anna serve`` (and the task's own commands) take as a flag.

    Attributes:
        name: a Python identifier (``"asr_aligner_dir"``); the flag is ``--`` + the name with ``-`` for ``_``
            (``--asr-aligner-dir``), and its value is passed under this name.
        help: one line for ``--help``.
        kind: ``"str"``, ``"int"`` (a positive integer), ``"float"``, ``"path"`` (an existing folder, a
            ``pathlib.Path``) or ``"flag"`` (a boolean switch).
        default: the value when the flag is not given (None: the task's own default).
        stage: ``"build"``: a keyword argument of the task's ``build``; ``"load"``: a load option of the model's
            family (``ModelFamilySpec.load_options``), passed through ``load_model(family_options=...)``.

    Raises:
        ValueError: ``name`` is not an identifier, or ``kind`` / ``stage`` is not one of :data:`OPTION_KINDS` /
            :data:`OPTION_STAGES`.
    """

    name: str
    help: str
    kind: str = "str"
    default: Any = None
    stage: str = "build"

    def __attrs_post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"TaskOption.name must be a Python identifier, got {self.name!r}")
        if self.kind not in OPTION_KINDS:
            raise ValueError(f"TaskOption.kind must be one of {', '.join(OPTION_KINDS)}, got {self.kind!r}")
        if self.stage not in OPTION_STAGES:
            raise ValueError(f"TaskOption.stage must be one of {', '.join(OPTION_STAGES)}, got {self.stage!r}")

    @property
    def flag(self) -> str:
        """The command-line flag (``--asr-aligner-dir``)."""
        return "--" + self.name.replace("_", "-")


@attrs.frozen
class TaskSpec:
    """What a task needs to run in a server or from the command line: its engine, how the server
    drives it, and its HTTP routes. One main model (and so one task) per process.

    Attributes:
        name: the task name families list in ``ModelFamilySpec.tasks`` (``"generate"``,
            ``"transcribe"``, ``"speech"``); unique across plugins.
        engine: lazy ``"module:attr"`` of ``build(loaded: LoadedModel, config: EngineConfig,
            runner: RunnerConfig | None, **options) -> engine``: the task's synchronous engine over the loaded
            model (run in a worker thread; with ``runner`` given it also warms up and captures
            graphs), given the values of the task's ``build``-stage ``options`` that were set, by name. The engine has a
            ``max_model_len: int`` attribute (its token limit per request; 0 when the task has none).
        serving: lazy ``"module:attr"`` of ``start(engine) -> client``, called on the server's event
            loop: wraps the built engine for concurrent requests and starts it. The client offers
            ``stats() -> dict``, ``metrics`` (an ``anna_core.metrics.EngineMetrics`` or None) and
            ``async shutdown(drain: bool)``; the task's routes use whatever else it offers.
        routes: lazy ``"module:attr"`` of a list of litestar route handlers served for this task
            (besides the health and ``/v1/models`` routes every server has). Handlers reach the
            client as ``server.engine`` by declaring a ``server: ServerState`` parameter.
        description: one line for people (``anna plugins``, error messages).
        distribution: the installable distribution providing it (for error messages).
        options: the task's settings (:class:`TaskOption`), flags of ``anna serve``; a flag of a task other than
            the served one is refused.

    Raises:
        ValueError: an empty name, or ``engine`` / ``serving`` / ``routes`` not lazy strings.
    """

    name: str = attrs.field(validator=attrs.validators.min_len(1))
    engine: str = attrs.field(validator=_lazy)
    serving: str = attrs.field(validator=_lazy)
    routes: str = attrs.field(validator=_lazy)
    description: str = ""
    distribution: str = ""
    options: tuple[TaskOption, ...] = attrs.field(default=(), converter=tuple)


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
    "qwen3": "anna-qwen35",
    "qwen35": "anna-qwen35",  # GGUF general.architecture values
    "qwen35moe": "anna-qwen35",
    "gemma4": "anna-gemma4",
    "gemma4_text": "anna-gemma4",
    "gemma3": "anna-gemma4",
    "gemma3_text": "anna-gemma4",
    "qwen3_asr": "anna-audio",
    "qwen3_tts": "anna-audio",
    "llama": "anna-llama (examples/anna-llama)",
}

# Tasks known to exist, so a family whose task is not installed can name what to install.
KNOWN_TASK_DISTRIBUTIONS: dict[str, str] = {
    "transcribe": "anna-audio",
    "speech": "anna-audio",
}
