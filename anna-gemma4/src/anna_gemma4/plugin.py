"""Entry module of anna-gemma4: registration only (cheap to import: factories are lazy strings)."""

from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec, OutputParserSpec


@hookimpl
def register_model_families(register):
    # One family for both layouts: the conditional-generation checkpoints (text served, the vision and
    # audio towers' weights skipped) and the text-only causal LM.
    register(
        ModelFamilySpec(
            name="gemma4",
            loader="anna_gemma4.loader:load",
            model_types=("gemma4", "gemma4_text"),
            architectures=("Gemma4ForConditionalGeneration", "Gemma4ForCausalLM"),
            distribution="anna-gemma4",
            reasoning_parser="gemma4",
            tool_call_parser="gemma4",
            expert_offload=True,  # its MoE layers' routed experts may live in host memory (--offload-mode)
            tensor_parallel=True,  # --tensor-parallel-size: anna_gemma4.tensor_parallel
            tensor_parallel_check="anna_gemma4.tensor_parallel:check_group_size",  # before the workers spawn
            tiny_checkpoint="anna_gemma4.tiny:build_tiny_gemma4",  # for tests: variant e2b / moe / dense
            load_options=("expert_quant",),  # the MoE block's routed experts quantized at load (int4 / int8 / fp8)
        )
    )
    # Gemma 3: the causal LM (270M, 1B), the conditional-generation checkpoints' language model (4B,
    # 12B, 27B; the vision tower's weights skipped) and llama.cpp's `gemma3` GGUF files. No output parsers:
    # Gemma 3 has no thinking channel or tool-call syntax of its own.
    register(
        ModelFamilySpec(
            name="gemma3",
            loader="anna_gemma4.gemma3.loader:load",
            model_types=("gemma3", "gemma3_text"),
            architectures=("Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"),
            gguf_architectures=("gemma3",),
            distribution="anna-gemma4",
            tiny_checkpoint="anna_gemma4.gemma3.tiny:build_tiny_gemma3",
        )
    )


@hookimpl
def register_output_parsers(register):
    # Gemma 4 thinks in a <|channel>thought ... <channel|> block and calls tools as
    # <|tool_call>call:NAME{key:<|"|>text<|"|>}<tool_call|>.
    register(OutputParserSpec(name="gemma4", kind="reasoning", factory="anna_gemma4.reasoning:Gemma4ReasoningParser"))
    register(OutputParserSpec(name="gemma4", kind="tool_call", factory="anna_gemma4.tool_calls:Gemma4ToolParser"))
