"""Speech generation of one request in plain PyTorch: talker + code predictor, frame by frame.

After the reference (QwenLM/Qwen3-TTS ``modeling_qwen3_tts.py``: ``Qwen3TTSForConditionalGeneration.generate`` and
the talker's ``forward`` under transformers' ``generate`` with ``do_sample=False``). Each step the talker's logits
are adjusted as transformers' processors do there: the repetition penalty on the codebook-0 codes generated so far
(the prompt is embeddings, so it has no ids to penalise: a positive logit is divided by the penalty, a negative one
multiplied), the control ids ``[vocab - 1024, vocab)`` except the codec EOS never chosen, and EOS never chosen in
the first ``MIN_FRAMES`` steps; the frame's codebook 0 is then the highest logit, or drawn
(:func:`~anna_audio.qwen3_tts.sampling.choose`) when the talker samples. The code predictor fills the other
codebooks from the step's hidden state; the frame's summed embedding plus the next trailing text embedding is the
talker's next input. Generation stops at EOS (not a frame) or after ``max_new_tokens`` talker steps; as in the
reference, the last step's token is not expanded into a frame, so ``max_new_tokens`` steps give at most
``max_new_tokens - 1`` frames.
"""

from __future__ import annotations

import attrs
import torch

from anna_audio.qwen3_tts.code_predictor import CodePredictor
from anna_audio.qwen3_tts.config import CONTROL_ROWS, Qwen3TTSConfig
from anna_audio.qwen3_tts.decoder_layer import KV
from anna_audio.qwen3_tts.prompt import TalkerPrompt
from anna_audio.qwen3_tts.sampling import CodeSampling, SpeechSampling, choose
from anna_audio.qwen3_tts.talker import Talker

MIN_FRAMES = 2
"""Steps before EOS may be chosen (the reference's ``min_new_tokens``)."""


@attrs.frozen
class GeneratedSpeech:
    """``codes`` ``[F, G]`` int64 (EOS excluded); ``hidden`` ``[F, H]``: the talker state that chose each frame's
    codebook 0; ``logits`` ``[S, vocab]`` float32: the talker's raw logits of each step ``S``."""

    codes: torch.Tensor
    hidden: torch.Tensor
    logits: torch.Tensor


def adjust_logits(logits: torch.Tensor, generated: list[int], config: Qwen3TTSConfig, penalty: float,
                  step: int) -> torch.Tensor:
    """logits ``[vocab]`` float32 -> the adjusted copy the greedy choice reads (see the module docstring)."""
    out = logits.clone()
    if penalty != 1.0 and generated:
        seen = torch.tensor(sorted(set(generated)), device=out.device)
        values = out[seen]
        out[seen] = torch.where(values < 0, values * penalty, values / penalty)
    vocab, eos = config.talker.vocab_size, config.talker.ids.eos
    blocked = torch.ones(vocab, dtype=torch.bool, device=out.device)
    blocked[: vocab - CONTROL_ROWS] = False
    blocked[eos] = step < MIN_FRAMES
    return out.masked_fill(blocked, float("-inf"))


GREEDY = CodeSampling(do_sample=False, temperature=1.0, top_k=0, top_p=1.0)


def generate_greedy(config: Qwen3TTSConfig, talker: Talker, predictor: CodePredictor, prompt: TalkerPrompt, *,
                    max_new_tokens: int, repetition_penalty: float = 1.05) -> GeneratedSpeech:
    """:func:`generate` with talker and code predictor greedy (the reference with both ``do_sample`` off)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    return generate(config, talker, predictor, prompt, SpeechSampling(
        talker=GREEDY, predictor=GREEDY, repetition_penalty=repetition_penalty, max_new_tokens=max_new_tokens))


@torch.inference_mode()
def generate(config: Qwen3TTSConfig, talker: Talker, predictor: CodePredictor, prompt: TalkerPrompt,
             sampling: SpeechSampling, generator: torch.Generator | None = None) -> GeneratedSpeech:
    """Generate one request's codes with ``sampling`` (draws from ``generator`` when sampling).

    Raises:
        ValueError: ``repetition_penalty <= 0``.
    """
    if sampling.repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty must be positive, got {sampling.repetition_penalty}")
    max_new_tokens, repetition_penalty = sampling.max_new_tokens, sampling.repetition_penalty

    def pick_rest(logits: torch.Tensor, codebook: int) -> torch.Tensor:
        return choose(logits, sampling.predictor, generator)

    cache: list[KV] = []
    hidden, logits = talker(prompt.prefill[None], 0, cache)
    position = prompt.prefill.shape[0]
    generated: list[int] = []
    frames, hiddens, raw = [], [], [logits[0]]
    for step in range(max_new_tokens):
        adjusted = adjust_logits(logits[0], generated, config, repetition_penalty, step)
        token = int(choose(adjusted[None], sampling.talker, generator)[0])
        if token == config.talker.ids.eos or step == max_new_tokens - 1:
            break
        generated.append(token)
        first = talker.codec(torch.tensor([token], device=hidden.device))  # [1, H]
        rest = predictor(hidden, first, choose=pick_rest)  # [1, G-1]
        frames.append(torch.cat([torch.tensor([token], device=rest.device), rest[0]]))
        hiddens.append(hidden[0])
        text = prompt.trailing[step] if step < prompt.trailing.shape[0] else prompt.pad
        step_input = predictor.embed_frame(first, rest) + text
        hidden, logits = talker(step_input[:, None], position, cache)
        position += 1
        raw.append(logits[0])
    groups = config.talker.num_code_groups
    codes = torch.stack(frames) if frames else torch.zeros(0, groups, dtype=torch.int64)
    hidden_out = torch.stack(hiddens) if hiddens else torch.zeros(0, config.talker.shape.hidden_size)
    return GeneratedSpeech(codes=codes, hidden=hidden_out, logits=torch.stack(raw))
