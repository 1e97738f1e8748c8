"""A tiny Llama GGUF with quantized matrices: kept quantized (``--weight-quant auto`` on the CPU) versus
dequantized (``none``), and the ``--weight-quant`` flag on the CLI."""

import numpy as np
import pytest
import torch
from anna_cli.main import build_cli
from anna_core.errors import ModelLoadError
from anna_core.layers.quant_linear import QuantizedEmbedding, QuantizedLinear
from anna_core.testing.runner import prefill_logits, simple_greedy
from anna_llama.tiny import build_tiny_llama
from click.testing import CliRunner

from tests.core._gguf_fakes import write_gguf
from tests.llama.conftest import hf_to_gguf_tensors, load_anna, rel_err

gguf = pytest.importorskip("gguf")
T = gguf.GGMLQuantizationType

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 130, 64, 11, 200, 31, 8, 77, 150, 2, 19, 23, 90]
# per llama.cpp tensor kind, the GGML type it is stored as (mixed, as a Q4_K_M file mixes them)
TYPES = {"token_embd": T.Q8_0, "attn_q": T.Q4_0, "attn_k": T.Q4_1, "attn_v": T.Q8_0, "attn_output": T.Q5_0,
         "ffn_gate": T.Q4_1, "ffn_up": T.Q4_1, "ffn_down": T.Q5_1}


@pytest.fixture(scope="module")
def quant_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama-quant")
    hf = build_tiny_llama(path / "hf", vocab_size=262, tie=True, seed=5)
    plain, raw = {}, {}
    for name, w in hf_to_gguf_tensors(hf).items():
        kind = name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0]
        if kind in TYPES and w.ndim == 2:
            raw[name] = (gguf.quants.quantize(np.ascontiguousarray(w, dtype=np.float32), TYPES[kind]), TYPES[kind])
        else:
            plain[name] = w
    return write_gguf(path / "q.gguf", tensors=plain, raw=raw, tokenizer=True, llama={"layers": 2})


def test_kept_quantized_matches_dequantized(quant_gguf):
    packed = load_anna(quant_gguf, weight_quant="auto")
    dense = load_anna(quant_gguf, weight_quant="none")
    layer = packed.model.model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj, QuantizedLinear)  # Q4_0 | Q4_1 | Q8_0 merged into one
    assert layer.self_attn.qkv_proj.blocks is None  # packed at load
    assert isinstance(layer.mlp.gate_up_proj, QuantizedLinear) and isinstance(layer.mlp.down_proj, QuantizedLinear)
    assert isinstance(packed.model.model.embed_tokens, QuantizedEmbedding)
    assert not any(isinstance(m, QuantizedLinear) for m in dense.model.modules())
    # float32 weights are left only in the norms
    assert {p.dtype for p in packed.model.parameters()} == {torch.float32}
    assert sum(p.numel() for p in packed.model.parameters()) == 32 * 5  # 2 layers x 2 norms + final norm
    # bfloat16 activations in the quantized matmuls: logits within 1e-2 of the dequantized model's
    # (measured 4.0e-3), greedy tokens identical
    assert rel_err(prefill_logits(packed.model, PROMPT), prefill_logits(dense.model, PROMPT)) <= 1e-2
    assert simple_greedy(packed.model, PROMPT, 16) == simple_greedy(dense.model, PROMPT, 16)


def test_int4_and_int8_are_for_safetensors(quant_gguf):
    for mode in ("int4", "int8"):
        with pytest.raises(ModelLoadError, match=f"--weight-quant {mode} quantizes a safetensors checkpoint"):
            load_anna(quant_gguf, weight_quant=mode)


@pytest.fixture(scope="module")
def wide_safetensors(tmp_path_factory):
    """A random Llama whose rows (128, 256) int4's groups of 128 divide."""
    from anna_core.testing.checkpoints import build_tiny_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("llama-wide")
    cfg = LlamaConfig(vocab_size=322, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).eval().save_pretrained(str(path))
    build_tiny_tokenizer(path)
    return path


@pytest.mark.parametrize(("mode", "bound"), [("int8", 0.02), ("int4", 0.2)])
def test_safetensors_quantized_at_load(wide_safetensors, mode, bound):
    packed = load_anna(wide_safetensors, weight_quant=mode)
    dense = load_anna(wide_safetensors, weight_quant="none")
    layer = packed.model.model.layers[1]
    for proj in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj):
        assert isinstance(proj, QuantizedLinear) and proj.source == mode
    # measured (bf16 compute included): int8 (per channel) 7.2e-3, int4 (groups of 128) 9.5e-2 of max |logit|
    err = rel_err(prefill_logits(packed.model, PROMPT), prefill_logits(dense.model, PROMPT))
    assert err <= bound, err


def test_load_model_rejects_an_unknown_mode(quant_gguf):
    from anna_core.errors import AnnaError
    from anna_core.loading import load_model

    with pytest.raises(AnnaError, match="unknown weight quantization 'int3'; use one of auto, none, int4, int8, fp8"):
        load_model(quant_gguf, device="cpu", weight_quant="int3")


@pytest.mark.parametrize("command", ["generate", "serve", "bench"])
def test_weight_quant_flag(command):
    runner = CliRunner()
    result = runner.invoke(build_cli(), [command, "--help"])
    assert result.exit_code == 0 and "--weight-quant [auto|none|int4|int8|fp8]" in result.output
    bad = runner.invoke(build_cli(), [command, "--model-dir", ".", "--weight-quant", "int3"])
    assert bad.exit_code == 2 and "'int3' is not one of 'auto', 'none', 'int4', 'int8', 'fp8'" in bad.output


def test_generate_passes_weight_quant_to_the_loader(quant_gguf):
    result = CliRunner().invoke(build_cli(), ["generate", "--model-dir", str(quant_gguf), "--device", "cpu",
                                              "--weight-quant", "int8", "--prompt", "hi"])
    assert result.exit_code == 1 and "--weight-quant int8 quantizes a safetensors checkpoint" in result.stderr


def test_tensor_parallelism_refuses_a_gguf_before_any_worker_starts(quant_gguf, monkeypatch):
    from anna_core.distributed import launch
    from anna_core.engine.config import EngineConfig

    def spawn(*args, **kwargs):
        raise AssertionError("workers were spawned")

    monkeypatch.setattr(launch.WorkerGroup, "start", spawn)
    with pytest.raises(ModelLoadError, match="not a GGUF file") as err:
        launch.load_engine(quant_gguf, {"device": "cpu"}, "anna_core.tasks.generate:build", EngineConfig(), None,
                           tensor_parallel_size=2)
    assert "--weight-quant" not in str(err.value)
