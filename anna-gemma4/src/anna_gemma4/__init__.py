"""anna_gemma4: Gemma 4 family for Anna: the Gemma 4 text models (family ``gemma4``, both the
conditional-generation and the causal layouts), its tokenizer (:mod:`anna_gemma4.tokenizer`) and the
``gemma4`` reasoning and tool-call parsers."""

__version__ = "0.1.0"
