"""Entry module of anna-qwen35: registration only (no torch import here)."""

from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec


@hookimpl
def register_model_families(register):
    register(
        ModelFamilySpec(
            name="qwen35",
            loader="anna_qwen35.loader:load",
            model_types=("qwen3_5", "qwen3_5_text"),
            architectures=("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"),
            distribution="anna-qwen35",
        )
    )
