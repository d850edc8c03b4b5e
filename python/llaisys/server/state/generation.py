"""One HTTP request's run on the engine: its engine requests (one per prompt), read as one
ordered sequence of outputs, with its deadline, its client and explicit cancels watched.

Streaming and non-streaming responses both read a Generation (one path: a non-streaming
response is the collected stream). close() aborts whatever has not finished, so every way
out (the client going away mid-stream, an exception, a timeout) frees the KV blocks.
"""

from __future__ import annotations

import queue
import select
import socket
import threading
import time
from typing import Callable, Iterator, Optional

from ...engine.async_engine import EngineDeadError
from ...engine.sampling_params import SamplingParamsError
from ...engine.structured_spec import StructuredOutputError
from ..protocol.errors import APIError, bad_request, unavailable

POLL_S = 0.25  # how often a waiting reader checks its client, deadline and cancel flag


def client_gone_check(environ: dict) -> Callable[[], bool]:
    """A function telling whether the client closed its connection (werkzeug's server hands
    the socket over; an orderly close makes it readable with zero bytes)."""
    sock = environ.get("werkzeug.socket")

    def gone() -> bool:
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):  # reset, or already closed
            return True

    return gone


class CancelRegistry:
    """Response id -> the running Generation and its owner, for POST /v1/requests/<id>/cancel."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: dict = {}

    def add(self, gen: "Generation") -> None:
        with self._lock:
            self._running[gen.response_id] = gen

    def remove(self, gen: "Generation") -> None:
        with self._lock:
            if self._running.get(gen.response_id) is gen:
                del self._running[gen.response_id]

    def cancel(self, response_id: str, owner: str) -> bool:
        """Abort the owner's request; False if none runs under that id for that owner."""
        with self._lock:
            gen = self._running.get(response_id)
        if gen is None or gen.owner != owner:
            return False
        gen.abort("cancel")
        return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._running)


class Generation:
    """The engine requests of one HTTP request; iterate events() for (prompt index, output)."""

    def __init__(self, engine, response_id: str, owner: str, deadline: float,
                 client_gone: Callable[[], bool] = lambda: False, cancels: Optional[CancelRegistry] = None):
        self.engine = engine  # AsyncEngine
        self.response_id = response_id  # "chatcmpl-..." / "cmpl-..."; engine ids add "-<prompt index>"
        self.owner = owner
        self.deadline = deadline  # time.monotonic() after which the request is aborted
        self.client_gone = client_gone
        self.cancels = cancels
        self.abort_cause: Optional[str] = None  # "cancel" | "stop" | "timeout" | "disconnect" | "closed" once aborted
        self.finals: dict = {}  # prompt index -> final RequestOutput
        self.first_token_at: Optional[float] = None  # monotonic time of the first output token
        self.itl: list = []  # seconds between consecutive outputs that brought tokens
        self._last_token_at: Optional[float] = None
        self._streams: list = []
        self._queue: queue.SimpleQueue = queue.SimpleQueue()  # (prompt index, RequestOutput): the streams' sink

    def start(self, prompts: list, params: list) -> None:
        """Add one engine request per (token ids, text) prompt; a bad one fails them all (400),
        a dead or closing engine is a 503. The engine checks every prompt (vocabulary,
        context, seed, ...) before it queues any (AsyncEngine.add_requests: the one admission
        pass), so a request refused there never reaches a step; their outputs come into this
        Generation's one queue (the engine's sink), read by events()."""
        entries = [(self.response_id if len(prompts) == 1 else f"{self.response_id}-{i}", ids, sp, text)
                   for i, ((ids, text), sp) in enumerate(zip(prompts, params))]
        try:
            self._streams = list(self.engine.add_requests(entries, sink=self._queue))
        except EngineDeadError as e:
            self.close()
            raise unavailable(str(e), code="engine_unavailable") from None
        except SamplingParamsError as e:
            self.close()
            raise bad_request(str(e), param=e.param) from None
        except StructuredOutputError as e:  # the constraint cannot be built for this tokenizer
            self.close()
            raise bad_request(str(e), param=e.param) from None
        except ValueError as e:  # ids out of vocabulary, too long for the KV pool
            self.close()
            raise bad_request(str(e), param="prompt") from None
        if self.cancels is not None:
            self.cancels.add(self)

    def abort(self, cause: str) -> None:
        if self.abort_cause is None:
            self.abort_cause = cause
        for s in self._streams:
            s.abort()

    def events(self) -> Iterator[tuple]:
        """(prompt index, RequestOutput) as they come, until every prompt's final output.
        Aborts on the deadline, on a cancel and when the client leaves (then raises ClientGone:
        nobody is left to answer)."""
        from .limits import ClientGone

        remaining = len(self._streams)
        next_check = time.monotonic() + POLL_S
        while remaining:
            try:
                index, out = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                index, out = None, None
            # The client and the deadline are checked every POLL_S whether or not outputs
            # arrive: a fast engine yields a token more often than that, and the deadline
            # must still end a request that never pauses.
            now = time.monotonic()
            if out is None or now >= next_check:
                next_check = now + POLL_S
                if self.client_gone():
                    self.abort("disconnect")
                    raise ClientGone()
                if self.abort_cause is None and now >= self.deadline:
                    self.abort("timeout")
            if out is None:
                continue
            if any(c.delta_token_ids for c in out.outputs):
                now = time.monotonic()
                if self.first_token_at is None:
                    self.first_token_at = now
                elif self._last_token_at is not None:
                    self.itl.append(now - self._last_token_at)
                self._last_token_at = now
            if out.finished:
                self.finals[index] = out
                remaining -= 1
            yield index, out

    @property
    def finished(self) -> bool:
        return len(self.finals) == len(self._streams)

    def close(self) -> None:
        """Abort what has not finished (the client is gone or the response failed) and forget
        the request; safe to call more than once."""
        if not self.finished and self._streams:
            self.abort("closed")
        if self.cancels is not None:
            self.cancels.remove(self)

    def failure(self) -> Optional[APIError]:
        """The error to answer once finished: an engine fault (500), the deadline (504) or a
        shutdown (503); None for a normal end or an explicit cancel."""
        failed = [o for o in self.finals.values() if any(c.finish_reason == "error" for c in o.outputs)]
        if failed:
            out = failed[0]
            if out.error_param is not None:  # the request's own constraint failed: its fault
                return bad_request(out.error, param=out.error_param)
            return APIError(500, f"generation failed: {out.error or 'internal error'}", code="engine_error")
        aborted = any(c.finish_reason == "abort" for o in self.finals.values() for c in o.outputs)
        if not aborted or self.abort_cause in ("cancel", "stop"):  # "stop": the server ended every choice
            return None
        if self.abort_cause == "timeout":
            return APIError(504, "the request ran past the server's request timeout and was aborted",
                            code="request_timeout")
        return unavailable("the request was aborted because the server is shutting down", code="shutting_down")
