"""Request body schemas of the generation routes (chat, completions, responses) and the
small routes, built from ``schema.py``'s blocks and the server's per-request ``Limits``.

Tool fields follow OpenAI's chat API (``tools`` of type function, ``tool_choice`` none /
auto / required / a named function, ``parallel_tool_calls``); what the schema cannot say
(name rules, duplicates, a tool_choice naming no tool) is checked in ``openai/tool_calls.py``.
``/v1/responses`` takes the subset of OpenAI's Responses API that maps onto a chat request
(``responses/routes.py`` reads its input items).
"""

from __future__ import annotations

import functools
from typing import Optional

from ...engine.sampling_params import MAX_LOGIT_BIAS, MAX_LOGPROBS, MAX_STOP_STRINGS
from ...engine.structured_format import RESPONSE_FORMAT_SCHEMA
from .schema import (BOOL, F32_TINY, MAX_EMBEDDING_INPUTS, MAX_ID_LEN, MAX_INT, MAX_LOGIT_BIAS_ENTRIES, MAX_MESSAGES,
                     MAX_NAME_LEN, MAX_PROMPTS, MAX_SEED, ROLES, TOKEN_ID, TOKEN_IDS, _body, _int, _nullable, _num,
                     _obj, _str)

MAX_TOOLS = 128  # most tools one request may offer
MAX_DESCRIPTION = 16384  # longest tool description (characters)

CONTENT_PART = _obj({"type": {"type": "string", "const": "text"}, "text": _str()}, ("type", "text"),
                    "a text part (this server takes text only)")
MESSAGE = _obj({
    "role": {"type": "string", "enum": list(ROLES)},
    "content": {"anyOf": [_str(), {"type": "array", "items": CONTENT_PART, "maxItems": 1024}, {"type": "null"}],
                "description": "text, or an array of text parts (null only on an assistant turn with tool_calls)"},
    "name": _str(maxLength=MAX_NAME_LEN),
    "tool_calls": {"type": ["array", "null"], "maxItems": 128},
    "tool_call_id": _str(maxLength=MAX_NAME_LEN),
    "reasoning_content": {"type": ["string", "null"], "description": "an assistant turn's reasoning (rendered by "
                                                                       "templates that read it, e.g. Qwen3's)"},
}, ("role",), "a chat message; other keys are ignored (neither rendered nor stored)")
MESSAGES = {"type": "array", "items": MESSAGE, "minItems": 1, "maxItems": MAX_MESSAGES, "x-code": "invalid_value",
            "description": "the conversation, oldest first"}

FUNCTION = _obj({
    "name": _str("1 to 64 letters, digits, '_' or '-'", minLength=1, maxLength=64),
    "description": _str(maxLength=MAX_DESCRIPTION),
    "parameters": {"type": "object", "description": "a JSON Schema of type object (default: no parameters)"},
    "strict": {"type": ["boolean", "null"]},
}, ("name",))
TOOLS = {"type": "array", "maxItems": MAX_TOOLS, "description": "functions the model may call",
         "items": _obj({"type": {"type": "string", "enum": ["function"], "x-code": "unsupported_parameter"},
                        "function": FUNCTION}, ("type", "function"))}
TOOL_CHOICE = {"anyOf": [{"type": "string", "enum": ["none", "auto", "required"]},
                         _obj({"type": {"type": "string", "const": "function"},
                               "function": _obj({"name": _str(minLength=1, maxLength=64)}, ("name",))},
                              ("type", "function"))],
               "x-message": "'{where}' must be 'none', 'auto', 'required' or {{'type': 'function', 'function': "
                            "{{'name': ...}}}}, got {got}",
               "description": "none, auto (default with tools), required, or a named function"}
RESPONSES_TOOLS = {"type": "array", "maxItems": MAX_TOOLS, "description": "function tools (Responses API shape)",
                   "items": _obj({"type": {"type": "string", "enum": ["function"], "x-code": "unsupported_parameter"},
                                  "name": FUNCTION["properties"]["name"],
                                  "description": FUNCTION["properties"]["description"],
                                  "parameters": FUNCTION["properties"]["parameters"],
                                  "strict": FUNCTION["properties"]["strict"]}, ("type", "name"))}
RESPONSES_TOOL_CHOICE = {"anyOf": [TOOL_CHOICE["anyOf"][0],
                                   _obj({"type": {"type": "string", "const": "function"},
                                         "name": _str(minLength=1, maxLength=64)}, ("type", "name"))],
                         "x-message": "'{where}' must be 'none', 'auto', 'required' or {{'type': 'function', "
                                      "'name': ...}}, got {got}"}

SAMPLING = {  # the fields SamplingParams takes, with OpenAI's ranges
    "temperature": _num(0, 2, desc="0 is greedy; default 1"),
    "top_p": _num(F32_TINY, 1, desc="(0, 1]; below 1e-30 it is refused (0 in the core's float32)"),
    "min_p": _num(0, 1),
    "top_k": _int(-1, MAX_INT, desc="-1 or 0: off"),
    "presence_penalty": _num(-2, 2),
    "frequency_penalty": _num(-2, 2),
    "repetition_penalty": _num(F32_TINY, 2, desc="1 is off; (0, 2], below 1e-30 refused (0 in float32)"),
    "seed": _int(0, MAX_SEED),
    "ignore_eos": BOOL,
    "include_stop_str_in_output": BOOL,
    "skip_special_tokens": BOOL,
    "speculative": {"type": "boolean", "description": "speculative decoding for this request: false opts out, "
                                                      "true requires it (400 when the server runs without)"},
    "stop_token_ids": {"type": "array", "items": TOKEN_ID, "maxItems": 256,
                       "description": "ids that end generation (within the model's vocabulary)"},
    "logit_bias": {"type": "object", "maxProperties": MAX_LOGIT_BIAS_ENTRIES,
                   "propertyNames": {"type": "string", "pattern": r"^(0|[1-9][0-9]{0,9})$"},
                   "additionalProperties": _num(-MAX_LOGIT_BIAS, MAX_LOGIT_BIAS),
                   "description": "token id (decimal string, within the model's vocabulary) -> bias in [-100, 100]"},
    "user": _str("the end user (part of the caller's identity for per-user limits)", maxLength=MAX_NAME_LEN),
    "model": _str("served model name (default: the first)", maxLength=MAX_NAME_LEN),
    "stream": BOOL,
    "stream_options": _obj({"include_usage": _nullable(BOOL)}, desc="only with stream: true"),
    "response_format": RESPONSE_FORMAT_SCHEMA,
}


def _generation_fields(max_n: int, max_tokens_cap: Optional[int], max_stop: int) -> dict:
    cap = max_tokens_cap or MAX_INT
    return dict(SAMPLING, **{
        "n": _int(1, max_n, "completions per prompt"),
        "best_of": _int(1, max_n, "must equal n"),
        "max_tokens": _int(1, cap),
        "min_tokens": _int(0, cap),
        "stop": {"anyOf": [_str(minLength=1), {"type": "array", "items": _str(minLength=1),
                                                "maxItems": min(max_stop, MAX_STOP_STRINGS)}],
                 "x-message": "'{where}' must be a string or an array of strings, got {got}"},
    })


@functools.lru_cache(maxsize=32)
def _request_schemas(max_n: int, max_tokens_cap: Optional[int], max_stop: int) -> dict:
    gen = _generation_fields(max_n, max_tokens_cap, max_stop)
    prompt_item = {"anyOf": [_str(minLength=1, **{"x-code": "empty_prompt"}),
                             TOKEN_ID,
                             {"type": "array", "items": TOKEN_ID, "minItems": 1, "x-code": "empty_prompt"}]}
    prompt = {"anyOf": [_str(minLength=1, **{"x-code": "empty_prompt"}),
                        {"type": "array", "items": prompt_item, "minItems": 1}],
              "x-message": "'{where}' must be a non-empty string, an array of strings, an array of token ids or an "
                           "array of token-id arrays, got {got}",
              "description": f"a string, an array of token ids, or an array of at most {MAX_PROMPTS} prompts "
                             "(strings or token-id arrays; not mixed with bare ids)"}
    chat = _body(dict(gen, **{
        "messages": MESSAGES,
        "max_completion_tokens": gen["max_tokens"],
        "logprobs": BOOL,
        "top_logprobs": _int(0, MAX_LOGPROBS, "needs logprobs: true"),
        "session_id": _str("continue a server-side conversation: send only the new turn's messages",
                           minLength=1, maxLength=MAX_ID_LEN),
        "add_generation_prompt": BOOL,
        "tools": TOOLS,
        "tool_choice": TOOL_CHOICE,
        "parallel_tool_calls": BOOL,
    }), ("messages",), "POST /v1/chat/completions")
    completion = _body(dict(gen, **{
        "prompt": prompt,
        "logprobs": _int(0, MAX_LOGPROBS, "top logprobs per token"),
        "echo": BOOL,
        "suffix": _str("text after the completion: fill-in-the-middle with the prompt as the prefix, in the "
                       "model's FIM layout (models with FIM tokens; text prompts)"),
        "prompt_embeds": {"anyOf": [_str(minLength=1), {"type": "array", "items": _str(minLength=1), "minItems": 1,
                                                          "maxItems": MAX_PROMPTS}],
                          "x-message": "'{where}' must be a base64 string or an array of them, got {got}",
                          "description": "instead of prompt: base64 of little-endian float32 [n, hidden_size] input "
                                         f"embeddings, or an array of at most {MAX_PROMPTS} of them"},
    }), (), "POST /v1/completions (prompt or prompt_embeds is required)")
    embeddings = _body({
        "model": SAMPLING["model"],
        "input": dict(prompt, description=f"a string, an array of token ids, or an array of at most "
                                          f"{MAX_EMBEDDING_INPUTS} inputs (strings or token-id arrays)",
                      **{"x-message": "'{where}' must be a non-empty string, an array of strings, an array of token "
                                      "ids or an array of token-id arrays, got {got}"}),
        "encoding_format": {"type": "string", "enum": ["float", "base64"]},
        "dimensions": _int(1, MAX_INT, "must be the model's hidden size"),
        "user": SAMPLING["user"],
    }, ("input",), "POST /v1/embeddings")
    tokenize = _body({
        "model": SAMPLING["model"],
        "prompt": _str("text to tokenize (give prompt or messages)"),
        "messages": dict(MESSAGES, description="a chat to render with the model's template and tokenize"),
        "add_special_tokens": BOOL,
        "add_generation_prompt": BOOL,
    }, (), "POST /tokenize")
    detokenize = _body({"model": SAMPLING["model"], "tokens": dict(TOKEN_IDS, maxItems=1 << 20)}, ("tokens",),
                       "POST /detokenize")
    apply_template = _body({"model": SAMPLING["model"], "messages": MESSAGES, "tools": TOOLS,
                            "add_generation_prompt": BOOL}, ("messages",), "POST /apply-template")
    responses = _body({
        "model": SAMPLING["model"],
        "input": {"anyOf": [_str(minLength=1), {"type": "array", "minItems": 1, "maxItems": MAX_MESSAGES,
                                                "items": {"type": "object"}}],
                  "x-message": "'{where}' must be a non-empty string or an array of input items, got {got}",
                  "description": "a user message, or input items: messages ({role, content}), function_call and "
                                 "function_call_output items"},
        "instructions": _str("a system message put before the input (not carried by previous_response_id)"),
        "previous_response_id": _str("continue from a stored response", minLength=1, maxLength=MAX_ID_LEN),
        "store": BOOL,
        "max_output_tokens": gen["max_tokens"],
        "temperature": SAMPLING["temperature"],
        "top_p": SAMPLING["top_p"],
        "seed": SAMPLING["seed"],
        "stream": BOOL,
        "user": SAMPLING["user"],
        "tools": RESPONSES_TOOLS,
        "tool_choice": RESPONSES_TOOL_CHOICE,
        "parallel_tool_calls": BOOL,
        "metadata": {"type": "object", "maxProperties": 16, "additionalProperties": _str(maxLength=512)},
        "text": _obj({"format": _obj({"type": {"type": "string", "enum": ["text"], "x-code": "unsupported_parameter"}})},
                     desc="only the text format"),
    }, ("input",), "POST /v1/responses")
    user_only = _body({"user": SAMPLING["user"]}, (), "optional body: the owner's `user`")
    return {"ChatCompletionRequest": chat, "CompletionRequest": completion, "EmbeddingRequest": embeddings,
            "TokenizeRequest": tokenize, "DetokenizeRequest": detokenize, "ApplyTemplateRequest": apply_template,
            "UserBody": user_only,
            "ResponseRequest": responses}


def request_schemas(limits) -> dict:
    """Request body schemas by name, for a server with these per-request `limits` (a parse.Limits)."""
    return _request_schemas(limits.max_n, limits.max_tokens_cap, limits.max_stop)

