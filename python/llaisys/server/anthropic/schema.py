"""The Anthropic Messages API's bodies as JSON Schema: the requests of ``POST /v1/messages``
and ``POST /v1/messages/count_tokens`` (checked with ``schema.validate``, published in
/openapi.json), the message, the token count, the stream event and the error answered.

The request schemas say what a field is (types, ranges, Anthropic's enums); what depends on
other fields (a tool_use block only on an assistant turn, an image refused, a named
tool_choice needing its tool) is checked where the request is read (``routes.py``).
"""

from __future__ import annotations

import functools

from ...engine.sampling_params import MAX_STOP_STRINGS
from ..protocol.schema import BOOL, F32_TINY, MAX_INT, MAX_MESSAGES, MAX_NAME_LEN, _body, _int, _num, _obj, _str

MAX_BLOCKS = 1024  # most text blocks in `system` (a message's blocks are bounded by the body size limit)
MAX_TOOLS = 128  # most tools one request may offer (as on the chat route)
MAX_DESCRIPTION = 16384  # longest tool description (characters)
TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"  # Anthropic's pattern, within the chat route's 64 characters

TEXT_BLOCK = _obj({"type": {"type": "string", "const": "text"}, "text": _str()}, ("type", "text"), "a text block")
BLOCK = _obj({"type": _str("text, tool_use, tool_result, thinking, redacted_thinking (image and document are "
                           "refused: the served models read text only)")}, ("type",))
MESSAGE = _obj({
    "role": {"type": "string", "enum": ["user", "assistant"]},
    "content": {"anyOf": [_str(), {"type": "array", "items": BLOCK}],  # as many blocks as the body limit holds
                "x-message": "'{where}' must be a string or an array of content blocks, got {got}"},
}, ("role", "content"), "a turn; a final assistant turn is a prefill the answer continues")
TOOL = _obj({
    "name": _str("1 to 64 letters, digits, '_' or '-'", pattern=TOOL_NAME),
    "description": _str(maxLength=MAX_DESCRIPTION),
    "input_schema": {"type": "object", "description": "a JSON Schema of type object"},
    "type": _str("custom (the default); Anthropic's server tools are refused"),
}, ("name",))
TOOL_CHOICE = _obj({
    "type": {"type": "string", "enum": ["auto", "any", "tool", "none"]},
    "name": _str("the tool (type tool)", pattern=TOOL_NAME),
    "disable_parallel_tool_use": BOOL,
}, ("type",))


def _request_fields(max_stop: int) -> dict:
    return {
        "model": _str("served model name (default: the first)", maxLength=MAX_NAME_LEN),
        "messages": {"type": "array", "items": MESSAGE, "minItems": 1, "maxItems": MAX_MESSAGES},
        "system": {"anyOf": [_str(), {"type": "array", "items": TEXT_BLOCK, "maxItems": MAX_BLOCKS}],
                   "x-message": "'{where}' must be a string or an array of text blocks, got {got}"},
        "tools": {"type": "array", "items": TOOL, "maxItems": MAX_TOOLS},
        "tool_choice": TOOL_CHOICE,
        "thinking": {"type": "object", "description": "accepted and ignored (a reasoning model always reasons)"},
        "output_config": _obj({"format": {"type": ["object", "null"], "properties": {
            "type": {"type": "string", "const": "json_schema"}, "schema": {"type": "object"}},
            "required": ["type", "schema"], "description": "structured output: the answer's text follows the schema"}},
            desc="format: structured output; effort and other keys are ignored"),
        "metadata": _obj({"user_id": {"type": ["string", "null"], "maxLength": MAX_NAME_LEN}},
                         desc="user_id: the end user (part of the caller's identity for per-user limits)"),
    }


@functools.lru_cache(maxsize=32)
def request_schemas(max_stop: int = MAX_STOP_STRINGS) -> dict:
    """{"AnthropicMessageRequest", "AnthropicCountTokensRequest"} for a server allowing
    `max_stop` stop strings."""
    fields = _request_fields(max_stop)
    message = _body(dict(fields, **{
        "max_tokens": _int(1, MAX_INT, "required; lowered to the room the context leaves and to --max-tokens-cap"),
        "stop_sequences": {"type": "array", "items": _str(minLength=1),
                           "maxItems": min(max_stop, MAX_STOP_STRINGS)},
        "temperature": _num(0, 1, desc="default 1; 0 is greedy"),
        "top_p": _num(F32_TINY, 1),
        "top_k": _int(0, MAX_INT, desc="0: off"),
        "stream": BOOL,
    }), ("max_tokens", "messages"), "POST /v1/messages (Anthropic's Messages API)")
    count = _body(fields, ("messages",), "POST /v1/messages/count_tokens")
    return {"AnthropicMessageRequest": message, "AnthropicCountTokensRequest": count}


# ---- answers ------------------------------------------------------------------------------------
def _strict(props: dict, required=None, **kw) -> dict:
    return {"type": "object", "properties": props, "required": list(required or props), **kw}


STOP_REASONS = ["end_turn", "max_tokens", "stop_sequence", "tool_use"]
ERROR_TYPES = ["invalid_request_error", "authentication_error", "permission_error", "not_found_error",
               "request_too_large", "rate_limit_error", "api_error", "timeout_error", "overloaded_error"]
USAGE = _strict({"input_tokens": _int(0), "output_tokens": _int(0)})
CONTENT_BLOCK = {"type": "object", "required": ["type"], "properties": {
    "type": {"type": "string", "enum": ["text", "thinking", "tool_use"]},
    "text": _str(), "thinking": _str(), "signature": _str("always empty: nothing signs the reasoning here"),
    "id": _str("toolu_..."), "name": _str(), "input": {"type": "object"}},
    "description": "text {text}, thinking {thinking, signature}, or tool_use {id, name, input}"}
MESSAGE_OUT = _strict({
    "id": _str("msg_..."), "type": {"type": "string", "const": "message"},
    "role": {"type": "string", "const": "assistant"}, "model": _str(),
    "content": {"type": "array", "items": CONTENT_BLOCK},
    "stop_reason": {"type": ["string", "null"], "enum": STOP_REASONS + [None],
                    "description": "null only in a stream's message_start"},
    "stop_sequence": {"type": ["string", "null"]}, "usage": USAGE})

RESPONSE_SCHEMAS = {
    "AnthropicMessage": MESSAGE_OUT,
    "AnthropicCountTokens": _strict({"input_tokens": _int(0)}),
    "AnthropicError": _strict({"type": {"type": "string", "const": "error"},
                               "error": _strict({"type": {"type": "string", "enum": ERROR_TYPES}, "message": _str()})}),
    "AnthropicStreamEvent": _strict({"type": {"type": "string", "enum": [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop", "ping", "error"]}}, description="sent as `event: <type>` and `data: <JSON>`; no [DONE] line"),
}
