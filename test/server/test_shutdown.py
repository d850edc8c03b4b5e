"""Lifetimes on a real server: the per-request timeout aborts (JSON 504, or an error event in a
stream) and frees the blocks; SIGTERM stops admitting (503), lets short requests finish,
aborts what outlives --drain-timeout, and exits 0."""

import json
import signal
import threading
import time

import pytest
import requests

from server_helpers import MODEL_NAME, chat_body, error_of, post, repeat_word, wait_idle

pytestmark = pytest.mark.slow

TIMEOUT_S, DRAIN_S = 15, 6  # the long request outlives the drain (~2 s to admit the short one + 6) well within 15


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("--request-timeout", str(TIMEOUT_S), "--drain-timeout", str(DRAIN_S),
                        "--max-model-len", "4096")


def _events(resp) -> list:
    out = []
    for line in resp.iter_lines():
        if line.startswith(b"data: "):
            payload = line[6:].decode()
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


LONG = {"model": MODEL_NAME, "prompt": "Write a very long story.", "max_tokens": 3500, "ignore_eos": True}


def test_request_timeout_aborts_json_and_stream(server):
    got = {}

    def streamed():
        with requests.post(server.url + "/v1/completions", json=dict(LONG, stream=True), stream=True,
                           timeout=300) as r:
            got["stream"] = _events(r)

    th = threading.Thread(target=streamed)
    th.start()
    t0 = time.monotonic()
    r = post(server, "/v1/completions", LONG)
    assert time.monotonic() - t0 >= TIMEOUT_S - 1
    assert r.status_code == 504 and error_of(r)["code"] == "request_timeout"
    th.join(300)
    events = got["stream"]
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "request_timeout"
    assert any(e["choices"] for e in events[:-2])  # tokens were streamed before the timeout
    assert not any(wait_idle(server, 60).values())


def test_sigterm_drains_then_aborts_then_exits_0(server):
    got = {}

    def stream(name, body, first_chunk: threading.Event):
        with requests.post(server.url + "/v1/chat/completions" if "messages" in body else server.url +
                           "/v1/completions", json=dict(body, stream=True), stream=True, timeout=300) as r:
            events = []
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    first_chunk.set()
                    payload = line[6:].decode()
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
            got[name] = events

    long_started, short_started = threading.Event(), threading.Event()
    threads = [threading.Thread(target=stream, args=("long", LONG, long_started)),
               threading.Thread(target=stream, args=("short", chat_body(repeat_word("done"), max_tokens=3,
                                                                        ignore_eos=True), short_started))]
    threads[0].start()
    assert long_started.wait(120)
    threads[1].start()
    assert short_started.wait(120)  # the chat stream's role chunk: admitted and in the engine
    server.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        h = requests.get(server.url + "/health", timeout=30)
        if h.status_code == 503:
            break
        time.sleep(0.05)
    assert h.status_code == 503 and error_of(h)["code"] == "shutting_down"
    r = post(server, "/v1/chat/completions", chat_body(repeat_word("late")))
    assert r.status_code == 503 and error_of(r)["code"] == "shutting_down"
    for th in threads:
        th.join(300)
    short, long_ = got["short"], got["long"]
    assert short[-1] == "[DONE]" and short[-2]["choices"][0]["finish_reason"] == "length"  # drained
    assert long_[-1] == "[DONE]" and long_[-2]["error"]["code"] == "shutting_down"  # aborted after the drain
    assert server.proc.wait(60) == 0
    assert "draining" in server.log() and "server stopped" in server.log()
