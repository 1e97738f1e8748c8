"""Human-readable benchmark reports (the ``--json`` form is the report dict itself)."""

from __future__ import annotations

from typing import Any


def _served_check(r: dict[str, Any]) -> str:
    from anna_core.bench.engine_bench import SERVED_VS_EAGER_TOKENS

    checked = min(SERVED_VS_EAGER_TOKENS, r["output_len"])
    got = r["served_vs_eager_match_tokens"]
    verdict = "ok" if got >= checked else "MISMATCH"
    return (f"check     served tokens vs Anna's eager greedy loop: {got}/{checked} leading tokens equal in every "
            f"stream ({verdict})")


def _expert_cache(c: dict[str, Any]) -> str:
    rate = "n/a" if c["hit_rate"] is None else f"{100 * c['hit_rate']:.1f}%"
    return (f"experts   offloaded layers {len(c['offloaded_layers'])} (resident {len(c['resident_layers'])}), "
            f"{c['cached_experts_per_layer']} cached per layer: hit rate {rate} ({c['hits']} hits, {c['misses']} "
            f"misses; prefetched {c['prefetched']}, {c['prefetch_hits']} used), {c['bytes_copied'] / 1e9:.2f} GB "
            "copied host -> device")


def format_report(r: dict[str, Any]) -> str:
    """Lines for one :func:`anna_core.bench.engine_bench.run_bench` report.

    Keys: ``ttft_ms``, ``prefill_tokens_per_s``, ``decode_tokens_per_s_per_stream`` / ``_total``,
    ``itl_ms_p50`` / ``_p99``, ``peak_memory_gib``, ``copy_bandwidth_gbps``, ``step_bytes``, optional ``lm_head_path``
    (:meth:`~anna_core.engine.model_runner.ModelRunner.head_report`),
    ``roofline_tokens_per_s_per_stream``, ``roofline_fraction``, optional ``graph_replay_ms``,
    ``served_vs_eager_match_tokens``,
    ``tokens_sha256``, optional ``expert_cache`` (offloaded experts), optional ``image`` (``--image``: the image,
    its placeholder tokens, ``offload_vision``), optional ``video`` (``--video-frames``: the video, its placeholder
    tokens and frame groups, ``offload_vision``),
    ``async_scheduling``, ``profile_ms_per_step``, ``timeline`` (with ``timeline_source`` "served" or
    "padded" and, when served steps could not be traced, ``timeline_served_error``), ``timeline_error``
    and ``hf``.
    """
    gb = r["step_bytes"]["total"] / 1e9
    lines = [
        f"model {r['model']}  device {r['device']} ({r['device_name']})  dtype {r['dtype']}  "
        f"weight-quant {r.get('weight_quant', 'auto')}, lm-head {r.get('lm_head_quant', 'none')}, "
        f"experts {r.get('expert_quant', 'none')}",
        (f"batch {r['batch_size']}  input {r['input_len']}  output {r['output_len']}  runs {r['runs']} "
         f"(+{r['warmup']} warm-up)  graphs {'on' if r['graphs_captured'] else 'off'} "
         f"({r['graph_steps']} graph / {r['prefill_graph_steps']} prefill graph / {r['eager_steps']} eager passes"
         + (f", {r['split_steps']} split steps made of them" if r.get("split_steps") else "") + ")"
         f"  compile {r['compile_mode']}"
         + (f"  LM head: fused top-{r['lm_head_path']['k']} in {r['lm_head_path']['topk_steps']} / full logits in "
            f"{r['lm_head_path']['full_steps']} sampling steps" if r.get("lm_head_path") else "")
         + (f"  logprobs {r['logprobs']} per token" if r.get("logprobs") is not None else "")
         + (f"  prefix caching on ({r['snapshots_held']} recurrent-state snapshots held)" if r.get("prefix_caching") else "")
         + ("  engine as `anna serve` builds it (--serve-defaults)" if r.get("serve_defaults") else "")),
        *([_image(r["image"])] if r.get("image") else []),
        *([_video(r["video"])] if r.get("video") else []),
        f"prefill   {r['prefill_tokens_per_s']:10.1f} tok/s   TTFT {r['ttft_ms']:.2f} ms",
        (f"decode    {r['decode_tokens_per_s_per_stream']:10.1f} tok/s per stream   "
         f"{r['decode_tokens_per_s_total']:.1f} tok/s total"),
        (f"ITL       p50 {r['itl_ms_p50']:.3f} ms   p99 {r['itl_ms_p99']:.3f} ms"
         + (f"   (one graph replay alone, padding rows: {r['graph_replay_ms']:.3f} ms)" if r.get("graph_replay_ms") else "")
         + ("   async scheduling " + ("on" if r.get("async_scheduling") and r.get("graphs_captured")
                                       else "off" if r.get("graphs_captured") else "n/a (no graphs)"))),
        f"memory    peak {r['peak_memory_gib']:.2f} GiB",
        *([_expert_cache(r["expert_cache"])] if r.get("expert_cache") else []),
        *([f"tokens    sha256 {r['tokens_sha256']} (the last run's greedy tokens)"] if "tokens_sha256" in r else []),
        *([_served_check(r)] if "served_vs_eager_match_tokens" in r else []),
        (f"roofline  {gb:.3f} GB/step (weights {r['step_bytes']['weights'] / 1e9:.3f}, state "
         f"{r['step_bytes']['state'] / 1e9:.3f}, KV {r['step_bytes']['kv'] / 1e9:.3f}) at "
         f"{r['copy_bandwidth_gbps']:.0f} GB/s copy -> {r['roofline_tokens_per_s_per_stream']:.1f} tok/s per stream; "
         f"reached {100 * r['roofline_fraction']:.1f}%"),
    ]
    prof = r.get("profile_ms_per_step")
    if prof:
        total = prof["total"] or 1.0
        parts = "  ".join(f"{k} {v:.3f} ({100 * v / total:.0f}%)" for k, v in prof.items() if k != "total")
        lines.append(f"profile   eager kernel time per decode step {prof['total']:.3f} ms: {parts}")
    if r.get("timeline"):
        from anna_core.bench.timeline import format_timeline

        if r.get("timeline_source") == "served":
            lines.append("timeline  one captured decode step as served (distinct slots, real contexts), "
                         "kernel by kernel (us):")
        else:
            lines.append("timeline  one captured decode step replayed with padding rows, kernel by kernel (us):")
            if r.get("timeline_served_error"):
                lines.append(f"          (served steps not traced: {r['timeline_served_error']})")
        lines.append(format_timeline(r["timeline"], r.get("graph_replay_ms")))
    if r.get("timeline_error"):
        lines.append(f"timeline  not traced: {r['timeline_error']}")
    hf = r.get("hf")
    if hf:
        lines.append(
            f"HF        transformers{' + fla' if hf['fla'] else ' (torch path, no fla)'}: "
            f"{hf['hf_decode_tokens_per_s_per_stream']:.1f} tok/s per stream, TTFT {hf['hf_ttft_ms']:.1f} ms; "
            f"Anna {hf['anna_decode_tokens_per_s_per_stream']:.1f} -> {hf['speedup']:.1f}x "
            f"(greedy agreement: first {hf['greedy_match_tokens']} tokens)")
        if "logits_max_abs_diff" in hf:
            lines.append(
                f"agreement last-prompt logits vs HF: max |diff| {hf['logits_max_abs_diff']:.4f} (HF logit std "
                f"{hf['logits_std']:.4f}), top-1 {'same' if hf['top1_agree'] else 'DIFFERENT'}, top-5 overlap "
                f"{hf['top5_overlap']}/5")
        if "anna_err_vs_fp32" in hf:
            lines.append(
                f"fp32 oracle (HF in float32): max |logit error| Anna {hf['anna_err_vs_fp32']:.4f}, HF "
                f"{hf['hf_err_vs_fp32']:.4f}; fp32 top-1 = Anna's: {hf['fp32_top1_is_anna']}, = HF's: "
                f"{hf['fp32_top1_is_hf']}")
    return "\n".join(lines)


def _video(video: dict[str, Any]) -> str:
    return (f"video     {video['video']}: {video['video_tokens']} video tokens in {video['frame_groups']} frame groups "
            "per prompt (TTFT includes encoding them" + (" on the CPU, --offload-vision)" if video.get("offload_vision")
                                                          else ")"))


def _image(image: dict[str, Any]) -> str:
    return (f"image     {image['image']}: {image['image_tokens']} image tokens per prompt (TTFT includes encoding it"
            + (" on the CPU, --offload-vision)" if image.get("offload_vision") else ")"))
