"""Each sequence's place in its grammar: ``Matcher`` (the next draw's allowed-token mask, and
the advance on each sampled token), made by a ``StructuredBackend`` (one per engine: its
tokenizer's llguidance form, logits width and eos ids, and the start states of the grammars it
has seen; ``warm_structured`` builds the tokenizer's form ahead). Grammars come from
structured.py's ``grammar_of``; a failure while generating is a ``StructuredOutputError``
naming the request's field, which the request carries to its output (``error_param``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict

import numpy as np

from .structured import GRAMMAR_CACHE_SIZE, _llg, grammar_of, plain_error, start_error
from .structured_compile import in_compile_thread
from .structured_spec import StructuredOutputError, StructuredSpec

FAILED = "structured output failed:"  # how a failure while generating reads


def mask_words(vocab_size: int) -> int:
    """uint32 words of an allowed mask over logits of width vocab_size."""
    return (vocab_size + 31) // 32


class Matcher:
    """One sequence's place in its grammar: the next draw's allowed mask, and the advance."""

    def __init__(self, ll, n_words: int, param: str = "structured"):
        self._ll = ll  # llguidance.LLMatcher, owned
        self._param = param  # the request field errors name (StructuredSpec.param)
        self._mask = np.zeros(n_words, np.uint32)  # [n_words] the next draw's allowed ids
        self._fresh = False  # _mask is that of the current position

    def mask(self) -> np.ndarray:
        """[n_words] uint32 allowed-id bits for the next token (computed once per position;
        the caller must not change it). Raises StructuredOutputError if the matcher failed."""
        if not self._fresh:
            self._ll.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
            self._check()
            if not self._mask.any():  # the sampler refuses an empty mask: say why here
                raise self._error("the grammar allows no next token")
            self._fresh = True
        return self._mask

    def advance(self, token_id: int) -> None:
        """Consume a sampled token; StructuredOutputError if the grammar does not allow it."""
        self._fresh = False
        if not self._ll.consume_token(int(token_id)):
            self._check()
            raise self._error(f"token {token_id} is not allowed by the grammar")

    @property
    def done(self) -> bool:
        """The grammar is complete and nothing may follow (or the matcher failed)."""
        return self._ll.is_stopped()

    def ahead(self) -> "PendingMask":
        """The mask of the draw after the token a step in flight is sampling (async scheduling):
        a copy of this matcher (which advances over that token on the engine's thread meanwhile),
        advanced and asked on the step thread just before the call (PendingMask.fill)."""
        return PendingMask(self._ll.deep_copy(), np.zeros_like(self._mask))

    def _check(self) -> None:
        if self._ll.is_error():
            raise self._error(plain_error(self._ll.get_error()))

    def _error(self, why: str) -> StructuredOutputError:
        """The error of a failure while generating: "<param>: structured output failed: <why>"
        (the server answers it as a 400 naming param, see server/state/generation.py)."""
        return StructuredOutputError(self._param, f"{self._param}: {FAILED} {why}")


class PendingMask:
    """A grammar row's mask that waits for the token in flight (Matcher.ahead)."""

    def __init__(self, ll, out: np.ndarray):
        self._ll = ll  # llguidance.LLMatcher: a copy, used on the step thread only
        self.out = out  # [n_words] uint32 the mask the sampler reads, written by fill

    def fill(self, token_id: int) -> None:
        """Advance the copy over the token in flight and write the next draw's mask. Where the
        grammar takes nothing more after it (it ended the request, or the engine ends it with
        an error when that token is applied), every id is allowed: the row's token is dropped."""
        ll = self._ll
        if ll.consume_token(int(token_id)) and not ll.is_stopped():
            ll.unsafe_compute_mask_ptr(self.out.ctypes.data, self.out.nbytes)
        if ll.is_error() or not self.out.any():
            self.out.fill(0xFFFFFFFF)


def _backend_tokenizer(tokenizer):
    """The `tokenizers.Tokenizer` behind llaisys' Tokenizer (or a tokenizers.Tokenizer itself)."""
    for t in (tokenizer, getattr(tokenizer, "backend", None)):
        if t is not None and callable(getattr(t, "to_str", None)):
            return t
    raise StructuredOutputError("structured", "structured output needs a HuggingFace `tokenizers` tokenizer; "
                                              f"{type(tokenizer).__name__} has none")


_ll_tokenizers: "OrderedDict[tuple, object]" = OrderedDict()  # (json digest, n_vocab, eos) -> LLTokenizer
_ll_lock = threading.Lock()


def ll_tokenizer(tokenizer, vocab_size: int, eos_token_ids) -> object:
    """llguidance's form of `tokenizer` over logits of width vocab_size with these eos ids;
    built once per (tokenizer, width, eos) and kept (at most 4)."""
    text = _backend_tokenizer(tokenizer).to_str()
    eos = tuple(sorted(int(t) for t in eos_token_ids))
    if not eos:
        raise StructuredOutputError("structured", "structured output needs an end-of-sequence token id")
    key = (hashlib.sha256(text.encode()).hexdigest(), int(vocab_size), eos)
    with _ll_lock:  # one build at a time: a second caller waits for the first and reuses it
        tok = _ll_tokenizers.get(key)
        if tok is None:
            tok = _llg().LLTokenizer(text, n_vocab=int(vocab_size), eos_token=list(eos))
            _ll_tokenizers[key] = tok
            while len(_ll_tokenizers) > 4:
                _ll_tokenizers.popitem(last=False)
        return tok


class StructuredBackend:
    """Matchers for one engine: its tokenizer, logits width and eos ids."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids):
        self._tokenizer = tokenizer
        self.vocab_size = int(vocab_size)  # the model's logits width (>= the tokenizer's vocabulary)
        self._eos = frozenset(eos_token_ids)
        self._tok = None  # llguidance.LLTokenizer, built on first use
        self._start: "OrderedDict[str, object]" = OrderedDict()  # grammar -> LLMatcher at its start (LRU)
        self._lock = threading.Lock()

    def warm(self) -> None:
        """Build the tokenizer's llguidance form now (seconds) instead of on the first request."""
        self._ll_tok()

    def _ll_tok(self):
        if self._tok is None:
            self._tok = ll_tokenizer(self._tokenizer, self.vocab_size, self._eos)
        return self._tok

    def _start_state(self, grammar: str, param: str):
        """The LLMatcher at the start of `grammar`, checked for a first step (compile thread)."""
        start = _llg().LLMatcher(self._ll_tok(), grammar, log_level=0)
        error = start_error(start.deep_copy(), mask_words(self.vocab_size))
        if error is not None:
            raise StructuredOutputError(param, f"{param}: {error}")
        return start

    def matcher(self, spec: StructuredSpec) -> Matcher:
        """A new Matcher at the start of spec's grammar; StructuredOutputError if it cannot be made."""
        g = grammar_of(spec, spec.param)
        with self._lock:
            start = self._start.get(g)
            if start is not None:
                self._start.move_to_end(g)
        if start is None:
            start = in_compile_thread(spec.param, self._start_state, g, spec.param)
            with self._lock:
                self._start[g] = start
                while len(self._start) > GRAMMAR_CACHE_SIZE:
                    self._start.popitem(last=False)
        return Matcher(start.deep_copy(), mask_words(self.vocab_size), spec.param)


def warm_structured(backend: StructuredBackend, name: str) -> None:
    """Build `backend`'s llguidance tokenizer now, while a server loads its model. The build holds
    the GIL for seconds (2-7 s for Qwen2's 151k vocabulary on 2 loaded cores), so left to the
    first structured request it would stall every stream of the process once. A model whose
    tokenizer cannot do structured output still serves; such requests get their 400."""
    log = logging.getLogger(__name__)
    t0 = time.monotonic()
    try:
        backend.warm()
    except StructuredOutputError as e:
        log.info("model %s: no structured output (%s)", name, e)
        return
    log.info("model %s: structured-output tokenizer built in %.1f s", name, time.monotonic() - t0)

