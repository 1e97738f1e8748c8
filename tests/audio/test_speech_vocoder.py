"""The shared codec decoding of the ``speech`` task (:class:`~anna_audio.speech.vocoder.Vocoder`,
:class:`~anna_audio.speech.service.FrameChunker`): streams of several requests decoded chunk by chunk, batched
together, each equal to its whole decode (and so to the golden-verified decoder)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from anna_audio.qwen3_tts import load_codec_decoder, load_config
from anna_audio.qwen3_tts.stream_state import StreamState
from anna_audio.speech.service import ChunkPolicy, FrameChunker
from anna_audio.speech.vocoder import Vocoder

from tests.audio.tts_golden import CHECKPOINTS
from tests.audio.vocoder_streams import ChunkedStreams

ATOL = 1e-5  # batched rows vs one row: float32 rounding only


@pytest.fixture(scope="module")
def decoder():
    folder = CHECKPOINTS["custom_voice"]
    return load_codec_decoder(folder, load_config(folder))


def test_streamed_chunks_of_several_requests_equal_whole_decodes(decoder):
    cfg = decoder.config
    gen = torch.Generator().manual_seed(7)
    codes = [torch.randint(0, cfg.codebook_size, (n, cfg.num_quantizers), generator=gen) for n in (11, 7, 16)]
    with torch.inference_mode():
        whole = [w.numpy() for w in decoder.decode(codes)]
    vocoder = Vocoder(decoder)
    try:
        streams = ChunkedStreams(vocoder, codes, ChunkPolicy(first=2, rest=3))
        streams.arrive()  # frames arrive one at a time, as the engine makes them
        streams.flush()
        for i, ref in enumerate(whole):
            got = np.concatenate(streams.pieces[i])
            assert got.shape == ref.shape == (codes[i].shape[0] * cfg.samples_per_frame,)
            np.testing.assert_allclose(got, ref, atol=ATOL, rtol=0)
        assert vocoder.calls < streams.submitted  # chunks of different requests shared decoder calls
    finally:
        vocoder.close()


def test_chunker_sizes_and_bad_chunks(decoder):
    chunker = FrameChunker(ChunkPolicy(first=1, rest=4))
    frames = [torch.full((4,), i) for i in range(10)]
    sizes = [c.shape[0] for c in chunker.push(frames)]
    assert sizes == [1, 4, 4] and chunker.flush().shape[0] == 1 and chunker.flush() is None
    assert ChunkPolicy(first=1, rest=4).lengths() == [1, 2, 3, 4] and ChunkPolicy(first=3, rest=2).lengths() == [1, 2, 3]
    with pytest.raises(ValueError, match="at least one frame"):
        ChunkPolicy(first=0)
    vocoder = Vocoder(decoder)
    with pytest.raises(ValueError, match="a chunk must be"):
        vocoder.decode(StreamState(), torch.zeros(0, decoder.config.num_quantizers, dtype=torch.int64))
    bad = vocoder.decode(StreamState(), torch.full((2, decoder.config.num_quantizers), -1, dtype=torch.int64))
    with pytest.raises(ValueError, match="codes must lie"):
        bad.result()
    vocoder.close()


class _StreamCountingAccel:
    """Stands in for an :class:`~anna_core.device.Accelerator`: counts the worker's entries into its side stream."""

    def __init__(self):
        self.entered = 0

    def side_stream(self):
        import contextlib

        self.entered += 1
        return contextlib.nullcontext()


def test_warm_up_decodes_each_length_on_the_workers_own_stream(decoder):
    accel = _StreamCountingAccel()
    vocoder = Vocoder(decoder, accel)
    try:
        vocoder.warm_up([1, 3])
        assert vocoder.calls == 4  # per length: a fresh stream's first chunk, then its continuation
        assert accel.entered == 1  # one stream for the worker's life
        with pytest.raises(ValueError, match="at least one frame"):
            vocoder.warm_up([0])
        codes = torch.zeros(2, decoder.config.num_quantizers, dtype=torch.int64)
        with torch.inference_mode():
            whole = decoder.decode([codes])[0].numpy()
        np.testing.assert_allclose(vocoder.decode(StreamState(), codes).result(), whole, atol=ATOL, rtol=0)
    finally:
        vocoder.close()


def test_short_chunks_decode_before_longer_ones_waiting_with_them(decoder):
    """Chunks waiting together decode shortest first: a request's one-frame first chunk (its first audio) does not
    wait behind other requests' longer chunks."""
    import threading

    entered, release, order = threading.Event(), threading.Event(), []

    class Recording:
        config = decoder.config
        pre_conv = decoder.pre_conv

        def decode_streams(self, states, codes):
            if not order:
                entered.set()
                release.wait(5)  # hold the worker while the next chunks queue up
            order.append(codes.shape[1])
            return decoder.decode_streams(states, codes)

    vocoder = Vocoder(Recording())
    q = decoder.config.num_quantizers
    try:
        futures = [vocoder.decode(StreamState(), torch.zeros(2, q, dtype=torch.int64))]
        assert entered.wait(5)
        futures += [vocoder.decode(StreamState(), torch.zeros(n, q, dtype=torch.int64)) for n in (8, 1, 4)]
        release.set()
        for f in futures:
            f.result()
        assert order == [2, 1, 4, 8]
    finally:
        vocoder.close()
