"""Access control and backpressure on a real server with small limits: API keys, CORS, 429
under a flood (fast, with Retry-After), per-user concurrency and token budget, and a client
that leaves while queued giving its queue place back."""

import http.client
import json
import threading
import time

import openai
import pytest
import requests

from server_helpers import MODEL_NAME, chat_body, error_of, post, repeat_word, server_gauge, wait_idle

pytestmark = pytest.mark.slow

KEY = {"Authorization": "Bearer secret-1"}
ORIGIN = "http://example.test"


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("--api-key", "secret-1", "--api-key", "secret-2", "--cors-origin", ORIGIN,
                        "--max-concurrent-requests", "1", "--max-queue", "1", "--per-user-concurrency", "1",
                        "--per-user-token-budget", "150", "--token-budget-window", "600")


def test_api_key_is_required_except_for_health(server):
    assert requests.get(server.url + "/health", timeout=30).status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-Api-Key": "secret-1x"}, {"Authorization": "secret-1"}):
        for method, path in (("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/v1/chat/completions"),
                             ("POST", "/tokenize")):
            r = requests.request(method, server.url + path, headers=headers, json={}, timeout=30)
            assert r.status_code == 401, (headers, path, r.text)
            err = error_of(r)
            assert (err["type"], err["code"]) == ("authentication_error", "invalid_api_key")
    assert requests.get(server.url + "/v1/models", headers=KEY, timeout=30).status_code == 200
    assert requests.get(server.url + "/v1/models", headers={"X-Api-Key": "secret-2"}, timeout=30).status_code == 200
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = openai.OpenAI(base_url=server.url + "/v1", api_key="secret-2", max_retries=0, timeout=300)
    r = good.chat.completions.create(model=MODEL_NAME, messages=repeat_word("lime"), max_tokens=6, temperature=0,
                                     user="keyed")
    assert "lime" in r.choices[0].message.content.lower()


def test_cors_only_for_the_configured_origin(server):
    pre = requests.options(server.url + "/v1/chat/completions", timeout=30, headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert pre.status_code == 204  # preflight needs no key
    assert pre.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "Authorization" in pre.headers["Access-Control-Allow-Headers"]
    assert "Anthropic-Version" in pre.headers["Access-Control-Allow-Headers"]  # the Anthropic SDK from a page
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    r = requests.get(server.url + "/v1/models", headers={**KEY, "Origin": ORIGIN}, timeout=30)
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    other = requests.get(server.url + "/v1/models", headers={**KEY, "Origin": "http://evil.test"}, timeout=30)
    assert other.status_code == 200 and "Access-Control-Allow-Origin" not in other.headers


def test_a_flood_gets_fast_429s_with_retry_after(server):
    results = []
    lock = threading.Lock()

    def one(i):
        r = post(server, "/v1/chat/completions", chat_body(repeat_word(f"w{i}"), max_tokens=8, ignore_eos=True,
                                                           user=f"flood-{i}"), headers=KEY)
        with lock:
            results.append((time.monotonic(), r))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(600)
    ok = [t for t, r in results if r.status_code == 200]
    busy = [(t, r) for t, r in results if r.status_code == 429]
    assert len(ok) + len(busy) == 8, [r.status_code for _, r in results]
    assert len(ok) >= 2 and len(busy) >= 1  # one running + one queued got through
    for t, r in busy:
        err = error_of(r)
        assert (err["type"], err["code"]) == ("rate_limit_error", "queue_full")
        assert int(r.headers["Retry-After"]) >= 1
    # answered at once, without waiting for the engine: every 429 came back before the first
    # admitted request had finished
    assert max(t for t, _ in busy) < min(ok)
    assert not any(wait_idle(server, 60, headers=KEY).values())


def _long_stream(server, user, max_tokens=200):
    """A streamed completion that holds a slot until cancelled (or max_tokens run out)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "Tell a story.", "max_tokens": max_tokens,
                                                        "ignore_eos": True, "stream": True, "user": user}),
                 {"Content-Type": "application/json", **KEY})
    resp = conn.getresponse()
    assert resp.status == 200
    line = b""
    while not line.startswith(b"data: "):
        line = resp.readline()
    return conn, resp, json.loads(line[6:])["id"]


def test_per_user_concurrency_limit(server):
    conn, resp, rid = _long_stream(server, "solo")
    try:
        r = post(server, "/v1/chat/completions", chat_body(repeat_word("x"), user="solo"), headers=KEY)
        assert r.status_code == 429 and error_of(r)["code"] == "user_concurrency_limit"
        assert int(r.headers["Retry-After"]) >= 1
    finally:
        assert post(server, f"/v1/requests/{rid}/cancel", {"user": "solo"}, headers=KEY).status_code == 200
        resp.read()
        conn.close()
    assert not any(wait_idle(server, 60, headers=KEY).values())


def test_token_budget_per_user(server):
    spent, refused = 0, None
    for _ in range(8):
        r = post(server, "/v1/chat/completions", chat_body(repeat_word("fig"), max_tokens=4, user="spender"),
                 headers=KEY)
        if r.status_code == 429:
            refused = r
            break
        assert r.status_code == 200, r.text
        spent += r.json()["usage"]["total_tokens"]
    assert refused is not None and error_of(refused)["code"] == "token_budget_exceeded"
    assert spent >= 150 and int(refused.headers["Retry-After"]) >= 1
    r = post(server, "/v1/chat/completions", chat_body(repeat_word("fig"), max_tokens=4, user="saver"), headers=KEY)
    assert r.status_code == 200  # the budget is per user


def test_a_client_leaving_the_queue_frees_its_place(server):
    # holds the only slot for as long as the test needs it (it is cancelled at the end)
    conn, resp, rid = _long_stream(server, "holder", max_tokens=3000)
    try:
        import socket

        queued = socket.create_connection(("127.0.0.1", server.port))
        body = json.dumps(chat_body(repeat_word("q"), user="queued")).encode()
        queued.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Authorization: Bearer secret-1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 30
        while server_gauge(server, "admission_queued", headers=KEY) < 1:  # the raw request has reached the queue's one place
            assert time.monotonic() < deadline, "the queued request never reached the server's queue"
            time.sleep(0.05)
        r = post(server, "/v1/chat/completions", chat_body(repeat_word("y"), user="third"), headers=KEY)
        assert r.status_code == 429 and error_of(r)["code"] == "queue_full", r.text
        queued.close()
        got = {}

        def late():
            got["r"] = post(server, "/v1/chat/completions", chat_body(repeat_word("z"), max_tokens=4, user="late"),
                            headers=KEY)

        deadline = time.monotonic() + 30
        th = None
        while time.monotonic() < deadline:
            th = threading.Thread(target=late)
            th.start()
            th.join(1.0)
            if th.is_alive():  # queued, not refused: the place was given back
                break
            assert got["r"].status_code == 429
        assert th is not None and th.is_alive()
    finally:
        post(server, f"/v1/requests/{rid}/cancel", {"user": "holder"}, headers=KEY)
        resp.read()
        conn.close()
    th.join(300)
    assert got["r"].status_code == 200, got["r"].text
    assert not any(wait_idle(server, 60, headers=KEY).values())


def test_web_page_is_served_without_a_key(server):
    from server_helpers import REPO

    web = REPO / "web"
    if not (web / "index.html").is_file():
        pytest.skip("no web/index.html in this checkout")
    r = requests.get(server.url + "/", timeout=30)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    assert r.content == (web / "index.html").read_bytes()
    for f in sorted(p for p in web.rglob("*") if p.is_file()):
        rel = f.relative_to(web).as_posix()
        r = requests.get(f"{server.url}/{rel}", timeout=30)
        assert r.status_code == 200 and r.content == f.read_bytes(), rel
    assert requests.get(server.url + "/../pyproject.toml", timeout=30).status_code in (400, 404)
    assert requests.post(server.url + "/app.js", timeout=30).status_code in (401, 405)
