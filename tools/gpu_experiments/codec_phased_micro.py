"""Issue 27 on a GPU: the codec decoder's dilated convolutions dilated against phased
(:func:`anna_audio.qwen3_tts.codec_layers.phased_conv1d`) at the 1.7B codec's widths (768 / 384 / 192 channels,
dilation 3 and 9, 16 streams and one, both layouts), then an 8-frame chunk of 16 streams through the whole decoder at
each ``phased_min_channels`` (none, 256, 512, all; time-major none and 256), eager and replayed as CUDA graphs, with
the graph-vs-eager, bf16-vs-float32 whole decode, and chunked float32-vs-whole differences. (After a review
subagent's script, thirty-second session.) From the repository root on the GPU machine:

    timeout 300 python3 tools/gpu_experiments/codec_phased_micro.py
"""

from __future__ import annotations

import json
import time

import torch
from anna_audio.qwen3_tts.codec_decoder import CodecDecoder
from anna_audio.qwen3_tts.codec_layers import _conv, phased_conv1d, time_major_
from anna_audio.qwen3_tts.config import parse_codec
from anna_audio.qwen3_tts.stream_state import StreamState
from anna_audio.speech.vocoder_graphs import VocoderGraphs
from anna_core.device import accelerator
from codec_weights import randomize_codebooks
from torch import nn

DEVICE = torch.device("cuda")
CONFIG = "tests/audio/reference_configs/Qwen3-TTS-Tokenizer-12Hz.json"


def ms(fn, repeats: int = 15, inner: int = 5) -> float:
    """Median wall milliseconds of one call (``inner`` calls per timed repeat, synchronized)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3 / inner)
    return sorted(times)[repeats // 2]


def convolutions() -> None:
    for batch in (16, 1):
        for channels, steps in ((768, 256), (384, 1280), (192, 5120)):
            for d in (3, 9):
                conv = nn.Conv1d(channels, channels, 7, dilation=d).to(DEVICE, torch.bfloat16)
                tm_conv = nn.Conv1d(channels, channels, 7, dilation=d).to(DEVICE, torch.bfloat16)
                tm_conv.load_state_dict(conv.state_dict())
                time_major_(tm_conv)
                x = torch.randn(batch, channels, steps + 6 * d, device=DEVICE, dtype=torch.bfloat16)
                x_tm = x.transpose(1, 2).contiguous().transpose(1, 2)
                ref = conv(x).float()
                err = (phased_conv1d(x, conv).float() - ref).abs().max().item()
                err_tm = (phased_conv1d(x_tm, tm_conv, True).float() - ref).abs().max().item()
                times = [ms(lambda c=conv, v=x: c(v)), ms(lambda c=conv, v=x: phased_conv1d(v, c)),
                         ms(lambda c=tm_conv, v=x_tm: _conv(v, c, True)),
                         ms(lambda c=tm_conv, v=x_tm: phased_conv1d(v, c, True))]
                print(f"batch {batch} channels {channels} length {steps + 6 * d} dilation {d}: [B, C, T] dilated "
                      f"{times[0]:.3f} phased {times[1]:.3f} ms | time-major dilated {times[2]:.3f} phased "
                      f"{times[3]:.3f} ms; max |phased - dilated| {err:.2g} / {err_tm:.2g}", flush=True)


def decoders() -> None:
    with open(CONFIG) as f:
        cfg = parse_codec(json.load(f)).decoder
    torch.manual_seed(0)
    base = CodecDecoder(cfg)
    randomize_codebooks(base)
    weights = base.state_dict()
    rows = 16
    codes = torch.randint(0, cfg.codebook_size, (rows, 24, cfg.num_quantizers))

    def build(time_major: bool, phased: int | None, dtype: torch.dtype = torch.bfloat16) -> CodecDecoder:
        m = CodecDecoder(cfg, time_major=time_major, phased_min_channels=phased)
        m.load_state_dict(weights)
        return m.layout_weights().to(DEVICE, dtype).eval()

    def chunked(m: CodecDecoder) -> torch.Tensor:
        states = [StreamState() for _ in range(rows)]
        return torch.cat([m.decode_streams(states, codes[:, i:i + 8]) for i in (0, 8, 16)], 1).float()

    whole = build(False, None, torch.float32).decode_streams([StreamState() for _ in range(rows)], codes).float()
    for time_major, phased in ((False, None), (False, 256), (False, 512), (False, 0), (True, None), (True, 256)):
        m = build(time_major, phased)
        bf16_err = (chunked(m) - whole).abs().max().item()
        f32_err = (chunked(build(time_major, phased, torch.float32)) - whole).abs().max().item()
        states = [StreamState() for _ in range(rows)]
        eager = ms(lambda m=m, s=states: m.decode_streams(s, codes[:, :8]), 7, 2)
        graphs = VocoderGraphs(m, accelerator(DEVICE), [8], rows)
        graphs.capture()
        a, b = [StreamState() for _ in range(rows)], [StreamState() for _ in range(rows)]
        diff = max((graphs.decode(a, codes[:, i:i + 8]).float() - m.decode_streams(b, codes[:, i:i + 8]).float())
                   .abs().max().item() for i in (0, 8, 16))
        states = [StreamState() for _ in range(rows)]
        replay = ms(lambda g=graphs, s=states: g.decode(s, codes[:, :8]), 7, 2)
        print(f"time-major {time_major} phased_min_channels {phased}: chunk eager {eager:.2f} ms, graph {replay:.2f} ms;"
              f" |graph - eager| {diff:.2g}, |bf16 chunks - whole| {bf16_err:.3g}, |float32 chunks - whole| "
              f"{f32_err:.3g}", flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    with torch.inference_mode():
        convolutions()
        decoders()
