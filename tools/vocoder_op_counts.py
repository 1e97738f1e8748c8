"""Launches and host syncs of one streamed codec decoder chunk on the CPU (issue 27), at a released shape with
random weights: ``python tools/vocoder_op_counts.py [tests/audio/reference_configs/Qwen3-TTS-Tokenizer-12Hz.json]``
(with the Anna sources on PYTHONPATH; about a minute on two cores at the 1.7B shape).

Counts come from :class:`anna_core.testing.host_reads.OpCounts` (ATen ops that run a kernel, a proxy for device
launches; host reads and tensors made from host data, the points where a device would wait) over
``decode_chunk`` (the device work of a chunk that continues its streams, what a graph captures) and over the whole
eager ``decode_streams`` call (codes from the host: their check reads host memory only, then one upload).
"""

from __future__ import annotations

import json
import sys

import torch
from anna_audio.qwen3_tts.codec_decoder import CodecDecoder
from anna_audio.qwen3_tts.config import parse_codec
from anna_audio.qwen3_tts.stream_state import StreamBatch, StreamState
from anna_core.testing.host_reads import OpCounts


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "-v"]
    path = args[0] if args else "tests/audio/reference_configs/Qwen3-TTS-Tokenizer-12Hz.json"
    with open(path) as f:
        cfg = parse_codec(json.load(f)).decoder
    torch.manual_seed(0)
    decoder = CodecDecoder(cfg).eval()
    q = cfg.num_quantizers
    for b, t in ((1, 1), (1, 8), (4, 8)):
        states = [StreamState() for _ in range(b)]
        codes = torch.zeros(b, t, q, dtype=torch.int64)
        decoder.decode_streams(states, codes)  # the streams' first chunks: the counted ones continue them
        with torch.inference_mode():
            context = StreamBatch(states, decoder.state_layout()).context
            with OpCounts() as chunk:
                decoder.decode_chunk(codes, context)
        with OpCounts() as call:
            decoder.decode_streams(states, codes)
        print(f"batch {b}, {t} frame(s): decode_chunk {chunk.launches} launches, {chunk.syncs} syncs; "
              f"decode_streams {call.launches} launches, {call.syncs} syncs "
              f"({ {k: v for k, v in call.ops.items() if k in ('item', 'lift_fresh', '_local_scalar_dense')} })")
        if "-v" in sys.argv:
            print(sorted(chunk.ops.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    main()
