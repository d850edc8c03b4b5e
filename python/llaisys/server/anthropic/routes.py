"""POST /v1/messages and POST /v1/messages/count_tokens: Anthropic's Messages API, read into
the chat request it stands for and run on the chat route's path (the model's own chat
template, tool calling, structured output for a forced tool, the reasoning split).

Request mapping (``chat_body``):
- ``system`` (a string or text blocks) becomes the first, system message.
- ``messages``: ``content`` a string or blocks. ``text`` blocks are joined; a user turn's
  ``tool_result`` blocks become ``tool`` messages (``tool_call_id`` = ``tool_use_id``,
  content its text) in the order given, around the turn's text; an assistant turn's
  ``tool_use`` blocks become its ``tool_calls`` (``input`` as the arguments); ``thinking``
  and ``redacted_thinking`` blocks are dropped (templates drop earlier reasoning). ``image``
  and ``document`` blocks (also inside a tool_result) are a 400: the served models read
  text only. A final assistant turn of text is a prefill: the prompt ends with it and the
  answer continues it.
- ``tools`` (custom tools: name, description, input_schema) become functions; a server tool
  (another ``type``) is a 400. ``tool_choice``: auto, any (-> required), tool {name} (-> the
  named function, forced with the same grammar), none; ``disable_parallel_tool_use`` ->
  parallel_tool_calls false.
- ``output_config.format`` ({type: json_schema, schema}) -> response_format json_schema
  (structured output: the text follows the schema).
- ``stop_sequences`` -> stop, ``temperature`` / ``top_p`` / ``top_k`` as they are,
  ``metadata.user_id`` -> user, ``max_tokens`` (required) lowered to the room the context
  leaves and to the server's cap. ``thinking`` and unknown fields are ignored.

Errors are answered in Anthropic's shape (``stream.error_body``), the key check's
401 included: the blueprint's handlers take every error of these two routes.
"""

from __future__ import annotations

import json
import logging
import time
import uuid

from flask import Blueprint, Response, g, jsonify
from werkzeug.exceptions import HTTPException

from .schema import request_schemas
from .stream import MessagesRun, error_body
from ..protocol.errors import APIError, bad_request, escape_controls
from ..state.generation import Generation
from ..protocol.parse import parse_chat
from ..openai.reasoning import opened_in_prompt
from ..openai.routes import _sampling, _start, chat_prompt, output_overrides, state
from ..protocol.schema import validate
from ..openai.tool_calls import with_tool_constraint

log = logging.getLogger("llaisys.server")
bp = Blueprint("anthropic", __name__)

_RENAMED = {"stop": "stop_sequences", "user": "metadata", "parallel_tool_calls": "tool_choice",
            "response_format": "output_config"}
_REWORDED = (("tool_choice names function", "tool_choice names tool"), ("tool_choice 'required'", "tool_choice 'any'"),
             ("response_format", "output_config.format"))  # the chat route's words -> Anthropic's
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def _bad(where: str, what: str) -> APIError:
    return bad_request(f"{where}: {what}", param="messages")


def _text_blocks(blocks: list, where: str) -> str:
    """The joined text of a tool_result's blocks (text only)."""
    out = []
    for k, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind in ("image", "document"):
            raise _bad(f"{where}[{k}]", f"{kind} blocks are not supported: the served models read text only")
        if kind != "text" or not isinstance(b.get("text"), str):
            raise _bad(f"{where}[{k}]", "must be a text block {'type': 'text', 'text': ...}")
        out.append(b["text"])
    return "".join(out)


def _tool_result(b: dict, where: str) -> dict:
    tid, content = b.get("tool_use_id"), b.get("content", "")
    if not isinstance(tid, str) or not tid:
        raise _bad(where, "a tool_result block needs its tool_use_id")
    if isinstance(content, list):
        if len(content) > 1024:
            raise _bad(f"{where}.content", "at most 1024 blocks")
        content = _text_blocks(content, f"{where}.content")
    elif not isinstance(content, str):
        raise _bad(f"{where}.content", "must be a string or an array of text blocks")
    return {"role": "tool", "tool_call_id": tid, "content": content}


def _tool_use(b: dict, where: str) -> dict:
    tid, name, args = b.get("id"), b.get("name"), b.get("input", {})
    if not (isinstance(tid, str) and isinstance(name, str) and isinstance(args, dict)):
        raise _bad(where, "a tool_use block needs a string id and name and an object input")
    return {"id": tid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def _turn(m: dict, i: int) -> list:
    """The chat messages of one Anthropic turn (see the module doc)."""
    role, content = m["role"], m["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    out, text, calls = [], [], []
    for k, b in enumerate(content):
        where, kind = f"messages[{i}].content[{k}]", b["type"]
        if kind == "text":
            if not isinstance(b.get("text"), str):
                raise _bad(where, "a text block needs its text")
            text.append(b["text"])
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(b, where))
        elif kind == "tool_result" and role == "user":
            if text:  # text before a result stays before it
                out.append({"role": "user", "content": "".join(text)})
                text = []
            out.append(_tool_result(b, where))
        elif kind in ("image", "document"):
            raise _bad(where, f"{kind} blocks are not supported: the served models read text only")
        else:
            raise _bad(where, f"a {kind!r} block is not supported in {role} turns")
    if role == "assistant":
        return [{"role": "assistant", "content": "".join(text) if text or not calls else None,
                 **({"tool_calls": calls} if calls else {})}]
    if text or not out:
        out.append({"role": "user", "content": "".join(text)})
    return out


def _system(system) -> list:
    if system is None:
        return []
    text = system if isinstance(system, str) else "".join(b["text"] for b in system)
    return [{"role": "system", "content": text}] if text else []


def _tools(tools: list) -> list:
    out = []
    for i, t in enumerate(tools):
        if t.get("type") not in (None, "custom"):
            raise bad_request(f"tools[{i}]: server tools ({t['type']!r}) are not supported; give custom tools "
                              "(name, description, input_schema)", param="tools", code="unsupported_parameter")
        if t.get("input_schema") is None:
            raise bad_request(f"tools[{i}].input_schema is a required field", param="tools",
                              code="missing_required_parameter")
        fn = {"name": t["name"], "parameters": t["input_schema"]}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def chat_body(body: dict) -> tuple:
    """(the chat request body, the prefill text or None) of a schema-checked Anthropic body."""
    messages = _system(body.get("system"))
    turns = body["messages"]
    prefill = None
    last = turns[-1]
    if last["role"] == "assistant":
        (msg,) = _turn(last, len(turns) - 1)
        if msg.get("tool_calls"):
            raise _bad(f"messages[{len(turns) - 1}]", "a final assistant turn is a prefill and may hold only text")
        prefill, turns = msg["content"], turns[:-1]
    for i, m in enumerate(turns):
        messages += _turn(m, i)
    if not any(m["role"] != "system" for m in messages):
        raise bad_request("messages must hold a user turn before a final assistant (prefill) turn", param="messages")
    chat = {"messages": messages, "stream": body.get("stream") or False}
    for src, dst in (("model", "model"), ("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"),
                     ("stop_sequences", "stop")):
        if body.get(src) is not None:
            chat[dst] = body[src]
    user = (body.get("metadata") or {}).get("user_id")
    if user is not None:
        chat["user"] = user
    if body.get("tools"):
        chat["tools"] = _tools(body["tools"])
    fmt = (body.get("output_config") or {}).get("format")
    if fmt is not None:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
    choice = body.get("tool_choice")
    if choice is not None:
        if choice["type"] == "tool":
            if choice.get("name") is None:
                raise bad_request("tool_choice of type 'tool' needs the tool's name", param="tool_choice")
            chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        else:
            chat["tool_choice"] = _CHOICES[choice["type"]]
        if choice.get("disable_parallel_tool_use"):
            chat["parallel_tool_calls"] = False
    return chat, prefill


def _read(schema_name: str) -> tuple:
    """(body, ChatRequest, prefill) of this request: 400 naming Anthropic's fields otherwise."""
    st = state()
    body = st.read_json()
    schema = request_schemas(st.request_limits.max_stop)[schema_name]
    validate(schema, body)
    chat, prefill = chat_body({k: v for k, v in body.items() if k in schema["properties"]})  # count_tokens: no
    # sampling fields (unknown there, so never checked by the chat route's schema either)
    try:
        req = parse_chat(chat, st.request_limits)
    except APIError as e:
        e.param = _RENAMED.get(e.param, e.param)
        for ours, theirs in _REWORDED:
            e.message = e.message.replace(ours, theirs)
        raise
    return body, req, prefill


def _prompt(req, served, prefill) -> tuple:
    """(prompt text, ChatSetup): the chat route's prompt, then the prefill the answer continues."""
    text, setup = chat_prompt(req, served, req.messages)
    if prefill:
        text += prefill
        setup.opened = setup.reasoning_parser is not None and opened_in_prompt(text)
    return text, setup


def _max_tokens(requested: int, n_prompt: int, served, cap) -> int:
    """max_tokens lowered to the context's room and the server's cap (a prompt that leaves no
    room keeps it: the 400 context_length_exceeded follows)."""
    room = served.max_model_len - n_prompt
    return requested if room < 1 else min(requested, room, cap or requested)


@bp.post("/v1/messages")
def create_message():
    st = state()
    body, req, prefill = _read("AnthropicMessageRequest")
    served = st.registry.get(req.model)
    owner = st.identity(req.user)
    ticket, deadline, gone = _start(served, owner)
    try:
        text, setup = _prompt(req, served, prefill)
        ids = served.engine.tokenizer.encode(text)
        req.max_tokens = _max_tokens(body["max_tokens"], len(ids), served, st.request_limits.max_tokens_cap)
        sp = _sampling(req, len(ids), served, "messages", **output_overrides(req, setup))
        sp = with_tool_constraint(sp, req.tools)
        gen = Generation(served.engine, f"msg_{uuid.uuid4().hex[:24]}", owner, deadline, gone, st.cancels)
        g.log_fields["id"] = gen.response_id
        gen.start([(ids, text)], [sp])
    except BaseException:
        ticket.release()
        raise
    return MessagesRun(st, served, req, gen, ticket, "chat", [""], None, setup, input_tokens=len(ids)).respond()


@bp.post("/v1/messages/count_tokens")
def count_tokens():
    _, req, prefill = _read("AnthropicCountTokensRequest")
    served = state().registry.get(req.model)
    text, _ = _prompt(req, served, prefill)
    return jsonify({"input_tokens": len(served.engine.tokenizer.encode(text))})


# ---- errors in Anthropic's shape ----------------------------------------------------------------
def is_anthropic_path(path: str) -> bool:
    """Whether an error on `path` answers in Anthropic's shape (also for a 405 or 404 that Flask
    raises before any route of this blueprint is chosen)."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


@bp.errorhandler(APIError)
def api_error(err: APIError) -> Response:
    f = g.get("log_fields")
    if f is not None and not f.get("reported") and err.status != 499:
        state().metrics.on_request_done(f.get("model"), None, err.status, None, time.monotonic() - f["t0"], [])
    resp = Response(json.dumps(error_body(err.status, err.message), ensure_ascii=False), status=err.status,
                    mimetype="application/json")
    for k, v in err.headers.items():
        resp.headers[k] = v
    return resp


@bp.errorhandler(HTTPException)
def _http_error(e: HTTPException) -> Response:
    return api_error(APIError(e.code or 500, e.description or "HTTP error"))


@bp.errorhandler(Exception)
def _internal(e: Exception) -> Response:
    from flask import request

    log.exception("internal error on %s %s", request.method, escape_controls(request.path))
    return api_error(APIError(500, f"internal error: {type(e).__name__}"))
