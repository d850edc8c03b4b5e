"""A started /infill Generation answered as llama-server answers: one JSON result (an array of
them for n_cmpl > 1), or server-sent events, each ``data: <JSON>``: pieces ``{index, content,
tokens, stop: false, ...}`` then each completion's final result with ``stop: true``, ``content``
'' and its timings; no ``[DONE]`` line (llama-server sends none outside its OpenAI routes).

The editor's limits are applied here, on the text as it comes:
- ``n_indent``: the middle ends (``stop_type`` "limit") where a line after the first is
  indented less than n_indent, cut after that line's indentation (llama-server's rule; a
  blank line counts as indented 0). A stream holds back a line that is only indentation
  until it is decided.
- ``t_max_predict_ms``: once that long has passed since the first token and the middle has a
  new line, generation stops (``stop_type`` "limit").
- ``t_max_prompt_ms``: when no token has come that long after the request was handed to the
  engine (after admission and tokenizing), the request is aborted and answered empty
  (``stop_type`` "limit"). The prompt's full KV blocks computed so far stay in the prefix
  cache, so the next request resumes from them. Checked between engine steps: a prefill chunk
  already running finishes first. Ignored when n_predict is 0 (a cache warm-up, whose point
  is processing the prompt).

finish() runs once whichever way the answer ends and releases the engine request, the
admission slot, and reports metrics, the token charge and the log line (as respond.Run).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Iterator, Optional

from flask import Response, g, jsonify

from ..openai.respond import guard_stream, read_events

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def indent_cut(text: str, n_indent: int) -> tuple:
    """(text, cut): `text` ended after the indentation of its first line (after the first)
    indented less than n_indent, and whether it was cut."""
    nl = text.find("\n")
    while nl != -1:
        start = j = nl + 1
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and j - start < n_indent:
            return text[:j], True
        nl = text.find("\n", start)
    return text, False


def held_back(text: str) -> str:
    """The part of a running middle that is decided under n_indent: without a last line that
    is only indentation so far."""
    nl = text.rfind("\n")
    return text[:nl + 1] if nl != -1 and not text[nl + 1:].strip(" \t") else text


def pick_fields(obj: dict, paths: list) -> dict:
    """llama-server's response_fields: {path: value} for each path found ('a/b' reads obj['a']['b'])."""
    out = {}
    for path in paths:
        cur, found = obj, True
        for part in path.split("/"):
            if isinstance(cur, dict) and part in cur:
                cur = cur[part]
            else:
                found = False
                break
        if found:
            out[path] = cur
    return out


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


class _Middle:
    """One completion's state as the server reads it."""

    def __init__(self, index: int):
        self.index = index
        self.text = ""  # the middle so far, after the editor's limits
        self.token_ids: list = []
        self.sent = 0  # characters of text already streamed
        self.done = False  # ended (by the engine or by a limit here)
        self.limited = False  # ended by n_indent, t_max_predict_ms or t_max_prompt_ms
        self.output = None  # the engine's latest CompletionOutput


class InfillRun:
    """Answers one /infill request from its started Generation."""

    def __init__(self, state, served, req, gen, ticket, prompt, t_start: float):
        self.state = state  # the app's ServerState
        self.served = served  # registry.ServedModel
        self.req = req  # infill.InfillRequest
        self.gen = gen  # generation.Generation, started
        self.ticket = ticket  # limits.Ticket
        self.prompt = prompt  # models.fim.FimPrompt
        self.t_start = t_start
        self.middles = [_Middle(i) for i in range(req.sampling.get("n", 1))]
        self.prompt_limited = False  # t_max_prompt_ms fired before the first token
        self.log_fields = g.log_fields
        self.log_fields["deferred"] = req.stream
        self._finished = False
        self._timer: Optional[threading.Timer] = None
        if req.t_max_prompt_ms > 0 and req.n_predict != 0:
            self._timer = threading.Timer(req.t_max_prompt_ms / 1000.0, self._prompt_limit)
            self._timer.daemon = True
            self._timer.start()

    def _prompt_limit(self) -> None:
        if self.gen.first_token_at is None and not self.gen.finished:
            self.prompt_limited = True
            self.gen.abort("stop")

    # ---- reading ---------------------------------------------------------------------------
    def _absorb(self, out) -> list:
        """Feed one engine output; the middles it changed."""
        now = time.monotonic()
        changed = []
        for c in out.outputs:
            m = self.middles[c.index]
            if m.done:
                continue
            m.output = c
            text, cut = c.text, False
            if self.req.n_indent > 0:
                text, cut = indent_cut(text, self.req.n_indent)
            late = (self.req.t_max_predict_ms > 0 and self.gen.first_token_at is not None and "\n" in text
                    and now - self.gen.first_token_at > self.req.t_max_predict_ms / 1000.0)
            m.text, m.token_ids = text, list(c.token_ids)
            if cut or late or c.finish_reason is not None:
                m.done = True
                m.limited = cut or late or (c.finish_reason == "abort" and self.prompt_limited)
            if self.prompt_limited and c.finish_reason == "abort" and not (cut or late):
                m.text, m.token_ids = "", []  # past t_max_prompt_ms: answered empty, whatever came with the abort
            changed.append(m)
        if all(m.done for m in self.middles) and not self.gen.finished:
            self.gen.abort("stop")  # every middle ended here: nothing more of the engine request is read
        return changed

    def _events(self) -> Iterator:
        for _, out in read_events(self.gen, self.finish):
            yield out

    # ---- results ---------------------------------------------------------------------------
    def _timings(self) -> dict:
        final = self.gen.finals.get(0)
        usage = final.usage if final is not None else None
        times = final.metrics if final is not None else None
        cached = usage.cached_tokens if usage is not None else 0
        n_prompt = len(self.prompt.token_ids)
        prompt_ms = predicted_ms = 0.0
        if times is not None and times.first_token is not None:
            prompt_ms = (times.first_token - (times.first_scheduled or times.arrival)) * 1000.0
            predicted_ms = ((times.last_token or times.first_token) - times.first_token) * 1000.0
        n_pred = 0 if self.req.n_predict == 0 else len(self.middles[0].token_ids)
        prompt_n = max(0, n_prompt - cached)

        def per(ms, n):
            return (ms / n if n else 0.0), (1000.0 * n / ms if ms > 0 else 0.0)

        p_tok, p_sec = per(prompt_ms, prompt_n)
        d_tok, d_sec = per(predicted_ms, n_pred)
        return {"cache_n": cached, "prompt_n": prompt_n, "prompt_ms": prompt_ms, "prompt_per_token_ms": p_tok,
                "prompt_per_second": p_sec, "predicted_n": n_pred, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": d_tok, "predicted_per_second": d_sec}

    def _stop_type(self, m: _Middle) -> tuple:
        """(stop_type, stopping_word) as llama-server reports them."""
        c = m.output
        if m.limited or self.req.n_predict == 0 or (c is not None and c.finish_reason == "length"):
            return "limit", ""
        if c is not None and c.finish_reason == "stop":
            return ("word", c.stop_reason) if isinstance(c.stop_reason, str) else ("eos", "")
        return "none", ""

    def _result(self, m: _Middle, content: str) -> dict:
        warm = self.req.n_predict == 0  # the one token sampled to run the prompt is not an answer
        ids = [] if warm else m.token_ids
        stop_type, word = self._stop_type(m)
        final = self.gen.finals.get(0)
        cached = final.usage.cached_tokens if final is not None else 0
        sp = self.req.sampling
        return {
            "index": m.index, "content": "" if warm else content, "tokens": ids if self.req.return_tokens else [],
            "id_slot": -1, "stop": True, "model": self.served.name, "tokens_predicted": len(ids),
            "tokens_evaluated": len(self.prompt.token_ids), "tokens_cached": cached,
            "prompt": self._prompt_text(), "has_new_line": "\n" in m.text, "truncated": self.prompt.truncated,
            "stop_type": stop_type, "stopping_word": word,
            "generation_settings": {"n_predict": -1 if self.req.n_predict is None else self.req.n_predict,
                                    "temperature": sp.get("temperature"), "top_k": sp.get("top_k"),
                                    "top_p": sp.get("top_p"), "min_p": sp.get("min_p"),
                                    "n_indent": self.req.n_indent, "t_max_predict_ms": self.req.t_max_predict_ms,
                                    "t_max_prompt_ms": self.req.t_max_prompt_ms, "stop": sp.get("stop", []),
                                    "n_extra_chunks": self.prompt.n_chunks},
            "timings": self._timings(),
        }

    def _prompt_text(self) -> str:
        try:
            return self.served.engine.tokenizer.decode(self.prompt.token_ids)
        except ValueError:
            return ""

    # ---- answers ---------------------------------------------------------------------------
    def respond(self) -> Response:
        if self.req.stream:
            return Response(self._stream(), mimetype="text/event-stream", headers=SSE_HEADERS)
        return self._json()

    def _json(self) -> Response:
        for out in self._events():
            self._absorb(out)
        results = [self._result(m, m.text) for m in self.middles]
        if self.req.response_fields is not None:
            results = [pick_fields(r, self.req.response_fields) for r in results]
        self.finish(200)
        return jsonify(results[0] if len(results) == 1 else results)

    def _piece(self, m: _Middle) -> Optional[bytes]:
        safe = m.text if (m.done or self.req.n_indent <= 0) else held_back(m.text)
        if len(safe) <= m.sent:
            return None
        delta, m.sent = safe[m.sent:], len(safe)
        return _sse({"index": m.index, "content": delta, "tokens": [], "stop": False, "id_slot": -1,
                     "tokens_predicted": len(m.token_ids), "tokens_evaluated": len(self.prompt.token_ids)})

    def _stream(self) -> Iterator[bytes]:
        return guard_stream(self._frames(), self.finish, lambda e: [_sse(e.body())], self.gen.response_id)

    def _frames(self):
        for _, out in self.gen.events():
            for m in self._absorb(out):
                if self.req.n_predict != 0:
                    piece = self._piece(m)
                    if piece is not None:
                        yield piece
        err = self.gen.failure()
        if err is not None:
            yield _sse(err.body())
            return err.status
        for m in self.middles:
            yield _sse(self._result(m, ""))
        return 200

    def finish(self, status: int) -> None:
        if self._finished:
            return
        self._finished = True
        if self._timer is not None:
            self._timer.cancel()
        self.gen.close()
        self.ticket.release()
        final = self.gen.finals.get(0)
        if final is not None:
            self.state.admission.charge(self.gen.owner, final.usage.total_tokens)
        ttft = None if self.gen.first_token_at is None else self.gen.first_token_at - self.log_fields["t0"]
        self.state.metrics.on_request_done(self.served.name, final, status, ttft,
                                           time.monotonic() - self.log_fields["t0"], self.gen.itl)
        f = self.log_fields
        f.update(status=status, reported=True, ttft=ttft)
        if final is not None:
            f.update(prompt_tokens=final.usage.prompt_tokens, completion_tokens=final.usage.completion_tokens,
                     cached_tokens=final.usage.cached_tokens)
            f["finish"] = ",".join(sorted({self._stop_type(m)[0] for m in self.middles}))
        self.state.log_request(f)
