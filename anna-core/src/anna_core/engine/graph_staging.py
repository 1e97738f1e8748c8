"""Host <-> device buffers of the captured decode step, double-buffered for asynchronous scheduling.

The engine may stage step ``N+1`` while step ``N`` is still queued on the device (see
:mod:`anna_core.engine.llm_engine`). A non-blocking host -> device copy reads its page-locked source
when the copy *executes*, and a device -> host copy writes its destination whenever it executes,
so a single host buffer could be overwritten before its copy ran, or read after the next step's copy
landed. Two host buffers alternate, and an event recorded after each copy is waited on before that
buffer is touched again (in practice it has long completed: the engine reads step ``N``'s ids before
it stages step ``N+2``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from anna_core.device import Accelerator

MERGE_BYTES = 64 * 1024
"""The most bytes of unused rows :meth:`Staging.upload` copies to save a copy: a host -> device copy of a few bytes
costs the device a few microseconds (its launch and the copy engine's turn-around), 64 KiB about as much at the ~25
GB/s of a page-locked copy."""

_NP = {torch.int64: np.int64, torch.int32: np.int32, torch.float32: np.float32, torch.bool: np.bool_}


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()


class Staging:
    """One byte buffer holding every per-step input: two page-locked host copies and one device copy.

    Fields are 8-byte aligned slices viewed with their own dtypes, so one ``copy_`` moves them all.
    Row fields (e.g. block tables ``[rows, max_blocks]``, megabytes at long context lengths) are laid out
    last, and :meth:`upload` with ``rows`` copies only their first rows: a step of a few sequences does not
    move every row's table. Where the rows left out of the earlier row fields come to at most
    :data:`MERGE_BYTES`, the upload is one copy of the buffer's start through the last row field's first rows
    (:meth:`upload_spans`): each host -> device copy costs the step a few microseconds however small it is.
    Device fields (e.g. the sampled ids a captured step writes for the next step to read) come first and are
    never uploaded: they live in the same device buffer so that a graph can index them together with the field
    laid out after them (one ``index_select`` over both, no copy between them).

    Args:
        accel: device services (pinning, events).
        fields: ``(name, dtype, shape)`` per field.
        row_fields: names of fields whose first dimension is the row (sequence) index, uploaded by rows.
        device_fields: names of fields the device writes, laid out first (in ``fields``' order) and never uploaded.

    Attributes:
        h: numpy views of the current host buffer, by field name (write the step's inputs here).
        d: device tensor views, by field name (what the captured graph reads).
    """

    def __init__(self, accel: Accelerator, fields: Sequence[tuple[str, torch.dtype, tuple[int, ...]]],
                 row_fields: Sequence[str] = (), device_fields: Sequence[str] = ()):
        layout: dict[str, tuple[int, torch.dtype, tuple[int, ...]]] = {}
        offset = 0
        ordered = ([f for f in fields if f[0] in device_fields]
                   + [f for f in fields if f[0] not in row_fields and f[0] not in device_fields]
                   + [f for f in fields if f[0] in row_fields])
        self._start = 0  # bytes of the device fields: never uploaded
        self._head: int | None = None  # bytes before the first row field: uploaded whole
        for name, dtype, shape in ordered:
            if name in row_fields and self._head is None:
                self._head = offset
            layout[name] = (offset, dtype, shape)
            offset += -(-_nbytes(dtype, shape) // 8) * 8
            if name in device_fields:
                self._start = offset
        self.nbytes = offset
        if self._head is None:
            self._head = offset
        self._row_fields = [n for n, _, _ in ordered if n in row_fields]
        self._layout = layout
        self._spans: dict[int | None, list[tuple[int, int]]] = {}  # upload_spans by rows (fixed by the layout)
        self._accel = accel
        self._hosts = [accel.pin(torch.zeros(offset, dtype=torch.uint8)) for _ in range(2)]
        self._events: list[object | None] = [None, None]
        self._views: list[dict[str, np.ndarray]] = []
        for host in self._hosts:
            host_np = host.numpy()
            self._views.append({name: host_np[off:off + _nbytes(dtype, shape)].view(_NP[dtype]).reshape(shape)
                                for name, (off, dtype, shape) in layout.items()})
        self.device = torch.zeros(offset, dtype=torch.uint8, device=accel.device)
        self.d: dict[str, torch.Tensor] = {name: self.device[off:off + _nbytes(dtype, shape)].view(dtype).view(shape)
                                           for name, (off, dtype, shape) in layout.items()}
        self._cur = 0
        self.h = self._views[0]

    def next_buffer(self) -> None:
        """Switch :attr:`h` to the other host buffer, waiting until its last upload has run.

        The new buffer still holds the inputs of two steps ago: callers rewrite every row they use.
        """
        self._cur ^= 1
        event = self._events[self._cur]
        if event is not None:
            event.synchronize()
        self.h = self._views[self._cur]

    def upload_spans(self, rows: int | None = None) -> list[tuple[int, int]]:
        """The byte ranges ``[(start, end)]`` of the buffer that :meth:`upload` copies, one copy each: with ``rows``
        (and row fields) the fields other than the device and row fields, and the first ``rows`` rows of each row
        field, merged into one range when the rows in between come to at most :data:`MERGE_BYTES`; without
        ``rows``, every field but the device fields (computed once per ``rows``: a step's upload only looks them
        up)."""
        spans = self._spans.get(rows)
        if spans is None:
            spans = self._spans[rows] = self._compute_spans(rows)
        return spans

    def _compute_spans(self, rows: int | None) -> list[tuple[int, int]]:
        if rows is None or not self._row_fields:
            return [(self._start, self.nbytes)]
        spans = [(self._start, self._head)]
        for name in self._row_fields:
            off, dtype, shape = self._layout[name]
            spans.append((off, off + rows * _nbytes(dtype, shape[1:])))
        left_out = sum(b[0] - a[1] for a, b in zip(spans, spans[1:]))
        if left_out <= MERGE_BYTES:
            return [(spans[0][0], spans[-1][1])]
        return [(a, b) for a, b in spans if b > a]

    def upload(self, rows: int | None = None) -> None:
        """Copy the current host buffer to the device without blocking the host: every field, or with
        ``rows`` the fields other than the row fields and the first ``rows`` rows of each row field (the
        device fields never; the copies of :meth:`upload_spans`)."""
        host = self._hosts[self._cur]
        for start, end in self.upload_spans(rows):
            self.device[start:end].copy_(host[start:end], non_blocking=True)
        event = self._accel.event()
        if event is not None:
            event.record()
        self._events[self._cur] = event


class PendingIds:
    """The sampled ids of a launched step (and, for a model that declares ``side_outputs``, its side outputs), on
    their way to page-locked host memory: the plain object a decode graph step hands from the runner to the engine.

    :meth:`tolist` waits for the copies (the step's one host sync) and returns the ids; :meth:`side_outputs` then
    gives each row's side output.

    Args:
        device_ids: ``[n]`` int64 sampled ids on the device.
        host: ``[n]`` int64 their host copy (being written).
        event: recorded after the copies were enqueued (None on the CPU, where they are done).
        side_host: ``[n, ...]`` the host copy of the step's side outputs (``CausalLM.gather_side_outputs`` of its
            rows' state slots, gathered inside the step), or None.
    """

    def __init__(self, device_ids: torch.Tensor, host: torch.Tensor, event: object | None,
                 side_host: torch.Tensor | None = None):
        self.device_ids = device_ids
        self._host = host
        self._event = event
        self._side_host = side_host

    def tolist(self) -> list[int]:
        if self._event is not None:
            self._event.synchronize()
        return self._host.tolist()

    def side_outputs(self) -> list[torch.Tensor] | None:
        """Per row, its side output (row ``i`` of the host copy, ``[...]``; a copy: the page-locked buffer is reused
        two steps later), or None when the step gathered none. Waits for the copies like :meth:`tolist`."""
        if self._side_host is None:
            return None
        if self._event is not None:
            self._event.synchronize()
        return list(self._side_host.clone().unbind(0))


class IdsReadback:
    """Two alternating page-locked host buffers receiving each step's sampled ids (and side outputs: two more,
    allocated at the first step that has some, at the shape and dtype it has)."""

    def __init__(self, accel: Accelerator, rows: int):
        self._accel = accel
        self._rows = rows
        self._hosts = [accel.pin(torch.zeros(rows, dtype=torch.int64)) for _ in range(2)]
        self._side_hosts: list[torch.Tensor] | None = None
        self._events: list[object | None] = [None, None]
        self._cur = 0

    def start(self, device_ids: torch.Tensor, side: torch.Tensor | None = None) -> PendingIds:
        """Enqueue the copy of ``device_ids`` (``[n]`` int64), and of ``side`` (``[n, ...]``, the step's side outputs)
        when given, into the next host buffers."""
        self._cur ^= 1
        event = self._events[self._cur]
        if event is not None:  # its previous step was read long ago; never blocks in practice
            event.synchronize()
        n = device_ids.shape[0]
        host = self._hosts[self._cur][:n]
        host.copy_(device_ids, non_blocking=True)
        side_host = None
        if side is not None:
            self.reserve_side(side)
            side_host = self._side_hosts[self._cur][:n]
            side_host.copy_(side, non_blocking=True)
        event = self._accel.event()
        if event is not None:
            event.record()
        self._events[self._cur] = event
        return PendingIds(device_ids, host, event, side_host)

    def reserve_side(self, like: torch.Tensor) -> None:
        """Allocate the side outputs' two page-locked buffers for rows shaped and typed as ``like`` ``[n, ...]`` (at
        capture, so that no step pays for pinning memory), unless they are already."""
        hosts = self._side_hosts
        if hosts is None or hosts[0].shape[1:] != like.shape[1:] or hosts[0].dtype != like.dtype:
            self._side_hosts = [self._accel.pin(torch.zeros((self._rows, *like.shape[1:]), dtype=like.dtype))
                                for _ in range(2)]
