"""Causal convolution layers of the 12 Hz codec's decoder, each able to continue from a
:class:`~anna_audio.qwen3_tts.stream_state.ChunkContext`.

Math after the reference decoder (QwenLM/Qwen3-TTS ``qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py``:
``Qwen3TTSTokenizerV2CausalConvNet``, ``...CausalTransConvNet``, ``...ConvNeXtBlock``, ``SnakeBeta``,
``...DecoderDecoderResidualUnit``, ``...DecoderDecoderBlock``). Every layer is causal: output sample ``t`` reads
inputs up to ``t`` only, so a chunk that starts from the state the previous chunk left equals the same span of a
whole decode. Module and parameter names follow the checkpoint's (``conv.weight``, ``block.1.conv.weight``, ...).

All tensors are ``[B, C, T]`` (batch, channels, samples). A layer built with ``time_major=True`` holds them
time-major in memory (channels-last: strides ``(T * C, 1, C)``, a transposed view of a contiguous ``[B, T, C]``):
its convolutions run as ``conv2d`` over ``[B, C, 1, T]`` in channels-last memory, the layout cuDNN's 16-bit kernels
compute in (a ``[B, C, T]``-contiguous input costs a conversion in and out of every convolution), pointwise
convolutions as matrix products over the time-major rows, transposed ones as a matrix product or a kernel-2
convolution (:meth:`CausalTransposedConv1d.forward`); elementwise layers keep the layout they are given. With
``time_major=False`` they are ``[B, C, T]``-contiguous and run torch's ``conv1d`` / ``conv_transpose1d`` (faster on
the CPU). Both layouts compute the same values.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from anna_audio.qwen3_tts.stream_state import ChunkContext, ContextLayer


def cat_time(past: torch.Tensor, x: torch.Tensor, time_major: bool) -> torch.Tensor:
    """``[B, C, t1]`` and ``[B, C, t2]`` (any layouts) -> ``[B, C, t1 + t2]`` (one copy), time-major or
    ``[B, C, T]``-contiguous."""
    if time_major:
        return torch.cat((past.transpose(1, 2), x.transpose(1, 2)), dim=1).transpose(1, 2)
    return torch.cat((past, x), dim=-1)


def time_major_(conv: nn.Conv1d) -> None:
    """Store ``conv``'s weight ``[A, B, k]`` time-major (strides ``(k * B, 1, B)``), the layout a channels-last
    convolution reads without converting it on every call; values unchanged."""
    w = conv.weight
    conv.weight = nn.Parameter(w.detach().transpose(1, 2).contiguous().transpose(1, 2), requires_grad=w.requires_grad)


def phased_conv1d(x: torch.Tensor, conv: nn.Conv1d, time_major: bool = False) -> torch.Tensor:
    """``conv`` (no padding, dilation ``d``, one group) of ``x`` ``[B, C_in, T]`` -> ``[B, C_out, T - (k - 1) d]`` as
    ``d`` undilated convolutions, one per phase: output ``d a + p`` reads inputs ``d (a + j) + p`` (``j < k``), so
    phase ``p`` of the output is the undilated convolution of phase ``p`` of the input. The phases go into the batch
    (``T`` zero-padded up to a multiple of ``d``, the extra outputs dropped: a pad, a copy into the phases and one out
    of them, a few microseconds at the codec's sizes), time-major in and out where ``time_major`` (the undilated
    convolution then channels-last, as :func:`_conv`). The same sums as the dilated convolution; on CUDA cuDNN may run
    the undilated ones with its fast kernels where it gives a wide dilated convolution its slow generic one
    (BENCHMARKS.md)."""
    d, k = conv.dilation[0], conv.kernel_size[0]
    b, c, t = x.shape
    padded = -(-t // d) * d
    rows = x.transpose(1, 2) if time_major else x  # [B, T, C] (contiguous) or [B, C, T]
    if padded != t:
        rows = F.pad(rows, (0, 0, 0, padded - t) if time_major else (0, padded - t))
    if time_major:  # [B, T/d, d, C] -> [B d, T/d, C], then viewed [B d, C, T/d] time-major
        phases = rows.unflatten(1, (padded // d, d)).transpose(1, 2).reshape(b * d, padded // d, c).transpose(1, 2)
        y = F.conv2d(phases.unsqueeze(2), conv.weight.unsqueeze(2), conv.bias).squeeze(2)  # [B d, C_out, A]
        out = y.transpose(1, 2).unflatten(0, (b, d)).transpose(1, 2).reshape(b, y.shape[-1] * d, y.shape[1])
        return (out[:, :t - (k - 1) * d].contiguous() if padded != t else out).transpose(1, 2)
    phases = rows.unflatten(-1, (padded // d, d)).permute(0, 3, 1, 2).reshape(b * d, c, padded // d)
    y = F.conv1d(phases, conv.weight, conv.bias)  # [B d, C_out, padded / d - k + 1]
    y = y.unflatten(0, (b, d)).permute(0, 2, 3, 1).reshape(b, y.shape[1], y.shape[-1] * d)
    return y[..., :t - (k - 1) * d]


def _conv(x: torch.Tensor, conv: nn.Conv1d, time_major: bool, phased: bool = False) -> torch.Tensor:
    """``conv`` (no padding) of ``x`` ``[B, C_in, T]`` -> ``[B, C_out, T']``: with ``phased`` (a dilated
    convolution) :func:`phased_conv1d`; time-major, a channels-last ``conv2d`` (a pointwise one as a matrix product
    over the time-major rows); else torch's ``conv1d``."""
    if phased:
        return phased_conv1d(x, conv, time_major)
    if not time_major:
        return conv(x)
    if conv.kernel_size[0] == 1 and conv.groups == 1:
        return F.linear(x.transpose(1, 2), conv.weight[:, :, 0], conv.bias).transpose(1, 2)
    y = F.conv2d(x.unsqueeze(2), conv.weight.unsqueeze(2), conv.bias, dilation=(1, conv.dilation[0]),
                 groups=conv.groups)
    return y.squeeze(2)


class CausalConv1d(ContextLayer):
    """Stride-1 convolution padded on the left by ``(kernel - 1) * dilation`` samples (zeros at the start of a
    stream, the previous chunk's last input samples after it).

    Args:
        time_major: hold activations time-major (module docstring).
        phased: a dilated convolution of one group runs as undilated ones over the input's phases
            (:func:`phased_conv1d`; slower on the CPU).

    Parameters:
        conv.weight: ``[C_out, C_in / groups, kernel]``; conv.bias: ``[C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 groups: int = 1, time_major: bool = False, phased: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.context = (kernel_size - 1) * dilation
        self.time_major = time_major
        self.phased = phased and dilation > 1 and groups == 1

    @property
    def context_shape(self) -> tuple[int, ...] | None:
        """``(C_in, context)``: the last input samples (None for a pointwise convolution)."""
        return (self.conv.in_channels, self.context) if self.context else None

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        """x: ``[B, C_in, T]`` -> ``[B, C_out, T]`` (time-major where the layer is)."""
        if self.context == 0:
            return _conv(x, self.conv, self.time_major)
        past = state.get(self) if state is not None else x.new_zeros(x.shape[0], x.shape[1], self.context)
        padded = cat_time(past, x, self.time_major)
        if state is not None:
            state.put(self, padded[..., padded.shape[-1] - self.context:])
        return _conv(padded, self.conv, self.time_major, self.phased)


class CausalTransposedConv1d(ContextLayer):
    """Transposed convolution (kernel ``k``, stride ``s``) keeping ``s`` outputs per input sample: the reference
    trims the last ``k - s`` samples of the whole output, so output ``n`` sums inputs ``m`` with
    ``m * s <= n < m * s + k``. A chunk therefore needs the ``ceil((k - s) / s)`` input samples before it, which
    the state carries (zeros at the start).

    Args:
        time_major: hold activations time-major (module docstring; :meth:`forward` says how it computes).

    Parameters:
        conv.weight: ``[C_in, C_out, k]``; conv.bias: ``[C_out]``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 time_major: bool = False) -> None:
        super().__init__()
        if kernel_size < stride:
            raise ValueError(f"kernel {kernel_size} shorter than stride {stride}")
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride = stride
        self.context = math.ceil((kernel_size - stride) / stride)
        self.time_major = time_major
        self._rearranged: tuple | None = None  # (weight, bias, storage and version key, rearranged pair)

    @property
    def context_shape(self) -> tuple[int, ...] | None:
        """``(C_in, context)``: the last input frames (None when the kernel equals the stride)."""
        return (self.conv.in_channels, self.context) if self.context else None

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        """x: ``[B, C_in, T]`` -> ``[B, C_out, T * stride]``.

        Time-major, with kernel ``k = s`` (no context) output ``m s + j`` is ``W[:, :, j] . x[m]``: one matrix
        product into ``s * C_out`` columns ordered ``(j, c)``, whose time-major rows are the output's time-major
        memory as they stand. With ``k = 2 s`` (one frame of context) it is
        ``W[:, :, j] . x[m] + W[:, :, j + s] . x[m - 1]``: a kernel-2 convolution into the same ``s * C_out``
        channels, read the same way. Otherwise (other kernels, or ``[B, C, T]``-contiguous) ``conv_transpose1d``,
        its output trimmed. The rearranged weight and bias are built once and kept (:meth:`rearranged`).
        """
        steps, s = x.shape[-1], self.stride
        c_out, k = self.conv.out_channels, self.conv.kernel_size[0]
        if self.context:
            past = state.get(self) if state is not None else x.new_zeros(x.shape[0], x.shape[1], self.context)
            x = cat_time(past, x, self.time_major)
            if state is not None:
                state.put(self, x[..., x.shape[-1] - self.context:])
        if not self.time_major or k not in (s, 2 * s):
            start = self.context * s
            return self.conv(x)[..., start:start + steps * s]
        w, bias = self.rearranged()
        if k == s:
            z = F.linear(x.transpose(1, 2), w, bias)
        else:
            z = F.conv2d(x.unsqueeze(2), w, bias).squeeze(2).transpose(1, 2)
        return z.reshape(x.shape[0], steps * s, c_out).transpose(1, 2)  # z: [B, T, s * C_out]

    def drop_rearranged(self) -> None:
        """Forget the kept rearranged weights (the next :meth:`rearranged` builds them from the weights as they are)."""
        self._rearranged = None

    def rearranged(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The time-major forms of ``conv``'s weight and bias: for ``k = s`` a matrix ``[s * C_out, C_in]``, for
        ``k = 2 s`` a channels-last kernel-2 ``conv2d`` weight ``[s * C_out, C_in, 1, 2]`` (taps on ``x[m - 1]``,
        then ``x[m]``); rows ordered ``(j, c)``; bias ``[s * C_out]``. Built on the first call and kept while
        ``conv.weight`` and ``conv.bias`` are the same parameters over the same storage, dtype and device at the same
        in-place version (loading a state dict, ``.to()`` or assigning new parameters rebuilds them; a write through
        ``.data`` or into an inference-mode tensor bumps no version and is not seen: call
        :meth:`CodecDecoder.layout_weights` after one). :meth:`CodecDecoder.layout_weights` builds them afresh, so a
        device graph captured later reads the kept tensors.

        Raises:
            ValueError: the kernel is neither the stride nor twice it.
        """
        w, bias = self.conv.weight, self.conv.bias  # [C_in, C_out, k], [C_out]
        key = tuple((t.data_ptr(), t.dtype, t.device, -1 if t.is_inference() else t._version) for t in (w, bias))
        kept = self._rearranged
        if kept is not None and kept[0] is w and kept[1] is bias and kept[2] == key:
            return kept[3]
        c_in, c_out, k = w.shape
        s = self.stride
        with torch.no_grad():
            if k == s:
                w_t = w.permute(2, 1, 0).reshape(s * c_out, c_in).contiguous()
            elif k == 2 * s:
                taps = torch.stack((w[:, :, s:], w[:, :, :s]), dim=-1)  # [C_in, C_out, s, 2]
                # one copy into [(j, c), 2, C_in]; viewed [(j, c), C_in, 1, 2], channels-last as the input
                w_t = taps.permute(2, 1, 3, 0).reshape(s * c_out, 2, c_in).transpose(1, 2).unsqueeze(2)
            else:
                raise ValueError(f"no time-major form for kernel {k} at stride {s}")
            b_t = bias.repeat(s)
        self._rearranged = (w, bias, key, (w_t, b_t))
        return w_t, b_t


class SnakeBeta(nn.Module):
    """``x + sin(x * e^alpha)^2 / (e^beta + 1e-9)`` per channel (Snake with a separate magnitude; Ziyin et al.
    2020, as the reference's ``SnakeBeta``).

    Args:
        channels: C.
        snake: an accelerated ``snake_beta`` op (``(x, alpha, beta) -> y``, the op registry's kernel; one launch),
            or None: the torch expression (the op's reference, seven launches).

    Parameters:
        alpha, beta: ``[C]`` log-scale frequency and magnitude.
    """

    def __init__(self, channels: int, snake: Callable[..., torch.Tensor] | None = None) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.snake = snake

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        """x: ``[B, C, T]`` -> ``[B, C, T]`` (the add and the division in one op)."""
        if self.snake is not None:
            return self.snake(x, self.alpha, self.beta)
        alpha = torch.exp(self.alpha)[None, :, None]
        beta = torch.exp(self.beta)[None, :, None]
        return torch.addcdiv(x, torch.sin(x * alpha).pow(2), beta + 1e-9)


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv (kernel 7) -> LayerNorm -> Linear 4x -> GELU -> Linear -> per-channel ``gamma``,
    added to the input.

    Parameters:
        dwconv.conv.weight ``[C, 1, 7]``, dwconv.conv.bias; norm.weight / norm.bias ``[C]``; pwconv1 ``[4C, C]``;
        pwconv2 ``[C, 4C]``; gamma ``[C]``.
    """

    def __init__(self, dim: int, time_major: bool = False) -> None:
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim, time_major=time_major)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        h = self.dwconv(x, state).transpose(1, 2)  # [B, T, C] (contiguous where the convolution is time-major)
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return torch.addcmul(x, self.gamma[:, None], h.transpose(1, 2))  # x + gamma * h in one op


class ResidualUnit(nn.Module):
    """``x + conv2(snake(conv1(snake(x))))`` with a dilated kernel-7 ``conv1`` (``phased``: see
    :class:`CausalConv1d`) and a pointwise ``conv2``."""

    def __init__(self, dim: int, dilation: int, snake: Callable[..., torch.Tensor] | None = None,
                 time_major: bool = False, phased: bool = False) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim, snake)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation=dilation, time_major=time_major, phased=phased)
        self.act2 = SnakeBeta(dim, snake)
        self.conv2 = CausalConv1d(dim, dim, 1, time_major=time_major)

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        h = self.conv1(self.act1(x), state)
        return x + self.conv2(self.act2(h), state)


class UpsampleBlock(nn.Module):
    """SnakeBeta, a transposed convolution (kernel ``2 r``, stride ``r``) halving the channels, then residual units
    of dilation 1, 3 and 9 (the checkpoint's ``decoder.decoder.<i>.block.<0..4>``; ``phased``: their dilated
    convolutions as :func:`phased_conv1d`)."""

    def __init__(self, in_dim: int, out_dim: int, rate: int, snake: Callable[..., torch.Tensor] | None = None,
                 time_major: bool = False, phased: bool = False) -> None:
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(in_dim, snake),
                                    CausalTransposedConv1d(in_dim, out_dim, 2 * rate, rate, time_major),
                                    *(ResidualUnit(out_dim, d, snake, time_major, phased) for d in (1, 3, 9))])

    def forward(self, x: torch.Tensor, state: ChunkContext | None = None) -> torch.Tensor:
        for layer in self.block:
            x = layer(x, state)
        return x
