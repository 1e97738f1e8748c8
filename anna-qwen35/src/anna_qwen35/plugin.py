"""Entry module of anna-qwen35: registration only (no torch import here)."""

from anna_core.hookspecs import hookimpl
from anna_core.registry import ModelFamilySpec, OutputParserSpec


@hookimpl
def register_model_families(register):
    register(
        ModelFamilySpec(
            name="qwen35",
            loader="anna_qwen35.loader:load",
            # Dense and mixture-of-experts; the vision-language layouts take images (anna_qwen35.vision / processor).
            model_types=("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
            architectures=("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
                           "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"),
            gguf_architectures=("qwen35", "qwen35moe"),  # llama.cpp's dense and MoE text models
            distribution="anna-qwen35",
            reasoning_parser="qwen3",
            tool_call_parser="qwen3_coder",
            vision_offload=True,  # --offload-vision: the vision tower on the CPU
            expert_offload=True,  # its MoE layers' routed experts may live in host memory (--offload-mode)
            tensor_parallel=True,  # --tensor-parallel-size: anna_qwen35.tensor_parallel
            tensor_parallel_check="anna_qwen35.tensor_parallel:check_group_size",  # before the workers spawn
            tiny_checkpoint="anna_qwen35.tiny:build_tiny_checkpoint",  # for tests: variant dense / moe
            # the LM head / the MoE routed experts quantized too (int4 / int8 / fp8; default dense); the layout cache
            load_options=("lm_head_quant", "layout_cache", "expert_quant"),
        )
    )
    register(
        ModelFamilySpec(
            name="qwen3",
            loader="anna_qwen35.qwen3.loader:load",
            # Qwen3 dense text models (q/k RMSNorm, 1-D rotary); Qwen3-ASR's text decoder is one too
            model_types=("qwen3",),
            architectures=("Qwen3ForCausalLM",),
            distribution="anna-qwen35",
            # Qwen3 thinks in <think> blocks as Qwen3.5 does, but calls tools in JSON inside <tool_call>, not in
            # Qwen3-Coder's XML
            reasoning_parser="qwen3",
            tool_call_parser="qwen3_json",
            tiny_checkpoint="anna_qwen35.qwen3.tiny:build_tiny_checkpoint",
            load_options=("layout_cache",),  # a pre-quantized checkpoint's repacked weights cached (default on)
        )
    )


@hookimpl
def register_output_parsers(register):
    # Qwen3.5 reasons in <think> blocks and calls tools in Qwen3-Coder's XML markup; the generic
    # implementations live in anna-core.
    register(OutputParserSpec(name="qwen3", kind="reasoning", factory="anna_core.parsers.think:ThinkReasoningParser"))
    register(OutputParserSpec(name="qwen3_coder", kind="tool_call",
                              factory="anna_core.parsers.qwen3_coder:Qwen3CoderToolParser"))
    # Qwen3 (the qwen3 family) writes its calls as JSON objects inside <tool_call>
    register(OutputParserSpec(name="qwen3_json", kind="tool_call",
                              factory="anna_core.parsers.qwen3_json:Qwen3JsonToolParser"))
