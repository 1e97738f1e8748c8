"""The forced aligner (``--asr-aligner-dir``): word times equal transformers' model run directly on the same
window and words; unknown languages refused."""

import itertools

import numpy as np
import pytest
import torch
from anna_audio.transcribe.aligner import ForcedAligner
from anna_audio.transcribe.aligner_tiny import build_tiny_aligner


@pytest.fixture(scope="module")
def aligner_dir(tmp_path_factory):
    return build_tiny_aligner(tmp_path_factory.mktemp("aligner"))


def test_words_equal_transformers(aligner_dir):
    from transformers import Qwen3ASRForTokenClassification, Qwen3ASRProcessor

    samples = (0.1 * np.random.default_rng(1).standard_normal(16000 * 4)).astype(np.float32)
    text = "the quick brown fox, jumps!"
    words = ForcedAligner.load(aligner_dir).align(samples, text, "English")

    processor = Qwen3ASRProcessor.from_pretrained(str(aligner_dir))
    model = Qwen3ASRForTokenClassification.from_pretrained(str(aligner_dir)).eval()
    inputs, word_lists = processor.prepare_forced_aligner_inputs(audio=[samples], transcript=[text], language="en")
    with torch.no_grad():
        logits = model(**inputs).logits
    expected = processor.decode_forced_alignment(logits, inputs["input_ids"], word_lists,
                                                 timestamp_token_id=model.config.timestamp_token_id)[0]
    assert [w.word for w in words] == ["the", "quick", "brown", "fox", "jumps"]
    assert [(w.word, w.start, w.end) for w in words] == [(e["text"], e["start_time"], e["end_time"]) for e in expected]
    assert len({w.start for w in words} | {w.end for w in words}) > 1  # the random head does tell times apart
    assert all(a.start <= a.end <= b.start for a, b in itertools.pairwise(words))


def test_language_checks(aligner_dir):
    aligner = ForcedAligner.load(aligner_dir)
    aligner.check_language("English")
    aligner.check_language(None)
    from anna_core.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="not available for Thai"):
        aligner.check_language("Thai")
    assert aligner.align(np.zeros(16000, np.float32), " ... ", "English") == []


def test_not_an_aligner(tmp_path):
    from anna_core.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="not a loadable Qwen3 forced aligner"):
        ForcedAligner.load(tmp_path)


def test_an_asr_checkpoint_is_not_an_aligner(tmp_path):
    """A Qwen3-ASR checkpoint given as the aligner loads in transformers with a random classifier (a warning only):
    Anna refuses it at load instead of answering every timestamp request with garbage or a 500."""
    from anna_core.errors import ModelLoadError
    from anna_core.testing.tiny import write_tiny_checkpoint

    folder = write_tiny_checkpoint("qwen3_asr", tmp_path / "asr")
    with pytest.raises(ModelLoadError, match="missing or mis-shaped"):
        ForcedAligner.load(folder)
