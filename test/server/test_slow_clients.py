"""Slow clients against a real server (the tiny checkpoint) with short limits: a connection
that trickles its headers is answered 408 and closed once --header-timeout has passed since
it opened, a body that stalls gets a 408 after --body-timeout, connections from one address
past --max-connections-per-client are refused with a 429 while the first ones are held, and
none of that cuts a long stream or stops normal requests (issue #39, part 6)."""

from __future__ import annotations

import json
import select
import socket
import threading
import time

import pytest
import requests

from server_helpers import MODEL_NAME, sse_events

HEADER_S, BODY_S, CAP = 2.0, 2.0, 4
SLACK_S = 15.0  # generous: the machine may be shared; a fault means never closed at all


def test_connection_limits_refuse_bad_values():
    from llaisys.server.state.connections import ConnectionLimits

    for bad in (dict(header_timeout_s=0), dict(body_timeout_s=-1), dict(max_per_client=-1)):
        with pytest.raises(ValueError):
            ConnectionLimits(**bad)
    assert ConnectionLimits(max_per_client=0).max_per_client == 0  # 0: no cap


@pytest.fixture(scope="module")
def server(start_tiny_server):
    return start_tiny_server("--header-timeout", str(HEADER_S), "--body-timeout", str(BODY_S),
                             "--max-connections-per-client", str(CAP))


def connect(srv) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    return s


def read_until_closed(s: socket.socket, limit_s: float) -> tuple:
    """(bytes the server sent, seconds until it closed); None for the time if still open at limit_s."""
    t0 = time.monotonic()
    got = b""
    s.settimeout(0.5)
    while time.monotonic() - t0 < limit_s:
        try:
            piece = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return got, time.monotonic() - t0
        if not piece:
            return got, time.monotonic() - t0
        got += piece
    return got, None


def test_trickled_headers_get_408_and_close(server):
    s = connect(server)
    t0 = time.monotonic()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    closed = None
    got = b""
    while time.monotonic() - t0 < HEADER_S + SLACK_S:  # one header byte every 0.3 s, as a slowloris does
        try:
            s.sendall(b"X")
        except OSError:
            break
        got, closed = read_until_closed(s, 0.3)
        if closed is not None:
            break
    elapsed = time.monotonic() - t0
    s.close()
    assert closed is not None, f"still open after {elapsed:.1f} s of trickled headers"
    assert elapsed < HEADER_S + SLACK_S
    assert got == b"" or got.startswith(b"HTTP/1.1 408"), got[:200]


def test_silent_connection_is_closed(server):
    s = connect(server)
    got, closed = read_until_closed(s, HEADER_S + SLACK_S)
    s.close()
    assert closed is not None and got == b""  # nothing asked, nothing answered


def _partial_post(srv, body_sent: bytes, length: int) -> socket.socket:
    s = connect(srv)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(length).encode() + b"\r\n\r\n" + body_sent)
    return s


def test_stalled_body_gets_408(server):
    s = _partial_post(server, b'{"model": "', 200)
    got, closed = read_until_closed(s, BODY_S + SLACK_S)
    s.close()
    assert closed is not None, "a stalled body was never answered"
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), got[:300]
    assert json.loads(body)["error"]["code"] == "request_timeout"


def _refused(socks: list, wait_s: float) -> bool:
    """Whether any of socks was answered at once (a 429: the cap was already met when it opened)."""
    ready, _, _ = select.select(socks, [], [], wait_s)
    return bool(ready)


def _hold(srv) -> list:
    """CAP connections, each with its headers sent and its body pending, all counted by the
    server. The previous test's connection counts until its handler thread ends, a moment after
    its answer (a CI run had the fourth held one refused that way, so the next one was let in):
    until none of them is refused at once, they are closed and opened again (bounded)."""
    for _ in range(10):
        held = [_partial_post(srv, b"", 10_000) for _ in range(CAP)]
        if not _refused(held, 0.3):
            return held
        for s in held:
            s.close()
        time.sleep(0.5)
    raise AssertionError(f"{CAP} connections could not be held: one was refused each time")


def test_connections_past_the_per_client_cap_are_refused(server):
    """CAP connections held (each trickling its body, one byte per 0.5 s, under the body
    timeout): the next one is answered 429 and closed; once they go, connections work again."""
    stop = threading.Event()
    held = _hold(server)

    def trickle():
        while not stop.wait(0.5):
            for s in held:
                try:
                    s.sendall(b" ")
                except OSError:
                    pass

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        time.sleep(0.5)  # (the server accepts them in order; the cap counts accepted connections)
        extra = connect(server)
        got, closed = read_until_closed(extra, SLACK_S)
        extra.close()
        assert closed is not None and got.startswith(b"HTTP/1.1 429"), got[:300]
        assert json.loads(got.partition(b"\r\n\r\n")[2])["error"]["code"] == "too_many_connections"
        r = requests.get(server.url + "/health", timeout=30)  # ... still refused while they are held
        assert r.status_code == 429
    finally:
        stop.set()
        t.join()
        for s in held:
            s.close()
    deadline = time.monotonic() + SLACK_S
    while True:  # the held connections' threads notice the close and release their places
        r = requests.get(server.url + "/health", timeout=30)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 200


def test_a_long_stream_outlasts_the_read_timeouts(server):
    """A stream read slowly (pauses longer than both timeouts) arrives whole: only reads are timed."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 300,
            "ignore_eos": True, "temperature": 0, "stream": True}
    with requests.post(server.url + "/v1/chat/completions", json=body, stream=True, timeout=120) as r:
        assert r.status_code == 200
        time.sleep(HEADER_S + BODY_S + 1)
        events = sse_events(r)
    assert events[-1][1] == "[DONE]"
    finish = [e["choices"][0].get("finish_reason") for _, e in events[:-1] if e["choices"]]
    assert finish[-1] == "length"


def test_normal_requests_still_work(server):
    r = requests.post(server.url + "/v1/chat/completions", timeout=60,
                      json={"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
