"""Every Triton kernel compiles for sm_90 (H100/H200) with the real compiler, no GPU needed."""

import os
import subprocess
import sys

import pytest

from tests.xpu_kernels._interp import require_triton_interpreter

require_triton_interpreter()


def test_kernels_compile_for_cuda_sm90(tmp_path):
    from triton.backends import backends

    if "nvidia" not in backends:
        pytest.skip("triton has no NVIDIA backend here")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "ANNA_TRITON_INTERPRET")}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # compile for real, not from a cache
    out = subprocess.run([sys.executable, "-m", "anna_xpu_kernels.compile_check", "--arch", "90"],
                         check=False, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 126 and all(": ok," in line for line in lines)
    # the decode kernels' PDL variants wait for their predecessor before any global write and before
    # any global load other than their weights / own state (PTX order)
    assert sum("waits first" in line for line in lines) == 78
    kernels = {line.split()[0] for line in lines}
    assert kernels == {"_rms_norm_kernel", "_fused_gdn_decode_kernel", "_qk_norm_rope_cache_kernel", "_conv_update_kernel", "_conv_prefill_kernel", "_conv_prefill_state_kernel",
                       "_gdr_decode_kernel", "_paged_attention_kernel", "_merge_splits_kernel",
                       "_add_rms_norm_kernel", "_silu_and_mul_kernel", "_sigmoid_mul_kernel",
                       "_gemv_kernel", "_gdn_prefill_prep_kernel", "_persistent_gemv_kernel", "_long_gemv_kernel",
                       "_wq_decode_kernel",
                       "_moe_align_kernel", "_moe_gate_up_kernel", "_moe_down_kernel", "_moe_route_kernel",
                       "_decode_gate_up_kernel", "_decode_down_kernel",
                       "_post_norm_residual_kernel", "_dual_post_norm_residual_kernel", "_rms_norm_pair_kernel",
                       "_post_norm_residual_norm_pair_kernel", "_tq_attention_kernel", "_gated_block_kernel", "_per_layer_inputs_kernel", "_soft_cap_kernel",
                       "_tq_query_kernel", "_tq_output_kernel", "_tq_write_kernel", "_tq_write_columns_kernel",
                       "_top_k_gumbel_kernel", "_snake_beta_kernel"}
