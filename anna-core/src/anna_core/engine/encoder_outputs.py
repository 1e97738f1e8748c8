"""The model runner's encoder outputs: media encoded by the model, kept while prefills read them.

What to encode and when to drop is the scheduler's decision (:mod:`anna_core.engine.encoder_cache`,
``SchedulerOutput.encoder_inputs`` / ``free_encoder_hashes``); this holds the tensors and turns a step's
placeholder rows into ``ForwardBatch.embeds`` / ``embeds_mask`` (:mod:`anna_core.multimodal`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from anna_core.device import accelerator
from anna_core.engine.sampler import host_tensor
from anna_core.errors import AnnaError
from anna_core.multimodal import MediaItem

Span = tuple[int, torch.Tensor, int, int]
"""``(batch row, encoder output [length, hidden], its first row, rows)`` of one placeholder span."""


class EncoderOutputs:
    """Encoder outputs by medium key (:attr:`~anna_core.multimodal.MediaItem.key`), for a model whose
    capabilities declare ``modalities``.

    Each :meth:`encode` is timed on the host and, without waiting for it, on the device (a
    :class:`~anna_core.device.DeviceSpan` around the call); :meth:`settle` adds the device times of the spans the
    device has finished, so whoever synchronises anyway (the engine, after reading a step back) calls it.

    Args:
        model: the model (``encode`` and ``hidden_size``, :class:`~anna_core.model.CausalLM`).
        device: where batches are built.
        accel: the device's services (default: ``accelerator(device)``), whose ``span()`` times the encodes.
    """

    def __init__(self, model: Any, device: torch.device, accel: Any = None):
        self.model = model
        self.device = device
        self.accel = accel if accel is not None else accelerator(device)
        self.outputs: dict[bytes, torch.Tensor] = {}
        self.num_encoded = 0  # media encoded so far
        self.num_rows = 0  # their encoder-output rows
        self.host_s = 0.0  # host seconds in the model's encode (on an accelerator: launching its kernels)
        self.device_s = 0.0  # device seconds of the encodes whose spans have been read (settle)
        self._spans: list[Any] = []  # DeviceSpans not read yet

    def drop(self, hashes: Sequence[bytes]) -> None:
        """Forget the outputs nobody needs any more (``hashes``: medium keys)."""
        for h in hashes:
            self.outputs.pop(h, None)

    def encode(self, items: Sequence[MediaItem]) -> None:
        """Run the model's encoder on ``items`` (one call for all) and keep each output.

        Raises:
            AnnaError: the model returned the wrong number of outputs or one not ``[length, hidden_size]``.
        """
        if not items:
            return
        span = self.accel.span()
        t0 = time.perf_counter()
        span.start()
        outputs = self.model.encode(list(items))
        span.stop()
        self.host_s += time.perf_counter() - t0
        self._spans.append(span)
        if len(outputs) != len(items):
            raise AnnaError(f"encode returned {len(outputs)} outputs for {len(items)} media")
        hidden = self.model.hidden_size
        for item, emb in zip(items, outputs):
            if tuple(emb.shape) != (item.length, hidden):
                raise AnnaError(f"the encoder output of an {item.modality} is {tuple(emb.shape)}, expected "
                                f"({item.length}, {hidden}) for its {item.length} placeholder tokens")
        for item, emb in zip(items, outputs):
            self.outputs[item.key] = emb
        self.num_encoded += len(items)
        self.num_rows += sum(item.length for item in items)

    def settle(self) -> None:
        """Add the device time of every encode the device has finished (never waits; the others stay pending)."""
        pending = []
        for span in self._spans:
            ms = span.elapsed_ms()
            if ms is None:
                pending.append(span)
            else:
                self.device_s += ms / 1e3
        self._spans = pending

    def report(self) -> dict[str, Any]:
        """Counters for ``/healthz`` (after :meth:`settle`): ``media_encoded``, ``rows_encoded``, ``encode_host_s``
        (seconds of host time in the model's ``encode``; on an accelerator mostly its launches), ``encode_device_s``
        (seconds of device time of the encodes the device has finished: on an accelerator the stream's time between
        events recorded around each ``encode``, on the CPU the host time again), ``encodes_pending`` (encodes
        whose device time is not known yet) and ``outputs_held``."""
        self.settle()
        return {"media_encoded": self.num_encoded, "rows_encoded": self.num_rows,
                "encode_host_s": round(self.host_s, 6), "encode_device_s": round(self.device_s, 6),
                "encodes_pending": len(self._spans), "outputs_held": len(self.outputs)}

    def spans(self, seqs: Sequence[Any], cu_seqlens: Sequence[int]) -> list[Span]:
        """The placeholder spans of the scheduled sequences ``seqs`` (rows from ``cu_seqlens``).

        Raises:
            AnnaError: a medium's output is not here (the scheduler did not have it encoded).
        """
        spans = []
        for i, seq in enumerate(seqs):
            for item in seq.media:
                emb = self.outputs.get(item.key)
                if emb is None:
                    raise AnnaError(f"no encoder output for a medium of {seq.request_id} (not scheduled for encoding)")
                lo, hi = max(item.offset, seq.start), min(item.end, seq.context_len)
                spans.append((cu_seqlens[i] + lo - seq.start, emb, lo - item.offset, hi - lo))
        return spans

    def rows(self, seqs: Sequence[Any], cu_seqlens: Sequence[int]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``(embeds [T, hidden], embeds_mask [T] bool)`` of the step's placeholder rows (``T =
        cu_seqlens[-1]``), or ``(None, None)`` when no sequence covers a placeholder."""
        spans = self.spans(seqs, cu_seqlens)
        if not spans:
            return None, None
        t = cu_seqlens[-1]
        embeds = torch.zeros(t, spans[0][1].shape[-1], dtype=spans[0][1].dtype, device=self.device)
        mask = [False] * t
        for row, emb, src, n in spans:
            embeds[row:row + n] = emb[src:src + n]
            mask[row:row + n] = [True] * n
        return embeds, host_tensor(mask, torch.bool, self.device)
