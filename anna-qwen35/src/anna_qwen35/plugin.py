"""Entry module of anna-qwen35: registration only (no torch import here)."""

from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec


@hookimpl
def register_model_families(register):
    register(
        ModelFamilySpec(
            name="qwen35",
            loader="anna_qwen35.loader:load",
            # The MoE types are claimed so that their loader can say clearly that MoE is not
            # supported yet, instead of "install anna-qwen35" from the generic error.
            model_types=("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
            architectures=("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
                           "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"),
            distribution="anna-qwen35",
        )
    )
