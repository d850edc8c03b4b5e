"""The request and response bodies of ``POST /infill`` (llama-server's code infill route), as
JSON Schema: what the server validates with and what /openapi.json publishes.

Field names and meanings are llama-server's. Fields llama-server takes that change nothing
here (``samplers``, ``id_slot``, ``lora``, ``n_probs``, ``cache_prompt``, ...) are described
with an empty schema: any value is accepted and ignored, never a 400. Unknown fields are
ignored too, as on every route.
"""

from __future__ import annotations

from ...engine.sampling_params import MAX_STOP_STRING_CHARS, MAX_STOP_STRINGS
from ..protocol.request_schemas import SAMPLING
from ..protocol.schema import BOOL, MAX_INT, MAX_SEED, TOKEN_IDS, _body, _int, _num, _obj, _str

MAX_EXTRA_CHUNKS = 256  # most input_extra chunks (llama.vim sends 16 by default, 64 at most in its docs)
MAX_FILENAME = 1024  # longest input_extra filename (characters)
MAX_RESPONSE_FIELDS = 64  # most response_fields paths
MAX_MS = 24 * 3600 * 1000  # the longest time limit one may give (a day; <= 0 is no limit)
MAX_PROMPT_IDS = 1 << 20  # most token ids a /completion prompt may give (the context bounds it further)

IGNORED = ("samplers", "id_slot", "cache_prompt", "lora", "n_probs", "min_keep", "typical_p", "dynatemp_range",
           "dynatemp_exponent", "mirostat", "mirostat_tau", "mirostat_eta", "penalty_last_n", "dry_multiplier",
           "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability",
           "xtc_threshold", "top_n_sigma", "n_keep", "n_discard", "post_sampling_probs", "timings_per_token",
           "return_progress", "id")
# fields that would change the middle and are not implemented here: refused (400 unsupported_parameter)
REFUSED = {"grammar": "grammar-constrained infill is not supported",
           "json_schema": "schema-constrained infill is not supported",
           "logit_bias": "logit_bias is not supported on /infill and /completion (use /v1/completions)"}


def _ignored(why: str = "accepted and ignored") -> dict:
    return {"description": why}


def infill_request_schema(limits) -> dict:
    """The InfillRequest schema for a server with these per-request `limits`."""
    return _body(infill_fields(limits), (), "POST /infill (llama-server's code infill)")


def completion_request_schema(limits) -> dict:
    """The NativeCompletionRequest schema (POST /completion): /infill's fields less the
    infill-only ones, with `prompt` the whole text or its token ids."""
    props = {k: v for k, v in infill_fields(limits).items()
             if k not in ("input_prefix", "input_suffix", "input_extra")}
    props["prompt"] = {"anyOf": [_str(minLength=1), dict(TOKEN_IDS, minItems=1, maxItems=MAX_PROMPT_IDS)],
                       "x-message": "'{where}' must be a non-empty string or an array of token ids, got {got}",
                       "description": "the text to continue, as it is (the model's BOS added if it has one; no "
                                      "chat template), or its token ids"}
    return _body(props, ("prompt",), "POST /completion (llama-server's native completion)")


def infill_fields(limits) -> dict:
    """Every field of /infill's body, by name (infill_request_schema)."""
    chunk = _obj({"filename": _str("the chunk's file (default 'tmp')", maxLength=MAX_FILENAME),
                  "text": _str("the chunk's text")},
                 desc="a chunk of extra context; other keys (llama.vim's `time`) are ignored")
    stop_list = {"type": "array", "maxItems": min(limits.max_stop, MAX_STOP_STRINGS),
                 "items": _str(maxLength=MAX_STOP_STRING_CHARS)}
    props = {
        "model": _str("served model name (default, or '': the first)", maxLength=256),
        "input_prefix": _str("the text before the cursor"),
        "input_suffix": _str("the text after the cursor"),
        "prompt": _str("text typed after input_prefix, appended to it and kept whole"),
        "input_extra": {"type": "array", "maxItems": MAX_EXTRA_CHUNKS, "items": chunk,
                        "description": "extra context chunks, oldest first: the repo-level layout when the model "
                                       "has <|repo_name|> and <|file_sep|>; the oldest are dropped first"},
        "n_predict": _int(-1, MAX_INT, "most tokens to generate; -1 (default): up to the context; 0: process "
                                       "(and cache) the prompt only. Clamped to the room left in the context and "
                                       "to the server's --max-tokens-cap"),
        "max_tokens": _int(-1, MAX_INT, "the same as n_predict (n_predict wins)"),
        "temperature": _num(desc="<= 0 is greedy; default 0.8 (llama-server's)"),
        "top_k": _int(-MAX_INT, MAX_INT, "<= 0: off; default 40"),
        "top_p": dict(SAMPLING["top_p"], description="(0, 1]; default 0.95"),
        "min_p": _num(0, 1, desc="default 0.05"),
        "seed": _int(-1, MAX_SEED, "-1 (default): a random seed"),
        "repeat_penalty": dict(SAMPLING["repetition_penalty"], description="1 (default) is off"),
        "presence_penalty": SAMPLING["presence_penalty"],
        "frequency_penalty": SAMPLING["frequency_penalty"],
        "ignore_eos": BOOL,
        "stop": {"anyOf": [_str(maxLength=MAX_STOP_STRING_CHARS), stop_list],
                 "x-message": "'{where}' must be a string or an array of strings, got {got}",
                 "description": "stop strings (empty ones are ignored)"},
        "stream": dict(BOOL, description="server-sent events as llama-server sends them (no [DONE] line)"),
        "n_cmpl": _int(1, limits.max_n, "completions to generate; more than 1 answers an array"),
        "n_indent": _int(-MAX_INT, MAX_INT, "minimum indentation of new lines: the middle ends before a line "
                                            "indented less (<= 0: off)"),
        "t_max_predict_ms": _int(-MAX_MS, MAX_MS, "stop once this long has passed since the first token and a "
                                                  "new line was generated (<= 0: off)"),
        "t_max_prompt_ms": _int(-MAX_MS, MAX_MS, "answer empty (stop_type 'limit') when no token came within "
                                                 "this long; ignored with n_predict 0 (<= 0: off)"),
        "response_fields": {"type": "array", "maxItems": MAX_RESPONSE_FIELDS, "items": _str(maxLength=256),
                            "description": "answer only these fields ('timings/prompt_n' reads a nested one); "
                                           "not applied to streamed events"},
        "return_tokens": dict(BOOL, description="fill `tokens` with the generated ids"),
        "user": SAMPLING["user"],
    }
    props.update({name: _ignored() for name in IGNORED})
    return props


TIMINGS = {"type": "object", "properties": {
    "prompt_n": _int(0, desc="prompt tokens computed (not served from the prefix cache)"),
    "prompt_ms": _num(0), "prompt_per_token_ms": _num(0), "prompt_per_second": _num(0),
    "predicted_n": _int(0), "predicted_ms": _num(0), "predicted_per_token_ms": _num(0),
    "predicted_per_second": _num(0), "cache_n": _int(0, desc="prompt tokens served from the prefix cache")}}
_RESULT = {"type": "object", "description": "with response_fields, only the fields asked for", "properties": {
    "index": _int(0), "content": _str(), "tokens": {"type": "array", "items": _int(0)}, "id_slot": _int(-1),
    "stop": BOOL, "model": _str(), "tokens_predicted": _int(0), "tokens_evaluated": _int(0),
    "tokens_cached": _int(0), "prompt": _str(), "has_new_line": BOOL, "truncated": BOOL,
    "stop_type": {"type": "string", "enum": ["none", "eos", "word", "limit"]}, "stopping_word": _str(),
    "generation_settings": {"type": "object"}, "timings": TIMINGS}}
INFILL_RESPONSE_SCHEMAS = {
    "InfillResponse": {"anyOf": [_RESULT, {"type": "array", "items": _RESULT}],
                       "description": "one result; an array of n_cmpl results when n_cmpl > 1"},
    "InfillChunk": dict(_RESULT, required=["index", "content", "stop"],
                        description="a streamed piece (stop false) or a completion's final event (stop true, "
                                    "content '', with timings)"),
}
