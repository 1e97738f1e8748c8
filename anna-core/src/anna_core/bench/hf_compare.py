"""Side by side: HF transformers ``generate`` on Anna's own random weights, in the same process.

The family model exports its weights under HF names (``hf_export``: views of Anna's tensors, no
copy); the HF model is built on the meta device and takes those tensors with
``load_state_dict(assign=True)``, so both run the same weights and the comparison costs no extra
weight memory. HF uses flash-linear-attention's kernels for the gated delta rule when ``fla`` is
importable (on CUDA); the report says which path it took.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from typing import Any

import torch

from anna_core.bench.roofline import wall_clock
from anna_core.errors import AnnaError


def fla_in_use() -> bool:
    """Whether ``fla`` is importable (transformers then routes the gated delta rule to it)."""
    if "fla" in sys.modules and sys.modules["fla"] is None:
        return False
    return importlib.util.find_spec("fla") is not None


def build_hf(loaded: Any, multimodal: bool = False) -> Any:
    """The HF model over ``loaded``'s weights (shared tensors), in eval mode.

    Families with ``hf_export``: Qwen3.5 dense and MoE and Qwen3 (``anna-qwen35``), Gemma 4 and Gemma 3
    (``anna-gemma4``). ``multimodal``: the family's whole vision-language model (``hf_export(multimodal=True)``:
    Qwen3.5 with its vision tower), not the text model alone.

    Raises:
        AnnaError: the family has no ``hf_export`` or HF lacks the class; the exported names do not fit
            the HF model (missing / unexpected tensors); a computed buffer could not be given its value
            (:func:`_rebuild_meta_modules`). ``ModelLoadError`` (a subclass) from ``hf_export`` itself.
    """
    import transformers

    export = getattr(loaded.model, "hf_export", None)
    if export is None:
        raise AnnaError(f"the {loaded.family!r} model has no hf_export(); --compare-hf is not available for it")
    cls_name, config_cls_name, config_kwargs, state = export(multimodal=True) if multimodal else export()
    cls = getattr(transformers, cls_name, None)
    config_cls = getattr(transformers, config_cls_name, None)
    if cls is None or config_cls is None:
        raise AnnaError(f"transformers {transformers.__version__} has no {cls_name}/{config_cls_name}")
    config = config_cls(**config_kwargs)
    with torch.device("meta"):
        hf = cls(config)
    missing, unexpected = hf.load_state_dict(state, strict=False, assign=True)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]
    unexpected = [u for u in unexpected if not _set_computed_buffer(hf, u, state[u], loaded.device)]
    if missing or unexpected:
        raise AnnaError(f"HF weight export mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if getattr(config, "tie_word_embeddings", False):
        hf.tie_weights()
    _rebuild_meta_modules(hf, loaded.device)
    left = [n for n, t in list(hf.named_parameters()) + list(hf.named_buffers()) if t.is_meta]
    if left:
        raise AnnaError(f"HF tensors stayed on the meta device: {left[:5]}")
    return hf.eval()


def _set_computed_buffer(hf: Any, name: str, value: torch.Tensor, device: torch.device) -> bool:
    """Give HF's non-persistent buffer ``name`` (one ``load_state_dict`` skips) the exported ``value`` on ``device``;
    False when ``name`` is no buffer of ``hf``. An export carries such a value where HF computes it in a constructor
    that :func:`_rebuild_meta_modules` cannot call alike on every transformers release."""
    owner, _, attr = name.rpartition(".")
    try:
        module = hf.get_submodule(owner)
    except AttributeError:
        return False
    if attr not in dict(module.named_buffers(recurse=False)):
        return False
    module.register_buffer(attr, value.to(device), persistent=False)
    return True


def _rebuild_meta_modules(hf: Any, device: torch.device) -> None:
    """Give the computed (non-persistent) buffers that stayed on the meta device their values on ``device``.

    A module holding only such buffers (a rotary table) is built again on ``device`` from its config. One
    that also holds parameters (Gemma's scaled embedding and its ``embed_scale``) keeps them: its meta
    buffers are allocated on ``device`` and HF's own ``_init_weights`` fills them, run while the
    module's parameters are swapped for meta stand-ins, so that it cannot write to Anna's shared tensors.

    Raises:
        AnnaError: ``_init_weights`` left such a buffer unset, or it is not a float buffer.
    """
    for name, module in list(hf.named_modules()):
        own = list(module.named_buffers(recurse=False))
        if not own or not any(b.is_meta for _, b in own):
            continue
        if not list(module.parameters(recurse=False)):
            with torch.device(device):
                fresh = type(module)(module.config)
            parent_name, _, attr = name.rpartition(".")
            setattr(hf.get_submodule(parent_name) if parent_name else hf, attr, fresh)
        else:
            _init_meta_buffers(hf, name, module, device)


def _init_meta_buffers(hf: Any, name: str, module: torch.nn.Module, device: torch.device) -> None:
    """``module``'s meta buffers filled by ``hf._init_weights(module)`` on ``device`` (see
    :func:`_rebuild_meta_modules`); NaN beforehand, so a buffer it leaves unset is caught."""
    meta = [b for b, t in module.named_buffers(recurse=False) if t.is_meta]
    for buf in meta:
        t = module.get_buffer(buf)
        if not t.is_floating_point():
            raise AnnaError(f"HF buffer {name}.{buf} ({t.dtype}) stayed on the meta device")
        setattr(module, buf, torch.full(t.shape, float("nan"), dtype=t.dtype, device=device))
    held = [(sub, p, param) for sub in module.modules() for p, param in list(sub.named_parameters(recurse=False))]
    try:
        for sub, p, param in held:
            setattr(sub, p, torch.nn.Parameter(torch.empty_like(param, device="meta"), requires_grad=False))
        hf._init_weights(module)
    finally:
        for sub, p, param in held:
            setattr(sub, p, param)
    unset = [buf for buf in meta if bool(module.get_buffer(buf).isnan().any())]
    if unset:
        raise AnnaError(f"HF's _init_weights left {type(module).__name__} buffers {unset} of {name} unset")


def hf_generate_time(hf: Any, prompts: list[list[int]], new_tokens: int) -> tuple[float, list[list[int]]]:
    """Seconds of one greedy ``generate`` of exactly ``new_tokens`` tokens, and the generated ids."""
    from transformers import GenerationConfig

    dev = next(hf.parameters()).device
    ids = torch.tensor(prompts, device=dev)
    gen = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                           eos_token_id=None, pad_token_id=0)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t = wall_clock()
    with torch.inference_mode():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen)
    sync()
    return wall_clock() - t, out[:, ids.shape[1]:].tolist()


def compare_hf(loaded: Any, engine: Any, prompts: list[list[int]], new_tokens: int,
               anna_report: dict[str, Any]) -> dict[str, Any]:
    """Time HF generate (prefill alone, then prefill + ``new_tokens``) and Anna on the same prompts.

    Returns:
        ``{"fla": bool, "hf_ttft_ms", "hf_decode_tokens_per_s_per_stream", "anna_decode_tokens_per_s_per_stream",
        "speedup", "greedy_match_tokens", ...}``; ``greedy_match_tokens`` counts the leading tokens where
        HF and Anna agree on the first prompt (bf16 rounding makes long agreement unlikely on random
        weights), the :func:`logits_agreement` fields compare both models' last-prompt-position
        logits.
    """
    from anna_core.bench.engine_bench import timed_run

    hf = build_hf(loaded)
    hf_generate_time(hf, prompts, 2)  # warm-up
    first = statistics.median(hf_generate_time(hf, prompts, 1)[0] for _ in range(2))
    total, hf_tokens = hf_generate_time(hf, prompts, new_tokens)
    hf_per_stream = (new_tokens - 1) / max(total - first, 1e-9)
    anna = timed_run(engine, prompts, new_tokens, "hfcmp")
    match = 0
    for a, b in zip(anna["tokens"][0], hf_tokens[0]):
        if a != b:
            break
        match += 1
    anna_per_stream = anna_report["decode_tokens_per_s_per_stream"]
    agreement = logits_agreement(hf, loaded.model, prompts[0])
    del hf
    return {"fla": fla_in_use(), "new_tokens": new_tokens, "hf_ttft_ms": first * 1e3,
            "hf_decode_tokens_per_s_per_stream": hf_per_stream,
            "anna_decode_tokens_per_s_per_stream": anna_per_stream,
            "speedup": anna_per_stream / hf_per_stream, "greedy_match_tokens": match, **agreement}


@torch.inference_mode()
def logits_agreement(hf: Any, model: Any, prompt: list[int]) -> dict[str, float]:
    """HF vs Anna float32 logits at the last position of ``prompt`` (one prefill each, same weights):
    ``logits_max_abs_diff``, ``logits_std`` (HF's, for scale), ``top1_agree`` and ``top5_overlap``.

    When the models run in a 16-bit dtype, HF is then converted to float32 (its own copy of the
    weights; Anna's tensors are untouched) as the oracle: ``anna_err_vs_fp32`` and ``hf_err_vs_fp32``
    are each 16-bit model's largest absolute logit error against it, so Anna's rounding error can be
    judged against HF's own. On a CUDA device without room for that copy (the 26B and 31B shapes on one
    H200) the oracle is skipped and ``fp32_oracle`` says so."""
    from anna_core.testing.runner import prefill_logits

    dev = next(hf.parameters()).device
    ids = torch.tensor([prompt], device=dev)
    ref = hf(ids).logits[0, -1].float()
    got = prefill_logits(model, prompt)[-1].float()
    top_ref, top_got = ref.topk(5).indices.tolist(), got.topk(5).indices.tolist()
    out = {"logits_max_abs_diff": float((got - ref).abs().max()), "logits_std": float(ref.std()),
           "top1_agree": top_ref[0] == top_got[0], "top5_overlap": len(set(top_ref) & set(top_got))}
    if next(hf.parameters()).dtype in (torch.bfloat16, torch.float16):
        need = 2 * sum(p.numel() * p.element_size() for p in hf.parameters())  # the float32 copy
        if dev.type == "cuda" and torch.cuda.mem_get_info(dev)[0] < 1.1 * need:
            out["fp32_oracle"] = f"skipped: a float32 copy ({need / 2**30:.0f} GiB) does not fit beside the model"
            return out
        oracle = hf.float()(ids).logits[0, -1].float()
        out.update(anna_err_vs_fp32=float((got - oracle).abs().max()),
                   hf_err_vs_fp32=float((ref - oracle).abs().max()),
                   fp32_top1_is_anna=int(oracle.argmax()) == top_got[0],
                   fp32_top1_is_hf=int(oracle.argmax()) == top_ref[0])
    return out
