"""A fake :class:`~anna_core.model.CausalLM` that answers from scripts, for server and parser tests.

It runs behind the real engine (scheduler, sampler, detokenizer, stop strings, logits processors)
and ignores what the prompt means: the prompt only selects a script by containing the marker
``[[script:NAME]]``. Scripts:

- :class:`TokenScript`: emits the given token ids, then EOS. The logits at output position ``k``
  are ``100 - 20 j`` for the script token at ``k + j`` (``j < 5``), ``10 - j / 1000`` for later
  script tokens (first occurrence wins) and 0 for every other token, so sampling follows the
  script at any temperature up to 1 (a deviation has probability below ``e^-20`` per token); when
  a grammar forbids the scripted token, the nearest allowed upcoming script token wins.
- :class:`UniformScript`: logits 0 on ``candidates`` and ``-inf`` elsewhere, for ``length`` tokens
  then EOS: sampling is uniform over the candidates (``logprob = -ln(len(candidates))``), so
  seeds and ``n`` choices give visibly different, reproducible outputs.

A prompt without a marker answers with EOS at once. State per sequence lives in the state slot
index (fresh when a chunk starts at position 0); run the engine with prefix caching off.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import torch

from anna_core.engine.forward_batch import ForwardBatch
from anna_core.model import CacheSpec, ModelCaches, ModelCapabilities

_MARKER = re.compile(r"\[\[script:([A-Za-z0-9_\-]+)\]\]")
_LOOKAHEAD = 5


@attrs.frozen
class TokenScript:
    token_ids: tuple[int, ...]


@attrs.frozen
class UniformScript:
    candidates: tuple[int, ...]
    length: int


class ScriptedLM(torch.nn.Module):
    """The fake model (see the module doc).

    Args:
        tokenizer: :class:`anna_core.tokenizer.Tokenizer` (decodes prompts to find the marker).
        vocab_size: logits width ``V``.
        eos_token_id: emitted when a script ends.
        scripts: name -> :class:`TokenScript` / :class:`UniformScript` (more can be added later
            with :meth:`add`).
    """

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_id: int,
                 scripts: dict[str, TokenScript | UniformScript] | None = None):
        super().__init__()
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.cache_spec = CacheSpec()
        self.capabilities = ModelCapabilities()
        self._names: list[str] = []
        self._scripts: list[TokenScript | UniformScript] = []
        self._slots: dict[int, dict[str, Any]] = {}
        for name, script in (scripts or {}).items():
            self.add(name, script)

    def add(self, name: str, script: TokenScript | UniformScript) -> None:
        """Register (or replace) script ``name``."""
        if name in self._names:
            self._scripts[self._names.index(name)] = script
        else:
            self._names.append(name)
            self._scripts.append(script)

    def _select(self, prompt: list[int]) -> int:
        m = _MARKER.search(self.tokenizer.decode(prompt, skip_special_tokens=False))
        return self._names.index(m.group(1)) if m and m.group(1) in self._names else -1

    def forward(self, batch: ForwardBatch, caches: ModelCaches) -> torch.Tensor:
        """Hidden ``[T, 2]`` float32: for a row that samples, ``(script index, output position)``; other rows
        (prompt rows, which only prompt logprobs read) ``(-1, 0)``: no script, EOS logits."""
        ids = batch.input_ids.tolist()
        positions = batch.positions.tolist()
        cu = batch.cu_seqlens.tolist()
        slots = batch.state_slots.tolist()
        sampling_rows = set(batch.logits_indices.tolist())
        hidden = torch.zeros(len(ids), 2)
        hidden[:, 0] = -1  # (0 would be the first registered script's first output position)
        for i, slot in enumerate(slots):
            lo, hi = cu[i], cu[i + 1]
            if positions[lo] == 0:
                self._slots[slot] = {"fed": [], "prompt_len": None, "script": -1}
            state = self._slots[slot]
            state["fed"] += ids[lo:hi]
            if hi - 1 in sampling_rows:
                if state["prompt_len"] is None:
                    state["prompt_len"] = len(state["fed"])
                    state["script"] = self._select(state["fed"])
                hidden[hi - 1, 0] = state["script"]
                hidden[hi - 1, 1] = len(state["fed"]) - state["prompt_len"]
        return hidden

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, V]`` float32 for hidden rows ``[N, 2]`` (see the module doc)."""
        logits = torch.zeros(hidden.shape[0], self.vocab_size)
        for r, (index, k) in enumerate(hidden.tolist()):
            index, k = int(index), int(k)
            script = self._scripts[index] if index >= 0 else None
            if isinstance(script, UniformScript) and k < script.length:
                logits[r] = float("-inf")
                logits[r, list(script.candidates)] = 0.0
            elif isinstance(script, TokenScript) and k < len(script.token_ids):
                upcoming = script.token_ids[k:]
                for j in reversed(range(len(upcoming))):  # earlier positions overwrite later ones
                    logits[r, upcoming[j]] = 100.0 - 20.0 * j if j < _LOOKAHEAD else 10.0 - j / 1000
            else:
                logits[r, self.eos_token_id] = 100.0
        return logits
