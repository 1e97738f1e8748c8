"""anna_core.layers against transformers' implementations of the same math."""

from __future__ import annotations

import pytest
import torch
from anna_core.errors import ModelLoadError
from anna_core.kernels.registry import KernelRegistry, bind_ops
from anna_core.layers import RMSNorm, RotaryEmbedding
from anna_core.layers.rotary import inverse_frequencies
from anna_core.testing.oracle import hide_fla


@pytest.fixture(scope="module")
def ops():
    return bind_ops(KernelRegistry.from_plugins(), "cpu", torch.float32)


@pytest.mark.parametrize("rope", [
    {"rope_type": "default", "rope_theta": 500000.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
])
def test_inverse_frequencies_match_hf(rope):
    hide_fla()
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=256, num_attention_heads=2, head_dim=128, rope_parameters=dict(rope),
                         max_position_embeddings=131072)
    init = ROPE_INIT_FUNCTIONS.get(rope["rope_type"], LlamaRotaryEmbedding.compute_default_rope_parameters)
    expected, scaling = init(config)
    assert scaling == 1.0
    torch.testing.assert_close(inverse_frequencies(128, rope), expected.float(), rtol=1e-6, atol=0)


def test_partial_rotary_and_mrope_match_qwen35():
    hide_fla()
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding, apply_rotary_pos_emb

    rope = {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10], "mrope_interleaved": True}
    config = Qwen3_5TextConfig(hidden_size=512, num_attention_heads=4, head_dim=256, rope_parameters=dict(rope))
    hf_rope = Qwen3_5TextRotaryEmbedding(config)
    mine = RotaryEmbedding(256, 64, rope)
    gen = torch.Generator().manual_seed(0)
    T = 7
    pos3 = torch.randint(0, 5000, (3, T), generator=gen)  # distinct t/h/w positions
    cos, sin = hf_rope(torch.zeros(1, dtype=torch.float32), pos3[:, None, :])  # [1, T, 64]
    my_cos, my_sin = mine.cos_sin(pos3)
    torch.testing.assert_close(my_cos, cos[0, :, :32], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(my_sin, sin[0, :, :32], rtol=1e-5, atol=1e-5)
    # text: equal t/h/w positions reduce to 1-D positions; rotation of the first 25% dims only
    pos = pos3[0]
    q = torch.randn(T, 4, 256, generator=gen)
    k = torch.randn(T, 2, 256, generator=gen)
    cos, sin = hf_rope(q, pos.expand(3, 1, T))
    hq, hk = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    mq, mk = mine(pos, q, k)
    torch.testing.assert_close(mq, hq[0].transpose(0, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mk, hk[0].transpose(0, 1), rtol=1e-5, atol=1e-5)
    assert torch.equal(mq[..., 64:], q[..., 64:])
    # a precomputed (cos, sin) shared across layers, and q|k heads rotated side by side, give the same result
    shared = mine.cos_sin(pos)
    sq, sk = mine(torch.full_like(pos, -1), q, k, cos_sin=shared)  # positions unread when cos_sin is given
    assert torch.equal(sq, mq) and torch.equal(sk, mk)
    assert torch.equal(mine.rotate(torch.cat([q, k], dim=1), shared), torch.cat([mq, mk], dim=1))


def test_rotary_rejects_bad_parameters():
    with pytest.raises(ModelLoadError, match="rope_type 'yarn' is not supported"):
        RotaryEmbedding(64, 64, {"rope_type": "yarn", "rope_theta": 1e4})
    with pytest.raises(ModelLoadError, match="lack the field 'factor'"):
        RotaryEmbedding(64, 64, {"rope_type": "linear"})
    with pytest.raises(ModelLoadError, match="rotary_dim 7"):
        RotaryEmbedding(64, 7, {})


def test_rms_norm_zero_centred_and_plain(ops):
    x = torch.randn(5, 16, dtype=torch.float64).float()
    w = torch.randn(16)
    plain, centred = RMSNorm(16, 1e-6, ops), RMSNorm(16, 1e-6, ops, zero_centered=True)
    assert torch.equal(plain.weight, torch.ones(16)) and torch.equal(centred.weight, torch.zeros(16))
    plain.weight.data.copy_(w)
    centred.weight.data.copy_(w)
    normed = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(plain(x), normed * w)
    torch.testing.assert_close(centred(x), normed * (1 + w))


def test_rms_norm_without_scale_has_no_parameter_and_matches_gemma4(ops):
    hide_fla()
    from transformers.models.gemma4.modeling_gemma4 import Gemma4RMSNorm

    norm = RMSNorm(16, 1e-6, ops, scale=False)
    assert list(norm.parameters()) == []
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(3)) * 4
    torch.testing.assert_close(norm(x), Gemma4RMSNorm(16, 1e-6, with_scale=False)(x), rtol=1e-6, atol=1e-6)
    y, r = norm.add_and_norm(x, x)
    torch.testing.assert_close(y, norm(2 * x), rtol=1e-6, atol=1e-6)
    assert torch.equal(r, 2 * x)
    with pytest.raises(ValueError, match="zero-centred"):
        RMSNorm(16, 1e-6, ops, zero_centered=True, scale=False)
    with torch.device("meta"):
        assert RMSNorm(16, 1e-6, ops, scale=False).weight is None  # nothing for a loader to fill


@pytest.mark.parametrize("partial, head_dim", [(0.25, 64), (0.5, 32), (1.0, 16)])
def test_proportional_rope_matches_gemma4_global_layers(partial, head_dim):
    hide_fla()
    from transformers import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding, apply_rotary_pos_emb

    rope = {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": partial}
    config = Gemma4TextConfig(hidden_size=32, num_attention_heads=2, head_dim=8, global_head_dim=head_dim,
                              num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
                              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                               "full_attention": dict(rope)})
    hf_rope = Gemma4TextRotaryEmbedding(config)
    mine = RotaryEmbedding(head_dim, head_dim, rope)
    rotated = int(partial * head_dim // 2)
    assert (mine._inv_freq[rotated:] == 0).all() and (mine._inv_freq[:rotated] > 0).all()
    gen = torch.Generator().manual_seed(1)
    T = 9
    pos = torch.randint(0, 3000, (T,), generator=gen)
    q = torch.randn(T, 2, head_dim, generator=gen)
    k = torch.randn(T, 1, head_dim, generator=gen)
    cos, sin = hf_rope(q, pos[None], "full_attention")  # [1, T, D]
    hq = apply_rotary_pos_emb(q[None], cos, sin, unsqueeze_dim=2)[0]
    hk = apply_rotary_pos_emb(k[None], cos, sin, unsqueeze_dim=2)[0]
    mq, mk = mine(pos, q, k)
    torch.testing.assert_close(mq, hq, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mk, hk, rtol=1e-5, atol=1e-5)
    if rotated < head_dim // 2:  # dims past the rotated pairs pass through bit for bit
        half = head_dim // 2
        assert torch.equal(mq[..., rotated:half], q[..., rotated:half])
        assert torch.equal(mq[..., half + rotated:], q[..., half + rotated:])


@pytest.mark.parametrize(("head_dim", "rotary_dim", "dtype"), [(64, 64, torch.float32), (64, 16, torch.float32),
                                                               (32, 32, torch.bfloat16)])
def test_rotate_wide_equals_rotate_bit_for_bit(head_dim, rotary_dim, dtype):
    rotary = RotaryEmbedding(head_dim, rotary_dim, {"rope_type": "default", "rope_theta": 10000.0})
    positions = torch.tensor([0, 5, 77, 1023])
    x = torch.randn(4, 6, head_dim).to(dtype)
    cos_sin = rotary.cos_sin(positions)
    wide = rotary.rotate_wide(x, rotary.widen(cos_sin))
    assert wide.dtype == dtype
    assert torch.equal(wide, rotary.rotate(x, cos_sin))
