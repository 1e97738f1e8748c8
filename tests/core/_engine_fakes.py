"""Fakes for engine tests: a tiny deterministic CausalLM over the paged KV cache and state slots,
and a byte-level BPE tokenizer built in memory.

``FakeLM``'s next token is a hash of the *whole* context, which it reads back from the paged KV
cache through the block table (K holds ``[token, position]``); it also keeps a running token sum in
the recurrent state and the last token in the conv state and raises if either disagrees with the
cache. So a wrong block table, slot mapping, position, unzeroed or swapped state slot shows up as
a wrong token or an error, never silently.
"""

from __future__ import annotations

import math

import torch
from anna_core.model import (
    CacheSpec,
    FullAttentionSpec,
    GenerationDefaults,
    LoadedModel,
    ModelCapabilities,
    RecurrentStateSpec,
)


def next_token(tokens: list[int], vocab: int) -> int:
    """The fake model's greedy next token after ``tokens``."""
    weighted = sum((i + 1) * t for i, t in enumerate(tokens))
    return (31 * weighted + 7 * tokens[-1] + 3 * len(tokens)) % vocab


def greedy_reference(prompt: list[int], n: int, vocab: int, script: list[int] | None = None) -> list[int]:
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(script[len(tokens) % len(script)] if script else next_token(tokens, vocab))
    return tokens[len(prompt):]


class FakeLM(torch.nn.Module):
    """Args: vocab: vocabulary size; script: if given, the token after position ``p`` is
    ``script[(p + 1) % len(script)]`` (a model that "memorised" a text); sharpness: logit scale."""

    def __init__(self, vocab: int = 101, script: list[int] | None = None, sharpness: float = 6.0):
        super().__init__()
        self.vocab_size = vocab
        self.script = script
        self.sharpness = sharpness
        self.fail_on_token: int | None = None
        self.cache_spec = CacheSpec((FullAttentionSpec(layers=[0], num_kv_heads=1, head_dim=2),
                                     RecurrentStateSpec(layers=[1], conv_shape=(1, 1), state_shape=(1, 1, 1))))
        self.capabilities = ModelCapabilities()

    def forward(self, batch, caches):
        k_cache, _ = caches.attention(0).layer(0)
        bs = caches.block_size
        table = batch.tables[0]
        flat = k_cache.view(-1, 2)  # [num_blocks * block_size, 2]
        flat[table.slot_mapping] = torch.stack([batch.input_ids, batch.positions], -1).to(flat.dtype)
        rec, conv = caches.state(1).recurrent[0], caches.state(1).conv[0]
        targets = []
        cu = batch.cu_seqlens.tolist()
        for i in range(batch.num_seqs):
            q_len, ctx = batch.query_lens[i], batch.context_lens[i]
            start = ctx - q_len
            pos = torch.arange(ctx)
            slots = table.block_tables[i].long()[pos // bs] * bs + pos % bs
            cached = flat[slots]
            if not torch.equal(cached[:, 1].long(), pos):
                raise RuntimeError(f"KV cache of sequence {i} holds the wrong positions")
            if not torch.equal(batch.input_ids[cu[i]:cu[i + 1]], cached[start:, 0].long()):
                raise RuntimeError(f"input ids of sequence {i} do not match the cache")
            toks = cached[:, 0].long().tolist()
            if self.fail_on_token is not None and self.fail_on_token in toks[start:]:
                raise RuntimeError("injected failure")
            slot = int(batch.state_slots[i])
            if int(rec[slot].sum()) != sum(toks[:start]) or int(conv[slot].sum()) != (toks[start - 1] if start else 0):
                raise RuntimeError(f"recurrent state of sequence {i} (slot {slot}) is stale")
            rec[slot] += sum(toks[start:])
            conv[slot] = toks[-1]
            for p in range(start, ctx):
                if self.script:
                    targets.append(self.script[(p + 1) % len(self.script)])
                else:
                    targets.append(next_token(toks[:p + 1], self.vocab_size))
        return torch.tensor(targets, dtype=torch.float32)[:, None]  # [T, 1]

    def compute_logits(self, hidden):
        j = torch.arange(self.vocab_size, dtype=torch.float32)
        return self.sharpness * torch.cos(2 * math.pi * (j[None, :] - hidden) / self.vocab_size)  # [N, V]


CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "Anna serves models. Stop here please. The end.",
    "hello hello world world the the",
]


def build_tokenizer(special_tokens: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")):
    """A byte-level BPE :class:`anna_core.tokenizer.Tokenizer` trained on a tiny English corpus, so
    emoji and CJK characters split into several byte tokens."""
    from anna_core.tokenizer import Tokenizer
    from tokenizers import Tokenizer as HFTok
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = HFTok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=list(special_tokens),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=special_tokens[0])
    hf.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return Tokenizer(hf)


def loaded(model: FakeLM, tokenizer=None, eos: list[int] | None = None, sampling: dict | None = None,
           max_model_len: int = 4096) -> LoadedModel:
    return LoadedModel(model=model, tokenizer=tokenizer,
                       generation=GenerationDefaults(eos_token_ids=eos or [], sampling=sampling or {}),
                       max_model_len=max_model_len, family="fake", dtype=torch.float32,
                       device=torch.device("cpu"))
