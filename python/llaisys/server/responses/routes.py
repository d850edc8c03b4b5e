"""POST /v1/responses: the subset of OpenAI's Responses API that maps onto a chat request.

- ``input`` is a string (one user message) or input items: messages (``role`` user /
  assistant / system / developer, ``content`` a string or ``input_text`` / ``output_text``
  parts), ``function_call`` items (an earlier call of the model) and
  ``function_call_output`` items (its result); ``reasoning`` items are dropped (templates
  strip earlier reasoning anyway). ``instructions`` becomes a system message first; it is
  not carried to later responses, as OpenAI documents.
- ``previous_response_id`` continues a stored response: every stored response (``store``,
  default true) is a server-side session (state/sessions.py) keyed by its id, holding the
  conversation up to and including its answer, so the next turn's prompt starts with the
  same tokens and the prefix cache finds them. Another caller's id is a 404. Stored
  responses count against the caller's tenant quota and the per-session byte cap like any
  session (a conversation past it is 400 ``session_too_large``, checked before rendering).
- ``tools`` (function tools, flat shape), ``tool_choice``, ``parallel_tool_calls``,
  ``max_output_tokens``, ``temperature``, ``top_p``, ``seed``, ``user``.
- The answer's output items: a ``reasoning`` item (reasoning models, ``reasoning_text``
  content), a ``message`` with one ``output_text`` part, ``function_call`` items. A
  stream sends OpenAI's events (``response.created`` … ``response.completed``), each with
  its ``sequence_number``, as ``event: <type>`` / ``data: <json>`` pairs.
"""

from __future__ import annotations

import time
import uuid

from flask import Blueprint, Response, g, jsonify

from ..protocol.errors import APIError, bad_request, not_found, unavailable
from ..state.generation import Generation
from ..protocol.parse import check_body, get_field, parse_chat
from ..openai.respond import SSE_HEADERS, Run, guard_stream
from .events import EventWriter, response_object
from ..state.sessions import SessionStoreFull, SessionTooLarge

bp = Blueprint("responses", __name__)


def _new(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _text_of(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}.content must be a string or an array of text parts", param="input")
    out = []
    for k, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text", "text") \
                or not isinstance(part.get("text"), str):
            raise bad_request(f"{where}.content[{k}] must be an input_text part (this server takes text only)",
                              param="input")
        out.append(part["text"])
    return "".join(out)


def input_messages(raw) -> list:
    """Chat messages from `input` (see the module doc); 400 naming `input` otherwise."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    out: list = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message" and "role" in item:
            role = item["role"]
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(f"{where}.role must be user, assistant, system or developer, got {role!r}",
                                  param="input")
            out.append({"role": role, "content": _text_of(item.get("content"), where)})
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise bad_request(f"{where} (function_call) needs string call_id, name and arguments", param="input")
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(item.get("call_id"), str) or not isinstance(output, (str, list)):
                raise bad_request(f"{where} (function_call_output) needs a string call_id and output", param="input")
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text_of(output, where)})
        elif kind == "reasoning":
            continue
        else:
            raise bad_request(f"{where}.type {kind!r} is not supported (message, function_call, "
                              "function_call_output, reasoning)", param="input")
    if not out:
        raise bad_request("input holds no message", param="input")
    return out


_RENAMED = {"messages": "input", "max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens"}


def chat_body(body: dict, history: list) -> dict:
    """The chat request a (schema-checked) responses body stands for."""
    messages = list(history) + input_messages(body["input"])
    instructions = get_field(body, "instructions")
    if instructions is not None:
        messages = [{"role": "system", "content": instructions}] + messages
    chat = {"messages": messages, "stream": get_field(body, "stream", False)}
    for src, dst in (("model", "model"), ("temperature", "temperature"), ("top_p", "top_p"), ("seed", "seed"),
                     ("user", "user"), ("max_output_tokens", "max_tokens"), ("parallel_tool_calls",
                                                                           "parallel_tool_calls")):
        if body.get(src) is not None:
            chat[dst] = body[src]
    tools = get_field(body, "tools")
    if tools:
        chat["tools"] = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters",
                                                                             "strict") if t.get(k) is not None}}
                         for t in tools]
    choice = get_field(body, "tool_choice")
    if choice is not None:
        chat["tool_choice"] = choice if isinstance(choice, str) else {"type": "function",
                                                                      "function": {"name": choice["name"]}}
    return chat


class ResponsesRun(Run):
    """Answers /v1/responses from the same Generation and ChoiceOutput a chat answer uses."""

    def __init__(self, *args, body: dict, **kw):
        super().__init__(*args, **kw)
        self.body = body  # the responses request body (echoed in the response object)
        self.created = int(time.time())

    def _object(self, status: str) -> dict:
        co = self.outputs.get(0)
        usage = None
        if self.gen.finals:
            u = self.gen.finals[0].usage
            usage = {"input_tokens": u.prompt_tokens, "input_tokens_details": {"cached_tokens": u.cached_tokens},
                     "output_tokens": u.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                     "total_tokens": u.total_tokens}
        return response_object(self.gen.response_id, self.created, self.served.name, self.body, status, co, usage,
                               self.ids)

    def _status(self) -> str:
        co = self.outputs.get(0)
        reason = co.finish_reason(self._reported_reason(co.engine_output)) if co is not None else None
        return "incomplete" if reason == "length" else "completed"

    def respond(self) -> Response:
        self.ids = {}  # output item ids, fixed once made so the stream and the final object agree
        if self.req.stream:
            return Response(self._events(), mimetype="text/event-stream", headers=SSE_HEADERS)
        for i, out in self._read():
            self._absorb(i, out)
        body = self._object(self._status())
        self.finish(200)
        return jsonify(body)

    def _events(self):
        w = EventWriter(self.ids)
        return guard_stream(self._frames(w), self.finish,
                            lambda e: [w.event("error", code=e.code, message=e.message, param=e.param)],
                            self.gen.response_id)

    def _frames(self, w: EventWriter):
        yield w.event("response.created", response=self._object("in_progress"))
        yield w.event("response.in_progress", response=self._object("in_progress"))
        for i, out in self.gen.events():
            for _, _, d, _ in self._absorb(i, out):
                yield from w.delta(d)
        err = self.gen.failure()
        if err is not None:
            yield w.event("error", code=err.code, message=err.message, param=err.param)
            return err.status
        yield from w.close_item(self.outputs.get(0))
        final = self._object(self._status())
        yield w.event("response.completed" if final["status"] == "completed" else "response.incomplete",
                      response=final)
        return 200


@bp.post("/v1/responses")
def create_response():
    # openai.routes imports nothing of this module
    from ..openai.routes import _sampling, _start, chat_prompt, output_overrides, state
    from ..openai.tool_calls import with_tool_constraint

    st = state()
    body = check_body("ResponseRequest", st.read_json(), st.request_limits)
    owner = st.identity(get_field(body, "user"))
    history = []
    prev = get_field(body, "previous_response_id")
    if prev is not None:
        try:
            history = st.sessions.get(prev, owner)
        except KeyError:
            raise not_found(f"no stored response {prev!r}", code="response_not_found",
                            param="previous_response_id") from None
    try:
        req = parse_chat(chat_body(body, history), st.request_limits)
    except APIError as e:
        e.param = _RENAMED.get(e.param, e.param)
        raise
    served = st.registry.get(req.model)
    ticket, deadline, gone = _start(served, owner)
    rid = _new("resp")
    session = None
    try:
        if get_field(body, "store", True):  # kept as a session under the response's id once it succeeds
            conversation = req.messages if get_field(body, "instructions") is None else req.messages[1:]
            try:
                st.sessions.begin_turn(rid, owner, conversation, st.tenant(get_field(body, "user")))
            except SessionStoreFull as e:
                raise unavailable(str(e), code="sessions_full", retry_after=1) from None
            except SessionTooLarge as e:  # the conversation with previous_response_id's history
                raise bad_request(str(e).replace(f"session {rid!r}", "the stored response"), param="input",
                                  code="session_too_large") from None
            session = (rid, owner)
        text, setup = chat_prompt(req, served, req.messages)
        ids = served.engine.tokenizer.encode(text)
        sp = _sampling(req, len(ids), served, "input", **output_overrides(req, setup))
        sp = with_tool_constraint(sp, req.tools)
        gen = Generation(served.engine, rid, owner, deadline, gone, st.cancels)
        g.log_fields["id"] = rid
        gen.start([(ids, text)], [sp])
    except BaseException:
        ticket.release()
        if session is not None:
            st.sessions.end_turn(*session, None)
        raise
    return ResponsesRun(st, served, req, gen, ticket, "chat", [""], session, setup, body=body).respond()
