"""The codec decoder's chunks captured as graphs (:class:`~anna_audio.speech.vocoder_graphs.VocoderGraphs`) on the
CPU through :class:`~anna_core.testing.fake_graphs.FakeGraphAccelerator`: capture reads nothing on the host, replays
stream the same audio as whole decodes (batched rows equal each alone, more streams than the largest bucket split
into replays), other chunk lengths decode eagerly, and a failed capture leaves the vocoder eager with its reason."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from anna_audio.qwen3_tts import load_codec_decoder, load_config
from anna_audio.qwen3_tts.stream_state import ChunkContext, StreamBatch, StreamState
from anna_audio.speech.service import ChunkPolicy
from anna_audio.speech.vocoder import Vocoder
from anna_audio.speech.vocoder_graphs import VocoderGraphs
from anna_core.testing.fake_graphs import FakeGraphAccelerator
from anna_core.testing.host_reads import NoHostReads, OpCounts

from tests.audio.tts_golden import CHECKPOINTS
from tests.audio.vocoder_streams import ChunkedStreams

ATOL = 1e-5  # batched rows and padded keys vs a whole decode: float32 rounding only


@pytest.fixture(scope="module")
def decoder():
    folder = CHECKPOINTS["custom_voice"]
    return load_codec_decoder(folder, load_config(folder))


def _codes(decoder, lengths, seed=11):
    cfg = decoder.config
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, cfg.codebook_size, (n, cfg.num_quantizers), generator=gen) for n in lengths]


def test_chunk_decode_reads_nothing_on_the_host(decoder):
    """A continued chunk of streams at different positions: no host read, and the same samples as decode_streams."""
    codes = torch.stack(_codes(decoder, (3, 3)))
    states, again = [StreamState(), StreamState()], [StreamState(), StreamState()]
    decoder.decode_streams(states[:1], codes[:1, :2])  # stream 0 is two frames in, stream 1 fresh
    decoder.decode_streams(again[:1], codes[:1, :2])
    want = decoder.decode_streams(states, codes[:, 2:])
    batch = StreamBatch(again, decoder.state_layout())
    with torch.inference_mode(), NoHostReads():
        got = decoder.decode_chunk(codes[:, 2:], batch.context)
    torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_captured_chunks_stream_like_whole_decodes(decoder):
    accel = FakeGraphAccelerator()
    vocoder = Vocoder(decoder, accel)
    assert vocoder.capture_graphs([2, 3], max_batch=2)  # buckets 1, 2: three streams take two replays
    assert vocoder.why_not_graphs is None and accel.captures == 4  # (length, bucket) each
    codes = _codes(decoder, (12, 7, 16))
    with torch.inference_mode():
        whole = [w.numpy() for w in decoder.decode(codes)]
    try:
        streams = ChunkedStreams(vocoder, codes, ChunkPolicy(first=2, rest=3))
        streams.arrive()  # frames arrive one at a time; chunks wait together
        replays = accel.replays
        streams.flush()  # the last chunks (1, 2 and 2 frames): 1 is not captured
        assert replays > 0 and accel.replays == replays + 2  # the two of 2 frames replay, 1 frame is eager
        for i, ref in enumerate(whole):
            got = np.concatenate(streams.pieces[i])
            assert got.shape == ref.shape == (codes[i].shape[0] * decoder.config.samples_per_frame,)
            np.testing.assert_allclose(got, ref, atol=ATOL, rtol=0)
    finally:
        vocoder.close()


def test_replay_uploads_once_and_reads_back_nothing(decoder):
    """A replayed chunk: no host read or tensor made from host data (the samples' copy back is the caller's)."""
    accel = FakeGraphAccelerator()
    graphs = VocoderGraphs(decoder, accel, [2], max_batch=4)  # 3 streams replay bucket 4: one padding row
    graphs.capture(warmup_iters=0)
    streams = [StreamState() for _ in range(3)]
    codes = torch.stack(_codes(decoder, (2, 2, 2)))
    with OpCounts() as counts:
        wav = graphs.decode(streams, codes)
    assert counts.syncs == 0, counts.ops
    alone = [decoder.decode([c])[0] for c in codes]
    for row in range(3):
        torch.testing.assert_close(wav[row], alone[row], atol=ATOL, rtol=0)
        assert streams[row].frames == 2
    with pytest.raises(Exception, match="no captured codec graph"):
        graphs.decode(streams, codes[:, :1])


class _FailingAccel(FakeGraphAccelerator):
    def capture(self, fn, pool=None):
        raise RuntimeError("operation not permitted when stream is capturing")


def test_failed_capture_stays_eager_and_says_why(decoder, caplog):
    vocoder = Vocoder(decoder, _FailingAccel())
    with caplog.at_level(logging.WARNING, logger="anna.speech"):
        assert not vocoder.capture_graphs([1], max_batch=1)
    assert vocoder.graphs is None and "not permitted" in vocoder.why_not_graphs
    assert any("decode eagerly" in r.message for r in caplog.records)
    cpu = Vocoder(decoder)  # no accelerator: nothing to capture
    assert not cpu.capture_graphs([1], max_batch=1) and "does not capture" in cpu.why_not_graphs
    codes = _codes(decoder, (2,))[0]
    try:
        got = vocoder.decode(StreamState(), codes).result()
        np.testing.assert_allclose(got, decoder.decode([codes])[0].detach().numpy(), atol=ATOL, rtol=0)
    finally:
        vocoder.close()


def test_context_layout_covers_every_causal_layer(decoder):
    """Each convolution with a kernel wider than one, each transposed one wider than its stride and each attention
    layer owns a span of the stream's context; the spans tile it."""
    from anna_audio.qwen3_tts.stream_state import ContextLayer

    layout = decoder.state_layout()
    layers = [m for m in decoder.modules() if isinstance(m, ContextLayer) and m.context_shape is not None]
    assert len(layout.spans) == len(layers) > 0
    offsets = sorted(layout.spans.values())
    end = 0
    for offset, shape in offsets:
        assert offset == end
        end += int(np.prod(shape))
    assert end == layout.size == layout.zeros.numel()
    context = ChunkContext(layout, torch.zeros(2, dtype=torch.int64), torch.zeros(2, layout.size),
                           torch.zeros(2, layout.size))
    assert context.get(layers[0]).shape == (2, *layers[0].context_shape)
