"""A started Generation turned into the HTTP answer: one JSON body, or an SSE stream.

Both read the same events; the stream sends each output as it comes (the first chunk of
a chat stream carries the role, a choice's last chunk its finish_reason, an optional usage
chunk with ``choices: []`` precedes ``data: [DONE]``); the JSON body is what the stream
would add up to. finish() runs exactly once whichever way the answer ends, and releases
everything the request held: engine requests, admission slot, session turn, and reports
metrics, the token charge and the request's log line.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Iterator, Optional

from flask import Response, g, jsonify

from ..protocol.errors import APIError
from ..state.limits import ClientGone
from .chat_output import ChatSetup, delta_bodies
from .bodies import TokenText, chat_logprobs, completion_logprobs, envelope, sum_usage

log = logging.getLogger("llaisys.server")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n\n"


def guard_stream(body, finish, fault, response_id) -> Iterator[bytes]:
    """A streamed response's frames, ended the same way for every API. `body` is a generator of
    frames that returns the HTTP status the request ends with (200, or its generation's failure);
    a client gone ends it as 499, and a fault of ours mid-stream is logged and told to the client
    through `fault(APIError)`, which yields the API's own error frames, as 500. finish(status)
    runs once in every case."""
    status = 500
    try:
        status = yield from body
    except ClientGone:
        status = 499
    except GeneratorExit:  # the server could not write: the client went away
        status = 499
        raise
    except Exception as e:  # noqa: BLE001  (a fault of ours mid-stream: say so, then end)
        log.exception("stream %s failed", response_id)
        status = 500
        yield from fault(APIError(500, f"internal error: {type(e).__name__}", code="internal_error"))
    finally:
        finish(status)


def read_events(gen, finish):
    """`gen`'s (prompt index, output) events to its end; a client gone, an exception or the
    generation's own failure calls finish(499 | 500 | its status) and is raised."""
    try:
        yield from gen.events()
    except ClientGone:
        finish(499)
        raise
    except BaseException:
        finish(500)
        raise
    err = gen.failure()
    if err is not None:
        finish(err.status)
        raise err


class Run:
    """Answers one chat ("chat") or completion ("text") request from its Generation."""

    def __init__(self, state, served, req, gen, ticket, kind: str, prompt_texts: list, session=None, chat=None):
        self.state = state  # the app's ServerState
        self.served = served  # registry.ServedModel
        self.req = req  # protocol.ChatRequest / CompletionRequest
        self.gen = gen  # generation.Generation, started
        self.ticket = ticket  # limits.Ticket
        self.kind = kind
        self.prompt_texts = prompt_texts  # echo text per prompt ("" unless echo)
        self.session = session  # (session id, owner) of a session turn, or None
        self.chat = chat if chat is not None else (ChatSetup() if kind == "chat" else None)  # chat_output.ChatSetup
        self.outputs: dict = {}  # chat: choice index -> ChoiceOutput
        self.created = int(time.time())
        self.n = req.sampling.get("n", 1)
        self.text_of = TokenText(served.engine.tokenizer)
        self.texts: dict = {}  # choice index -> text streamed so far
        self.done: set = set()  # choice indices whose finish_reason was sent
        self.log_fields = g.log_fields  # the request's log record (flask.g is gone once streaming)
        self.log_fields["deferred"] = req.stream  # a stream logs when it ends, not when the view returns
        self._finished = False

    # ---- shared ----------------------------------------------------------------------------
    def respond(self) -> Response:
        if self.req.stream:
            return Response(self._stream(), mimetype="text/event-stream", headers=SSE_HEADERS)
        return self._json()

    def finish(self, status: int) -> None:
        if self._finished:
            return
        self._finished = True
        self.gen.close()
        self.ticket.release()
        finals = [self.gen.finals[i] for i in sorted(self.gen.finals)]
        usage = sum_usage([o.usage for o in finals]) if finals else None
        if self.session is not None:
            self.state.sessions.end_turn(*self.session, self.reply(status))
        if usage is not None:
            self.state.admission.charge(self.gen.owner, usage.total_tokens)
        ttft = None if self.gen.first_token_at is None else self.gen.first_token_at - self.log_fields["t0"]
        self.state.metrics.on_request_done(self.served.name, finals[0] if finals else None, status, ttft,
                                           time.monotonic() - self.log_fields["t0"], self.gen.itl)
        f = self.log_fields
        f.update(status=status, reported=True, ttft=ttft)
        if usage is not None:
            f.update(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                     cached_tokens=usage.cached_tokens)
        f["finish"] = ",".join(sorted({c.finish_reason or "none" for o in finals for c in o.outputs})) or None
        self.state.log_request(f)

    def reply(self, status: int) -> Optional[dict]:
        """The assistant message a session keeps (None: the turn failed or was aborted)."""
        co = self.outputs.get(0)
        if status != 200 or co is None or co.finish_reason(self._reported_reason(co.engine_output)) not in \
                ("stop", "length", "tool_calls"):
            return None
        msg = {k: v for k, v in co.message().items() if k != "reasoning_content"}
        if msg["content"] is None and not msg.get("tool_calls"):
            msg["content"] = ""
        return msg

    def _choice_index(self, prompt_index: int, c) -> int:
        return prompt_index * self.n + c.index

    def _logprobs(self, c, token_ids: list, prompt_offset: int = 0):
        if self.req.logprobs is None or not token_ids:
            return None
        entries = c.logprobs[len(c.logprobs) - len(token_ids):] if c.logprobs else [{}] * len(token_ids)
        if self.kind == "chat":
            return chat_logprobs(token_ids, entries, self.req.logprobs, self.text_of)
        return completion_logprobs(token_ids, entries, self.req.logprobs, self.text_of, prompt_offset)

    def _reported_reason(self, c) -> Optional[str]:
        """The finish_reason a client sees: stop/length, and abort only for an explicit cancel
        (other aborts and errors are answered as errors)."""
        if c.finish_reason in ("stop", "length"):
            return c.finish_reason
        if c.finish_reason == "abort" and self.gen.abort_cause == "cancel":
            return "abort"
        return None

    def _absorb(self, prompt_index: int, out) -> list:
        """Chat: feed one engine output to its choices; [(choice index, engine choice, ChoiceDelta,
        finish_reason or None)] for the choices still open. Once every choice has ended here (a
        stop string in the answer, the one call parallel_tool_calls=false allows), the engine
        request is aborted: nothing more of it will be read."""
        got = []
        for c in out.outputs:
            idx = self._choice_index(prompt_index, c)
            if idx in self.done:
                continue
            co = self.outputs.get(idx)
            if co is None:
                co = self.outputs[idx] = self.chat.new_output()
            final = c.finish_reason is not None
            d = co.feed(c.delta_text, final=final, num_tokens=len(c.token_ids))
            co.engine_output = c
            reason = co.finish_reason(self._reported_reason(c)) if (final or co.stopped) else None
            if final or co.stopped:
                self.done.add(idx)
            got.append((idx, c, d, reason))
        n_choices = len(self.prompt_texts) * self.n
        if len(self.done) == n_choices and any(co.stopped for co in self.outputs.values()) and not self.gen.finished:
            self.gen.abort("stop")
        return got

    # ---- JSON ------------------------------------------------------------------------------
    def _read(self):
        """The generation's (prompt index, output) events to its end; a client gone, an
        exception or the generation's own failure finishes the run (499, 500, its status)
        and is raised."""
        yield from read_events(self.gen, self.finish)

    def _json(self) -> Response:
        for i, out in self._read():
            if self.kind == "chat":
                self._absorb(i, out)
        choices = []
        for i in sorted(self.gen.finals):
            for c in self.gen.finals[i].outputs:
                reason = self._reported_reason(c)
                if self.kind == "chat":
                    idx = self._choice_index(i, c)
                    co = self.outputs[idx]
                    choices.append({"index": idx, "message": co.message(),
                                    "logprobs": self._logprobs(c, c.token_ids),
                                    "finish_reason": co.finish_reason(reason)})
                else:
                    echo = self.prompt_texts[i]
                    choices.append({"index": self._choice_index(i, c), "text": echo + c.text,
                                    "logprobs": self._logprobs(c, c.token_ids, len(echo)), "finish_reason": reason})
        choices.sort(key=lambda ch: ch["index"])
        usage = sum_usage([o.usage for o in self.gen.finals.values()])
        body = envelope(self.kind, self.gen.response_id, self.created, self.served.name, choices, usage)
        self.finish(200)
        return jsonify(body)

    # ---- SSE -------------------------------------------------------------------------------
    def _chunk(self, choices: list, usage=None) -> bytes:
        return sse(envelope(self.kind, self.gen.response_id, self.created, self.served.name, choices, usage,
                            chunk=True, include_usage=self.req.include_usage))

    def _first_chunks(self) -> Iterator[bytes]:
        for i in range(len(self.prompt_texts)):
            for k in range(self.n):
                idx = i * self.n + k
                if self.kind == "chat":
                    choice = {"index": idx, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None}
                elif self.prompt_texts[i]:
                    choice = {"index": idx, "text": self.prompt_texts[i], "logprobs": None, "finish_reason": None}
                else:
                    continue
                self.texts[idx] = "" if self.kind == "chat" else self.prompt_texts[i]
                yield self._chunk([choice])

    def _chat_chunks(self, prompt_index: int, out) -> Iterator[bytes]:
        for idx, c, d, reason in self._absorb(prompt_index, out):
            lp = self._logprobs(c, c.delta_token_ids)
            bodies = delta_bodies(d)
            if not bodies and (lp or reason):
                bodies = [{}]
            for k, delta in enumerate(bodies):
                last = k == len(bodies) - 1
                yield self._chunk([{"index": idx, "delta": delta, "logprobs": lp if k == 0 else None,
                                    "finish_reason": reason if last else None}])

    def _output_chunks(self, prompt_index: int, out) -> Iterator[bytes]:
        if self.kind == "chat":
            yield from self._chat_chunks(prompt_index, out)
            return
        for c in out.outputs:
            idx = self._choice_index(prompt_index, c)
            if idx in self.done:
                continue
            sent = self.texts.setdefault(idx, "")
            lp = self._logprobs(c, c.delta_token_ids, len(sent))
            reason = self._reported_reason(c)
            if not (c.delta_text or lp or reason):
                continue
            self.texts[idx] = sent + c.delta_text
            choice = {"index": idx, "text": c.delta_text, "logprobs": lp, "finish_reason": reason}
            if reason is not None:
                self.done.add(idx)
            yield self._chunk([choice])

    def _stream(self) -> Iterator[bytes]:
        return guard_stream(self._frames(), self.finish, lambda e: [sse(e.body()), b"data: [DONE]\n\n"],
                            self.gen.response_id)

    def _frames(self):
        status = 200
        yield from self._first_chunks()
        for i, out in self.gen.events():
            yield from self._output_chunks(i, out)
        err = self.gen.failure()
        if err is not None:
            status = err.status
            yield sse(err.body())
        elif self.req.include_usage:
            yield self._chunk([], sum_usage([o.usage for o in self.gen.finals.values()]))
        yield b"data: [DONE]\n\n"
        return status
