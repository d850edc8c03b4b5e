"""Bad HTTP, as an attacker sends it, against one real server (the tiny checkpoint): wrong
types for every field of every body, out-of-range numbers, huge ints, NaN/Infinity, deep
nesting, huge bodies, bad UTF-8, lone surrogates, wrong content types, unknown routes and
methods, bad API keys, oversized arrays, empty bodies, duplicate keys, null where a value is
needed, ids outside the vocabulary...

Every case must answer a 4xx in OpenAI's error shape (naming the field where there is one),
the server must stay up after each, and a greedy answer must be the same after all of them
as before.
"""

from __future__ import annotations

import socket

import pytest
import requests

from http_attack_cases import ANY, BAD_REQUESTS, CAP, CHAT, KEY, MAX_BODY, MAX_N, MSG
from server_helpers import MODEL_NAME, error_of

GREEDY = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Say something."}], "temperature": 0,
          "max_tokens": CAP}


@pytest.fixture(scope="module")
def server(start_tiny_server):
    return start_tiny_server("--max-tokens-cap", str(CAP), "--max-n", str(MAX_N), "--max-body-bytes", str(MAX_BODY),
                             "--max-model-len", "256")


@pytest.fixture(scope="module")
def keyed(start_tiny_server):
    return start_tiny_server("--api-key", KEY, "--max-tokens-cap", str(CAP))


@pytest.fixture(scope="module")
def greedy_before(server):
    r = requests.post(server.url + CHAT, json=GREEDY, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("method,path,kw,status,param", BAD_REQUESTS)
def test_bad_request_is_a_clean_4xx(server, greedy_before, method, path, kw, status, param):
    r = requests.request(method, server.url + path, timeout=60, **kw)
    assert r.status_code == status, r.text[:500]
    assert r.headers["Content-Type"].startswith("application/json")
    err = error_of(r)
    assert err["type"] == {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error",
                           413: "invalid_request_error", 415: "invalid_request_error"}[status], err
    if param is not ANY:
        assert err["param"] == param, err
    assert requests.get(server.url + "/health", timeout=30).status_code == 200


AUTH_CASES = [
    ({}, "no key"), ({"Authorization": "Bearer"}, "empty bearer"), ({"Authorization": "Bearer wrong"}, "wrong"),
    ({"Authorization": f"Basic {KEY}"}, "basic scheme"), ({"Authorization": KEY}, "no scheme"),
    ({"Authorization": f"Bearer {KEY}x"}, "longer"), ({"Authorization": f"Bearer {KEY[:-1]}"}, "prefix"),
    ({"Authorization": "Bearer " + "k" * 8000}, "8 KB key"), ({"X-Api-Key": "wrong"}, "x-api-key wrong"),
    ({"X-Api-Key": ""}, "x-api-key empty"), ({"Authorization": "Bearer wrong", "X-Api-Key": KEY}, "bearer wins"),
    ({"Authorization": "Bearer s\u00e9cret".encode("utf-8")}, "utf-8 bytes"),
    ({"Authorization": "Bearer s\u00e9cret".encode("latin-1")}, "latin-1 bytes"),
    ({"Authorization": f"Bearer {KEY.upper()}"}, "case changed"),
]


@pytest.mark.parametrize("headers", [h for h, _ in AUTH_CASES], ids=[i for _, i in AUTH_CASES])
@pytest.mark.parametrize("method,path", [("POST", CHAT), ("GET", "/v1/models"), ("POST", "/tokenize"),
                                         ("GET", "/metrics")])
def test_bad_api_key_is_401(keyed, method, path, headers):
    r = requests.request(method, keyed.url + path, headers=headers, json={"messages": MSG}, timeout=60)
    assert r.status_code == 401, r.text[:300]
    assert error_of(r)["code"] == "invalid_api_key"


def test_key_in_the_query_string_is_not_a_key(keyed):
    r = requests.get(keyed.url + "/v1/models", params={"api_key": KEY}, timeout=30)
    assert r.status_code == 401
    assert requests.get(keyed.url + "/v1/models", headers={"X-Api-Key": KEY}, timeout=30).status_code == 200


def test_raw_socket_garbage_leaves_the_server_up(server):
    """Not HTTP at all, a request line of 64 KB, a header block that never ends: the
    connection is answered or closed, and the server still serves."""
    for payload in (b"\x00\xff" * 1000 + b"\r\n\r\n", b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\n\r\n",
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
                    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\nzz\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(payload)
            try:
                s.recv(4096)
            except (socket.timeout, ConnectionResetError):
                pass
    assert requests.get(server.url + "/health", timeout=30).status_code == 200


def test_greedy_answer_unchanged_after_the_attacks(server, greedy_before):
    r = requests.post(server.url + CHAT, json=GREEDY, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == greedy_before
