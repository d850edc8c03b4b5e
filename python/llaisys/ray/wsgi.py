"""Serve a Starlette request (what a Ray Serve ingress receives) with a WSGI app (the Flask
app of ``llaisys serve``), streaming its response.

Each request runs the WSGI app on its own thread (a stream may wait minutes for tokens; a
shared executor of a few threads would starve). The response's chunks cross to the event
loop through an asyncio queue; an SSE response becomes a StreamingResponse, any other one is
collected and returned whole.

Client disconnect: the server's routes watch ``environ["werkzeug.socket"]`` for an orderly
close (generation.client_gone_check). Here that socket is one end of a socketpair whose
other end the bridge closes when Serve cancels the request (the client went away), so the
route code aborts the engine request exactly as it does under werkzeug's own server.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import sys
import threading

from .client import HTTP_CONTEXT, HTTPContext

log = logging.getLogger("llaisys.ray")

HOP_HEADERS = {"content-length", "transfer-encoding", "connection"}  # set by the HTTP server, not copied
MAX_HINT_BODY = 4 << 20  # bodies larger than this are not parsed for routing hints


def http_context(body: bytes, headers) -> HTTPContext:
    """Routing and retry hints of a request: `stream` and `session_id` of a JSON body (an
    unparsable body gets the defaults: the app answers it 400 anyway), or X-Session-Id."""
    ctx = HTTPContext(session=headers.get("x-session-id") or None)
    if body and len(body) <= MAX_HINT_BODY:
        try:
            obj = json.loads(body)
        except ValueError:
            return ctx
        if isinstance(obj, dict):
            ctx.streaming = obj.get("stream") is True
            sid = obj.get("session_id")
            if isinstance(sid, str) and sid:
                ctx.session = sid
    return ctx


def build_environ(request, body: bytes, sock: socket.socket) -> dict:
    """The WSGI environ of a Starlette request whose body has been read."""
    url = request.url
    client = request.client
    env = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": url.path,
        "QUERY_STRING": url.query or "",
        "SERVER_NAME": url.hostname or "localhost",
        "SERVER_PORT": str(url.port or (443 if url.scheme == "https" else 80)),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": client.host if client else "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": url.scheme or "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "werkzeug.socket": sock,
        "CONTENT_LENGTH": str(len(body)),
    }
    for k, v in request.headers.items():
        k = k.lower()
        if k == "content-type":
            env["CONTENT_TYPE"] = v
        elif k != "content-length":
            key = "HTTP_" + k.upper().replace("-", "_")
            env[key] = f"{env[key]},{v}" if key in env else v
    return env


def _run_app(app, environ: dict, ctx: HTTPContext, put, stop: threading.Event, sock: socket.socket) -> None:
    """On the request's thread: call the app, hand its chunks to `put`, always end with ("end",)."""
    HTTP_CONTEXT.set(ctx)
    it = None
    try:
        def start_response(status, headers, exc_info=None):
            put(("start", int(status.split()[0]), headers))
            return lambda data: put(("data", data))

        it = app(environ, start_response)
        for chunk in it:
            if chunk:
                put(("data", chunk))
            if stop.is_set():
                break
    except BaseException as e:  # noqa: BLE001 - reported to the client as a 500
        log.exception("the app failed on %s %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
        put(("error", e))
    finally:
        try:
            if it is not None and hasattr(it, "close"):
                it.close()  # a stream's generator runs its finally: aborts, releases, logs
        finally:
            sock.close()
            put(("end",))


async def serve_wsgi(app, request):
    """The Starlette response of `app` (a WSGI app) to `request`."""
    from starlette.responses import Response, StreamingResponse

    body = await request.body()
    ctx = http_context(body, request.headers)
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()
    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def put(item) -> None:
        loop.call_soon_threadsafe(q.put_nowait, item)

    def disconnect() -> None:
        stop.set()
        ours.close()  # the app's client_gone() sees an orderly close

    environ = build_environ(request, body, theirs)
    threading.Thread(target=_run_app, args=(app, environ, ctx, put, stop, theirs), daemon=True,
                     name="llaisys-http").start()
    streaming = False
    try:
        first = await q.get()
        if first[0] != "start":
            return Response(b'{"error": {"message": "internal error", "type": "server_error", "param": null, '
                            b'"code": "internal_error"}}', status_code=500, media_type="application/json")
        _, status, headers = first
        headers = [(k, v) for k, v in headers if k.lower() not in HOP_HEADERS]
        ctype = next((v for k, v in headers if k.lower() == "content-type"), "")
        if ctype.startswith("text/event-stream"):
            streaming = True
            return StreamingResponse(_chunks(q, disconnect), status_code=status,
                                     headers=_header_dict(headers), media_type=None)
        parts = []
        while True:
            item = await q.get()
            if item[0] == "data":
                parts.append(item[1])
            elif item[0] == "end":
                break
        return Response(b"".join(parts), status_code=status, headers=_header_dict(headers), media_type=None)
    finally:
        if not streaming:
            disconnect()


def _header_dict(headers: list) -> dict:
    out: dict = {}
    for k, v in headers:
        out[k] = f"{out[k]}, {v}" if k in out else v
    return out


async def _chunks(q: asyncio.Queue, disconnect):
    """The response body of a stream; a cancelled or closed stream tells the app the client left."""
    try:
        while True:
            item = await q.get()
            if item[0] == "data":
                yield item[1]
            elif item[0] == "end":
                return
    finally:
        disconnect()

