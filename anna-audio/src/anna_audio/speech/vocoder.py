"""The codec decoder shared by every request: chunks of code frames in, 24 kHz samples out, batched across
requests on one worker thread, each request's audio streamed with its full left context.

Every request's waveform is a stream (:class:`~anna_audio.qwen3_tts.stream_state.StreamState`): each chunk continues
it exactly (the decoder is causal and the state holds every layer's context), so a request's chunks concatenate to
its whole decode. The worker takes every chunk waiting when it wakes, groups them by length, and decodes each group
in one call (:meth:`~anna_audio.qwen3_tts.codec_decoder.CodecDecoder.decode_streams`), shortest first (a request's
short first chunk, its first audio, does not wait behind longer ones), so concurrent requests share the decoder's
launches instead of queueing behind each other. On an accelerator the worker enqueues its work on a
stream of its own, so a chunk's decode runs beside the talker's steps instead of between them (the two share no
tensors: codes come from the host, samples go back to it).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

import numpy as np
import torch

from anna_audio.qwen3_tts.codec_decoder import CodecDecoder
from anna_audio.qwen3_tts.stream_state import StreamState


class Vocoder:
    """Batched, streamed codec decoding on a worker thread (started on first use; :meth:`close` stops it).

    Args:
        decoder: the checkpoint's codec decoder (on its device).
        accel: the decoder's :class:`~anna_core.device.Accelerator` (its ``side_stream`` gives the worker a stream of
            its own); None: the caller's current stream (the CPU, tests).
    """

    def __init__(self, decoder: CodecDecoder, accel: Any = None):
        self.decoder = decoder
        self.accel = accel
        self.samples_per_frame = decoder.config.samples_per_frame
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.calls = 0  # decoder calls so far (each decodes one group of chunks)

    def decode(self, state: StreamState, codes: torch.Tensor) -> Future:
        """Queue the next chunk of one stream: codes ``[T, Q]`` int64 (``T >= 1``) -> a future of its samples
        ``[T * samples_per_frame]`` float32 (numpy). A stream's next chunk must wait for this one's result.

        Raises:
            ValueError: codes that are not ``[T >= 1, Q]``.
        """
        if codes.dim() != 2 or codes.shape[0] < 1:
            raise ValueError(f"a chunk must be [frames >= 1, {self.decoder.config.num_quantizers}], got "
                             f"{tuple(codes.shape)}")
        future: Future = Future()
        self._start()
        self._queue.put((state, codes, future))
        return future

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="anna-vocoder", daemon=True)
                self._thread.start()

    def close(self) -> None:
        """Stop the worker after the chunks already queued."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def warm_up(self, lengths: Iterable[int]) -> None:
        """Decode one throwaway chunk of zeros of each length in ``lengths`` (frames; e.g. the chunk policy's first and
        later chunk sizes), first chunk and continuation both, through the worker, so a server's first request pays
        no first-call costs (kernel selection, allocations).

        Raises:
            ValueError: a length below 1.
        """
        q = self.decoder.config.num_quantizers
        for n in lengths:
            if n < 1:
                raise ValueError(f"chunk lengths must be at least one frame, got {n}")
            state = StreamState()
            for _ in range(2):  # a fresh stream's first chunk, then one that continues it
                self.decode(state, torch.zeros(n, q, dtype=torch.int64)).result()

    def _run(self) -> None:
        stream = self.accel.side_stream() if self.accel is not None else contextlib.nullcontext()
        with stream:
            self._serve()

    def _serve(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                batch.append(item)
            groups: dict[int, list] = {}
            for item in batch:
                groups.setdefault(item[1].shape[0], []).append(item)
            for _, items in sorted(groups.items()):  # shortest first: requests' first chunks (first audio) lead
                self._decode_group(items)
            if stop:
                return

    def _decode_group(self, items: list) -> None:
        live = [it for it in items if it[2].set_running_or_notify_cancel()]
        if not live:
            return
        try:
            device = self.decoder.pre_conv.conv.weight.device
            codes = torch.stack([c for _, c, _ in live]).to(device)
            wav = self.decoder.decode_streams([s for s, _, _ in live], codes).float().cpu().numpy()
            self.calls += 1
        except Exception as exc:  # the requests of this group fail; the worker keeps serving
            for _, _, future in live:
                future.set_exception(exc)
            return
        for row, (_, _, future) in enumerate(live):
            future.set_result(np.ascontiguousarray(wav[row]))
