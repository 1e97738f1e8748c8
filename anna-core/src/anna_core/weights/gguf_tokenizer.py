"""The tokenizer and chat template of a GGUF file, through transformers' GGUF conversion.

transformers rebuilds a ``tokenizers`` tokenizer from the GGUF vocabulary, merges and special
tokens (the well-kept path). That takes seconds (about 9 s on two CPU cores for a 49k vocabulary),
so the converted tokenizer is saved once under ``$ANNA_CACHE_DIR/gguf-tokenizers/<key>/``
(default ``~/.cache/anna``), keyed by the file's resolved path, size and modification time and the
transformers version; later loads read the saved ``tokenizer.json`` in well under a second.

For llama.cpp pre-tokenizer types that transformers' conversion does not know, the split regex
is set from llama.cpp's definition (``src/llama-vocab.cpp``), so text is cut the way the
vocabulary's merges were learned.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anna_core.cache_dir import cache_dir
from anna_core.errors import ModelLoadError
from anna_core.tokenizer import Tokenizer

log = logging.getLogger("anna.gguf")

_CACHE_FORMAT = "1"

# llama.cpp's STARCODER / REFACT / SMOLLM / ... pre-tokenizer: every digit alone, then GPT-2's split.
_STARCODER_SPLITS = (r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)")
_EXTRA_PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    name: _STARCODER_SPLITS
    for name in ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2")
}


def _cache_key(path: Path, splits: tuple[str, ...] | None, converter: str | None = None) -> str:
    import transformers

    st = path.stat()
    ident = f"{_CACHE_FORMAT}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{transformers.__version__}|{splits}"
    if converter is not None:
        ident += f"|{converter}"
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def _extra_splits(tokenizer_model: str | None, pre_type: str | None) -> tuple[str, ...] | None:
    """llama.cpp split rules to apply for a byte-level (``gpt2``) vocabulary transformers lacks rules for."""
    return _EXTRA_PRE_TOKENIZERS.get(pre_type or "") if tokenizer_model == "gpt2" else None


def _set_splits(hf: Any, splits: tuple[str, ...] | None) -> None:
    if splits is None:
        return
    from tokenizers import Regex, pre_tokenizers

    hf.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(s), behavior="isolated") for s in splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )


def convert_gguf_tokenizer(path: Path, splits: tuple[str, ...] | None = None) -> Any:
    """A transformers tokenizer converted from the GGUF at ``path`` (slow; no caching), with the
    pre-tokenizer replaced by the ``splits`` regexes (then byte-level) when given.

    Raises:
        ModelLoadError: transformers cannot convert this file's tokenizer.
    """
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except Exception as exc:  # transformers raises many types here
        raise ModelLoadError(f"cannot build a tokenizer from the GGUF metadata of {str(path)!r}: {exc}") from exc
    _set_splits(hf, splits)
    return hf


def _save_atomically(hf: Any, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        hf.save_pretrained(str(tmp))
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not target.is_dir():
            raise


class GGUFTokenizer(Tokenizer):
    """A :class:`Tokenizer` whose chat template sees every message ``content`` as one string.

    GGUF chat templates (e.g. SmolLM2's) concatenate ``message['content']`` as a string, so
    OpenAI-style lists of text parts are joined before rendering.
    """

    def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        return super().apply_chat_template([flatten_text_parts(m) for m in messages], **kwargs)


def flatten_text_parts(message: dict[str, Any]) -> dict[str, Any]:
    """A message whose ``content`` is a list of only ``{"type": "text", "text": ...}`` parts, with
    the texts joined into one string; any other message is returned unchanged."""
    content = message.get("content")
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return {**message, "content": "".join(str(p.get("text", "")) for p in content)}
    return message


def load_gguf_tokenizer(
    path: str | Path,
    *,
    tokenizer_model: str | None = "gpt2",
    pre_type: str | None = None,
    chat_template: str | None = None,
    cache: Path | None = None,
    convert: Callable[[Path], Any] | None = None,
) -> Tokenizer:
    """The tokenizer of the GGUF at ``path`` (the first part of a split file), cached on disk.

    Args:
        path: the GGUF file.
        tokenizer_model: its ``tokenizer.ggml.model`` (``"gpt2"`` = byte-level BPE).
        pre_type: its ``tokenizer.ggml.pre``; for byte-level vocabularies, selects llama.cpp split
            rules that transformers' conversion lacks.
        chat_template: overrides the file's ``tokenizer.chat_template``.
        cache: cache root (default :func:`cache_dir`). An unwritable cache only costs speed.
        convert: builds the transformers tokenizer from the file instead of
            :func:`convert_gguf_tokenizer` (a family whose vocabulary transformers' ``AutoTokenizer``
            cannot load; its qualified name enters the cache key; ``pre_type`` splits are not applied).

    Raises:
        ModelLoadError: the tokenizer cannot be built.
    """
    from transformers import AutoTokenizer

    path = Path(path)
    root = (cache or cache_dir()) / "gguf-tokenizers"
    splits = None if convert is not None else _extra_splits(tokenizer_model, pre_type)
    name = None if convert is None else f"{convert.__module__}.{convert.__qualname__}"
    target = root / _cache_key(path, splits, name)
    hf = None
    if (target / "tokenizer.json").is_file():
        try:
            hf = AutoTokenizer.from_pretrained(str(target), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 -- any damaged cache entry is rebuilt
            log.warning("ignoring unreadable tokenizer cache %s: %s", target, exc)
            shutil.rmtree(target, ignore_errors=True)
    if hf is None:
        log.info("converting the GGUF tokenizer of %s (once; cached in %s)", path.name, target)
        hf = convert_gguf_tokenizer(path, splits) if convert is None else convert(path)
        try:
            _save_atomically(hf, target)
        except OSError as exc:
            log.warning("cannot cache the converted tokenizer in %s: %s", target, exc)
    return GGUFTokenizer(hf, chat_template)
