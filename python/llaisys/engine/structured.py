"""Structured output: grammars that constrain what a request may generate (llguidance).

A ``StructuredSpec`` says what the output must be: any JSON object (``json_object``), JSON
matching a schema (``json_schema``, with OpenAI's ``strict``), a regular expression
(``regex``), or a context-free grammar in Lark (``lark``, llguidance's dialect, which may embed
``%json {schema}``) or in llama.cpp's GBNF (``gbnf``, converted to Lark). It is checked when a
``SamplingParams`` is made (a bad schema or grammar is a ``StructuredOutputError``, a
``ValueError`` naming the field) and needs no tokenizer; the engine then gives each sequence a
``Matcher`` from a ``StructuredBackend`` (one per tokenizer), which yields the allowed-token
bitmask of the next draw (the core sampler's ``allowed_mask``, doc/sampling.md) and advances on
each sampled token.

End of output: a grammar that is complete and cannot go on allows only the eos ids, and a
grammar that is complete but could go on (``[0-9]+``) allows eos as well. A sequence whose
matcher has stopped (complete, nothing may follow) finishes with "stop" at once, without
spending a step on the eos token. JSON is generated compactly with ", " and ": " separators
(no free whitespace, which small models can repeat until max_tokens).

Cost: compiled grammars are cached (a bounded LRU of matchers in their start state, deep-copied
per sequence); the tokenizer's llguidance form is built once per tokenizer (seconds, on the
first constrained request). A mask costs ~0.1-1 ms per row per step on this CPU.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

KINDS = ("json_object", "json_schema", "regex", "lark", "gbnf")
MAX_SPEC_CHARS = 256 * 1024  # longest schema / grammar text a request may send
GRAMMAR_CACHE_SIZE = 128  # compiled grammars kept per backend (LRU)
# JSON generation options (llguidance JsonCompileOptions): compact, fixed separators
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class StructuredOutputError(ValueError):
    """An invalid or unsupported structured-output spec; ``param`` names the request field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class StructuredSpec:
    """What a request's output must match. Build one with the classmethods."""

    kind: str  # one of KINDS
    value: str = ""  # json_schema: the schema as JSON text; regex: the pattern; lark/gbnf: the grammar
    strict: bool = True  # json_schema: False lets llguidance ignore keywords it does not implement
    # the request field the spec came from ("response_format", "tools"), named by errors met
    # while generating under it; not part of the spec's identity (equality, cache keys)
    param: str = field(default="structured", compare=False)

    @classmethod
    def json_object(cls) -> "StructuredSpec":
        return cls("json_object")

    @classmethod
    def json_schema(cls, schema, strict: bool = True) -> "StructuredSpec":
        """schema: a dict (or its JSON text)."""
        if isinstance(schema, (dict, bool)):
            try:
                schema = json.dumps(schema)  # key order kept: properties are generated in it
            except RecursionError:  # the encoder nests a frame per level
                raise StructuredOutputError("structured", "structured: the schema nests too deeply") from None
        return cls("json_schema", schema, bool(strict))

    @classmethod
    def regex(cls, pattern: str) -> "StructuredSpec":
        return cls("regex", pattern)

    @classmethod
    def lark(cls, grammar: str) -> "StructuredSpec":
        return cls("lark", grammar)

    @classmethod
    def gbnf(cls, grammar: str) -> "StructuredSpec":
        return cls("gbnf", grammar)


def _llg():
    import llguidance  # imported when a constraint is first used: `import llaisys` never needs it
    return llguidance


# Integers a schema leaves unbounded are generated within JSON's safe range (|n| <= 2^53 - 1, at
# most 16 digits, as llama.cpp's JSON grammars bound them): unbounded, a small model sampling
# at temperature 1 wrote "minutes": 4500000000... until max_tokens.
SAFE_INT = 2 ** 53 - 1
_DATA_KEYWORDS = ("enum", "const", "default", "examples")  # values there are data, not schemas


def _bound_integers(schema):
    """Gives every integer schema in `schema` (changed in place) without a lower (upper) bound
    -SAFE_INT (SAFE_INT); returns it. Iterative: the depth of a request's schema is its own."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        t = node.get("type")
        if t == "integer" or (isinstance(t, list) and "integer" in t):
            if "minimum" not in node and "exclusiveMinimum" not in node:
                node["minimum"] = -SAFE_INT
            if "maximum" not in node and "exclusiveMaximum" not in node:
                node["maximum"] = SAFE_INT
        stack.extend(v for k, v in node.items() if k not in _DATA_KEYWORDS)
    return schema


def _check_numbers(schema, param: str) -> None:
    """Numeric bounds the grammar cannot honour are refused: llguidance generates integers as
    64-bit (a wider bound was clamped, and 9223372036854775807 broke a minimum of 1e300), and a
    bound must be a finite number. Iterative."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        t = node.get("type")
        integer = t == "integer" or (isinstance(t, list) and "integer" in t)
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            v = node.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if v != v or v in (float("inf"), float("-inf")):
                raise StructuredOutputError(param, f"{param}: {key} must be a finite number, got {v}")
            if integer and key != "multipleOf" and not -I64 <= v <= I64 - 1:
                raise StructuredOutputError(param, f"{param}: integer {key} {v:.6g} is outside the 64-bit range "
                                                   f"[-2^63, 2^63 - 1] that structured output can generate")
        stack.extend(v for k, v in node.items() if k not in _DATA_KEYWORDS)


I64 = 2 ** 63


def _json_schema(schema_text: str, param: str):
    """The parsed schema, checked against the limits and numeric bounds, integers bounded."""
    from .structured_limits import check_schema_limits
    try:
        schema = json.loads(schema_text)
    except ValueError as e:
        raise StructuredOutputError(param, f"{param}: the schema is not valid JSON ({e})") from None
    except RecursionError:  # the decoder nests a frame per level; the text may hold 10^5 levels
        raise StructuredOutputError(param, f"{param}: the schema nests too deeply") from None
    if not isinstance(schema, (dict, bool)):
        raise StructuredOutputError(param, f"{param}: a JSON schema must be an object, got {type(schema).__name__}")
    check_schema_limits(schema, param)
    _check_numbers(schema, param)
    return _bound_integers(schema)


def grammar_of(spec: StructuredSpec, param: str = "structured") -> str:
    """The llguidance grammar of `spec`, validated; StructuredOutputError naming `param` if the
    spec is malformed, or uses a feature llguidance does not support (strict schemas)."""
    if not isinstance(spec, StructuredSpec):
        raise StructuredOutputError(param, f"{param} must be a StructuredSpec, got {type(spec).__name__}")
    if spec.kind not in KINDS:
        raise StructuredOutputError(param, f"{param}: kind must be one of {', '.join(KINDS)}, got {spec.kind!r}")
    if not isinstance(spec.value, str) or len(spec.value) > MAX_SPEC_CHARS:
        raise StructuredOutputError(param, f"{param}: the schema or grammar must be a string of at most "
                                           f"{MAX_SPEC_CHARS} characters")
    return _grammar_cached(spec, param)


_grammar_lock = threading.Lock()
_grammars: "OrderedDict[StructuredSpec, str]" = OrderedDict()  # spec -> validated grammar (LRU)


def _grammar_cached(spec: StructuredSpec, param: str) -> str:
    with _grammar_lock:
        g = _grammars.get(spec)
        if g is not None:
            _grammars.move_to_end(spec)
            return g
    g = _compile(spec, param)
    with _grammar_lock:
        _grammars[spec] = g
        while len(_grammars) > GRAMMAR_CACHE_SIZE:
            _grammars.popitem(last=False)
    return g


def _compile(spec: StructuredSpec, param: str) -> str:
    """Checks spec against the limits here (Python), then compiles it on the compile thread."""
    from .structured_compile import in_compile_thread
    from .structured_limits import check_grammar_limits
    if spec.kind == "json_object":
        arg = {"type": "object"}
    elif spec.kind == "json_schema":
        arg = _json_schema(spec.value, param)
    else:
        arg = spec.value
        if spec.kind in ("lark", "gbnf"):
            check_grammar_limits(arg, spec.kind, param)
    return in_compile_thread(param, _compile_native, spec, arg, param)


def _compile_native(spec: StructuredSpec, arg, param: str) -> str:
    """The llguidance calls of _compile (on the compile thread): the grammar, validated, and
    its start state checked for a first step (a grammar without any finite text fails there)."""
    llg = _llg()
    if spec.kind in ("json_object", "json_schema"):
        options = dict(JSON_OPTIONS, lenient=not spec.strict)
        try:
            g = llg.LLMatcher.grammar_from_json_schema(arg, defaults=options)
        except (ValueError, TypeError) as e:
            raise StructuredOutputError(param, f"{param}: {plain_error(str(e))}") from None
    elif spec.kind == "regex":
        g = llg.LLMatcher.grammar_from_regex(arg)
    else:
        if spec.kind == "gbnf":
            from llguidance.gbnf_to_lark import gbnf_to_lark
            try:
                arg = gbnf_to_lark(arg)
            except Exception as e:  # the converter raises its own error types
                raise StructuredOutputError(param, f"{param}: invalid GBNF grammar: {plain_error(str(e))}") from None
        g = llg.LLMatcher.grammar_from_lark(arg)
    error = llg.LLMatcher.validate_grammar(g)
    if error and not error.startswith("WARNING"):
        raise StructuredOutputError(param, f"{param}: invalid {spec.kind.replace('_', ' ')}: {plain_error(error)}")
    error = start_error(llg.LLMatcher(_byte_tokenizer(), g, log_level=0), _BYTE_WORDS)
    if error is not None and "special token" not in error:  # special tokens: checked with the model's
        raise StructuredOutputError(param, f"{param}: {error}")
    return g


_UNSATISFIABLE = "the schema or grammar accepts no finite text (a $ref or rule that refers to itself " \
                 "without a way to end)"
# llguidance's internal errors -> a plain sentence (their text carries parser state dumps)
_PLAIN = (("NoExtensionBias", _UNSATISFIABLE),
          ("Too many items", "the schema or grammar cannot be completed within the parser's limits (a "
                             "required field or rule that recurses without end, or very short repeated tokens)"))


def plain_error(error: str) -> str:
    """llguidance's error text as a sentence for a user: internal names mapped, state dumps cut."""
    for needle, sentence in _PLAIN:
        if needle in error:
            return sentence
    return error.split("<state>")[0].strip()[:500]


def start_error(ll, n_words: int):
    """None if the LLMatcher `ll` can take a first step, else why not (plain)."""
    if ll.is_error():
        return plain_error(ll.get_error())
    mask = np.zeros(n_words, np.uint32)
    ll.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
    if ll.is_error():
        return plain_error(ll.get_error())
    if not mask.any():
        return _UNSATISFIABLE
    return None


_byte_tok = None  # llguidance.LLTokenizer over the 256 bytes and one eos (the start check of _compile)
_BYTE_WORDS = (257 + 31) // 32  # mask words of _byte_tokenizer


def _byte_tokenizer():
    """A model-free tokenizer for the start check: every byte is a token, plus an eos."""
    global _byte_tok
    if _byte_tok is None:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
        vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
        tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        tk.add_special_tokens([AddedToken("<|eos|>", special=True)])
        eos = tk.token_to_id("<|eos|>")
        _byte_tok = _llg().LLTokenizer(tk.to_str(), n_vocab=eos + 1, eos_token=[eos])
    return _byte_tok


FAILED = "structured output failed:"  # marks a failure while generating (server/generation.py)


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

    def _check(self) -> None:
        if self._ll.is_error():
            raise self._error(plain_error(self._ll.get_error()))

    def _error(self, why: str) -> StructuredOutputError:
        """The error of a failure while generating: "<param>: structured output failed: <why>"
        (the server answers it as a 400 naming param, see server/generation.py)."""
        return StructuredOutputError(self._param, f"{self._param}: {FAILED} {why}")


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
            from .structured_compile import in_compile_thread
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
