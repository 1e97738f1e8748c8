"""Tiny GGUF files written with ``gguf.GGUFWriter`` for tests (no real model needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")


def byte_alphabet() -> list[str]:
    """GPT-2's printable spelling of the 256 byte values, in byte order."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return [bytes_to_unicode()[b] for b in range(256)]


def add_tiny_tokenizer(writer: Any) -> None:
    """A byte-level BPE vocabulary with a ChatML template.

    Ids: 0-2 control tokens, ``3 + b`` for byte ``b``, then ``Ġt`` 259, ``he`` 260, ``12`` 261.
    """
    tokens = SPECIALS + byte_alphabet() + ["Ġt", "he", "12"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))
    writer.add_token_merges(["Ġ t", "h e", "1 2"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)


def add_llama_metadata(writer: Any, *, layers: int = 1, hidden: int = 32, heads: int = 4, kv_heads: int = 2,
                       ffn: int = 64, vocab: int = 262) -> None:
    writer.add_block_count(layers)
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)


def write_gguf(path: Path, arch: str = "llama", tensors: dict[str, np.ndarray] | None = None, *,
               tokenizer: bool = False, llama: bool | dict[str, Any] = False, split_max_tensors: int = 0,
               raw: dict[str, tuple[np.ndarray, Any]] | None = None) -> Path:
    """Write a GGUF at ``path`` (split into ``-0000i-of-0000N`` files when ``split_max_tensors``).

    Args:
        tensors: name -> float32/float16 array (torch-order shape).
        llama: write ``llama.*`` hyper-parameters (a dict overrides :func:`add_llama_metadata`'s defaults).
        raw: name -> (stored bytes ``[rows, bytes per row]`` uint8, GGMLQuantizationType).
    """
    import gguf

    w = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    if llama:
        add_llama_metadata(w, **(llama if isinstance(llama, dict) else {}))
    if tokenizer:
        add_tiny_tokenizer(w)
    for name, arr in (tensors or {}).items():
        w.add_tensor(name, arr)
    for name, (data, qtype) in (raw or {}).items():
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
