"""Sampling settings of Qwen3-TTS (talker and code predictor) and the choice of a code from logits.

A checkpoint's ``generation_config.json`` gives the defaults (keys ``do_sample``, ``top_k``, ``top_p``,
``temperature``, ``repetition_penalty``, ``subtalker_dosample``, ``subtalker_top_k``, ``subtalker_top_p``,
``subtalker_temperature``, ``max_new_tokens``); a missing key takes the reference's hard default (QwenLM/Qwen3-TTS
``qwen_tts/inference/qwen3_tts_model.py``, ``_merge_generate_kwargs``). Sampling follows transformers' order as the
reference runs it: temperature, then top-k, then top-p (the smallest set of codes whose probability reaches
``top_p``, the most likely always kept), then a draw from the renormalised distribution.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import torch
from anna_core.errors import ModelLoadError
from anna_core.kernels.reference.sampling import top_k_scores, usable_temperature

DEFAULTS: dict[str, Any] = {"do_sample": True, "top_k": 50, "top_p": 1.0, "temperature": 0.9,
                            "repetition_penalty": 1.05, "subtalker_dosample": True, "subtalker_top_k": 50,
                            "subtalker_top_p": 1.0, "subtalker_temperature": 0.9, "max_new_tokens": 2048}


@attrs.frozen
class CodeSampling:
    """How one model picks codes: greedy when not ``do_sample``; else temperature, top-k (0: off), top-p."""

    do_sample: bool
    temperature: float
    top_k: int
    top_p: float

    def __attrs_post_init__(self) -> None:
        if self.do_sample and not usable_temperature(self.temperature):
            raise ValueError(f"temperature must be positive (with a normal float32 reciprocal) when sampling, got "
                             f"{self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@attrs.frozen
class SpeechSampling:
    """The talker's and the code predictor's sampling, the talker's repetition penalty and step limit."""

    talker: CodeSampling
    predictor: CodeSampling
    repetition_penalty: float
    max_new_tokens: int


def sampling_from(values: dict[str, Any]) -> SpeechSampling:
    """``values`` (generation_config keys; missing ones take :data:`DEFAULTS`) -> :class:`SpeechSampling`.

    Raises:
        ValueError: a value of the wrong type or outside its range.
    """
    v = {**DEFAULTS, **{k: values[k] for k in DEFAULTS if values.get(k) is not None}}
    try:
        talker = CodeSampling(bool(v["do_sample"]), float(v["temperature"]), int(v["top_k"]), float(v["top_p"]))
        predictor = CodeSampling(bool(v["subtalker_dosample"]), float(v["subtalker_temperature"]),
                                 int(v["subtalker_top_k"]), float(v["subtalker_top_p"]))
        penalty, steps = float(v["repetition_penalty"]), int(v["max_new_tokens"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid sampling settings: {exc}") from exc
    if penalty <= 0 or steps < 1:
        raise ValueError(f"repetition_penalty must be positive and max_new_tokens at least 1, got {penalty}, {steps}")
    return SpeechSampling(talker=talker, predictor=predictor, repetition_penalty=penalty, max_new_tokens=steps)


def load_sampling(folder: str | Path) -> SpeechSampling:
    """The defaults of the checkpoint in ``folder`` (its ``generation_config.json``; all reference defaults when
    the file is absent).

    Raises:
        ModelLoadError: the file is unreadable or holds invalid settings.
    """
    path = Path(folder) / "generation_config.json"
    if not path.is_file():
        return sampling_from({})
    try:
        values = json.loads(path.read_text())
        if not isinstance(values, dict):
            raise ValueError("not a JSON object")
        return sampling_from(values)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{str(path)!r}: {exc}") from exc


def choose(logits: torch.Tensor, sampling: CodeSampling, generator: torch.Generator | None = None) -> torch.Tensor:
    """logits ``[B, V]`` float32 (already adjusted: penalties, blocked ids at ``-inf``) -> codes ``[B]`` int64."""
    if not sampling.do_sample:
        return logits.argmax(dim=-1)
    return torch.multinomial(_filtered(logits, sampling).softmax(dim=-1), 1, generator=generator)[:, 0]


def _filtered(logits: torch.Tensor, sampling: CodeSampling) -> torch.Tensor:
    """Tempered scores with the codes outside top-k / top-p at ``-inf`` (the order of :func:`choose`): the op table's
    tempering and top-k (:func:`~anna_core.kernels.reference.sampling.top_k_scores`, what ``top_k_gumbel_sample``
    draws from, so the two draw the same codes), then top-p."""
    scores = top_k_scores(logits, sampling.temperature, sampling.top_k)
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(scores, dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs >= sampling.top_p
        scores = scores.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    return scores


def gumbel_noise(shape: tuple[int, ...], device: torch.device | str) -> torch.Tensor:
    """``log(-log(u))``, ``u ~ U(0, 1)`` float32 of ``shape`` from the device's generator, ``u`` clamped to
    ``[tiny, 1 - 1e-7]`` (so the noise is finite): what :func:`choose_gumbel` subtracts from the scores. Drawing a
    frame's noise for all its codebooks at once (one draw instead of one per codebook) gives every code the same
    distribution; on the CPU the values equal the per-codebook draws in order (its generator fills tensors
    serially)."""
    u = torch.rand(shape, dtype=torch.float32, device=device).clamp_(min=torch.finfo(torch.float32).tiny,
                                                                     max=1.0 - 1e-7)
    return torch.log(-torch.log(u))


def choose_gumbel(logits: torch.Tensor, sampling: CodeSampling, noise: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`choose` without a host sync (for captured graphs): greedy, or the Gumbel-max draw
    ``argmax(scores - log(-log(u)))``, ``u ~ U(0, 1)`` from the device's generator, which picks each code with its
    probability in the filtered distribution, as a multinomial draw does (not the same draws for a seed).

    logits ``[B, V]`` float32, noise ``[B, V]`` float32 (:func:`gumbel_noise`; None: drawn here) -> codes ``[B]``
    int64.
    """
    if not sampling.do_sample:
        return logits.argmax(dim=-1)
    scores = _filtered(logits, sampling)
    return (scores - (gumbel_noise(scores.shape, scores.device) if noise is None else noise)).argmax(dim=-1)
