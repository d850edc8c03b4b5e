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

Modules: structured_spec.py (the spec and its error), this one (a spec to its validated
grammar: ``grammar_of``), structured_limits.py and structured_compile.py (the bounds checked
before compiling, and the thread it runs on), structured_matcher.py (``Matcher``,
``StructuredBackend``), structured_format.py and structured_tools.py (specs from requests).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

import numpy as np

from .structured_compile import in_compile_thread
from .structured_limits import check_grammar_limits, check_schema_limits
from .structured_spec import DATA_KEYWORDS, JSON_OPTIONS, KINDS, MAX_SPEC_CHARS, StructuredOutputError, StructuredSpec

GRAMMAR_CACHE_SIZE = 128  # compiled grammars kept per backend (LRU)


def _llg():
    import llguidance  # imported when a constraint is first used: `import llaisys` never needs it
    return llguidance


# Integers a schema leaves unbounded are generated within JSON's safe range (|n| <= 2^53 - 1, at
# most 16 digits, as llama.cpp's JSON grammars bound them): unbounded, a small model sampling
# at temperature 1 wrote "minutes": 4500000000... until max_tokens.
SAFE_INT = 2 ** 53 - 1


def _schema_objects(schema):
    """Every dict of `schema` that may be a schema (values under enum / const / default /
    examples are data and are skipped). Iterative: the depth of a request's schema is its own."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            yield node
            stack.extend(v for k, v in node.items() if k not in DATA_KEYWORDS)


def _is_integer(node: dict) -> bool:
    t = node.get("type")
    return t == "integer" or (isinstance(t, list) and "integer" in t)


def _bound_integers(schema):
    """Gives every integer schema in `schema` (changed in place) without a lower (upper) bound
    -SAFE_INT (SAFE_INT); returns it."""
    for node in _schema_objects(schema):
        if _is_integer(node):
            if "minimum" not in node and "exclusiveMinimum" not in node:
                node["minimum"] = -SAFE_INT
            if "maximum" not in node and "exclusiveMaximum" not in node:
                node["maximum"] = SAFE_INT
    return schema


def _check_numbers(schema, param: str) -> None:
    """Numeric bounds the grammar cannot honour are refused: llguidance generates integers as
    64-bit (a wider bound was clamped, and 9223372036854775807 broke a minimum of 1e300), and a
    bound must be a finite number."""
    for node in _schema_objects(schema):
        integer = _is_integer(node)
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            v = node.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if v != v or v in (float("inf"), float("-inf")):
                raise StructuredOutputError(param, f"{param}: {key} must be a finite number, got {v}")
            if integer and key != "multipleOf" and not -I64 <= v <= I64 - 1:
                raise StructuredOutputError(param, f"{param}: integer {key} {v:.6g} is outside the 64-bit range "
                                                   f"[-2^63, 2^63 - 1] that structured output can generate")


I64 = 2 ** 63


def _json_schema(schema_text: str, param: str):
    """The parsed schema, checked against the limits and numeric bounds, integers bounded."""
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
