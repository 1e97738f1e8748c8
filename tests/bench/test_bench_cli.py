"""``anna bench`` on the CPU with a tiny config-only Qwen3.5 folder and dummy weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from anna_cli.bench import bench
from click.testing import CliRunner

from tests.bench.tiny_config import TINY_QWEN35, write_tiny_qwen35_config


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_qwen35_config(tmp_path_factory.mktemp("tinyq"))


def test_anna_bench_json_on_cpu(tiny_dir):
    res = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--batch-size", "2",
                                     "--input-len", "6", "--output-len", "3", "--warmup", "0", "--runs", "1",
                                     "--profile", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output[res.output.index("{"):])
    assert r["batch_size"] == 2 and r["device"] == "cpu" and not r["graphs_captured"]
    assert r["eager_steps"] == 3  # one prefill, two decodes
    assert r["ttft_ms"] > 0 and r["prefill_tokens_per_s"] == pytest.approx(2 * 6 / (r["ttft_ms"] / 1e3))
    assert r["decode_tokens_per_s_total"] == pytest.approx(2 * r["decode_tokens_per_s_per_stream"])
    assert 0 < r["itl_ms_p50"] <= r["itl_ms_p99"]
    # tied embeddings: every parameter is read once per step (the LM head reads the embedding)
    c = TINY_QWEN35
    assert r["step_bytes"]["weights"] > c["vocab_size"] * c["hidden_size"] * 4
    state = 2 * 2 * 2 * (c["linear_num_value_heads"] * 16 * 16 * 4 + (2 * 2 * 16 + 4 * 16) * 3 * 4)
    assert r["step_bytes"]["state"] == state  # 2 linear layers x batch 2 x read+write
    assert r["roofline_fraction"] > 0 and r["copy_bandwidth_gbps"] > 0
    assert r["served_vs_eager_match_tokens"] == min(16, r["output_len"])  # every stream, all checked tokens
    prof = r["profile_ms_per_step"]
    assert prof["gdn"] > 0 and prof["attention"] > 0 and prof["mlp"] > 0 and prof["lm_head"] > 0


def test_anna_bench_rejects_bad_lengths(tiny_dir):
    res = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--output-len", "1"])
    assert res.exit_code == 1 and "output-len" in res.output


def test_anna_bench_compare_hf_on_cpu(tiny_dir):
    res = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--dtype", "fp32",
                                     "--input-len", "12", "--output-len", "6", "--warmup", "0", "--runs", "1",
                                     "--compare-hf", "--json"])
    assert res.exit_code == 0, res.output
    hf = json.loads(res.output[res.output.index("{"):])["hf"]
    assert hf["speedup"] > 0 and hf["hf_decode_tokens_per_s_per_stream"] > 0
    # float32, same weights: the two models agree (random weights, so only rounding separates them)
    assert hf["top1_agree"] and hf["top5_overlap"] == 5
    assert hf["logits_max_abs_diff"] < 1e-3 * max(1.0, hf["logits_std"])
    assert hf["greedy_match_tokens"] == 6


def test_compare_hf_fp32_oracle_in_bf16(tiny_dir):
    from anna_core.bench.hf_compare import build_hf, logits_agreement
    from anna_core.loading import load_model

    loaded = load_model(tiny_dir, device="cpu", dtype="bf16", load_format="dummy")
    hf = build_hf(loaded)
    before = loaded.model.model.embed_tokens.weight.clone()
    got = logits_agreement(hf, loaded.model, list(range(3, 20)))
    assert loaded.model.model.embed_tokens.weight.dtype == before.dtype  # Anna's weights untouched
    assert torch.equal(loaded.model.model.embed_tokens.weight, before)
    assert got["hf_err_vs_fp32"] > 0  # bf16 really rounds
    assert got["anna_err_vs_fp32"] <= 4 * got["hf_err_vs_fp32"] + 0.05 * got["logits_std"]


def test_anna_bench_logprobs_on_cpu(tiny_dir):
    res = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--input-len", "6",
                                     "--output-len", "4", "--warmup", "0", "--runs", "1", "--logprobs", "3"])
    assert res.exit_code == 0, res.output
    assert "logprobs 3 per token" in res.output
    assert "4/4 leading tokens equal in every stream (ok)" in res.output  # greedy tokens unchanged by logprobs


def test_anna_bench_rejects_negative_logprobs(tiny_dir):
    res = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--logprobs", "-1"])
    assert res.exit_code == 1 and "--logprobs" in res.output


def test_anna_bench_timeline_without_graphs_says_why(tiny_dir):
    res = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--input-len", "6",
                                     "--output-len", "3", "--warmup", "0", "--runs", "1", "--timeline"])
    assert res.exit_code == 0, res.output
    assert "timeline  not traced: needs a CUDA device with captured decode graphs" in res.output


def test_anna_bench_with_prefix_caching_snapshots_inside_one_prefill(tiny_dir):
    """As `anna serve` runs: a 600-token prompt is one prefill step that snapshots the recurrent state at
    256 and 512 (the default snapshot interval), not three chunks."""
    res = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--input-len", "600",
                                     "--output-len", "3", "--warmup", "0", "--runs", "1", "--enable-prefix-caching",
                                     "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output[res.output.index("{"):])
    assert r["prefix_caching"] and r["snapshots_held"] == 2
    assert r["eager_steps"] == 3  # one prefill, two decodes
    assert r["served_vs_eager_match_tokens"] == 3


def test_anna_bench_serve_defaults_builds_the_engine_anna_serve_builds(tiny_dir):
    """--serve-defaults: prefix caching on without asking (a 600-token prompt snapshots at 256 and 512 inside
    its one prefill step), the prompt cache and 64 sequences, the checkpoint's context."""
    res = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--batch-size", "2",
                                     "--input-len", "600", "--output-len", "3", "--warmup", "0", "--runs", "1",
                                     "--serve-defaults", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output[res.output.index("{"):])
    assert r["serve_defaults"] and r["prefix_caching"] and r["snapshots_held"] == 4
    assert r["eager_steps"] == 3 and r["served_vs_eager_match_tokens"] == 3
    bad = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--batch-size", "65",
                                     "--serve-defaults"])
    assert bad.exit_code != 0 and "at most 64 sequences" in bad.output
    bad = CliRunner().invoke(bench, ["--model-dir", str(tiny_dir), "--device", "cpu", "--serve-defaults",
                                     "--enable-prefix-caching"])
    assert bad.exit_code != 0 and "--serve-defaults builds the engine" in bad.output


def _compare_hf_same_weights(folder: Path) -> None:
    """``anna bench --compare-hf`` on the config-only ``folder`` (dummy weights) agrees with HF throughout."""
    res = CliRunner().invoke(bench, ["--model-dir", str(folder), "--device", "cpu", "--dtype", "fp32",
                                     "--load-format", "dummy", "--input-len", "24", "--output-len", "5",
                                     "--warmup", "0", "--runs", "1", "--compare-hf", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{"):])
    assert report["served_vs_eager_match_tokens"] == 5
    hf = report["hf"]
    assert hf["speedup"] > 0 and hf["hf_decode_tokens_per_s_per_stream"] > 0 and hf["hf_ttft_ms"] > 0
    assert hf["top1_agree"] and hf["top5_overlap"] == 5
    assert hf["logits_max_abs_diff"] < 1e-3 * max(1.0, hf["logits_std"])
    assert hf["greedy_match_tokens"] == 5


@pytest.mark.parametrize("variant, conditional", [("e2b", False), ("moe", True), ("dense", True)])
def test_anna_bench_compare_hf_on_cpu_gemma4(tmp_path, variant, conditional):
    """``--compare-hf`` on a config-only tiny Gemma 4 folder: HF's ``Gemma4ForCausalLM`` over Anna's tensors,
    timed and compared, for the E2B (per-layer embeddings, KV sharing), 26B-A4B (MoE, K = V) and 31B (K = V)
    styles; the last two in the released layout (the text config nested)."""
    pytest.importorskip("anna_gemma4")
    from tests.bench.tiny_config import write_tiny_gemma4_config

    _compare_hf_same_weights(write_tiny_gemma4_config(tmp_path / variant, variant, conditional=conditional))


def test_anna_bench_compare_hf_on_cpu_qwen35_moe(tmp_path):
    """``--compare-hf`` on a config-only tiny Qwen3.5 MoE folder: ``Qwen3_5MoeForCausalLM`` with the fused experts."""
    from tests.bench.tiny_config import write_tiny_qwen35_moe_config

    _compare_hf_same_weights(write_tiny_qwen35_moe_config(tmp_path / "moe"))
