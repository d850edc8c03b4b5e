"""The HTTP server under the Flask app: werkzeug's threaded server, with slow clients bounded.

werkzeug's server gives every connection a thread and no read deadline, so a client that
trickles its request holds a thread for as long as it likes. Here:

- Header timeout: the request line and headers must arrive within ``header_timeout_s`` of
  the connection's start (a total, so a byte now and then does not extend it). Past it the
  connection is answered 408 if it had sent anything, else closed.
- Body timeout: while the app reads the body, a read that waits ``body_timeout_s`` with no
  byte arriving ends it: the app answers 408 (``request_timeout``) and the connection closes.
- Only reads are timed: the socket is blocking again whenever the server writes, so a long
  stream is never cut by these timeouts (``--request-timeout`` bounds generation).
- Per-address cap: at most ``max_per_client`` connections from one client address at once;
  a connection past it is answered 429 (``too_many_connections``) and closed at once, from
  the accepting thread, without a thread of its own. 0 means no cap.

werkzeug closes every connection after one response (no keep-alive), so one connection is
one request.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Optional

from werkzeug.exceptions import RequestTimeout
from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from ..protocol.errors import APIError

log = logging.getLogger("llaisys.server")


class BodyTimeout(RequestTimeout):
    """The body stalled while the app read it: a 408 (werkzeug's HTTPException, which its
    LimitedStream lets through, where an OSError would become a 400 "client disconnected")."""


@dataclass
class ConnectionLimits:
    """The slow-client limits (command-line options)."""

    header_timeout_s: float = 10.0  # request line + headers must arrive within this of the connection's start
    body_timeout_s: float = 30.0  # longest wait for the next body byte while the app reads the body
    max_per_client: int = 128  # connections at once from one client address; 0: no cap

    def __post_init__(self) -> None:
        if not self.header_timeout_s > 0 or not self.body_timeout_s > 0:
            raise ValueError("header_timeout_s and body_timeout_s must be > 0")
        if self.max_per_client < 0:
            raise ValueError(f"max_per_client must be >= 0, got {self.max_per_client}")


class _TimedReader(io.RawIOBase):
    """The connection's read side: each recv waits at most until `deadline` (header phase), or
    `idle_s` (body phase); the socket is blocking again afterwards, for the writes."""

    def __init__(self, sock: socket.socket, deadline: float, idle_s: float):
        self.sock = sock
        self.deadline: Optional[float] = deadline  # monotonic time the headers must be in by; None: body phase
        self.idle_s = idle_s  # body phase: longest wait for the next byte
        self.received = 0  # bytes read so far
        self.in_app = False  # the app is running (a body timeout is its 408, not a dropped connection)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.deadline is not None:
            wait = self.deadline - time.monotonic()
            if wait <= 0:
                raise TimeoutError("request headers not received in time")
        else:
            wait = self.idle_s
        self.sock.settimeout(wait)
        try:
            n = self.sock.recv_into(buf)
        except TimeoutError:
            if self.in_app:  # a 408 the app answers; elsewhere (werkzeug draining the body) a drop
                raise BodyTimeout(f"no request body byte received for {self.idle_s:g} s") from None
            raise
        finally:
            self.sock.settimeout(None)
        self.received += n
        return n


class TimedRequestHandler(WSGIRequestHandler):
    """werkzeug's handler with the header and body read timeouts of `server.conn_limits`."""

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader setup() made (the socket stays open)
        lim: ConnectionLimits = self.server.conn_limits
        self._reader = _TimedReader(self.connection, time.monotonic() + lim.header_timeout_s, lim.body_timeout_s)
        self.rfile = io.BufferedReader(self._reader)

    def make_environ(self) -> dict:
        environ = super().make_environ()
        environ["llaisys.reader"] = self._reader  # for _timed_app
        return environ

    def parse_request(self) -> bool:
        ok = super().parse_request()  # reads the headers
        self._reader.deadline = None  # from here on the app reads the body: idle timeout only
        return ok

    def log_error(self, format: str, *args) -> None:
        if format.startswith("Request timed out"):  # http.server's catch of a TimeoutError: only
            # reads are timed, and past the headers the app and werkzeug handle their own
            self._timed_out()
            return
        super().log_error(format, *args)

    def _timed_out(self) -> None:
        self.close_connection = True
        if self._reader.received:  # a client that sent nothing (yet) gets no answer it never asked for
            _send_quietly(self.connection, _plain_response(APIError(
                408, "the request headers did not arrive in time", code="request_timeout")))
        log.info("closed a connection from %s: request headers not received within %g s",
                 self.client_address[0], self.server.conn_limits.header_timeout_s)


class LimitedWSGIServer(ThreadedWSGIServer):
    """werkzeug's threaded server with `conn_limits`: timed reads and a per-address cap."""

    def __init__(self, host: str, port: int, app, conn_limits: ConnectionLimits):
        self.conn_limits = conn_limits
        self._per_client: dict = {}  # client address -> connections open (> 0 only)
        self._count_lock = threading.Lock()
        super().__init__(host, port, _timed_app(app), TimedRequestHandler)

    def process_request(self, request, client_address) -> None:
        addr = client_address[0] if isinstance(client_address, tuple) else str(client_address)
        cap = self.conn_limits.max_per_client
        with self._count_lock:
            n = self._per_client.get(addr, 0)
            if cap and n >= cap:
                refused = True
            else:
                refused = False
                self._per_client[addr] = n + 1
        if refused:
            _send_quietly(request, _plain_response(APIError(
                429, f"at most {cap} connections at once per client address", code="too_many_connections",
                headers={"Retry-After": "1"})))
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._release(addr)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(client_address[0] if isinstance(client_address, tuple) else str(client_address))

    def _release(self, addr: str) -> None:
        with self._count_lock:
            n = self._per_client.get(addr, 0) - 1
            if n > 0:
                self._per_client[addr] = n
            else:
                self._per_client.pop(addr, None)


def _timed_app(app):
    """`app`, marking its connection's reader as in the app while it runs (the body is read there)."""

    def wrapped(environ, start_response):
        reader = environ.get("llaisys.reader")
        if reader is None:
            return app(environ, start_response)
        reader.in_app = True
        try:
            return app(environ, start_response)
        finally:
            reader.in_app = False

    return wrapped


def _plain_response(err: APIError) -> bytes:
    """A whole HTTP response for `err`, written without the app (the connection then closes)."""
    from http import HTTPStatus

    body = err.json_bytes()
    head = f"HTTP/1.1 {err.status} {HTTPStatus(err.status).phrase}\r\nContent-Type: application/json\r\n" \
           f"Content-Length: {len(body)}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in err.headers.items()) + \
           "Connection: close\r\n\r\n"
    return head.encode("ascii") + body


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    """Best effort, never blocking: a client that does not read simply gets nothing."""
    try:
        sock.setblocking(False)
        sock.send(data)
    except OSError:
        pass
