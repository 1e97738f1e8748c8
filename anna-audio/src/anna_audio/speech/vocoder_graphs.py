"""The codec decoder's chunks captured as device graphs: one graph per (batch bucket, chunk frames), replayed over
static buffers.

A chunk's decode (:meth:`~anna_audio.qwen3_tts.codec_decoder.CodecDecoder.decode_chunk`) has fixed shapes for a given
row count and frame count and reads nothing on the host: each stream's left context is one flat vector
(:class:`~anna_audio.qwen3_tts.stream_state.StateLayout`), its position a device tensor. At setup, for each chunk
length the server decodes (its first chunk, then the later ones) and each bucket ``b`` (1, 2, 4, ... up to
``max_batch``), the decode is warmed up and captured over static buffers. A chunk of ``n`` streams then

1. writes its codes and the streams' positions into one page-locked host buffer and copies it to the device in one
   non-blocking copy, and gathers the streams' contexts into the static context rows (one launch),
2. replays the graph of the smallest bucket ``>= n`` (rows ``n..b-1`` are padding whose outputs nobody reads),
3. copies the rows' new contexts out of the static buffer (one launch: the next replay overwrites it) and returns
   a view of the static waveform buffer, which the caller copies to the host (the chunk's one host sync).

More than ``max_batch`` streams decode in several replays. The device services come from
:class:`anna_core.device.Accelerator`, so :class:`~anna_core.testing.fake_graphs.FakeGraphAccelerator` exercises this
on the CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from anna_core.device import Accelerator, StepGraph
from anna_core.engine.cuda_graphs import bucket_sizes
from anna_core.errors import AnnaError

from anna_audio.qwen3_tts.codec_decoder import CodecDecoder
from anna_audio.qwen3_tts.stream_state import ChunkContext, StreamState, advance

log = logging.getLogger("anna.speech")


class VocoderGraphs:
    """Captured chunk decodes of one codec decoder (see the module docstring).

    Args:
        decoder: the codec decoder, on ``accel``'s device.
        accel: the device services; ``accel.graphs`` must be true to :meth:`capture`.
        lengths: the chunk lengths (frames) to capture, e.g. the chunk policy's first and later sizes.
        max_batch: the most streams one replay decodes (the largest bucket).

    Raises:
        AnnaError: no lengths, a length or ``max_batch`` below 1.
    """

    def __init__(self, decoder: CodecDecoder, accel: Accelerator, lengths: Iterable[int], max_batch: int):
        self.lengths = sorted(set(lengths))
        if not self.lengths or self.lengths[0] < 1:
            raise AnnaError(f"chunk lengths to capture must be at least one frame, got {self.lengths}")
        self.decoder = decoder
        self.accel = accel
        self.buckets = bucket_sizes(max_batch)
        self.rows = self.buckets[-1]
        self.layout = decoder.state_layout()
        cfg = decoder.config
        self.q, self.spf = cfg.num_quantizers, cfg.samples_per_frame
        longest = self.lengths[-1]
        dev, dtype = accel.device, self.layout.dtype
        # int64 inputs: rows' positions [rows], then the chunk's codes [b, T, Q] (contiguous for any b and T)
        self._host = accel.host_empty((self.rows + self.rows * longest * self.q,), torch.int64)
        self._inputs = torch.zeros(self._host.shape, dtype=torch.int64, device=dev)
        self._past = torch.zeros(self.rows, self.layout.size, dtype=dtype, device=dev)
        self._new = torch.zeros(self.rows, self.layout.size, dtype=dtype, device=dev)
        self._wav = torch.zeros(self.rows, longest * self.spf, dtype=dtype, device=dev)
        self._graphs: dict[tuple[int, int], StepGraph] = {}
        self._uploaded = accel.event()  # recorded after each upload: the host buffer is free again once it passed

    def _codes(self, b: int, frames: int) -> torch.Tensor:
        return self._inputs[self.rows:self.rows + b * frames * self.q].view(b, frames, self.q)

    def _step(self, b: int, frames: int) -> None:
        """The captured work of bucket ``b`` at ``frames`` frames: decode, waveform into the static buffer."""
        context = ChunkContext(self.layout, self._inputs[:b], self._past[:b], self._new[:b])
        wav = self.decoder.decode_chunk(self._codes(b, frames), context)
        self._wav[:b, :frames * self.spf].copy_(wav)

    @torch.inference_mode()
    def capture(self, warmup_iters: int = 2) -> None:
        """Warm up and capture every (length, bucket), largest bucket first, sharing one memory pool.

        Raises:
            AnnaError: the device cannot capture graphs; any error of a capture (the caller falls back to eager).
        """
        if not self.accel.graphs:
            raise AnnaError(f"{self.accel.device} cannot capture graphs")
        pool = self.accel.graph_pool()
        for frames in self.lengths:
            for b in reversed(self.buckets):
                with self.accel.side_stream():
                    for _ in range(warmup_iters):
                        self._step(b, frames)
                self.accel.synchronize()
                self._graphs[(b, frames)] = self.accel.capture(lambda b=b, f=frames: self._step(b, f), pool)
        self.accel.synchronize()
        log.info("captured codec decoder graphs for chunks of %s frames, batch sizes %s", self.lengths,
                 self.buckets)

    def covers(self, frames: int) -> bool:
        """Whether chunks of ``frames`` frames replay a graph (else they decode eagerly)."""
        return (self.buckets[-1], frames) in self._graphs

    @torch.inference_mode()
    def decode(self, streams: list[StreamState], codes: torch.Tensor) -> torch.Tensor:
        """Decode one chunk of ``len(streams)`` streams by replays; each stream advances.

        Args:
            streams: one state per row, in row order.
            codes: ``[n, T, Q]`` int64 on the host, already checked
                (:func:`~anna_audio.qwen3_tts.codec_decoder.check_codes`).

        Returns:
            ``[n, T * samples_per_frame]`` on the device, the decoder's dtype (valid until the next call).

        Raises:
            AnnaError: ``T`` not captured, or a row count other than ``len(streams)``.
        """
        n, frames = codes.shape[0], codes.shape[1]
        if not self.covers(frames) or n != len(streams):
            raise AnnaError(f"no captured codec graph for {n} streams of {frames} frames")
        if n <= self.rows:
            return self._replay(streams, codes)
        return torch.cat([self._replay(streams[i:i + self.rows], codes[i:i + self.rows]).clone()
                          for i in range(0, n, self.rows)])

    def _replay(self, streams: list[StreamState], codes: torch.Tensor) -> torch.Tensor:
        n, frames = codes.shape[0], codes.shape[1]
        b = next(size for size in self.buckets if size >= n)
        if self._uploaded is not None:
            self._uploaded.synchronize()  # the previous upload (a split chunk's) has left the host buffer
        host, width = self._host.numpy(), frames * self.q
        host[:n] = [s.frames for s in streams]
        host[n:self.rows] = 0
        host[self.rows:self.rows + n * width] = codes.reshape(-1).numpy()
        host[self.rows + n * width:self.rows + b * width] = 0
        self._inputs[:self.rows + b * width].copy_(self._host[:self.rows + b * width], non_blocking=True)
        if self._uploaded is not None:
            self._uploaded.record()
        torch.stack([s.tail if s.tail is not None else self.layout.zeros for s in streams], out=self._past[:n])
        self._graphs[(b, frames)].replay()
        advance(streams, self._new[:n].clone(), frames)
        return self._wav[:n, :frames * self.spf]
