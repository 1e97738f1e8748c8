"""Speech synthesis benchmark: ``python -m anna_audio.tts_bench`` -- the ``speech`` task served in-process.

The model folder holds ``config.json`` and ``speech_tokenizer/config.json`` (random weights with
``--load-format dummy``, e.g. :func:`write_shape_folder` of the 1.7B shape from ``tests/audio/reference_configs``).
Every request is a synthetic prompt of ``--text-tokens`` text tokens (random ids: the weights are random too; a
Base checkpoint gets a random x-vector as its voice) that produces exactly ``--frames`` frames (EOS ignored), so
every run does the same work. The server is ``anna serve``'s app (uvicorn on a loopback port, on a thread of this
process) and each request a streamed ``POST /v1/audio/speech`` (``pcm``) read with httpx, from a client process of
its own (:mod:`anna_audio.tts_bench_client`; ``--in-process-client`` sends them from this process, as the benchmark
did before 2026-12-07: that client shares the server's interpreter lock, so its reading of 16 streams slowed the
server it timed).

Reported: at one request, the first audio (seconds to the response's first body byte) and the real-time factor (wall
seconds to the last byte / audio seconds; lower is better); at ``--concurrency`` requests sent at once, each one's
latency to its last byte and first byte (mean, min, p50, max) and its ratio to one request's, and how long their
prompt builds took (the planner's ``prepare`` on the server's worker threads; the last one's end since the client
started sending the requests). Then where a frame's time
goes (:func:`device_split`): whether the decode steps replay captured graphs, the device milliseconds of one decode
step (talker and code predictor) and of the code predictor alone per batch, and the vocoder's per frame. Targets of issue 27 on an
H200 at the 1.7B shape in bf16: RTF <= 0.05, first audio <= 60 ms, 16 concurrent within 2x of one. A prompt replays
a captured prefill graph (the served steps by path and the prefill graphs' report are printed);
``--no-prefill-graphs`` prefills eagerly instead (their A/B, decode graphs kept).

With ``--reference`` the reference implementation (:mod:`anna_audio.tts_reference`: ``qwen_tts``, random weights of
the same configuration) runs after Anna's measurement in the same process, Anna's engine and its device memory
released first, at the same device, dtype, frames, text length, runs and concurrency; the report gains
``reference`` (the same layout) and ``side_by_side`` (real-time factor, first audio and latencies of both). Where
``qwen_tts`` does not import, the benchmark stops at once with a message and exit status 2.

Example (GPU, the 1.7B shape, random weights)::

    python -m anna_audio.tts_bench --shape Qwen3-TTS-12Hz-1.7B-Base --dtype bf16 --frames 125 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from anna_audio.tts_bench_client import BenchClient

REFERENCE_CONFIGS = Path("tests/audio/reference_configs")
"""The reference configs, relative to the repository root (where the benchmark runs)."""
CODEC_CONFIG = "Qwen3-TTS-Tokenizer-12Hz.json"
FRAME_S = 0.08  # 12.5 frames per second


def write_shape_folder(shape: str, folder: str | Path, configs: Path = REFERENCE_CONFIGS) -> Path:
    """A config-only checkpoint folder of ``configs/<shape>.json`` with the released 12 Hz codec's
    ``speech_tokenizer/config.json`` (for ``--load-format dummy``)."""
    folder = Path(folder)
    (folder / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(configs / f"{shape}.json", folder / "config.json")
    shutil.copyfile(configs / CODEC_CONFIG, folder / "speech_tokenizer" / "config.json")
    return folder


class SyntheticPlanner:
    """Wraps a :class:`~anna_audio.speech.service.SpeechPlanner`: every request's text becomes ``text_tokens``
    random text ids (seeded by the text), a Base checkpoint's voice a random x-vector, and it always runs exactly
    ``frames`` frames. Each :meth:`prepare` call's ``(start, end)`` (``time.perf_counter`` seconds, on the server's
    worker threads) is appended to :attr:`spans`: how long building the prompts takes when requests arrive together."""

    def __init__(self, planner: Any, text_tokens: int, frames: int):
        self.planner = planner
        self.text_tokens = text_tokens
        self.frames = frames
        self.chunks = planner.chunks
        self.spans: list[tuple[float, float]] = []

    @property
    def sample_rate(self) -> int:
        return self.planner.sample_rate

    def prepare(self, request: Any, **_: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._prepare(request)
        finally:
            self.spans.append((start, time.perf_counter()))

    def _prepare(self, request: Any) -> Any:
        from anna_audio.qwen3_tts.prompt import SpeechRequest

        config = self.planner.parts.config
        gen = torch.Generator().manual_seed(sum(map(ord, request.text)))
        words = torch.randint(10, config.talker.text_vocab_size, (self.text_tokens,), generator=gen)
        wrap = torch.tensor([config.text_ids["im_start"], 11, 12])
        ids = torch.cat([wrap, words, torch.tensor([config.text_ids["im_end"], 13]), wrap])
        xvector = torch.randn(config.talker.shape.hidden_size, generator=gen) if config.accepts_reference_audio \
            else None
        speaker = next(iter(sorted(config.talker.speakers)), None) if config.accepts_speaker else None
        return self.planner.prepare_tokens(
            SpeechRequest(assistant_ids=ids, speaker=speaker, speaker_embedding=xvector, non_streaming_text=True),
            max_frames=self.frames, ignore_eos=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InProcessServer:
    """``anna serve``'s app over a built speech engine, on uvicorn in a thread (loopback)."""

    def __init__(self, built: Any):
        import uvicorn
        from anna_core.plugins import make_plugin_manager
        from anna_core.server.app import create_app
        from anna_core.server.state import ServerState

        from anna_audio.plugin import SPEECH_TASK
        from anna_audio.speech import task

        self.built = built
        self.state = ServerState(model_name="bench")
        self.port = _free_port()

        async def start_client() -> None:  # on the server's loop, as anna serve does
            self.state.set_ready(task.start(self.built), None, max_model_len=self.built.max_model_len)

        app = create_app(self.state, pm=make_plugin_manager(load_entry_points=False), task=SPEECH_TASK,
                         on_startup=[start_client])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> InProcessServer:
        self.thread.start()
        deadline = time.time() + 120
        while not (self.server.started and self.state.ready):
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("the in-process server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        # litestar's module-level route handlers keep the last app (its state, its startup hook's closure): the
        # engine stays reachable through neither, and its and the vocoder's threads end
        service, self.state.engine, self.built = self.state.engine, None, None
        if service is not None:
            asyncio.run(service.shutdown(drain=False))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/audio/speech"


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "p50": statistics.median(values), "max": max(values)}


def run_bench(model_dir: str | Path, *, load_format: str = "dummy", device: str = "auto", dtype: str = "auto",
              frames: int = 125, text_tokens: int = 32, concurrency: int = 16, runs: int = 3,
              cuda_graph: bool = True, chunk_frames: tuple[int, int] | None = None,
              async_scheduling: bool = True, prefill_graphs: bool = True,
              disable_kernels: tuple[str, ...] = (), max_prefill_replays: int | None = None,
              client_process: bool = True) -> dict[str, Any]:
    """Load, serve in-process, and measure (see the module docstring); the report as a dict. ``disable_kernels``:
    kernel implementations not to use (``"op:name"``, as ``anna serve --disable-kernel``). ``async_scheduling``:
    the engine's (decode steps launched ahead of the previous step's read-back); ``prefill_graphs``: with
    ``cuda_graph``, prompts replay captured prefill graphs (``RunnerConfig.prefill_graphs``; False: eager prefills,
    the A/B of the first audio); ``max_prefill_replays``: the most fresh prompts of one step that replay their
    own prefill graph (``RunnerConfig.max_prefill_replays``; None: its default; more prompts share one eager pass:
    the A/B of the concurrent requests' prefills); ``client_process``: the HTTP client runs in a process of its own
    (:class:`~anna_audio.tts_bench_client.BenchClient`; False: in this one, sharing the server's interpreter lock, as
    the benchmark did before 2026-12-07). The report's ``"steps"`` counts the served steps by path
    (``"decode_graph"``, ``"launched_ahead"``: decode graph steps not waited for, ``"prefill_graph"``: prompts
    replayed from a prefill graph, ``"eager"``) and ``"prefill_graphs"`` is the runner's prefill graph report
    (captured, prompt lengths, why not).

    Raises:
        ValueError: a non-positive ``frames``, ``text_tokens``, ``concurrency`` or ``runs``.
    """
    if min(frames, text_tokens, concurrency, runs) < 1:
        raise ValueError("frames, text_tokens, concurrency and runs must be positive")
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.loading import load_model

    from anna_audio.speech import task
    from anna_audio.speech.service import ChunkPolicy

    loaded = load_model(model_dir, device=device, dtype=dtype, load_format=load_format, disable_kernels=disable_kernels)
    replays = {} if max_prefill_replays is None else {"max_prefill_replays": max_prefill_replays}
    runner = RunnerConfig(cuda_graph=cuda_graph, warmup=loaded.device.type != "cpu", prefill_graphs=prefill_graphs,
                          **replays)
    built = task.build(loaded, EngineConfig(max_num_seqs=max(concurrency, 1), async_scheduling=async_scheduling), runner)
    if chunk_frames is not None:
        built.planner.chunks = ChunkPolicy(*chunk_frames)
    built.planner = SyntheticPlanner(built.planner, text_tokens, frames)
    audio_s = frames * FRAME_S
    with InProcessServer(built) as server, BenchClient(client_process) as client:
        client.round(server.url, 1, 10_000)  # warm-up: first-call allocations, the vocoder's thread, the client
        singles = [client.round(server.url, 1, r)[1][0] for r in range(runs)]
        built.planner.spans.clear()
        crowd_start, crowd = client.round(server.url, concurrency, 1000)
    expected = frames * 1920 * 2
    if any(r["bytes"] != expected for r in singles + crowd):
        raise RuntimeError(f"a response did not hold {frames} frames ({expected} bytes of pcm)")
    one = min(singles, key=lambda r: r["latency_s"])
    report = {
        "model_dir": str(model_dir), "device": str(loaded.device), "dtype": str(loaded.dtype).replace("torch.", ""),
        "frames": frames, "audio_s": audio_s, "text_tokens": text_tokens,
        "chunk_frames": [built.planner.chunks.first, built.planner.chunks.rest],
        "disabled_kernels": list(disable_kernels), "max_prefill_replays": runner.max_prefill_replays,
        "client": "own process" if client_process else "server's process",
        "one": {"first_audio_s": one["first_audio_s"], "latency_s": one["latency_s"],
                "rtf": one["latency_s"] / audio_s, "runs": singles},
        "concurrent": {"requests": concurrency, "latency_s": _stats([r["latency_s"] for r in crowd]),
                       "first_audio_s": _stats([r["first_audio_s"] for r in crowd])},
    }
    report["concurrent"]["latency_vs_one"] = report["concurrent"]["latency_s"]["mean"] / one["latency_s"]
    spans = built.planner.spans  # the concurrent round's prompt builds (one per request)
    report["concurrent"]["prepare_s"] = {**_stats([end - start for start, end in spans]),
                                         "last_end": max(end for _, end in spans) - crowd_start}
    report["vocoder_calls"] = built.vocoder.calls
    steps = built.engine.runner
    report["steps"] = {"async_scheduling": async_scheduling, "decode_graph": steps.num_graph_steps,
                       "launched_ahead": steps.num_launched_ahead, "prefill_graph": steps.num_prefill_graph_steps,
                       "eager": steps.num_eager_steps}
    report["prefill_graphs"] = steps.graph_report()["prefill"]
    report["split"] = device_split(built, sorted({1, concurrency}), built.planner.chunks.rest)
    return report


def _median_ms(accel: Any, fn: Any, iters: int = 10) -> float:
    fn()  # warm
    timer, times = accel.timer(), []
    for _ in range(iters):
        timer.start()
        fn()
        times.append(timer.stop())
    return sorted(times)[len(times) // 2]


@torch.inference_mode()
def device_split(built: Any, batches: list[int], chunk: int) -> dict[str, Any]:
    """Where a frame's time goes, after the served rounds (the engine idle): ``{"graphs": the runner's decode graph
    report, "step_ms": {batch: device ms of one captured decode step (talker + code predictor + head), all rows
    padding}, "predictor_ms": {batch: device ms of the code predictor's frame alone (captured on its own where the
    device captures graphs, else eager)}, "vocoder_ms_per_frame": {batch: ms per frame of a ``chunk``-frame chunk that
    continues each stream, as served (replaying the vocoder's graphs where captured)}, "vocoder_eager_ms_per_frame":
    {batch: the same decoded eagerly}, "vocoder_graphs": {"captured", "why_not", "chunk_frames", "batch_sizes"}}``."""
    from anna_audio.qwen3_tts.stream_state import StreamState

    runner, model = built.engine.runner, built.engine.model
    accel, graphs = runner.accel, runner.graphs
    vocoder = built.vocoder
    vgraphs = vocoder.graphs
    out: dict[str, Any] = {"graphs": runner.graph_report()["decode"], "step_ms": {}, "predictor_ms": {},
                           "vocoder_ms_per_frame": {}, "vocoder_eager_ms_per_frame": {},
                           "vocoder_graphs": {"captured": vgraphs is not None, "why_not": vocoder.why_not_graphs,
                                              "chunk_frames": vgraphs.lengths if vgraphs else [],
                                              "batch_sizes": vgraphs.buckets if vgraphs else []}}
    predictor, hidden, decoder = model.frame_predictor, model.hidden_size, vocoder.decoder
    for b in batches:
        bucket = graphs.bucket_for(b) if graphs is not None else None
        if bucket is not None:
            out["step_ms"][b] = graphs.time_replay(bucket, mode="logits", iters=10)
        h = torch.zeros(b, hidden, dtype=model.last_hidden.dtype, device=model.last_hidden.device)
        run = lambda h=h: predictor(h, h)  # noqa: E731 - the frame on static inputs
        if accel.graphs and b <= predictor.rows:
            with accel.side_stream():
                run()
            accel.synchronize()
            run = accel.capture(run).replay
        out["predictor_ms"][b] = _median_ms(accel, run)
        q = decoder.config.num_quantizers
        codes = torch.zeros(b, chunk, q, dtype=torch.int64)  # from the host, as served
        states = [StreamState() for _ in range(b)]
        decoder.decode_streams(states, codes)  # the streams' first chunks: later ones continue them
        decode = lambda states=states, codes=codes: decoder.decode_streams(states, codes)  # noqa: E731
        out["vocoder_eager_ms_per_frame"][b] = _median_ms(accel, decode, 5) / chunk
        if vgraphs is not None and vgraphs.covers(chunk):
            decode = lambda states=states, codes=codes: vgraphs.decode(states, codes)  # noqa: E731
        out["vocoder_ms_per_frame"][b] = _median_ms(accel, decode, 5) / chunk
    return out


def release_engine(device: str) -> dict[str, int]:
    """After :func:`run_bench` returned (its engine, server and threads gone): collect what is left of them and
    give the allocator's cached blocks back to ``device``; its :func:`~anna_core.device.memory_stats` after."""
    from anna_core.device import empty_cache, memory_stats

    gc.collect()
    empty_cache(torch.device(device))
    return memory_stats(torch.device(device))


def side_by_side(anna: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """Anna's and the reference's headline figures, ``{figure: {"anna": x, "reference": y}}``."""
    pick = {"rtf_one": lambda r: r["one"]["rtf"], "first_audio_s_one": lambda r: r["one"]["first_audio_s"],
            "latency_s_one": lambda r: r["one"]["latency_s"],
            "latency_s_concurrent_mean": lambda r: r["concurrent"]["latency_s"]["mean"],
            "first_audio_s_concurrent_mean": lambda r: r["concurrent"]["first_audio_s"]["mean"],
            "latency_vs_one": lambda r: r["concurrent"]["latency_vs_one"]}
    out: dict[str, Any] = {name: {"anna": f(anna), "reference": f(reference)} for name, f in pick.items()}
    out["concurrency"] = anna["concurrent"]["requests"]
    return out


def with_reference(report: dict[str, Any], *, text_tokens: int, runs: int) -> dict[str, Any]:
    """``report`` (Anna's, from :func:`run_bench`, whose engine is released here) with the reference measured in
    this process at the same configuration, device, dtype, frames, text length, runs and concurrency.

    Raises:
        ReferenceUnavailable: ``qwen_tts`` does not import here.
    """
    from anna_audio import tts_reference

    memory = release_engine(report["device"])
    reference = tts_reference.load_reference(report["model_dir"], report["device"], getattr(torch, report["dtype"]))
    figures = tts_reference.measure(reference, frames=report["frames"], text_tokens=text_tokens,
                                    concurrency=report["concurrent"]["requests"], runs=runs)
    figures["device_memory_before"] = memory
    return {**report, "reference": figures, "side_by_side": side_by_side(report, figures)}


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def main(argv: list[str] | None = None) -> None:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m anna_audio.tts_bench", description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--model-dir", help="a checkpoint folder (with --load-format dummy: configs only)")
    where.add_argument("--shape", help="a tests/audio/reference_configs name, e.g. Qwen3-TTS-12Hz-1.7B-Base")
    parser.add_argument("--load-format", default="dummy", choices=("auto", "safetensors", "dummy"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--frames", type=int, default=125, help="frames per request (80 ms each)")
    parser.add_argument("--text-tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3, help="single-request runs (the best is reported)")
    parser.add_argument("--chunk-frames", default=None, help="first,rest frames per decoded chunk (default 1,8)")
    parser.add_argument("--no-cuda-graph", action="store_true")
    parser.add_argument("--disable-kernel", action="append", default=[], metavar="OP:NAME",
                        help="a kernel implementation not to use (repeatable; the A/B of one kernel)")
    parser.add_argument("--no-prefill-graphs", action="store_true",
                        help="prefills eager, decode graphs kept (the A/B baseline of the prefill graphs)")
    parser.add_argument("--max-prefill-replays", type=int, default=None, metavar="N",
                        help="the most fresh prompts of a step that each replay a prefill graph (default: the "
                             "runner's); more share one eager pass")
    parser.add_argument("--no-async-scheduling", action="store_true",
                        help="wait for every decode step before the next (the A/B baseline of the overlap)")
    parser.add_argument("--in-process-client", action="store_true",
                        help="send the requests from this process (sharing the server's interpreter lock), as before "
                             "2026-12-07, instead of a client process")
    parser.add_argument("--reference", action="store_true",
                        help="then the reference implementation (qwen_tts) in this process, side by side")
    parser.add_argument("--out", default=None, help="also write the report (JSON) here")
    args = parser.parse_args(argv)
    if args.max_prefill_replays is not None and args.max_prefill_replays < 0:
        parser.error(f"--max-prefill-replays must be at least 0, got {args.max_prefill_replays}")
    if args.reference:
        from anna_audio.tts_reference import ReferenceUnavailable, require_reference

        try:
            require_reference()  # before Anna's run: a missing reference stops the benchmark at once
        except ReferenceUnavailable as exc:
            print(f"tts_bench --reference: {exc}", file=sys.stderr)
            sys.exit(2)
    model_dir = args.model_dir
    if args.shape:
        import tempfile

        model_dir = write_shape_folder(args.shape, Path(tempfile.mkdtemp()) / args.shape)
    chunks = tuple(int(x) for x in args.chunk_frames.split(",")) if args.chunk_frames else None
    from anna_core.errors import AnnaError

    try:
        report = run_bench(model_dir, load_format=args.load_format, device=args.device, dtype=args.dtype,
                           frames=args.frames, text_tokens=args.text_tokens, concurrency=args.concurrency,
                           runs=args.runs, cuda_graph=not args.no_cuda_graph, chunk_frames=chunks,
                           async_scheduling=not args.no_async_scheduling, prefill_graphs=not args.no_prefill_graphs,
                           disable_kernels=tuple(args.disable_kernel), max_prefill_replays=args.max_prefill_replays,
                           client_process=not args.in_process_client)
    except AnnaError as exc:  # a bad model folder, device, dtype or --disable-kernel entry: one line, not a traceback
        print(f"tts_bench: {exc}", file=sys.stderr)
        sys.exit(2)
    if args.reference:
        report = with_reference(report, text_tokens=args.text_tokens, runs=args.runs)
    one, crowd = report["one"], report["concurrent"]
    print(f"tts_bench {report['device']} {report['dtype']} {report['frames']} frames ({report['audio_s']:.2f} s audio)")
    print(f"one request: first audio {one['first_audio_s'] * 1000:.1f} ms, latency {one['latency_s']:.3f} s, "
          f"RTF {one['rtf']:.4f}")
    print(f"{crowd['requests']} concurrent: latency mean {crowd['latency_s']['mean']:.3f} s (x{crowd['latency_vs_one']:.2f}"
          f" of one), p50 {crowd['latency_s']['p50']:.3f} s, max {crowd['latency_s']['max']:.3f} s; first audio mean "
          f"{crowd['first_audio_s']['mean'] * 1000:.1f} ms (min {crowd['first_audio_s']['min'] * 1000:.1f}, max "
          f"{crowd['first_audio_s']['max'] * 1000:.1f}); prompt builds mean {crowd['prepare_s']['mean'] * 1000:.1f} ms, "
          f"max {crowd['prepare_s']['max'] * 1000:.1f}, the last done {crowd['prepare_s']['last_end'] * 1000:.1f} ms "
          f"after the requests were sent")
    st = report["steps"]
    print(f"engine steps: async scheduling {'on' if st['async_scheduling'] else 'off'}, decode graph "
          f"{st['decode_graph']} ({st['launched_ahead']} launched ahead), prefill graph {st['prefill_graph']}, "
          f"eager {st['eager']}")
    pg = report["prefill_graphs"]
    print(f"prefill graphs: captured {pg['captured']}, prompt lengths {pg['prompt_lengths']}"
          + (f" (why not: {pg['why_not']})" if pg["why_not"] else ""))
    split, graphs = report["split"], report["split"]["graphs"]
    print(f"decode graphs: captured {graphs['captured']}, batch sizes {graphs['batch_sizes']}"
          + (f" (why not: {graphs['why_not']})" if graphs["why_not"] else ""))
    vg = split["vocoder_graphs"]
    print(f"vocoder graphs: captured {vg['captured']}, chunk frames {vg['chunk_frames']}, batch sizes "
          f"{vg['batch_sizes']}" + (f" (why not: {vg['why_not']})" if vg["why_not"] else ""))
    for b, predictor_ms in split["predictor_ms"].items():
        step = split["step_ms"].get(b)
        step_text = f"{step:.2f}" if step is not None else "n/a (no graph)"
        print(f"device split at {b} request(s), ms per frame: decode step {step_text} (code predictor "
              f"{predictor_ms:.2f} of it), vocoder {split['vocoder_ms_per_frame'][b]:.2f} "
              f"({'graphs' if vg['captured'] else 'eager'}; eager {split['vocoder_eager_ms_per_frame'][b]:.2f}) "
              f"(chunks of {report['chunk_frames'][1]} frames)")
    if "side_by_side" in report:
        ref = report["reference"]
        print(f"reference (qwen_tts, same process, not streamed): one request latency {ref['one']['latency_s']:.3f} s, "
              f"RTF {_figure(ref['one']['rtf'])} (frames made {ref['one']['runs'][0]['frames_made']}); "
              f"{ref['concurrent']['requests']} in one call {ref['concurrent']['latency_s']['mean']:.3f} s "
              f"(x{ref['concurrent']['latency_vs_one']:.2f} of one)")
        for name, pair in report["side_by_side"].items():
            if isinstance(pair, dict):
                print(f"side by side {name}: anna {_figure(pair['anna'])}, reference {_figure(pair['reference'])}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
