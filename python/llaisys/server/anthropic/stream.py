"""The answer of POST /v1/messages: Anthropic's message, or its stream of events.

One builder (``Blocks``) turns the chat output's pieces (``chat_output.ChoiceDelta``) into
content blocks in the order the model writes them: a ``thinking`` block (reasoning models),
a ``text`` block, ``tool_use`` blocks. Each change it makes is also the stream event that
makes it, so the streamed events add up to the non-streamed message by construction:

    message_start (stop_reason null, usage {input_tokens, output_tokens: 0}), ping,
    per block: content_block_start, content_block_delta (text_delta | thinking_delta |
    input_json_delta), content_block_stop (when the next block starts or the answer ends),
    message_delta {stop_reason, stop_sequence, usage {output_tokens}}, message_stop.

A failure after the stream began is one ``event: error`` in Anthropic's error shape, and
the stream ends there.
"""

from __future__ import annotations

import json
from typing import Optional

from flask import Response, jsonify

from ..protocol.errors import APIError
from ..openai.respond import SSE_HEADERS, Run, guard_stream

# status -> Anthropic's error type (4xx not listed: invalid_request_error; 5xx: api_error)
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}


def error_body(status: int, message: str) -> dict:
    """{"type": "error", "error": {"type", "message"}}: Anthropic's error shape."""
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def event(kind: str, **fields) -> bytes:
    data = json.dumps({"type": kind, **fields}, ensure_ascii=False)
    return f"event: {kind}\ndata: ".encode() + data.encode("utf-8") + b"\n\n"


def tool_use_id(call_id: str) -> str:
    """The tool_use id of a parsed call (call_<hex> -> toolu_<hex>)."""
    return "toolu_" + call_id.split("_", 1)[-1]


class Blocks:
    """Content blocks built from ChoiceDeltas (see the module doc); feed() and close() return
    the (event type, fields) of each change."""

    def __init__(self):
        self.blocks: list = []  # content blocks so far, in order (a tool_use's input is set when it closes)
        self.open = None  # the open block: "thinking" | "text" | ("tool", call index) | None
        self.args = ""  # the open tool_use block's input JSON text so far

    def _start(self, key, block: dict) -> list:
        evs = self.close()
        self.open, self.args = key, ""
        self.blocks.append(block)
        evs.append(("content_block_start", {"index": len(self.blocks) - 1, "content_block": dict(block)}))
        return evs

    def _delta(self, delta: dict) -> tuple:
        return "content_block_delta", {"index": len(self.blocks) - 1, "delta": delta}

    def close(self) -> list:
        """Close the open block (its content_block_stop); [] when none is open."""
        if self.open is None:
            return []
        if self.open not in ("thinking", "text"):  # the parser hands over a complete JSON object
            self.blocks[-1]["input"] = json.loads(self.args) if self.args.strip() else {}
        self.open = None
        return [("content_block_stop", {"index": len(self.blocks) - 1})]

    def feed(self, d) -> list:
        evs = []
        if d.reasoning:
            if self.open != "thinking":
                evs += self._start("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            self.blocks[-1]["thinking"] += d.reasoning
            evs.append(self._delta({"type": "thinking_delta", "thinking": d.reasoning}))
        if d.content:
            if self.open != "text":
                evs += self._start("text", {"type": "text", "text": ""})
            self.blocks[-1]["text"] += d.content
            evs.append(self._delta({"type": "text_delta", "text": d.content}))
        started = {c.index: c for c in d.started}
        order = [(c.index, 0, None) for c in d.started] + [(index, 1, piece) for index, piece in d.arguments]
        for index, is_piece, piece in sorted(order, key=lambda e: e[:2]):  # a call's start, then its pieces
            if not is_piece:
                c = started[index]
                evs += self._start(("tool", index), {"type": "tool_use", "id": tool_use_id(c.id), "name": c.name,
                                                     "input": {}})
            elif self.open == ("tool", index):
                self.args += piece
                evs.append(self._delta({"type": "input_json_delta", "partial_json": piece}))
        return evs


class MessagesRun(Run):
    """Answers /v1/messages from the same Generation and ChoiceOutput a chat answer uses."""

    def __init__(self, *args, input_tokens: int, **kw):
        super().__init__(*args, **kw)
        self.input_tokens = input_tokens  # the prompt's tokens (usage.input_tokens, count_tokens' figure)
        self.blocks = Blocks()

    def _stop(self) -> tuple:
        """(stop_reason, stop_sequence) of the finished answer."""
        co = self.outputs.get(0)
        c = co.engine_output if co is not None else None
        reason = co.finish_reason(self._reported_reason(c)) if c is not None else None
        if reason == "tool_calls":
            return "tool_use", None
        if reason == "length":
            return "max_tokens", None
        if co is not None and co.stop.matched:  # matched here (a reasoning model's answer)
            return "stop_sequence", co.stop.matched_stop
        if c is not None and isinstance(c.stop_reason, str):  # matched by the engine
            return "stop_sequence", c.stop_reason
        return "end_turn", None  # the end of the turn, or an explicit cancel

    def _output_tokens(self) -> int:
        if self.gen.finals:
            return self.gen.finals[0].usage.completion_tokens
        co = self.outputs.get(0)
        return len(co.engine_output.token_ids) if co is not None and co.engine_output is not None else 0

    def message(self, content: list, stop: tuple, output_tokens: int) -> dict:
        return {"id": self.gen.response_id, "type": "message", "role": "assistant", "model": self.served.name,
                "content": content, "stop_reason": stop[0], "stop_sequence": stop[1],
                "usage": {"input_tokens": self.input_tokens, "output_tokens": output_tokens}}

    def respond(self) -> Response:
        if self.req.stream:
            return Response(self._events(), mimetype="text/event-stream", headers=SSE_HEADERS)
        for i, out in self._read():
            for _, _, d, _ in self._absorb(i, out):
                self.blocks.feed(d)
        self.blocks.close()
        body = self.message(self.blocks.blocks, self._stop(), self._output_tokens())
        self.finish(200)
        return jsonify(body)

    def _events(self):
        return guard_stream(self._frames(), self.finish,
                            lambda e: [event("error", error=error_body(e.status, e.message)["error"])],
                            self.gen.response_id)

    def _frames(self):
        yield event("message_start", message=self.message([], (None, None), 0))
        yield event("ping")
        for i, out in self.gen.events():
            for _, _, d, _ in self._absorb(i, out):
                for kind, fields in self.blocks.feed(d):
                    yield event(kind, **fields)
        err: Optional[APIError] = self.gen.failure()
        if err is not None:
            yield event("error", error=error_body(err.status, err.message)["error"])
            return err.status
        for kind, fields in self.blocks.close():
            yield event(kind, **fields)
        stop = self._stop()
        yield event("message_delta", delta={"stop_reason": stop[0], "stop_sequence": stop[1]},
                    usage={"output_tokens": self._output_tokens()})
        yield event("message_stop")
        return 200
