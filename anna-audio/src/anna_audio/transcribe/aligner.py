"""Word timestamps from a Qwen3 forced aligner (``Qwen3ASRForTokenClassification``, an auxiliary model of the
``transcribe`` task loaded from ``--asr-aligner-dir``), run with transformers.

The aligner reads an audio window and its transcript split into words, with two ``<timestamp>`` slots after each
word, and classifies every slot into a time bin (``timestamp_segment_time`` ms each). transformers'
``Qwen3ASRProcessor`` splits the words (CJK characters one by one, other scripts at spaces, punctuation dropped),
builds the input, and turns the bins into monotonic start / end times; this module runs it on one window at a time
(under a lock: the server calls it from worker threads) and returns :class:`~anna_audio.transcribe.formats.Word`s.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
from anna_core.errors import InvalidRequestError, ModelLoadError

from anna_audio.transcribe.formats import Word


class ForcedAligner:
    """A loaded forced aligner.

    Args:
        model: a transformers ``Qwen3ASRForTokenClassification`` in eval mode, whose config has
            ``timestamp_token_id``.
        processor: the checkpoint's transformers ``Qwen3ASRProcessor`` (its chat template lays the words out).
        languages: the language names it aligns (English names); others are refused.

    Raises:
        TypeError: the model's config has no integer ``timestamp_token_id``.
    """

    def __init__(self, model: Any, processor: Any, languages: frozenset[str]):
        token = getattr(model.config, "timestamp_token_id", None)
        if not isinstance(token, int):
            raise TypeError("the forced aligner's config.json needs an integer timestamp_token_id")
        self.model = model
        self.processor = processor
        self.languages = languages
        self.timestamp_token_id = token
        self._lock = threading.Lock()

    @classmethod
    def load(cls, folder: str | Path, *, device: torch.device | str = "cpu",
             dtype: torch.dtype = torch.float32) -> ForcedAligner:
        """Load the aligner checkpoint in ``folder`` (config, weights, processor) onto ``device`` in ``dtype``.

        Raises:
            ModelLoadError: the folder does not hold a loadable forced aligner.
        """
        from transformers import Qwen3ASRForTokenClassification, Qwen3ASRProcessor
        from transformers.models.qwen3_asr.processing_qwen3_asr import (
            FORCED_ALIGNER_LANGUAGES,
        )

        try:
            processor = Qwen3ASRProcessor.from_pretrained(str(folder))
            model, info = Qwen3ASRForTokenClassification.from_pretrained(str(folder), dtype=dtype,
                                                                         output_loading_info=True)
            absent = sorted(info.get("missing_keys") or ()) + [str(k) for k in info.get("mismatched_keys") or ()]
            if absent:  # e.g. an ASR checkpoint given as the aligner: its classifier would be random
                raise ValueError(f"{len(absent)} weights missing or mis-shaped (first: {absent[0]})")
            return cls(model.to(device).eval(), processor, frozenset(FORCED_ALIGNER_LANGUAGES))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a missing file, a bad config, no timestamp id
            raise ModelLoadError(f"--asr-aligner-dir {folder}: not a loadable Qwen3 forced aligner: {exc}") from exc

    def check_language(self, language: str | None) -> None:
        """Raises InvalidRequestError: ``language`` (an English name) is one the aligner does not align (None: the
        model will detect it, checked again once known)."""
        if language is not None and language not in self.languages:
            raise InvalidRequestError(f"word timestamps are not available for {language}; the forced aligner "
                                      f"aligns {', '.join(sorted(self.languages))}", param="language")

    def align(self, samples: np.ndarray, text: str, language: str | None) -> list[Word]:
        """The words of ``text`` with their times in ``samples``.

        Args:
            samples: ``[N]`` float32, 16 kHz mono (one window).
            text: the window's transcript.
            language: its language (an English name) or None.

        Returns:
            one :class:`Word` per aligned word (seconds from the window's start), in order; none for a transcript
            without words.

        Raises:
            InvalidRequestError: a language the aligner does not know.
        """
        if language is not None and language not in self.languages:
            language = None  # a detected language the aligner lacks: its default (space / CJK) word split
        with self._lock:
            inputs, word_lists = self.processor.prepare_forced_aligner_inputs(
                audio=[samples], transcript=[text], language=language)
            if not word_lists[0]:
                return []
            device = self.model.device
            inputs = {k: v.to(device) for k, v in inputs.items()}
            inputs["input_features"] = inputs["input_features"].to(self.model.dtype)
            with torch.inference_mode():
                logits = self.model(**inputs).logits
            timed = self.processor.decode_forced_alignment(logits, inputs["input_ids"], word_lists,
                                                           timestamp_token_id=self.timestamp_token_id)
        return [Word(item["text"], float(item["start_time"]), float(item["end_time"])) for item in timed[0]]
