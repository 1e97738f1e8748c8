"""The checkpoint's tokenizer and chat template, through transformers (the well-kept path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anna_core.errors import AnnaError, InvalidRequestError, ModelLoadError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
"""Files any of which marks a checkpoint folder as holding a tokenizer."""


class Tokenizer:
    """Wraps a transformers tokenizer: encode / decode / chat template / special ids.

    Args:
        hf_tokenizer: a ``PreTrainedTokenizerBase``.
        chat_template: overrides the checkpoint's template (``--chat-template`` file contents).
    """

    def __init__(self, hf_tokenizer: Any, chat_template: str | None = None):
        self.hf = hf_tokenizer
        if chat_template is not None:
            self.hf.chat_template = chat_template

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, chat_template: str | None = None) -> Tokenizer:
        """Load ``tokenizer.json`` / ``tokenizer_config.json`` from ``model_dir`` (no network).

        Raises:
            ModelLoadError: the folder has no usable tokenizer.
        """
        from transformers import AutoTokenizer

        try:
            hf = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        except Exception as exc:  # transformers raises many types here
            raise ModelLoadError(f"cannot load a tokenizer from {str(model_dir)!r}: {exc}") from exc
        return cls(hf, chat_template)

    @classmethod
    def from_folder(cls, model_dir: str | Path, chat_template: str | None = None, *,
                    required: bool = True) -> Tokenizer | None:
        """:meth:`from_pretrained`, or None where ``required`` is false and ``model_dir`` holds no tokenizer file
        (``tokenizer.json``, ``tokenizer_config.json``, ``vocab.json``, ``tokenizer.model``): a shape-only
        folder loaded with dummy weights.

        Raises:
            ModelLoadError: a required tokenizer, or present tokenizer files, that do not load.
        """
        root = Path(model_dir)
        if not required and not any((root / f).is_file() for f in TOKENIZER_FILES):
            return None
        return cls.from_pretrained(root, chat_template)

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    @property
    def eos_token_id(self) -> int | None:
        return self.hf.eos_token_id

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return self.hf.convert_ids_to_tokens(ids)

    @property
    def all_special_ids(self) -> set[int]:
        return set(self.hf.all_special_ids)

    def check_chat_template(self) -> None:
        """Render a one-message conversation with the chat template (if any), so that a broken one
        is found before any request (``anna serve`` does this at start-up).

        Raises:
            AnnaError: the template does not render (its first error line).
        """
        if not self.has_chat_template:
            return
        try:
            self.apply_chat_template([{"role": "user", "content": "Hello"}], add_generation_prompt=True)
        except InvalidRequestError as exc:
            first = (str(exc).strip().splitlines() or ["chat template error"])[0]
            raise AnnaError(f"the chat template cannot render a conversation: {first}") from exc

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: list[dict[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> str:
        """Render ``messages`` with the checkpoint's own Jinja chat template.

        Raises:
            InvalidRequestError: no chat template, or the template rejected the messages.
        """
        if not self.has_chat_template:
            raise InvalidRequestError("this model has no chat template; use /v1/completions or pass --chat-template")
        try:
            return self.hf.apply_chat_template(
                messages,
                tools=tools,
                tokenize=False,
                add_generation_prompt=add_generation_prompt and not continue_final_message,
                continue_final_message=continue_final_message,
                **template_kwargs,
            )
        except Exception as exc:  # jinja2 TemplateError / raise_exception() in templates
            raise InvalidRequestError(f"chat template error: {exc}", param="messages") from exc
