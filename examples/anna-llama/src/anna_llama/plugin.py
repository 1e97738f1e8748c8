"""Entry module of anna-llama: hook implementations and lazy ``"module:attr"`` strings only.

Importing this module must stay cheap (no torch, no weights): Anna loads every plugin's entry
module at start-up, and only imports ``anna_llama.loader`` when a Llama model is actually served.
"""

from anna_core.hookspecs import hookimpl
from anna_core.registry import DefaultModelSpec, ModelFamilySpec

DISTRIBUTION = "anna-llama"


@hookimpl
def register_model_families(register):
    register(
        ModelFamilySpec(
            name="llama",
            loader="anna_llama.loader:load",
            model_types=("llama",),
            architectures=("LlamaForCausalLM",),
            gguf_architectures=("llama",),
            distribution=DISTRIBUTION,
            tensor_parallel=True,  # anna_llama.tensor_parallel
            tensor_parallel_check="anna_llama.tensor_parallel:check_group_size",  # before the workers spawn
            tiny_checkpoint="anna_llama.tiny:build_tiny_checkpoint",  # for tests: a tiny random Llama
            load_options=("layout_cache",),  # a pre-quantized checkpoint's repacked weights cached (default on)
        )
    )


@hookimpl
def register_default_models(register):
    register(
        DefaultModelSpec(
            name="SmolLM2-135M-Instruct",
            locate="anna_llama.default_model:locate",
            priority=100,
            distribution=DISTRIBUTION,
        )
    )
