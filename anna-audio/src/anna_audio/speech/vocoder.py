"""The codec decoder shared by every request: chunks of code frames in, 24 kHz samples out, batched across
requests on one worker thread, each request's audio streamed with its full left context.

Every request's waveform is a stream (:class:`~anna_audio.qwen3_tts.stream_state.StreamState`): each chunk continues
it exactly (the decoder is causal and the state holds every layer's context), so a request's chunks concatenate to
its whole decode. The worker takes every chunk waiting when it wakes, groups them by length, and decodes each group
in one call (:meth:`~anna_audio.qwen3_tts.codec_decoder.CodecDecoder.decode_streams`), shortest first (a request's
short first chunk, its first audio, does not wait behind longer ones), so concurrent requests share the decoder's
launches instead of queueing behind each other. On an accelerator the worker enqueues its work on a
stream of its own, so a chunk's decode runs beside the talker's steps instead of between them (the two share no
tensors: codes come from the host, samples go back to it). With :class:`~anna_audio.speech.vocoder_graphs.VocoderGraphs`
(:meth:`Vocoder.capture_graphs`, on devices that capture graphs), chunks of the captured lengths replay device graphs
instead of launching the decoder's kernels one by one; other lengths (a request's last, shorter chunk, cloning's
reference codes) decode eagerly. Either way the codes are checked on the host, and the only wait for the device is
the copy of the samples back to it.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

import torch

from anna_audio.qwen3_tts.codec_decoder import CodecDecoder, check_codes
from anna_audio.qwen3_tts.stream_state import StreamState
from anna_audio.speech.vocoder_graphs import VocoderGraphs

log = logging.getLogger("anna.speech")


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
        self.graphs: VocoderGraphs | None = None
        self.why_not_graphs: str | None = "not captured"  # why chunks decode eagerly (None: graphs captured)

    def capture_graphs(self, lengths: Iterable[int], max_batch: int) -> bool:
        """Capture the decoder's chunks of ``lengths`` frames for up to ``max_batch`` streams per replay (before the
        first :meth:`decode`). Where the accelerator cannot capture graphs, or a capture fails (logged), chunks keep
        decoding eagerly: :attr:`why_not_graphs` says why.

        Returns:
            Whether graphs were captured.
        """
        if self.accel is None or not self.accel.graphs:
            self.why_not_graphs = "the device does not capture graphs"
            return False
        graphs = VocoderGraphs(self.decoder, self.accel, lengths, max_batch)
        try:
            graphs.capture()
        except Exception as exc:  # the eager decode still serves
            self.why_not_graphs = f"capture failed: {type(exc).__name__}: {exc}"
            log.warning("codec decoder graphs not captured (chunks decode eagerly): %s", self.why_not_graphs)
            return False
        self.graphs, self.why_not_graphs = graphs, None
        return True

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
        live = []
        for item in items:
            if not item[2].set_running_or_notify_cancel():
                continue
            try:
                check_codes(item[1][None], self.decoder.config)  # on the host: no device read
            except ValueError as exc:
                item[2].set_exception(exc)
                continue
            live.append(item)
        if not live:
            return
        try:
            streams, codes = [s for s, _, _ in live], torch.stack([c for _, c, _ in live])
            if self.graphs is not None and self.graphs.covers(codes.shape[1]):
                wav = self.graphs.decode(streams, codes)
            else:
                wav = self.decoder.decode_streams(streams, codes)
            wav = wav.float().cpu().numpy()
            self.calls += 1
        except Exception as exc:  # the requests of this group fail; the worker keeps serving
            for _, _, future in live:
                future.set_exception(exc)
            return
        for row, (_, _, future) in enumerate(live):
            future.set_result(wav[row].copy())  # its own memory (a replay's buffer may back wav on the CPU)
