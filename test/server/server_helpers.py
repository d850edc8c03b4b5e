"""Helpers of the server tests: launching a real server, reading /metrics and SSE, prompts
the 0.5B model follows."""

from __future__ import annotations

import re
import time

import requests
from benchkit.server import MODEL_NAME, REPO, Server, launch, metrics_of, sse_events  # noqa: F401 (the tests import them here)


def server_gauge(srv: Server, name: str, headers=None) -> float:
    """The unlabelled gauge llaisys:<name> (the server's own, e.g. admission_queued) from /metrics."""
    text = requests.get(srv.url + "/metrics", headers=headers, timeout=30).text
    return float(re.search(rf"^llaisys:{name} (\S+)$", text, re.MULTILINE).group(1))


def wait_idle(srv: Server, timeout: float = 120.0, headers=None) -> dict:
    """Poll /metrics until nothing runs, nothing waits and no KV block is held; the last reading."""
    deadline = time.monotonic() + timeout
    while True:
        m = metrics_of(srv, headers)
        if not any(m.values()) or time.monotonic() > deadline:
            return m
        time.sleep(0.2)
def repeat_word(word: str) -> list:
    """A chat the 0.5B model answers (greedy) with the word itself."""
    return [{"role": "user", "content": f"Repeat exactly this word and nothing else: {word}"}]


def post(srv, path: str, body=None, headers=None, timeout: float = 300.0, **kw) -> requests.Response:
    if body is not None and "data" not in kw:
        kw["json"] = body
    return requests.post(srv.url + path, headers=headers, timeout=timeout, **kw)


def chat_body(messages, **kw) -> dict:
    return {"model": MODEL_NAME, "messages": messages, "temperature": 0, "max_tokens": 8, **kw}


def stream_post(srv, path: str, body: dict, headers=None, timeout: float = 300.0) -> list:
    with requests.post(srv.url + path, json=dict(body, stream=True), headers=headers, stream=True,
                       timeout=timeout) as r:
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("text/event-stream")
        return sse_events(r)


def error_of(r: requests.Response) -> dict:
    """The error object of an error response, checked for OpenAI's shape."""
    body = r.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert {"message", "type", "param", "code"} <= set(err), err
    assert isinstance(err["message"], str) and err["message"]
    return err


# the server of test_api.py and test_api_contract.py: the limits their error cases are written against
API_MAX_MODEL_LEN = 512
API_SERVER_ARGS = ("--max-num-seqs", "16", "--max-model-len", str(API_MAX_MODEL_LEN), "--max-n", "4",
                   "--max-tokens-cap", "256", "--max-body-bytes", "65536")


def openai_client(srv, timeout: float = 300.0):
    """The official client on srv, without retries (a test sees the first answer)."""
    import openai

    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=timeout)
