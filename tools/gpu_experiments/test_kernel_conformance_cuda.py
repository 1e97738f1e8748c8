"""The kernel conformance suite on a CUDA device (the GPU machine; CI runs it on the CPU through Triton's
interpreter, tests/xpu_kernels/test_kernel_conformance.py): every implementation anna-xpu-kernels registers
(Triton, fla) against its op's torch reference on the op's sample inputs, on the GPU. Run from the repository
root there: ``python3 -m pytest -q -p no:cacheprovider tools/gpu_experiments/test_kernel_conformance_cuda.py``."""

from anna_core.testing.conformance import KernelConformance


class TestXpuKernelsConformanceOnCuda(KernelConformance):
    plugin = "anna_xpu_kernels"
    device = "cuda"
    # opt-in kernels checked too (their probes decline while their switch is off)
    environment = {"ANNA_QK_NORM_ROPE_ATTENTION": "1"}


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


def test_turboquant_words_decode_matches_the_reference_on_cuda():
    """The ``words`` decode of the TurboQuant attention with the ``lane`` shuffle (inline PTX, which the CPU tests
    cannot run), as ``ANNA_TURBOQUANT_DECODE=words`` (opaque operands, 168 registers), ``words-capped`` (8-bit
    fragments, one stage, 128 registers), ``words-chunked`` and ``words-chunked-capped`` launch it
    (:func:`anna_xpu_kernels.turboquant_launch.launch_settings`), against the torch reference on the GPU:
    decodes of 3 sequences over a shuffled block table at head dims 256 and 512 (two chunks), 4 and 3 bits, a float32
    query within float32 rounding and a bf16 one within a fifth of the bf16 kernel's own distance bound (the spread
    decode's error, doubled)."""
    import torch
    from anna_core.kernels.reference import turboquant as ref
    from anna_core.kv_quant.layout import TurboQuantLayout
    from anna_core.kv_quant.tables import TurboQuantTables
    from anna_xpu_kernels import turboquant as tq
    from anna_xpu_kernels.turboquant_launch import launch_settings

    def settings(choice, d):  # the explicit tuning of a decode choice, whatever ANNA_TURBOQUANT_DECODE says
        s = launch_settings(tq.TurboQuantTuning(), True, d, False, choice)
        return tq.TurboQuantTuning(lookup=s.lookup, block_n=s.block_n, num_warps=s.num_warps, num_stages=s.num_stages,
                                   d_chunks=s.d_chunks, unpack=s.unpack, max_registers=s.max_registers,
                                   opaque_operands=s.opaque)

    g = torch.Generator(device="cuda").manual_seed(0)
    for d, h_q, h_kv, bits in ((256, 16, 4, 4), (256, 16, 4, 3), (512, 8, 2, 4), (512, 8, 2, 3)):
        layout = TurboQuantLayout(bits)
        tables = TurboQuantTables.build(layout, d, "cuda").args
        n_blocks, bs = 40, 16
        kc = torch.zeros(n_blocks, bs, h_kv, layout.key_row_bytes(d), dtype=torch.uint8, device="cuda")
        vc = torch.zeros(n_blocks, bs, h_kv, layout.value_row_bytes(d), dtype=torch.uint8, device="cuda")
        k, v = torch.randn(2, n_blocks * bs, h_kv, d, device="cuda", generator=g)
        ref.turboquant_cache_write(k, v, kc, vc, torch.arange(n_blocks * bs, device="cuda"), *tables)
        block_tables = torch.randperm(n_blocks, device="cuda", generator=g)[:36].view(3, 12).to(torch.int32)
        lens = torch.tensor([190, 77, 161], dtype=torch.int32, device="cuda")
        cu = torch.arange(4, dtype=torch.int32, device="cuda")
        for dtype in (torch.float32, torch.bfloat16):
            q = torch.randn(3, h_q, d, device="cuda", generator=g).to(dtype)
            args = (q, kc, vc, cu, lens, block_tables, d ** -0.5, None, *tables)
            want = ref.paged_attention_turboquant(*args).float()
            spread = (tq.paged_attention_turboquant(*args, tuning=settings("spread", d)).float()
                      - want).abs().max().item()
            for tuning in (tq.TurboQuantTuning(unpack="words", lookup="lane", opaque_operands=True, max_registers=168),
                           tq.TurboQuantTuning(unpack="words", lookup="lane", opaque_operands=False, num_stages=1,
                                               max_registers=128),
                           settings("words-chunked", d), settings("words-chunked-capped", d)):
                err = (tq.paged_attention_turboquant(*args, tuning=tuning).float() - want).abs().max().item()
                bound = 2e-5 if dtype == torch.float32 else 2 * spread + 1e-6
                assert err <= bound, (d, bits, dtype, tuning, err, spread)


def test_turboquant_columns_write_matches_the_chain_on_cuda():
    """``ANNA_TURBOQUANT_WRITE=columns`` (a program per 16 rows and 64-column chunk, the QJL signs summed by the last
    chunk to arrive; acquire-release counters, which the CPU interpreter runs one program at a time) against ``chain``
    on the GPU at decode shapes (32 tokens of 4 heads at 256, of 2 at 512), 4 / 3 / 2 bits with QJL keys and 4 without,
    its default chunks and 32-wide ones: norms within float32 rounding, at most 0.1% of the code / sign bytes apart (a
    coordinate at a decision boundary, a projection at zero), and the same bytes again on a second and third call (the
    counters back at zero, the chunk-order sum deterministic)."""
    import torch
    from anna_core.kv_quant.layout import TurboQuantLayout
    from anna_core.kv_quant.tables import TurboQuantTables
    from anna_xpu_kernels import turboquant_write as tw

    g = torch.Generator(device="cuda").manual_seed(0)
    for d, h_kv in ((256, 4), (512, 2)):
        for bits, qjl in ((4, True), (3, True), (2, True), (4, False)):
            layout = TurboQuantLayout(bits, key_qjl=qjl)
            tables = TurboQuantTables.build(layout, d, "cuda").args
            kc = torch.zeros(64, 16, h_kv, layout.key_row_bytes(d), dtype=torch.uint8, device="cuda")
            vc = torch.zeros(64, 16, h_kv, layout.value_row_bytes(d), dtype=torch.uint8, device="cuda")
            k, v = torch.randn(2, 32, h_kv, d, device="cuda", generator=g).bfloat16()
            slots = torch.randperm(64 * 16, device="cuda", generator=g)[:32]
            want_k, want_v = kc.clone(), vc.clone()
            tw.write_with("chain", k, v, want_k, want_v, slots, *tables)
            for block_o in (None, 32):
                runs = []
                for _ in range(3):
                    got_k, got_v = kc.clone(), vc.clone()
                    tw.write_with("columns", k, v, got_k, got_v, slots, *tables, block_o=block_o)
                    runs.append((got_k, got_v))
                assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(run, runs[0])), (d, bits, block_o)
                for got, want, norms in ((runs[0][0], want_k, 8 if qjl else 4), (runs[0][1], want_v, 4)):
                    got, want = got.view(-1, got.shape[-1])[slots], want.view(-1, want.shape[-1])[slots]
                    torch.testing.assert_close(got[..., :norms].contiguous().view(torch.float32),
                                               want[..., :norms].contiguous().view(torch.float32), rtol=1e-5, atol=0)
                    differ = (got[..., norms:] != want[..., norms:]).float().mean().item()
                    assert differ <= 1e-3, (d, bits, qjl, block_o, differ)
