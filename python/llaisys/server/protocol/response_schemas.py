"""Response bodies of every route, as JSON Schema (the OpenAPI description's components;
tests check answers against them). Built from ``schema.py``'s blocks."""

from __future__ import annotations

from .schema import _int, _obj, _str

# ---- responses ---------------------------------------------------------------------------------
def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _strict(props: dict, required=None, **kw) -> dict:
    """A response object: every listed field present."""
    return {"type": "object", "properties": props, "required": list(required or props), **kw}


NULL_STR = {"type": ["string", "null"]}
FINISH = {"type": ["string", "null"], "enum": ["stop", "length", "tool_calls", "abort", None]}
TOOL_CALL = _strict({"id": _str(), "type": {"type": "string", "const": "function"},
                     "function": _strict({"name": _str(), "arguments": _str("the arguments as JSON text")})})
TOOL_CALL_DELTA = {"type": "object", "required": ["index"], "additionalProperties": False, "properties": {
    "index": _int(0), "id": _str(), "type": {"type": "string", "const": "function"},
    "function": {"type": "object", "additionalProperties": False, "properties": {"name": _str(), "arguments": _str()}}},
    "description": "a call's first chunk has index, id, type and function.name (arguments ''); later ones index "
                   "and function.arguments pieces"}
MESSAGE_OUT = _strict({"role": {"type": "string", "const": "assistant"},
                       "content": {"type": ["string", "null"],
                                   "description": "null when the answer is only tool calls or was cut in the reasoning"},
                       "reasoning_content": {"type": ["string", "null"],
                                             "description": "only from a reasoning model (--reasoning-parser)"},
                       "tool_calls": {"type": "array", "items": TOOL_CALL}}, ["role", "content"])
USAGE = _strict({"prompt_tokens": _int(0), "completion_tokens": _int(0), "total_tokens": _int(0),
                 "prompt_tokens_details": _strict({"cached_tokens": _int(0)})})
TOP_LOGPROB = _strict({"token": _str(), "logprob": {"type": "number"},
                       "bytes": {"type": "array", "items": _int(0, 255)}})
CHAT_LOGPROBS = _strict({"content": {"type": "array", "items": _strict(dict(TOP_LOGPROB["properties"], top_logprobs={
    "type": "array", "items": TOP_LOGPROB}))}, "refusal": {"type": "null"}})
COMPLETION_LOGPROBS = _strict({"tokens": {"type": "array", "items": _str()},
                               "token_logprobs": {"type": "array", "items": {"type": "number"}},
                               "top_logprobs": {"type": "array", "items": {
                                   "type": ["object", "null"], "additionalProperties": {"type": "number"}}},
                               "text_offset": {"type": "array", "items": _int(0)}})


def _envelope(obj: str, choice: dict, usage_required: bool) -> dict:
    props = {"id": _str(), "object": {"type": "string", "const": obj}, "created": _int(0), "model": _str(),
             "system_fingerprint": {"type": "null"}, "choices": {"type": "array", "items": choice},
             "usage": {"anyOf": [USAGE, {"type": "null"}]}}
    req = [k for k in props if k != "usage" or usage_required]
    return _strict(props, req)


def _logprobs_of(kind: str) -> dict:
    return {"anyOf": [CHAT_LOGPROBS if kind == "chat" else COMPLETION_LOGPROBS, {"type": "null"}]}


ERROR = _strict({"error": {"type": "object", "required": ["message", "type", "param", "code"], "properties": {
    "message": _str(minLength=1), "type": _str(), "param": NULL_STR, "code": NULL_STR,
    "n_prompt_tokens": _int(0), "n_ctx": _int(0), "state": _str()}}},
    description="every error: OpenAI's shape (n_prompt_tokens and n_ctx only with context_length_exceeded)")

MODEL_CARD = _strict({"id": _str(), "object": {"type": "string", "const": "model"}, "created": _int(0),
                      "owned_by": _str(), "root": _str(), "max_model_len": {"type": ["integer", "null"], "minimum": 1}})
OUTPUT_ITEM = {"type": "object", "required": ["type", "id"], "properties": {
    "type": {"type": "string", "enum": ["reasoning", "message", "function_call"]}, "id": _str(),
    "status": {"type": "string", "enum": ["in_progress", "completed", "incomplete"]},
    "role": {"type": "string", "const": "assistant"}, "content": {"type": "array", "items": {"type": "object"}},
    "summary": {"type": "array"}, "call_id": _str(), "name": _str(), "arguments": _str()},
    "description": "reasoning (content: reasoning_text parts), message (content: one output_text part), or "
                   "function_call (call_id, name, arguments)"}
RESPONSE = _strict({
    "id": _str(), "object": {"type": "string", "const": "response"}, "created_at": _int(0),
    "status": {"type": "string", "enum": ["in_progress", "completed", "incomplete"]}, "error": {"type": "null"},
    "incomplete_details": {"anyOf": [_strict({"reason": {"type": "string", "const": "max_output_tokens"}}),
                                     {"type": "null"}]},
    "model": _str(), "output": {"type": "array", "items": OUTPUT_ITEM},
    "usage": {"anyOf": [_strict({"input_tokens": _int(0), "input_tokens_details": _strict({"cached_tokens": _int(0)}),
                                 "output_tokens": _int(0), "output_tokens_details": _strict({"reasoning_tokens": _int(0)}),
                                 "total_tokens": _int(0)}), {"type": "null"}]},
    "previous_response_id": NULL_STR, "instructions": NULL_STR}, description="a response of /v1/responses")

RESPONSE_SCHEMAS = {
    "Error": ERROR,
    "Usage": USAGE,
    "ChatCompletion": _envelope("chat.completion", _strict({
        "index": _int(0), "message": MESSAGE_OUT,
        "logprobs": _logprobs_of("chat"), "finish_reason": FINISH}), True),
    "ChatCompletionChunk": _envelope("chat.completion.chunk", _strict({
        "index": _int(0), "delta": _obj({"role": {"type": "string", "const": "assistant"}, "content": _str(),
                                         "reasoning_content": _str(),
                                         "tool_calls": {"type": "array", "items": TOOL_CALL_DELTA}},
                                        additionalProperties=False),
        "logprobs": _logprobs_of("chat"), "finish_reason": FINISH}), False),
    "TextCompletion": _envelope("text_completion", _strict({
        "index": _int(0), "text": _str(), "logprobs": _logprobs_of("text"), "finish_reason": FINISH}), True),
    "TextCompletionChunk": _envelope("text_completion", _strict({
        "index": _int(0), "text": _str(), "logprobs": _logprobs_of("text"), "finish_reason": FINISH}), False),
    "EmbeddingList": _strict({"object": {"type": "string", "const": "list"}, "model": _str(),
                              "data": {"type": "array", "items": _strict({
                                  "object": {"type": "string", "const": "embedding"}, "index": _int(0),
                                  "embedding": {"anyOf": [{"type": "array", "items": {"type": "number"}},
                                                          _str(contentEncoding="base64")]}})},
                              "usage": _strict({"prompt_tokens": _int(0), "total_tokens": _int(0)})}),
    "TokenizeResponse": _strict({"tokens": {"type": "array", "items": _int(0)}, "count": _int(0),
                                 "max_model_len": _int(1)}),
    "DetokenizeResponse": _strict({"prompt": _str()}),
    "ApplyTemplateResponse": _strict({"prompt": _str()}),
    "Props": _strict({
        "model_alias": _str(), "model_path": _str(), "total_slots": _int(1), "chat_template": _str(),
        "bos_token": _str(), "eos_token": _str(), "build_info": _str(),
        "modalities": _strict({"vision": {"type": "boolean"}, "audio": {"type": "boolean"}}),
        "default_generation_settings": _strict({"n_ctx": _int(1), "params": _strict({
            "temperature": {"type": "number"}, "top_p": {"type": "number"}, "top_k": {"type": "integer"},
            "min_p": {"type": "number"}, "n_predict": {"type": "integer"}, "seed": {"type": "integer"}})})}),
    "ModelList": _strict({"object": {"type": "string", "const": "list"}, "data": {"type": "array", "items": MODEL_CARD}}),
    "Model": MODEL_CARD,
    "Response": RESPONSE,
    "ResponseStreamEvent": _strict({"type": _str("response.created, response.in_progress, "
                                                 "response.output_item.added / .done, response.content_part.added / "
                                                 ".done, response.reasoning_text.delta / .done, "
                                                 "response.output_text.delta / .done, "
                                                 "response.function_call_arguments.delta / .done, "
                                                 "response.completed, response.incomplete, error"),
                                    "sequence_number": _int(0)},
                                   description="sent as `event: <type>` and `data: <JSON>`; no [DONE] line"),
    "Health": _strict({"status": {"type": "string", "const": "ok"}, "models": {"type": "array", "items": _str()}}),
    "Session": _strict({"id": _str(), "object": {"type": "string", "const": "session"},
                        "messages": {"type": "array", "items": {"type": "object"}}}),
    "SessionDeleted": _strict({"id": _str(), "object": {"type": "string", "const": "session.deleted"},
                               "deleted": {"type": "boolean", "const": True}}),
    "CancelResponse": _strict({"id": _str(), "object": {"type": "string", "const": "request.cancel"},
                               "cancelled": {"type": "boolean", "const": True}}),
}


def resolve(schema, components: dict):
    """`schema` with every $ref to #/components/schemas/ replaced by the referenced schema."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if ref is not None:
            return resolve(components[ref.rsplit("/", 1)[1]], components)
        return {k: resolve(v, components) for k, v in schema.items()}
    if isinstance(schema, list):
        return [resolve(x, components) for x in schema]
    return schema
