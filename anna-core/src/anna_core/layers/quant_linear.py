"""Linear layers and embeddings whose weights stay quantized (GGUF blocks kept packed on the CPU).

:class:`QuantizedLinear` holds a weight as :class:`~anna_core.weights.gguf_blocks.AffineBlocks` until
:meth:`~QuantizedLinear.pack` lays it out, once, for the ``int4_linear`` op (torch's packed-int4 CPU
kernel; wider codes as two 4-bit planes, see :mod:`anna_core.kernels.reference.int4_linear`); no
float copy of the weight is kept. It computes in ``compute_dtype``: bfloat16 by default, where torch's
CPU kernel is fast (x, the scales and the result round to bfloat16: ``|y - x w^T| <= 3 * 2**-9 *
|x| |w|^T`` plus the result's rounding); float32 is exact to float32 rounding but about 100x slower.

:class:`QuantizedEmbedding` keeps the stored GGUF rows and dequantizes only the rows a step looks up;
a tied LM head runs in float32 over the table dequantized once (:meth:`~QuantizedEmbedding.logits`:
bfloat16 logits would decide near-tied greedy choices by rounding).
"""

from __future__ import annotations

from typing import Any

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from anna_core.kernels.reference.int4_linear import pack_affine_blocks
from anna_core.weights.gguf_blocks import AffineBlocks


class QuantizedLinear(nn.Module):
    """``y = x @ w^T + bias`` with ``w`` kept quantized, through the ``int4_linear`` op.

    Args:
        blocks: the ``[N, K]`` weight.
        bias: ``[N]`` Parameter or None.
        ops: the model's :class:`~anna_core.kernels.OpTable` (None: the op's torch reference).
        compute_dtype: the dtype the kernel runs in (bfloat16: fast on the CPU; float32: exact).

    Buffers (after :meth:`pack`, not in ``state_dict``): ``packed`` ``[N, K'/2]`` uint8, ``scale_zero``
    ``[K'/g, N, 2]``; ``layout`` (the :class:`~anna_core.kernels.reference.int4_linear.PackedInt4` they
    came from) expands x to the kernel's ``K'`` columns.
    """

    def __init__(self, blocks: AffineBlocks, bias: torch.Tensor | None = None, ops: Any = None,
                 compute_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.out_features, self.in_features = blocks.shape
        self.source = blocks.source
        self.blocks: AffineBlocks | None = blocks
        self.bias = bias if bias is None or isinstance(bias, nn.Parameter) else nn.Parameter(bias, requires_grad=False)
        self.ops = ops
        self.compute_dtype = compute_dtype
        self.group = 0
        self._op: Any = None

    @classmethod
    def merged(cls, parts: list[QuantizedLinear]) -> QuantizedLinear:
        """One layer whose output is the concatenation of ``parts``' outputs (same input); unpacked parts only."""
        if any(p.blocks is None for p in parts):
            raise ValueError("merge quantized linears before packing them")
        biases = [p.bias for p in parts]
        bias = None if any(b is None for b in biases) else torch.cat([b.detach() for b in biases])
        return cls(AffineBlocks.cat([p.blocks for p in parts]), bias, parts[0].ops, parts[0].compute_dtype)

    def dense(self, dtype: torch.dtype) -> nn.Linear:
        """An ``nn.Linear`` holding the dequantized weight (for a merge with a dense part)."""
        if self.blocks is None:
            raise ValueError("a packed QuantizedLinear keeps no blocks to dequantize")
        with torch.device("meta"):
            out = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        out.weight = nn.Parameter(self.blocks.dequantize(dtype), requires_grad=False)
        if self.bias is not None:
            out.bias = self.bias
        return out

    def pack(self) -> None:
        """Lay the weight out for the kernel (once; idempotent) and drop the unpacked codes."""
        if self.blocks is None:
            return
        p = pack_affine_blocks(self.blocks, self.compute_dtype)
        self.register_buffer("packed", p.packed, persistent=False)
        self.register_buffer("scale_zero", p.scale_zero, persistent=False)
        self.layout = attrs.evolve(p, packed=None, scale_zero=None)  # the geometry (the buffers live above)
        self.group = p.group
        self.blocks = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., K]`` -> ``[..., N]`` in x's dtype."""
        op = self._op
        if op is None:
            op = self._bind()
        flat = x.dim() == 2  # [M, K] already (decoders call it so): no reshape either way
        h = x if flat else x.reshape(-1, self.in_features)  # [M, K]
        if h.dtype != self.compute_dtype:
            h = h.to(self.compute_dtype)
        if self._expand:
            h = self.layout.expand(h)  # [M, K']: once per plane, groups padded to the kernel's
        y = op(h, self.packed, self.scale_zero, self.group)  # [M, N rounded up to 16]
        if self._trim:
            y = y[:, : self.out_features]
        if y.dtype != x.dtype:
            y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y if flat else y.reshape(*x.shape[:-1], self.out_features)

    def _bind(self):
        """Pack (first call) and resolve the op once; forward's per-call work is then the kernel's."""
        self.pack()
        from anna_core.kernels.reference.int4_linear import int4_linear

        self._op = int4_linear if self.ops is None else self.ops.int4_linear
        self._expand = self.layout.planes > 1 or self.layout.source_group != self.layout.group
        self._trim = self.packed.shape[0] != self.out_features
        return self._op

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, {self.source}, "
                f"compute={str(self.compute_dtype).replace('torch.', '')}, bias={self.bias is not None}")


class QuantizedEmbedding(nn.Module):
    """A token embedding over stored GGUF rows: looks rows up, then dequantizes just those.

    Args:
        raw: ``[V, row_bytes]`` uint8, the stored rows (one row per token).
        ggml_type: their GGML type (a ``gguf.GGMLQuantizationType`` or its name).
        dim: the embedding width ``H``.
        dtype: the dtype rows are dequantized to.
        tied_head: the table also serves as the tied LM head (:meth:`logits`).

    A tied LM head runs in float32 over the table dequantized once (a ``[V, H]`` float32 buffer, built at
    construction): the packed-int4 kernel rounds its output to bfloat16, whose step at a logit of 25 is 0.125,
    so near-tied greedy choices (margins of a few hundredths are common) would be decided by the rounding.
    """

    def __init__(self, raw: torch.Tensor, ggml_type: Any, dim: int, dtype: torch.dtype, tied_head: bool = False):
        super().__init__()
        self.register_buffer("raw", raw, persistent=False)
        self.ggml_type = getattr(ggml_type, "name", str(ggml_type))
        self.num_embeddings, self.embedding_dim = int(raw.shape[0]), dim
        self.dtype = dtype
        self.tied_head = tied_head
        head = self._dequantize(raw, torch.float32) if tied_head else None  # [V, H] float32
        self.register_buffer("head_weight", head, persistent=False)
        self.register_buffer("head_codes", None, persistent=False)  # [G, 32, V] int8 after use_int8_head
        self.register_buffer("head_scales", None, persistent=False)  # [G, V] float32 after use_int8_head
        self._int8_head: Any = None  # use_int8_head's (compiled) function

    def _dequantize(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        from anna_core.weights.dequant import dequantize

        return dequantize(rows, self.ggml_type, (rows.shape[0], self.embedding_dim), dtype=dtype, device=rows.device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: ``[...]`` int -> ``[..., H]`` in ``dtype``."""
        rows = F.embedding(ids.reshape(-1), self.raw)  # [T, row_bytes]
        return self._dequantize(rows, self.dtype).reshape(*ids.shape, self.embedding_dim)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The tied LM head: hidden ``[N, H]`` -> float32 logits ``[N, V]``.

        Raises:
            ValueError: not a tied head.
        """
        if self._int8_head is not None:
            h = hidden.float()
            if h.shape[0] == 1:
                return self._int8_head(h, self.head_codes, self.head_scales)
            return torch.cat([self._int8_head(row, self.head_codes, self.head_scales) for row in h.split(1)])
        if self.head_weight is None:
            raise ValueError("this QuantizedEmbedding is not a tied LM head")
        return F.linear(hidden.float(), self.head_weight)

    def use_int8_head(self, compile_fn: Any) -> None:
        """Compute the tied head from the ``Q8_0`` table's own codes instead of its float32 copy (which is freed:
        113 MB -> 30 MB for the default model, and that much less read per token). ``logit[v] = sum_g d[v, g]
        * sum_j q[v, g, j] h[g, j]``: the same products as the float32 table's (``d q`` is exact in float32),
        summed in another order, so the logits stay float32 (within float32 rounding of the table's). The
        expression is only fast compiled into one loop (``compile_fn``, e.g. ``torch.compile``: the runner's
        ``compile_mode``); rows are computed one at a time (one compiled shape). The codes are stored
        token-minor (``[G, 32, V]``, :func:`int8_head_logits`) so the loop's vector lanes run along the vocabulary.

        Raises:
            ValueError: not a tied head, or a table that is not ``Q8_0``; whatever ``compile_fn``'s function
                raises on its first call (the float32 head is then kept).
        """
        if not self.tied_head:
            raise ValueError("this QuantizedEmbedding is not a tied LM head")
        if self.ggml_type != "Q8_0":
            raise ValueError(f"the int8 head reads Q8_0 tables only, not {self.ggml_type}")
        blocks = self.raw.view(self.num_embeddings, -1, 34)  # Q8_0 block: d (float16), 32 int8 codes
        codes = blocks[..., 2:].view(torch.int8).permute(1, 2, 0).contiguous()  # [G, 32, V]: token-minor
        scales = blocks[..., :2].contiguous().view(torch.float16).squeeze(-1).float().t().contiguous()  # [G, V]
        fn = compile_fn(int8_head_logits)
        with torch.inference_mode():  # as steps run it (another grad mode is another compiled graph)
            fn(torch.zeros(1, self.embedding_dim), codes, scales)  # compiled now (a failure leaves the float32 head)
        self.head_codes, self.head_scales, self._int8_head = codes, scales, fn
        self.head_weight = None

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {self.ggml_type}"


def int8_head_logits(hidden: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """hidden ``[1, H]`` float32, codes ``[G, g, V]`` int8, scales ``[G, V]`` float32 -> ``[1, V]`` float32:
    ``logit[v] = sum_G scales[G, v] * sum_g codes[G, g, v] * hidden[G g]``.

    The codes are token-minor so a compiled loop reads them in order with its vector lanes along ``V``
    (each step a broadcast of one hidden value times a run of codes): on one core of the 2-core test machine,
    the default model's ``[49152, 576]`` head takes 2.4 ms this way against 3.1 ms token-major and 7.9 ms
    for ``F.linear`` over the float32 table. Eagerly it materialises ``[G, g, V]`` floats: compile it.
    """
    h = hidden.view(codes.shape[0], codes.shape[1], 1)  # [G, g, 1]
    return ((h * codes.float()).sum(1) * scales).sum(0, keepdim=True)


def use_int8_heads(root: nn.Module, compile_fn: Any) -> int:
    """:meth:`QuantizedEmbedding.use_int8_head` for every tied ``Q8_0`` head under ``root``; returns how many."""
    heads = [m for m in root.modules() if isinstance(m, QuantizedEmbedding) and m.tied_head and m.ggml_type == "Q8_0"]
    for head in heads:
        head.use_int8_head(compile_fn)
    return len(heads)


def pack_all(root: nn.Module, ops: Any = None) -> int:
    """:meth:`QuantizedLinear.pack` every quantized layer under ``root`` (heads of embeddings included),
    binding it to ``ops`` (the model's op table) when given; returns how many. Call once the
    projections are merged."""
    layers = [m for m in root.modules() if isinstance(m, QuantizedLinear)]
    for layer in layers:
        if ops is not None:
            layer.ops, layer._op = ops, None
        layer.pack()
    return len(layers)
