"""``python -m anna_core.bench.vl_bench``: what images and videos cost a vision-language model in the engine.

In one process, on one loaded model and one engine (built as :mod:`anna_core.bench.engine_bench` builds it:
graphs, warm-up, asynchronous scheduling, no prefix or prompt cache, so every request is computed):

* **image TTFT**: one request, a chat turn with one random ``WxH`` image (:mod:`anna_core.bench.image_prompts`),
  from adding it to the end of the step that gave its first token: encoding the image, splicing, the prefill and
  the first sample. Median of ``runs`` (a fresh image each), after ``warmup`` untimed ones.
* **video TTFT**: the same with a random ``frames``-frame video (:mod:`anna_core.bench.video_prompts`).
* **text TTFT**: a text-only prompt of random ids as long as the image prompt (the language model's share of the
  image TTFT).
* **decode beside image prefills**: ``streams`` text requests (random ids) decode; their inter-token latency is
  recorded over ``baseline_steps`` steps alone, then, ``runs`` times, ``image_requests`` image chats are added
  at once and every stream-token-bearing step until each image request has its first token is one ITL "during"
  (that step holds the images' encoding and prefill beside the decodes); the image requests end after two tokens
  and a few steps separate the rounds.
* **HF transformers** (unless ``compare_hf`` is off): the family's whole vision-language HF model over the same
  tensors (:func:`anna_core.bench.hf_compare.build_hf` with ``multimodal=True``), fed the same processor outputs
  (the processor's ``hf_inputs``); its image TTFT is a greedy ``generate`` of one token, synchronised, median of
  ``runs`` after ``warmup``; ``hf_first_token_equal`` says whether its token equals Anna's on the last run's
  prompt (expected in float32, not guaranteed in 16-bit dtypes).

Preparing the media (the image processor, video patching) is not timed on either side. The encoder's time
per TTFT request (``encoder_device_ms``: its device time where the engine measures it, else its host time) comes
from the engine's encoder counters. :func:`format_lines` prints one line per measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import attrs

from anna_core.errors import AnnaError


@attrs.define
class VLBenchSettings:
    """What to measure (the command's flags).

    Raises:
        AnnaError: a non-positive count.
    """

    model_dir: Path
    device: str = "auto"
    dtype: str = "auto"
    load_format: str = "dummy"
    image_size: tuple[int, int] = (1024, 1024)
    video_frames: int = 8
    video_size: tuple[int, int] = (640, 480)
    runs: int = 3
    warmup: int = 1
    streams: int = 8
    stream_input_len: int = 512
    stream_output_len: int = 512
    image_requests: int = 4
    baseline_steps: int = 32
    cuda_graph: bool = True
    compare_hf: bool = True
    seed: int = 0

    def __attrs_post_init__(self) -> None:
        for name in ("runs", "streams", "stream_input_len", "image_requests", "baseline_steps", "video_frames"):
            if getattr(self, name) < 1:
                raise AnnaError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise AnnaError(f"warmup must be non-negative, got {self.warmup}")


def _build_engine(loaded: Any, s: VLBenchSettings, max_len: int) -> Any:
    """An engine for ``streams + image_requests`` sequences of at most ``max_len`` tokens, set up like
    ``anna bench``'s (warm-up, decode and prefill graphs where the device has them)."""
    from anna_core.bench.engine_bench import engine_config
    from anna_core.engine.config import default_max_prefill_tokens
    from anna_core.engine.llm_engine import LLMEngine
    from anna_core.engine.model_runner import RunnerConfig

    batch = s.streams + s.image_requests
    prefill = max(default_max_prefill_tokens(loaded.device.type), max_len)
    engine = LLMEngine.from_loaded(loaded, engine_config(batch, max_len, prefill))
    engine.runner.setup(RunnerConfig(cuda_graph=s.cuda_graph, warmup=loaded.device.type != "cpu"),
                        max_model_len=engine.max_model_len, max_num_seqs=batch,
                        max_prefill_tokens=engine.longest_one_step_prompt())
    return engine


def _encoder_ms(engine: Any) -> float:
    """The encoder's milliseconds so far: device time where the engine measured it, else host time."""
    enc = engine.stats().get("encoder", {})
    device_s = enc.get("encode_device_s")
    return 1e3 * (device_s if device_s is not None else enc.get("encode_host_s", 0.0))


def media_ttft(engine: Any, requests: Any, s: VLBenchSettings, tag: str) -> dict[str, Any]:
    """TTFT of single media requests: ``requests(seed) -> ([prompt], [inputs])`` draws one; returns
    ``ttft_ms`` (median), ``ttft_ms_all``, ``encoder_ms`` (median per request), ``prompt_tokens``,
    ``media_tokens`` and ``first_token`` / ``prompt`` / ``inputs`` of the last run."""
    from anna_core.bench.engine_bench import timed_run

    ttfts, encoder = [], []
    for r in range(s.warmup + s.runs):
        prompts, inputs = requests(s.seed * 1000 + r)
        before = _encoder_ms(engine)
        res = timed_run(engine, prompts, 2, f"{tag}{r}", multimodal=inputs)
        if r >= s.warmup:
            ttfts.append(res["ttft_s"] * 1e3)
            encoder.append(_encoder_ms(engine) - before)
    return {"ttft_ms": statistics.median(ttfts), "ttft_ms_all": ttfts, "encoder_ms": statistics.median(encoder),
            "prompt_tokens": len(prompts[0]), "media_tokens": sum(m.length for m in inputs[0].items),
            "media_items": len(inputs[0].items), "first_token": res["tokens"][0][0], "prompt": prompts[0],
            "inputs": inputs[0]}


def text_ttft(engine: Any, loaded: Any, prompt_tokens: int, s: VLBenchSettings) -> dict[str, Any]:
    """TTFT of a text-only prompt of ``prompt_tokens`` random ids (the image prompt's length): the language
    model's share of the image TTFT, so ``image - text - encoder`` is what splicing the media costs. Returns
    ``ttft_ms`` (median of ``runs`` after ``warmup``), ``ttft_ms_all`` and ``prompt_tokens``."""
    import torch

    from anna_core.bench.engine_bench import timed_run

    ttfts = []
    for r in range(s.warmup + s.runs):
        gen = torch.Generator().manual_seed(s.seed * 1000 + 900 + r)
        ids = torch.randint(0, loaded.model.vocab_size, (prompt_tokens,), generator=gen).tolist()
        res = timed_run(engine, [ids], 2, f"text{r}")
        if r >= s.warmup:
            ttfts.append(res["ttft_s"] * 1e3)
    return {"ttft_ms": statistics.median(ttfts), "ttft_ms_all": ttfts, "prompt_tokens": prompt_tokens}


def decode_beside_images(engine: Any, loaded: Any, s: VLBenchSettings) -> dict[str, Any]:
    """Stream ITL alone and while image requests prefill beside the streams (see the module docstring).

    Raises:
        AnnaError: a request failed, or a stream finished before the last round (raise ``stream_output_len``).
    """
    import torch

    from anna_core.bench.image_prompts import ImageSpec, image_requests
    from anna_core.bench.roofline import wall_clock
    from anna_core.bench.timed_runs import percentile
    from anna_core.engine.sampling_params import SamplingParams

    gen = torch.Generator().manual_seed(s.seed * 1000 + 777)
    text = torch.randint(0, loaded.model.vocab_size, (s.streams, s.stream_input_len), generator=gen).tolist()
    long = SamplingParams(max_tokens=s.stream_output_len, temperature=0.0, ignore_eos=True)
    streams = [f"stream-{i}" for i in range(s.streams)]
    for rid, ids in zip(streams, text):
        engine.add_request(rid, ids, long)
    live = set(streams)
    last = [wall_clock()]

    def step() -> tuple[bool, set[str], float]:
        """One engine step: (a stream got a token, requests that got one, seconds since the last stream token)."""
        outs = engine.step()
        now = wall_clock()
        got = set()
        for o in outs:
            if o.error:
                raise AnnaError(f"benchmark request {o.request_id} failed: {o.error}")
            if o.delta_token_ids:
                got.add(o.request_id)
            if o.finished and o.request_id in live:
                raise AnnaError(f"stream {o.request_id} finished before the benchmark ended: raise stream_output_len")
        bearing = bool(got & live)
        gap = now - last[0]
        if bearing:
            last[0] = now
        return bearing, got, gap

    started: set[str] = set()
    while started != live:  # every stream decoding, then a few steps more
        started |= step()[1] & live
    for _ in range(4):
        while not step()[0]:
            pass
    alone: list[float] = []
    while len(alone) < s.baseline_steps:
        bearing, _, gap = step()
        if bearing:
            alone.append(gap)
    during: list[float] = []
    image_ttft: list[float] = []
    spec = ImageSpec(size=s.image_size)
    short = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    for r in range(s.runs):
        prompts, inputs = image_requests(loaded, spec, s.image_requests, s.seed * 1000 + 500 + r)
        t0 = wall_clock()
        # preparing the media (drawing and preprocessing the images) happens off the engine loop in a server (in
        # the request handler), so the streams' clock restarts here: the first ITL "during" is the step that
        # takes the images in, not that step plus the host-side preparation
        last[0] = t0
        waiting = {f"img{r}-{i}" for i in range(s.image_requests)}
        for i, (ids, mm) in enumerate(zip(prompts, inputs)):
            engine.add_request(f"img{r}-{i}", ids, short, multimodal=mm)
        while waiting:
            bearing, got, gap = step()
            image_ttft += [wall_clock() - t0] * len(got & waiting)
            waiting -= got
            if bearing:
                during.append(gap)
        for _ in range(4):  # the image requests finish; the streams settle
            while not step()[0]:
                pass
    for rid in streams:
        engine.abort_request(rid)
    while engine.has_unfinished():
        engine.step()
    mean_alone, mean_during = statistics.fmean(alone), statistics.fmean(during)
    return {"streams": s.streams, "image_requests": s.image_requests, "rounds": s.runs,
            "itl_ms_alone_p50": percentile(alone, 0.5) * 1e3, "itl_ms_alone_mean": mean_alone * 1e3,
            "itl_ms_during_mean": mean_during * 1e3, "itl_ms_during_max": max(during) * 1e3,
            "steps_during": len(during),
            "stream_tokens_per_s_alone": s.streams / mean_alone, "stream_tokens_per_s_during": s.streams / mean_during,
            "image_ttft_ms_p50": percentile(image_ttft, 0.5) * 1e3, "image_ttft_ms_max": max(image_ttft) * 1e3}


def hf_image_ttft(loaded: Any, requests: Any, s: VLBenchSettings, anna_last: dict[str, Any]) -> dict[str, Any]:
    """HF transformers' image TTFT on the same weights and processor inputs (see the module docstring).

    Raises:
        AnnaError: the model has no whole-model HF export or its processor no ``hf_inputs``.
    """
    import torch
    from transformers import GenerationConfig

    from anna_core.bench.hf_compare import build_hf, fla_in_use
    from anna_core.bench.roofline import wall_clock
    from anna_core.device import accelerator

    to_hf = getattr(loaded.processor, "hf_inputs", None)
    if to_hf is None:
        raise AnnaError(f"the {loaded.family!r} processor has no hf_inputs(): no HF side by side for it")
    hf = build_hf(loaded, multimodal=True)
    accel = accelerator(loaded.device)
    gen = GenerationConfig(do_sample=False, max_new_tokens=1, min_new_tokens=1, eos_token_id=None, pad_token_id=0)

    import inspect

    takes = inspect.signature(hf.forward).parameters

    def one(prompt: list[int], inputs: Any) -> tuple[float, int]:
        args = to_hf(prompt, inputs, device=loaded.device)
        if "mm_token_type_ids" not in takes:  # transformers releases before it (the GPU machine's 5.17)
            args.pop("mm_token_type_ids")
        accel.synchronize()
        t = wall_clock()
        with torch.inference_mode():
            out = hf.generate(**args, generation_config=gen)
        token = int(out[0, -1].item())  # waits for the device
        return (wall_clock() - t) * 1e3, token

    times = []
    for r in range(s.warmup + s.runs):
        prompts, inputs = requests(s.seed * 1000 + 300 + r)
        ms, _ = one(prompts[0], inputs[0])
        if r >= s.warmup:
            times.append(ms)
    _, token = one(anna_last["prompt"], anna_last["inputs"])
    import transformers

    return {"ttft_ms": statistics.median(times), "ttft_ms_all": times, "fla": fla_in_use(),
            "transformers": transformers.__version__, "first_token_equal": token == anna_last["first_token"]}


def run_vl_bench(s: VLBenchSettings, emit: Any = None) -> dict[str, Any]:
    """Load the model and run every measurement; returns the report (:func:`format_lines` writes its lines).
    ``emit(line)``, when given, gets each line as soon as it is measured (a run cut short keeps what it had).

    Raises:
        AnnaError: the model does not load, takes no images or videos, or a measurement failed.
    """
    from anna_core.bench.engine_bench import device_name
    from anna_core.bench.image_prompts import ImageSpec, image_requests
    from anna_core.bench.roofline import wall_clock
    from anna_core.bench.video_prompts import VideoSpec, video_requests
    from anna_core.loading import load_model

    t = wall_clock()
    loaded = load_model(s.model_dir, device=s.device, dtype=s.dtype, load_format=s.load_format)
    load_s = wall_clock() - t
    declared = loaded.model.capabilities.modalities
    if "image" not in declared or "video" not in declared:
        raise AnnaError(f"{str(s.model_dir)!r} is not a vision-language model taking images and videos (this "
                        f"{loaded.family} model takes {', '.join(declared) or 'text only'})")
    if loaded.processor is None:
        raise AnnaError(f"{str(s.model_dir)!r} has no media processor (its preprocessor config is missing)")
    image, video = ImageSpec(size=s.image_size), VideoSpec(frames=s.video_frames, size=s.video_size)

    def images(seed: int) -> Any:
        return image_requests(loaded, image, 1, seed)

    def videos(seed: int) -> Any:
        return video_requests(loaded, video, 1, seed)

    longest = max(len(images(0)[0][0]), len(videos(0)[0][0]), s.stream_input_len + s.stream_output_len)
    t = wall_clock()
    engine = _build_engine(loaded, s, longest + 2)
    setup_s = wall_clock() - t
    report: dict[str, Any] = {"model": str(s.model_dir), "device": str(loaded.device),
                              "device_name": device_name(loaded.device), "dtype": str(loaded.dtype).replace("torch.", ""),
                              "load_s": load_s, "setup_s": setup_s, "runs": s.runs, "warmup": s.warmup,
                              "image": image.describe(), "video": video.describe()}
    emit = emit or (lambda line: None)
    emit(format_lines(report)[0])
    img = media_ttft(engine, images, s, "image")
    report["image_ttft"] = {k: v for k, v in img.items() if k not in ("prompt", "inputs")}
    emit(format_lines(report)[-1])
    vid = media_ttft(engine, videos, s, "video")
    report["video_ttft"] = {k: v for k, v in vid.items() if k not in ("prompt", "inputs")}
    emit(format_lines(report)[-1])
    text = text_ttft(engine, loaded, img["prompt_tokens"], s)
    report["text_ttft"] = text
    emit(format_lines(report)[-1])
    report["beside"] = decode_beside_images(engine, loaded, s)
    emit(format_lines(report)[-1])
    if s.compare_hf:
        report["hf"] = hf_image_ttft(loaded, images, s, img)
        report["hf"]["speedup"] = report["hf"]["ttft_ms"] / report["image_ttft"]["ttft_ms"]
        emit(format_lines(report)[-1])
    return report


def format_lines(r: dict[str, Any]) -> list[str]:
    """The header line, then one line per measurement present in report ``r`` (in the order measured)."""
    lines = [f"vl_bench {r['model']} on {r['device_name']} ({r['dtype']}): load {r['load_s']:.1f} s, "
             f"setup {r['setup_s']:.1f} s"]
    if "image_ttft" in r:
        m = r["image_ttft"]
        lines.append(f"image TTFT {m['ttft_ms']:.1f} ms (median of {len(m['ttft_ms_all'])}; {r['image']}: "
                     f"{m['media_tokens']} image tokens, prompt {m['prompt_tokens']} tokens; encoder "
                     f"{m['encoder_ms']:.1f} ms)")
    if "video_ttft" in r:
        m = r["video_ttft"]
        lines.append(f"video TTFT {m['ttft_ms']:.1f} ms (median of {len(m['ttft_ms_all'])}; {r['video']}: "
                     f"{m['media_items']} frame groups, {m['media_tokens']} video tokens, prompt {m['prompt_tokens']} "
                     f"tokens; encoder {m['encoder_ms']:.1f} ms)")
    if "text_ttft" in r:
        m = r["text_ttft"]
        lines.append(f"text TTFT {m['ttft_ms']:.1f} ms (median of {len(m['ttft_ms_all'])}; {m['prompt_tokens']} random "
                     f"text tokens, the image prompt's length)")
    if "beside" in r:
        b = r["beside"]
        lines.append(f"decode beside image prefills: {b['streams']} streams, ITL alone {b['itl_ms_alone_mean']:.2f} ms "
                     f"mean (p50 {b['itl_ms_alone_p50']:.2f}), while {b['image_requests']} image requests prefill "
                     f"{b['itl_ms_during_mean']:.2f} ms mean, {b['itl_ms_during_max']:.2f} ms max over "
                     f"{b['steps_during']} steps; stream tok/s {b['stream_tokens_per_s_alone']:.1f} alone, "
                     f"{b['stream_tokens_per_s_during']:.1f} during; image TTFT beside the streams "
                     f"{b['image_ttft_ms_p50']:.1f} ms p50")
    if "hf" in r:
        h = r["hf"]
        lines.append(f"HF image TTFT {h['ttft_ms']:.1f} ms (median of {len(h['ttft_ms_all'])}; transformers "
                     f"{h['transformers']}, fla {'yes' if h['fla'] else 'no'}): {relative_speed(h['speedup'])}; "
                     f"first token equal: {'yes' if h['first_token_equal'] else 'no'}")
    return lines


def relative_speed(speedup: float) -> str:
    """``"Anna 2.50x faster"`` for ``speedup`` (HF's time over Anna's) >= 1, else ``"Anna 7.50x slower"``."""
    if speedup >= 1:
        return f"Anna {speedup:.2f}x faster"
    return f"Anna {1 / speedup:.2f}x slower" if speedup > 0 else "Anna's time not measurable"


def _size(text: str) -> tuple[int, int]:
    from anna_core.bench.image_prompts import parse_image_size

    return parse_image_size(text)


def main(argv: list[str] | None = None) -> int:
    """The command line: prints :func:`format_lines`' lines as they are measured; ``--out`` writes the JSON report.

    Returns:
        0; 2 for a usage error (a bad count, a missing ``--model-dir``) and 1 for a model that does not load or is
        not a vision-language one, or a failed measurement: either printed as one line on stderr, no traceback.
    """
    p = argparse.ArgumentParser(prog="python -m anna_core.bench.vl_bench", description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, required=True)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--load-format", default="dummy")
    p.add_argument("--image-size", type=_size, default=(1024, 1024), help="WxH (default 1024x1024)")
    p.add_argument("--video-frames", type=int, default=8)
    p.add_argument("--video-size", type=_size, default=(640, 480), help="WxH of every frame (default 640x480)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--stream-input-len", type=int, default=512)
    p.add_argument("--stream-output-len", type=int, default=512)
    p.add_argument("--image-requests", type=int, default=4)
    p.add_argument("--baseline-steps", type=int, default=32)
    p.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false")
    p.add_argument("--skip-hf", dest="compare_hf", action="store_false")
    p.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    args = vars(p.parse_args(argv))
    out = args.pop("out")
    try:
        settings = VLBenchSettings(**args)
        if not settings.model_dir.is_dir():
            raise AnnaError(f"--model-dir {str(settings.model_dir)!r} is not a folder")
    except AnnaError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        report = run_vl_bench(settings, emit=lambda line: print(line, flush=True))
    except AnnaError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 1
    if out is not None:
        out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
