"""Per-request logits processing outside the plain sampler: ``logit_bias``, grammar masks, logprobs.

:class:`LogitsProcessors` is used by the model runner for steps where any sampling request set
``logit_bias``, ``structured`` or ``logprobs`` (at decode on the logits of the captured "logits"
graph, never inside a graph's own sampler):

1. the raw log-probabilities of the rows that asked for logprobs are taken first
   (:mod:`anna_core.engine.logprobs`);
2. ``logit_bias`` is added in place, batched as one ``index_put_`` with ``bad_words``' bans (float32's lowest
   finite value added to the token that would complete a word, as vLLM bans it); tokens outside
   ``allowed_token_ids`` (vLLM's) get ``-inf``;
3. grammar rows are masked in place with xgrammar's token bitmask (``[N, ceil(V/32)]`` int32, one
   bit per vocabulary entry; forbidden tokens get ``-inf``), filled per row by the request's
   ``GrammarMatcher``;
4. the sampler draws the ids; ids and logprob tables leave the device in one ``.tolist()``;
5. each grammar's matcher accepts its row's sampled token.

Grammars are compiled with xgrammar (the well-kept structured-generation library) against the
tokenizer's vocabulary; compiled grammars are cached by spec. xgrammar is imported on the first
structured request only.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any

import torch

from anna_core.engine import logprobs as lp
from anna_core.engine.sampling_params import SamplingParams, StructuredOutput
from anna_core.errors import InvalidRequestError

log = logging.getLogger("anna.engine")

_CACHE_LIMIT = 256


_XGRAMMAR_LOG_PREFIX = re.compile(r"^\[[0-9:]+\] \S+:[0-9]+: ")  # "[12:00:00] /path/file.cc:123: "
_XGRAMMAR_INTERNALS = (
    re.compile(r"\S+\.(?:cc|cpp|cxx|h|hpp)(?::[0-9]+)+:? ?"),  # any other C++ source location
    re.compile(r"Check failed: \(.*?\) is (?:false|true): "),  # an internal assertion's condition
    re.compile(r"\. The JSON string is:.*$"),  # the input echoed back (the client has it)
)


def xgrammar_reason(exc: Exception) -> str:
    """The first line of an xgrammar error without library internals: its log prefix (time, C++
    source path and line), other source locations, internal assertion conditions and the echoed
    input."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    reason = _XGRAMMAR_LOG_PREFIX.sub("", lines[0])
    for pattern in _XGRAMMAR_INTERNALS:
        reason = pattern.sub("", reason)
    return reason.strip() or "the grammar library rejected it"


class GrammarState:
    """One request's grammar: an xgrammar ``GrammarMatcher`` plus its activation token.

    Attributes:
        matcher: the matcher (advanced by every token generated while active).
        waiting_for: token id that activates the grammar (None: active).
        failed: the matcher rejected a sampled token; the request is no longer constrained.
    """

    def __init__(self, matcher: Any, waiting_for: int | None):
        self.matcher = matcher
        self.waiting_for = waiting_for
        self.failed = False

    @property
    def active(self) -> bool:
        return self.waiting_for is None and not self.failed and not self.matcher.is_terminated()

    def accept(self, token_id: int) -> None:
        if self.failed:
            return
        if self.waiting_for is not None:
            if token_id == self.waiting_for:
                self.waiting_for = None
            return
        if self.matcher.is_terminated():
            return
        if not self.matcher.accept_token(token_id):
            log.warning("grammar rejected sampled token %d; the rest of the request is unconstrained", token_id)
            self.failed = True


def needs_processing(params: SamplingParams) -> bool:
    """Whether a request needs :class:`LogitsProcessors` (so its steps cannot use a decode graph's own
    sampler: they sample eagerly, at decode on the "logits" graph's output)."""
    return (bool(params.logit_bias) or params.structured is not None or params.logprobs is not None
            or params.allowed_token_ids is not None or bool(params.bad_words))


def _compile_structural_tag(compiler: Any, text: str) -> Any:
    """xgrammar's structural tag (JSON text with a ``format``), or vLLM's older form (``structures`` of ``{begin,
    schema, end}`` and ``triggers``) through xgrammar's tags-and-triggers call."""
    import xgrammar

    tag = json.loads(text)
    if not (isinstance(tag, dict) and "structures" in tag):
        return compiler.compile_structural_tag(text)
    items = [xgrammar.StructuralTagItem(begin=s["begin"], schema=json.dumps(s["schema"]), end=s["end"])
             for s in tag["structures"]]
    return compiler.compile_structural_tag(items, tag["triggers"])


class LogitsProcessors:
    """Bias, grammar masks and logprobs for one engine.

    Args:
        tokenizer: :class:`anna_core.tokenizer.Tokenizer` (grammars need it; None refuses them).
        vocab_size: rows of the model's logits ``V`` (may exceed the tokenizer's vocabulary).
        stop_token_ids: ids that may end a grammar (EOS).
    """

    def __init__(self, tokenizer: Any, vocab_size: int | None, stop_token_ids: tuple[int, ...] = ()):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = list(stop_token_ids)
        self._compiler: Any = None
        self._compiler_lock = threading.Lock()
        self._compiled: dict[StructuredOutput, Any] = {}

    # -- grammars --------------------------------------------------------------------------

    def _grammar_compiler(self) -> Any:
        with self._compiler_lock:  # validate() runs on request threads, new_state() on the engine's
            if self._compiler is None:
                import xgrammar

                vocab = self.vocab_size or self.tokenizer.vocab_size
                info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer.hf, vocab_size=vocab,
                                                               stop_token_ids=self.stop_token_ids or None)
                self._compiler = xgrammar.GrammarCompiler(info, max_threads=1)
            return self._compiler

    def compile(self, spec: StructuredOutput) -> Any:
        """The compiled grammar for ``spec`` (cached).

        Raises:
            InvalidRequestError: no tokenizer, or xgrammar rejected the schema / grammar.
        """
        cached = self._compiled.get(spec)
        if cached is not None:
            return cached
        if self.tokenizer is None:
            raise InvalidRequestError("structured output needs a tokenizer; this model was loaded without one",
                                      param=spec.param)
        compiler = self._grammar_compiler()
        try:
            if spec.kind == "json_object":  # any object (xgrammar's builtin JSON grammar allows any value)
                compiled = compiler.compile_json_schema('{"type": "object"}')
            elif spec.kind == "json_schema":
                compiled = compiler.compile_json_schema(spec.spec, any_whitespace=False)
            elif spec.kind == "structural_tag":
                compiled = _compile_structural_tag(compiler, spec.spec)
            elif spec.kind == "regex":
                compiled = compiler.compile_regex(spec.spec)
            elif "::=" not in spec.spec:  # no EBNF rule: Lark, as vLLM reads such a grammar
                compiled = compiler.compile_lark(spec.spec)
            else:
                compiled = compiler.compile_grammar(spec.spec)
        except Exception as exc:  # xgrammar raises RuntimeError / ValueError with a useful message
            raise InvalidRequestError(f"cannot compile the {spec.kind.replace('_', ' ')} for constrained "
                                      f"decoding: {xgrammar_reason(exc)}", param=spec.param) from exc
        with self._compiler_lock:
            while len(self._compiled) >= _CACHE_LIMIT:
                self._compiled.pop(next(iter(self._compiled)))
            self._compiled[spec] = compiled
        return compiled

    def validate(self, params: SamplingParams) -> None:
        """Check bias ids and compile the grammar now, so that bad input is a 400 at submission.

        Raises:
            InvalidRequestError: a ``logit_bias`` or ``allowed_token_ids`` id outside the vocabulary, or a bad
                grammar.
        """
        if params.logit_bias and self.vocab_size is not None:
            bad = [t for t in params.logit_bias if t >= self.vocab_size]
            if bad:
                raise InvalidRequestError(f"logit_bias token id {bad[0]} is outside the vocabulary of "
                                          f"{self.vocab_size} tokens", param="logit_bias")
        if params.allowed_token_ids is not None and self.vocab_size is not None:
            bad = [t for t in params.allowed_token_ids if t >= self.vocab_size]
            if bad:
                raise InvalidRequestError(f"allowed_token_ids id {bad[0]} is outside the vocabulary of "
                                          f"{self.vocab_size} tokens", param="allowed_token_ids")
        if params.bad_words and self.tokenizer is None:
            raise InvalidRequestError("bad_words needs a tokenizer; this model was loaded without one",
                                      param="bad_words")
        if params.structured is not None:
            self.compile(params.structured)

    def bad_word_ids(self, params: SamplingParams) -> tuple[tuple[int, ...], ...]:
        """The token sequences ``params.bad_words`` stand for, as vLLM's ``bad_words`` reads them: each word
        (leading blanks stripped) tokenized as it is and with one leading space, the spaced form kept only when it
        is as many tokens as the bare one and starts with another token (a word-initial token of its own). A step
        bans a sequence's last token when the request's output ends with the rest of it (a one-token word: always).

        Raises:
            InvalidRequestError: bad words without a tokenizer.
        """
        if not params.bad_words:
            return ()
        if self.tokenizer is None:
            raise InvalidRequestError("bad_words needs a tokenizer; this model was loaded without one",
                                      param="bad_words")
        out: list[tuple[int, ...]] = []
        for word in params.bad_words:
            bare = tuple(self.tokenizer.encode(word.lstrip(), add_special_tokens=False))
            spaced = tuple(self.tokenizer.encode(" " + word.lstrip(), add_special_tokens=False))
            forms = [bare] + ([spaced] if spaced and bare and len(spaced) == len(bare) and spaced[0] != bare[0] else [])
            out += [f for f in forms if f and f not in out]
        return tuple(out)

    def new_state(self, params: SamplingParams) -> GrammarState | None:
        """A fresh :class:`GrammarState` for a request (None when it has no grammar)."""
        if params.structured is None:
            return None
        import xgrammar

        matcher = xgrammar.GrammarMatcher(self.compile(params.structured))
        return GrammarState(matcher, params.structured.after_token_id)

    # -- the step --------------------------------------------------------------------------

    def apply(self, logits: torch.Tensor, requests: list[Any]) -> None:
        """Add ``logit_bias``, ban bad words' completing tokens, mask tokens outside ``allowed_token_ids`` and mask
        grammar rows of ``[N, V]`` float32 ``logits`` in place."""
        dev = logits.device
        n, vocab = logits.shape
        allowed = [(i, r.params.allowed_token_ids) for i, r in enumerate(requests)
                   if r.params.allowed_token_ids is not None]
        if allowed:
            keep = torch.zeros(len(allowed), vocab, dtype=torch.bool)
            for j, (_, ids) in enumerate(allowed):
                keep[j, [t for t in ids if t < vocab]] = True
            rows_index = torch.tensor([i for i, _ in allowed], device=dev)
            logits[rows_index] = logits[rows_index].masked_fill(~keep.to(dev), float("-inf"))
        rows, cols, vals = [], [], []
        for i, r in enumerate(requests):
            for tok, value in r.params.logit_bias.items():
                if tok < vocab:
                    rows.append(i)
                    cols.append(tok)
                    vals.append(value)
        lowest = torch.finfo(torch.float32).min  # finite, as vLLM's: a row whose allowed tokens are all banned
        for i, r in enumerate(requests):         # still samples among them, never an id outside allowed_token_ids
            out = r.output_token_ids
            for seq in r.bad_word_ids:
                head = len(seq) - 1
                if seq[-1] < vocab and (head == 0 or (len(out) >= head and tuple(out[len(out) - head:]) == seq[:-1])):
                    rows.append(i)
                    cols.append(seq[-1])
                    vals.append(lowest)
        if rows:
            index = (torch.tensor(rows, device=dev), torch.tensor(cols, device=dev))
            logits.index_put_(index, torch.tensor(vals, dtype=logits.dtype, device=dev), accumulate=True)
        grammar_rows = [i for i, r in enumerate(requests) if r.grammar is not None and r.grammar.active]
        if grammar_rows:
            import xgrammar

            bitmask = xgrammar.allocate_token_bitmask(n, vocab)
            for i in grammar_rows:
                requests[i].grammar.matcher.fill_next_token_bitmask(bitmask, i)
            xgrammar.apply_token_bitmask_inplace(logits, bitmask.to(dev), indices=grammar_rows)

    def sample(self, logits: torch.Tensor, requests: list[Any], sampler: Any) -> list[int]:
        """Process ``[N, V]`` logits, sample with ``sampler``, record logprobs, advance grammars.

        Returns:
            the ``N`` sampled ids (host ints). Each request that asked for logprobs gets a
            :class:`~anna_core.engine.outputs.TokenLogprob` appended to ``request.logprobs``.
        """
        rows = [i for i, r in enumerate(requests) if r.params.logprobs is not None]
        wanted = [requests[i].params.logprobs for i in rows]
        k = max(wanted, default=0)
        raw = lp.raw_logprobs(logits[rows]) if rows else None
        logits = logits.to(torch.float32, copy=True)  # the caller's logits stay raw
        self.apply(logits, requests)
        ids = sampler(logits, requests)
        row_index = torch.tensor(rows, dtype=torch.int64, device=logits.device) if rows else None
        values = lp.pack(ids, raw, row_index, k).tolist()  # the step's one host sync
        ids_list, entries = lp.unpack(values, len(requests), rows, wanted, k)
        for i, entry in zip(rows, entries):
            requests[i].logprobs.append(entry)
        for r, t in zip(requests, ids_list):
            if r.grammar is not None:
                r.grammar.accept(t)
        return ids_list
