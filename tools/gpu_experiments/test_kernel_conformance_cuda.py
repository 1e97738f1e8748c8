"""The kernel conformance suite on a CUDA device (the GPU machine; CI runs it on the CPU through Triton's
interpreter, tests/xpu_kernels/test_kernel_conformance.py): every implementation anna-xpu-kernels registers
(Triton, fla) against its op's torch reference on the op's sample inputs, on the GPU. Run from the repository
root there: ``python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py``."""

from anna_core.testing.conformance import KernelConformance


class TestXpuKernelsConformanceOnCuda(KernelConformance):
    plugin = "anna_xpu_kernels"
    device = "cuda"


def _head_case(scheme, rows, vocab, width, seed):
    import torch
    from anna_core.kernels.examples.linear import dyadic, exact_head
    from anna_core.kernels.examples.sample_gen import SampleGen

    r = SampleGen(seed, "cuda", torch.bfloat16)
    head = exact_head(r, vocab, width, scheme)
    return dyadic(r, rows, width, scale=0.125).to(torch.bfloat16).cuda(), head


def test_lm_head_topk_at_a_wide_vocabulary():
    """The Triton ``lm_head_topk`` against its reference at a vocabulary of many programs (32,017 ids, several
    tiles each, a ragged last one) and width 1024, every layout, rows on the CUDA cores and on ``tl.dot`` (1, 32),
    k 64 and 1, with and without a soft-cap: the op as the tuner picks, the autotuned one-pass kernel and the GEMV +
    selection (each one-pass configuration is checked at the real heads' shapes by topk_head_bench.py). Exact
    (dyadic) inputs: ids must match exactly, values and logsumexp within 1e-5."""
    import torch
    from anna_core.kernels.reference.lm_head_topk import lm_head_topk as reference
    from anna_xpu_kernels import lm_head_topk as kernel

    for scheme in ("none", "int4", "int8", "fp8"):
        for rows, k, cap in ((1, 64, None), (32, 1, 30.0)):
            x, head = _head_case(scheme, rows, 32017, 1024, seed=rows)
            want = reference(x, *head, k, cap)
            for name, got in (("op", kernel.lm_head_topk(x, *head, k, cap)),
                              ("one_pass", kernel.one_pass(x, *head, k, cap, 32017)),
                              ("gemv_select", kernel.gemv_select(x, *head, k, cap))):
                where = f"{name}: {scheme} rows {rows} k {k} cap {cap}"
                assert torch.equal(got[1], want[1]), where
                assert (got[0] - want[0]).abs().max().item() <= 1e-5, where
                assert (got[2] - want[2]).abs().max().item() <= 1e-5, where
