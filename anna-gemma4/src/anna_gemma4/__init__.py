"""anna_gemma4: Gemma 4 family for Anna. So far its chat-format output parsers (``gemma4``
reasoning and tool-call parsers) and its tokenizer (:mod:`anna_gemma4.tokenizer`); no model loader yet."""

__version__ = "0.1.0"
