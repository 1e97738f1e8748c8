"""Options shared by ``anna generate`` and ``anna serve``, and the one place errors become exit codes."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

DEVICES = ("auto", "cpu", "cuda", "xpu")
DTYPES = ("auto", "bf16", "fp16", "fp32")
LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
WEIGHT_QUANTS = ("auto", "none", "int4", "int8", "fp8")  # anna_core.loading.WEIGHT_QUANT_MODES (kept import-free)
WEIGHT_QUANT_HELP = ("auto: a GGUF's quantized matrices stay quantized on the CPU (dequantized on a GPU); on a GPU a "
                     "Qwen3.5 checkpoint whose bf16 weights would not fit the device memory becomes int4 (logged); "
                     "none: dequantize; int4 (groups of 128) / int8 (per channel) / fp8 (e4m3, 128x128 block "
                     "scales; GPUs with FP8 units): quantize a safetensors checkpoint's projections at load "
                     "(int4 / int8 on the CPU: anna-llama; on a GPU: Qwen3.5, LM head kept bf16).")


LM_HEAD_QUANTS = ("none", "int4", "int8", "fp8")
LM_HEAD_QUANT_HELP = ("Quantize the LM head too (the lm_head_quant load option of families that declare it: Qwen3.5); "
                      "none: dense.")


def lm_head_quant_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--lm-head-quant`` (``anna serve``, ``anna generate``, ``anna bench``): passed as ``lm_head_family_options``."""
    return click.option("--lm-head-quant", type=click.Choice(LM_HEAD_QUANTS), default="none", show_default=True,
                        help=LM_HEAD_QUANT_HELP)(fn)


def lm_head_family_options(lm_head_quant: str) -> dict[str, str]:
    """The ``family_options`` entry of ``--lm-head-quant`` (empty for ``none``)."""
    return {} if lm_head_quant == "none" else {"lm_head_quant": lm_head_quant}


def fused_topk_head_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--fused-topk-head/--no-fused-topk-head`` (``anna serve``, ``anna generate``, ``anna bench``): the runner's
    ``fused_topk_head``, ``"auto"`` or ``"off"`` (:func:`fused_topk_head_mode`)."""
    return click.option("--fused-topk-head/--no-fused-topk-head", default=False, show_default=True,
                        help="Opt-in (slower than the full head on an H100 so far: BENCHMARKS.md): steps whose every "
                             "request needs at most the top 64 logits (greedy, top_k <= 64, logprobs) compute only "
                             "those in the LM head (the lm_head_topk op) on accelerators; --no-fused-topk-head (the "
                             "default) always computes the full logits.")(fn)


def fused_topk_head_mode(enabled: bool) -> str:
    """``RunnerConfig.fused_topk_head`` of ``--fused-topk-head`` (``"auto"``) / ``--no-fused-topk-head`` (``"off"``)."""
    return "auto" if enabled else "off"


EXPERT_QUANTS = ("none", "int4", "int8", "fp8")  # anna_core.layers.wq_experts.EXPERT_QUANT_MODES (kept import-free)
EXPERT_QUANT_HELP = ("Quantize a MoE model's routed experts at load (Qwen3.5 MoE, Gemma 4 26B-A4B): int4 (groups of "
                     "128) / int8 (per channel) / fp8 (e4m3, 128x128 blocks; GPUs with FP8 units), as --weight-quant "
                     "lays them out; none: dense.")


def expert_quant_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--expert-quant`` (``anna serve``, ``anna generate``, ``anna bench``): ``load_model(expert_quant=...)``."""
    return click.option("--expert-quant", type=click.Choice(EXPERT_QUANTS), default="none", show_default=True,
                        help=EXPERT_QUANT_HELP)(fn)


def model_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--model-dir``, ``--gguf-file``, ``--device``, ``--dtype``, ``--load-format``, ``--weight-quant``."""
    decorators = [
        click.option("--model-dir", type=click.Path(path_type=Path), default=None,
                     help="Model folder (config.json + safetensors, or GGUF) or a .gguf file. "
                          "Default: the installed default model."),
        click.option("--gguf-file", default=None, help="Which GGUF file of the folder to load."),
        click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True),
        click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True,
                     help="auto: the checkpoint's dtype on accelerators, fp32 on CPU."),
        click.option("--load-format", type=click.Choice(LOAD_FORMATS), default="auto", show_default=True,
                     help="dummy: random weights from a folder holding only config.json."),
        click.option("--weight-quant", type=click.Choice(WEIGHT_QUANTS), default="auto", show_default=True,
                     help=WEIGHT_QUANT_HELP),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


def sampling_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The sampling flags (unset ones fall back to the checkpoint's generation_config.json)."""
    decorators = [
        click.option("--temperature", type=float, default=None, help="0 = greedy."),
        click.option("--top-p", type=float, default=None),
        click.option("--top-k", type=int, default=None, help="-1 = disabled."),
        click.option("--min-p", type=float, default=None),
        click.option("--presence-penalty", type=float, default=None),
        click.option("--frequency-penalty", type=float, default=None),
        click.option("--repetition-penalty", type=float, default=None),
    ]
    for decorator in reversed(decorators):
        fn = decorator(fn)
    return fn


SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                  "repetition_penalty")


def resolve_model_path(model_dir: Path | None) -> tuple[Path, str | None]:
    """``model_dir`` itself, else the installed default model's path and display name.

    Raises:
        ModelNotInstalledError: no ``--model-dir`` and no default model installed.
    """
    if model_dir is not None:
        return model_dir, None
    from anna_core.default_model import resolve_default_model

    path, spec = resolve_default_model()
    return path, spec.name


def exit_on_anna_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn Anna's user-facing errors into one ``error: ...`` line on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from anna_core.errors import AnnaError

        try:
            return fn(*args, **kwargs)
        except AnnaError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper
