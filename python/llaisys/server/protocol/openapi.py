"""GET /openapi.json: the OpenAPI 3.1 description of every route, generated from ``schema.py``
(the dicts the server validates request bodies with) and the route table below.

A test checks that the table and the Flask app's URL map name the same routes, so a route
cannot be added without being described.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..anthropic.schema import RESPONSE_SCHEMAS as ANTHROPIC_RESPONSES, request_schemas as anthropic_requests
from ..infill.schema import INFILL_RESPONSE_SCHEMAS, completion_request_schema, infill_request_schema
from .request_schemas import request_schemas
from .response_schemas import RESPONSE_SCHEMAS

# status -> when a route answers it (every error body is the Error schema)
ERROR_STATUSES = {
    400: "invalid request: the error's `param` names the field",
    401: "missing or wrong API key (only when the server has keys)",
    404: "unknown model, session or request",
    409: "the session already has a turn running",
    413: "request body larger than the server's limit",
    415: "the body is not application/json",
    429: "too many requests (queue full, per-user concurrency or token budget); see Retry-After",
    500: "the engine failed on this request",
    503: "loading, shutting down, or the engine stopped; see Retry-After",
    504: "the request ran past the server's request timeout",
}
_AUTH = (401, 503)  # what every route behind the key check can answer (503: draining)
_BODY = (400, 413, 415)  # what every route with a JSON body can answer
_GEN = _AUTH + _BODY + (404, 429, 500, 504)


@dataclass
class Route:
    method: str
    path: str  # OpenAPI form: /v1/sessions/{sid}
    endpoint: str  # the Flask endpoint serving it
    summary: str
    ok: Optional[str] = None  # 200's JSON schema name (None: see ok_types)
    ok_types: dict = field(default_factory=dict)  # other 200 content types -> schema
    body: Optional[str] = None  # request schema name
    body_required: bool = True
    errors: tuple = _AUTH
    path_params: tuple = ()
    query: dict = field(default_factory=dict)  # query parameter -> schema
    stream: Optional[str] = None  # chunk schema name of a text/event-stream answer (stream: true)
    open: bool = False  # answered without an API key
    error: str = "Error"  # the schema of its error bodies


_SSE_DESC = ("with `stream: true`: server-sent events, each `data: <JSON>` line one {chunk} (the last may be an "
             "Error object if generation failed midway), then `data: [DONE]`")


def _sse_event(chunk: str) -> dict:
    """The schema of ONE event of a text/event-stream answer, the fields an SSE parser gives
    (WHATWG): OpenAPI 3.1 leaves a stream's schema undefined, and readers such as schemathesis
    take `schema` to describe each event (3.2's `itemSchema`). The JSON inside `data` is
    x-sse-data's."""
    return {"type": "object", "description": _SSE_DESC.format(chunk=chunk), "required": ["data"],
            "properties": {"data": {"type": "string", "description": f"one {chunk} or Error as JSON, or [DONE]"},
                           "event": {"type": "string"}, "id": {"type": "string"},
                           "retry": {"type": "integer", "minimum": 0}}}
_USER_QUERY = {"user": {"type": "string", "maxLength": 256}}

ROUTES = [
    Route("GET", "/health", "health", "liveness and readiness (no API key needed)", "Health", errors=(503,),
          open=True),
    Route("GET", "/openapi.json", "openapi", "this description (no API key needed)",
          ok_types={"application/json": {"type": "object"}}, errors=(), open=True),
    Route("GET", "/v1/models", "models", "the served models", "ModelList"),
    Route("GET", "/v1/models/{model_id}", "model", "one served model (404 model_not_found for another id)", "Model",
          errors=_AUTH + (404,), path_params=("model_id",)),
    Route("POST", "/v1/responses", "responses.create_response", "a response (OpenAI's Responses API, the subset "
          "that maps onto chat)", "Response", body="ResponseRequest", errors=_GEN, stream="ResponseStreamEvent"),
    Route("POST", "/v1/messages", "anthropic.create_message", "a message (Anthropic's Messages API)",
          "AnthropicMessage", body="AnthropicMessageRequest", errors=_GEN, stream="AnthropicStreamEvent",
          error="AnthropicError"),
    Route("POST", "/v1/messages/count_tokens", "anthropic.count_tokens", "the input tokens of a Messages request",
          "AnthropicCountTokens", body="AnthropicCountTokensRequest", errors=_AUTH + _BODY + (404,),
          error="AnthropicError"),
    Route("GET", "/metrics", "metrics", "Prometheus metrics",
          ok_types={"text/plain": {"type": "string"}}),
    Route("POST", "/v1/chat/completions", "openai.chat_completions", "chat completion", "ChatCompletion",
          body="ChatCompletionRequest", errors=_GEN + (409,), stream="ChatCompletionChunk"),
    Route("POST", "/v1/completions", "openai.completions", "text completion", "TextCompletion",
          body="CompletionRequest", errors=_GEN, stream="TextCompletionChunk"),
    Route("POST", "/infill", "openai.infill", "code infill (llama-server's fill-in-the-middle, for editor plugins)",
          "InfillResponse", body="InfillRequest", errors=_GEN, stream="InfillChunk"),
    Route("POST", "/completion", "openai.completion", "llama-server's native completion of a text as it is (the "
          "answer and stream of /infill)", "InfillResponse", body="NativeCompletionRequest", errors=_GEN,
          stream="InfillChunk"),
    Route("POST", "/v1/embeddings", "openai.embeddings", "embeddings (mean-pooled, L2-normalised)", "EmbeddingList",
          body="EmbeddingRequest", errors=_AUTH + _BODY + (404, 429, 504)),
    Route("POST", "/tokenize", "openai.tokenize", "token ids of a prompt or a rendered chat", "TokenizeResponse",
          body="TokenizeRequest", errors=_AUTH + _BODY + (404,)),
    Route("POST", "/detokenize", "openai.detokenize", "text of token ids", "DetokenizeResponse",
          body="DetokenizeRequest", errors=_AUTH + _BODY + (404,)),
    Route("POST", "/apply-template", "openai.apply_template", "the prompt a chat request would run (llama-server's "
          "/apply-template)", "ApplyTemplateResponse", body="ApplyTemplateRequest", errors=_AUTH + _BODY + (404,)),
    Route("GET", "/props", "openai.props", "a served model's context, slots, chat template and sampling defaults "
          "(llama-server's /props, read only; ?model= picks one)", "Props", errors=_AUTH + (404,),
          query={"model": {"type": "string", "maxLength": 256}}),
    Route("POST", "/v1/requests/{rid}/cancel", "openai.cancel", "cancel one of your running requests",
          "CancelResponse", body="UserBody", body_required=False, errors=_AUTH + _BODY + (404,),
          path_params=("rid",), query=_USER_QUERY),
    Route("GET", "/v1/sessions/{sid}", "openai.get_session", "a session's committed messages", "Session",
          errors=_AUTH + (404,), path_params=("sid",), query=_USER_QUERY),
    Route("DELETE", "/v1/sessions/{sid}", "openai.delete_session", "forget a session", "SessionDeleted",
          errors=_AUTH + (404, 409), path_params=("sid",), query=_USER_QUERY),
    Route("GET", "/", "web_index", "the chat page", ok_types={"text/html": {"type": "string"}}, errors=(),
          open=True),
]


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _operation(r: Route, has_keys: bool) -> dict:
    content = {}
    if r.ok:
        content["application/json"] = {"schema": _ref(r.ok)}
    for ctype, schema in r.ok_types.items():
        content[ctype] = {"schema": schema}
    if r.stream:
        content["text/event-stream"] = {"schema": _sse_event(r.stream),
                                        "x-sse-data": {"anyOf": [_ref(r.stream), _ref(r.error)]}}
    responses = {"200": {"description": r.summary, "content": content}}
    for status in r.errors:
        if status == 401 and not has_keys:
            continue
        responses[str(status)] = {"description": ERROR_STATUSES[status],
                                  "content": {"application/json": {"schema": _ref(r.error)}}}
    op = {"operationId": r.endpoint.split(".")[-1], "summary": r.summary, "responses": responses}
    params = [{"name": p, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1,
                                                                      "maxLength": 256}} for p in r.path_params]
    params += [{"name": q, "in": "query", "required": False, "schema": s} for q, s in r.query.items()]
    if params:
        op["parameters"] = params
    if r.body:
        op["requestBody"] = {"required": r.body_required,
                             "content": {"application/json": {"schema": _ref(r.body)}}}
    if r.open or not has_keys:
        op["security"] = []
    return op


def build_openapi(limits, has_keys: bool = False, has_web: bool = True, version: str = "") -> dict:
    """The OpenAPI 3.1 document for a server with these per-request `limits`."""
    paths: dict = {}
    for r in ROUTES:
        if r.endpoint == "web_index" and not has_web:
            continue
        paths.setdefault(r.path, {})[r.method.lower()] = _operation(r, has_keys)
    schemas = dict(request_schemas(limits))
    schemas.update(RESPONSE_SCHEMAS)
    schemas.update(anthropic_requests(limits.max_stop))
    schemas.update(ANTHROPIC_RESPONSES)
    schemas.update(INFILL_RESPONSE_SCHEMAS, InfillRequest=infill_request_schema(limits),
                   NativeCompletionRequest=completion_request_schema(limits))
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "llaisys OpenAI-compatible server", "version": version or "0",
                 "description": "JSON routes take `Content-Type: application/json` (UTF-8) and answer errors as "
                                "`{\"error\": {\"message\", \"type\", \"param\", \"code\"}}` (the Anthropic "
                                "routes, /v1/messages*, answer Anthropic's `{\"type\": \"error\", \"error\": "
                                "{\"type\", \"message\"}}`). Unknown body fields are ignored; null is the same as "
                                "leaving a field out."},
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {"schemas": schemas},
    }
    if has_keys:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"},
                                                "apiKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}}
        doc["security"] = [{"bearer": []}, {"apiKey": []}]
    return doc
