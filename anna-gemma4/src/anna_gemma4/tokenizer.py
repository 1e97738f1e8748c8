"""Gemma 4's tokenizer: from a GGUF file's vocabulary or a checkpoint folder's tokenizer files.

**GGUF.** A Gemma 4 GGUF stores its vocabulary as ``tokenizer.ggml.model = "gemma4"``: a
SentencePiece-style BPE (``▁`` for spaces, byte fallback) of 262,144 tokens with its merges, token
types and the chat template. ``AutoTokenizer.from_pretrained(dir, gguf_file=...)`` cannot load it
in transformers 5.24: it first builds the model config from the file, and the per-layer
``gemma4.attention.head_count_kv`` array fails the config's int field. transformers' tokenizer-only
conversion (``transformers.integrations.gguf``: ``get_gguf_tokenizer`` then
``convert_gguf_tokenizer``) does not look at the config and reproduces llama.cpp's test vectors for
this vocabulary. It is a private API, so :func:`convert_gguf_vocabulary` is the one place Anna calls
it, checks what it returns, and fails with a :class:`~anna_core.errors.ModelLoadError` that says
what changed when a transformers release moves it. :func:`load_gguf_vocabulary` caches the result
on disk like every GGUF tokenizer (:func:`anna_core.weights.gguf_tokenizer.load_gguf_tokenizer`).

**Folder.** A safetensors checkpoint's ``tokenizer.json`` / ``tokenizer_config.json`` /
``chat_template.jinja`` load through :meth:`anna_core.tokenizer.Tokenizer.from_pretrained`
(``AutoTokenizer``, which reads a tokenizer folder without building the model config when
``tokenizer_config.json`` names the class); :func:`load_gemma4_tokenizer` picks the right path.

**Markup.** The chat format's tags are single tokens: ``<|turn>`` / ``<turn|>`` (a turn; control
tokens, dropped by ``skip_special_tokens``), ``<|think|>`` (thinking on, in the system turn),
``<|tool>`` / ``<tool|>`` (a tool declaration), and the ones the output parsers read, which are
*user-defined* (not special: they survive ``skip_special_tokens``): :data:`PARSER_MARKUP`.
:func:`check_markup` verifies both facts on a loaded tokenizer. A chat answer ends with ``<turn|>``,
so :func:`stop_token_ids` lists it beside ``<eos>``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from anna_core.errors import ModelLoadError
from anna_core.tokenizer import Tokenizer

TESTED_TRANSFORMERS = "5.24"
"""The transformers release whose private GGUF tokenizer conversion this module was written against."""

TURN_START, TURN_END = "<|turn>", "<turn|>"
THINK = "<|think|>"
TOOL_START, TOOL_END = "<|tool>", "<tool|>"
TOOL_CALL_START, TOOL_CALL_END = "<|tool_call>", "<tool_call|>"
TOOL_RESPONSE_START, TOOL_RESPONSE_END = "<|tool_response>", "<tool_response|>"
STRING_DELIMITER = '<|"|>'
CHANNEL_OPEN, CHANNEL_CLOSE = "<|channel>", "<channel|>"

PARSER_MARKUP = (TOOL_CALL_START, TOOL_CALL_END, TOOL_RESPONSE_START, TOOL_RESPONSE_END, STRING_DELIMITER,
                 CHANNEL_OPEN, CHANNEL_CLOSE)
"""Tags the reasoning and tool-call parsers match in the decoded text: each one token, not special."""

CONTROL_MARKUP = (TURN_START, TURN_END, THINK, TOOL_START, TOOL_END)
"""Tags only the chat template writes: each one special token."""

_PRIVATE_API = "transformers.integrations.gguf (get_gguf_tokenizer, convert_gguf_tokenizer)"


def _api_changed(what: str) -> ModelLoadError:
    import transformers

    return ModelLoadError(
        f"cannot convert a Gemma 4 GGUF vocabulary with transformers {transformers.__version__}: {what}. Anna "
        f"uses the private {_PRIVATE_API}, written against transformers {TESTED_TRANSFORMERS}; install "
        f"transformers=={TESTED_TRANSFORMERS}.* or update anna_gemma4/tokenizer.py")


def _private_api() -> tuple[Any, Any]:
    try:
        gguf = importlib.import_module("transformers.integrations.gguf")
    except ImportError as exc:
        raise _api_changed(f"transformers.integrations.gguf does not import ({exc})") from exc
    try:
        return gguf.get_gguf_tokenizer, gguf.convert_gguf_tokenizer
    except AttributeError as exc:
        raise _api_changed(f"a function is missing ({exc})") from exc


def convert_gguf_vocabulary(path: str | Path) -> Any:
    """A transformers fast tokenizer built from the Gemma 4 vocabulary in the GGUF at ``path``
    (seconds: no caching; see :func:`load_gguf_vocabulary`), with the file's chat template, ``<bos>``,
    ``<eos>``, ``<unk>``, ``<pad>`` and ``<mask>`` and no BOS added by ``encode`` (the template writes
    it), its markup checked by :func:`check_markup`.

    Raises:
        ModelLoadError: the file is missing or holds no Gemma 4 vocabulary, or transformers' private
            conversion API changed (the message names it and the tested version).
    """
    from tokenizers import Tokenizer as BackendTokenizer
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"no GGUF file at {str(path)!r}")
    get_gguf_tokenizer, convert_gguf_tokenizer = _private_api()
    try:
        architecture, vocab, config = get_gguf_tokenizer(str(path))
    except (TypeError, ValueError) as exc:
        raise _api_changed(f"get_gguf_tokenizer failed ({exc})") from exc
    except (KeyError, OSError) as exc:
        raise ModelLoadError(f"cannot read the tokenizer metadata of {str(path)!r}: {exc}") from exc
    if not isinstance(vocab, dict) or not isinstance(config, dict):
        raise _api_changed("get_gguf_tokenizer no longer returns (architecture, tokenizer dict, config dict)")
    if vocab.get("tokenizer_type") != "gemma4":
        raise ModelLoadError(f"{str(path)!r} has tokenizer.ggml.model {vocab.get('tokenizer_type')!r}, "
                             "not a Gemma 4 vocabulary ('gemma4')")
    try:
        backend, extra = convert_gguf_tokenizer(architecture, vocab)
    except (TypeError, ValueError) as exc:
        raise _api_changed(f"convert_gguf_tokenizer failed ({exc})") from exc
    if not isinstance(backend, BackendTokenizer):
        raise _api_changed(f"convert_gguf_tokenizer returned a {type(backend).__name__}, not a tokenizers.Tokenizer")
    tokens = vocab.get("tokens") or []
    mask_id = vocab.get("mask_token_id")
    kwargs = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token", "chat_template")
              if config.get(k) is not None}
    kwargs.update(dict(extra or {}))
    if isinstance(mask_id, int) and 0 <= mask_id < len(tokens):
        kwargs["mask_token"] = tokens[mask_id]
    hf = PreTrainedTokenizerFast(tokenizer_object=backend, add_bos_token=False, add_eos_token=False, **kwargs)
    check_markup(hf)
    return hf


def load_gguf_vocabulary(path: str | Path, *, chat_template: str | None = None, cache: Path | None = None) -> Tokenizer:
    """The Anna tokenizer of the Gemma 4 GGUF at ``path`` (the first part of a split file),
    converted once by :func:`convert_gguf_vocabulary` and then read from the on-disk cache.

    Args:
        path: the GGUF file.
        chat_template: overrides the file's ``tokenizer.chat_template`` (``--chat-template``).
        cache: cache root (default ``$ANNA_CACHE_DIR``).

    Raises:
        ModelLoadError: see :func:`convert_gguf_vocabulary`; also a cached copy whose markup is wrong.
    """
    from anna_core.weights.gguf_tokenizer import load_gguf_tokenizer

    tok = load_gguf_tokenizer(path, tokenizer_model="gemma4", chat_template=chat_template, cache=cache,
                              convert=convert_gguf_vocabulary)
    check_markup(tok)
    return tok


def load_gemma4_tokenizer(source: str | Path, *, chat_template: str | None = None,
                          cache: Path | None = None) -> Tokenizer:
    """The tokenizer of a Gemma 4 checkpoint: a ``.gguf`` file (:func:`load_gguf_vocabulary`) or a
    folder with ``tokenizer.json`` / ``tokenizer_config.json`` (and ``chat_template.jinja``), whose
    markup is checked the same way.

    Raises:
        ModelLoadError: no usable tokenizer, or one whose chat-format tags are not single tokens of
            the right kind (:func:`check_markup`).
    """
    source = Path(source)
    if source.is_file() and source.suffix == ".gguf":
        return load_gguf_vocabulary(source, chat_template=chat_template, cache=cache)
    tok = Tokenizer.from_pretrained(source, chat_template)
    check_markup(tok)
    return tok


def check_markup(tokenizer: Any) -> dict[str, int]:
    """``{tag: id}`` of every Gemma 4 chat-format tag, after checking that each is one token, that
    the :data:`PARSER_MARKUP` tags are not special (``skip_special_tokens`` keeps them for the output
    parsers) and that the :data:`CONTROL_MARKUP` ones are.

    Args:
        tokenizer: an :class:`~anna_core.tokenizer.Tokenizer` or a transformers tokenizer.

    Raises:
        ModelLoadError: a tag is split into several tokens or has the wrong kind.
    """
    hf = getattr(tokenizer, "hf", tokenizer)
    special = set(hf.all_special_ids)
    ids: dict[str, int] = {}
    for tag in PARSER_MARKUP + CONTROL_MARKUP:
        got = list(hf.encode(tag, add_special_tokens=False))
        if len(got) != 1:
            raise ModelLoadError(f"the Gemma 4 tag {tag!r} is not one token in this tokenizer (ids {got})")
        ids[tag] = got[0]
        kept = hf.decode(got, skip_special_tokens=True) == tag
        if tag in PARSER_MARKUP and (not kept or got[0] in special):
            raise ModelLoadError(f"the Gemma 4 tag {tag!r} is a special token here, so skip_special_tokens would "
                                 "remove it before the reasoning / tool-call parsers see it")
        if tag in CONTROL_MARKUP and kept:
            raise ModelLoadError(f"the Gemma 4 tag {tag!r} is not a special token here, so answers would show it")
    return ids


def stop_token_ids(tokenizer: Any) -> list[int]:
    """The ids that end a Gemma 4 generation: ``<eos>`` and ``<turn|>`` (the end of the model's turn),
    for a checkpoint whose files name only ``<eos>`` (a GGUF's ``tokenizer.ggml.eos_token_id``).

    Raises:
        ModelLoadError: the tokenizer has neither.
    """
    hf = getattr(tokenizer, "hf", tokenizer)
    out: list[int] = []
    for tid in (hf.eos_token_id, hf.convert_tokens_to_ids(TURN_END)):
        if isinstance(tid, int) and tid != hf.unk_token_id and tid not in out:
            out.append(tid)
    if not out:
        raise ModelLoadError("this tokenizer has neither an EOS token nor Gemma 4's <turn|>")
    return out
