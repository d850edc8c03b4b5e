"""The OpenAI routes against a real server on the real 0.5B model: the official `openai`
client (sync and async) and raw HTTP. One server for the module; generations stay short.
What needs no real model (errors, tokenize, CORS) is in test_api_contract.py."""

import asyncio
import http.client
import json
import socket
import threading
import time

import openai
import pytest
import requests

from server_helpers import (API_MAX_MODEL_LEN, API_SERVER_ARGS, MODEL_NAME, chat_body, error_of, metrics_of,
                            openai_client, post, repeat_word, sse_events, stream_post, wait_idle)

pytestmark = pytest.mark.slow

MAX_MODEL_LEN = API_MAX_MODEL_LEN


@pytest.fixture(scope="module")
def server(start_server):
    return start_server(*API_SERVER_ARGS)


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server)


# ---- basics ------------------------------------------------------------------------------
def test_health_said_loading_then_models_are_listed(server):
    assert server.saw_loading  # the socket was bound before the weights were read
    r = requests.get(server.url + "/health", timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    models = requests.get(server.url + "/v1/models", timeout=30).json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in models["data"]] == [(MODEL_NAME, "model",
                                                                                    MAX_MODEL_LEN)]


def test_chat_with_the_openai_client(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=repeat_word("pineapple"), max_tokens=8,
                                       temperature=0)
    assert r.id.startswith("chatcmpl-") and r.object == "chat.completion" and r.model == MODEL_NAME
    (choice,) = r.choices
    assert choice.index == 0 and choice.message.role == "assistant"
    assert "pineapple" in choice.message.content.lower()
    assert choice.finish_reason == "stop"
    u = r.usage
    assert u.prompt_tokens > 10 and 0 < u.completion_tokens <= 8 and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details.cached_tokens >= 0


def test_completion_prompt_forms_and_choice_order(client, server):
    ids = requests.post(server.url + "/tokenize", json={"model": MODEL_NAME, "prompt": "def fibonacci(n):"},
                        timeout=60).json()["tokens"]
    r = client.completions.create(model=MODEL_NAME, prompt=["def fibonacci(n):", "import numpy"], n=2,
                                  max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert [c.index for c in r.choices] == [0, 1, 2, 3]  # prompt-major, as OpenAI orders them
    texts = [c.text for c in r.choices]
    assert texts[0] == texts[1] and texts[2] == texts[3] and texts[0] != texts[2]  # greedy: siblings agree
    n_numpy = len(requests.post(server.url + "/tokenize", json={"prompt": "import numpy"}, timeout=60).json()["tokens"])
    assert r.usage.prompt_tokens == len(ids) + n_numpy  # each prompt counted once, whatever n is
    assert 4 <= r.usage.completion_tokens <= 24
    by_ids = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == texts[0]  # the same prompt as token ids gives the same text
    many = client.completions.create(model=MODEL_NAME, prompt=[ids, ids[:3]], max_tokens=6, temperature=0)
    assert many.choices[0].text == texts[0] and len(many.choices) == 2
    assert many.usage.prompt_tokens == len(ids) + 3


def test_echo_prepends_the_prompt(server):
    r = post(server, "/v1/completions", {"prompt": "x = 1", "max_tokens": 3, "temperature": 0, "echo": True})
    text = r.json()["choices"][0]["text"]
    plain = post(server, "/v1/completions", {"prompt": "x = 1", "max_tokens": 3, "temperature": 0}).json()
    assert text == "x = 1" + plain["choices"][0]["text"]


# ---- streaming ---------------------------------------------------------------------------
def _check_chunks(events, n_choices: int, kind: str, usage: bool):
    assert events[-1][1] == "[DONE]"
    chunks = [e for _, e in events[:-1]]
    assert all("error" not in c for c in chunks)
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1  # the same on every chunk
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    assert all(c["object"] == obj for c in chunks)
    body = chunks[:-1] if usage else chunks
    if usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
        assert all(c["usage"] is None for c in body)
    else:
        assert all("usage" not in c for c in body)
    texts = {}
    for i in range(n_choices):
        mine = [ch for c in body for ch in c["choices"] if ch["index"] == i]
        assert all(len(c["choices"]) == 1 for c in body)
        if kind == "chat":
            assert mine[0]["delta"] == {"role": "assistant", "content": ""}
            assert all("role" not in ch["delta"] for ch in mine[1:])
        reasons = [ch["finish_reason"] for ch in mine]
        assert reasons[-1] in ("stop", "length") and all(r is None for r in reasons[:-1])
        texts[i] = "".join(ch["delta"].get("content", "") if kind == "chat" else ch["text"] for ch in mine)
    return texts, (chunks[-1]["usage"] if usage else None)


def test_chat_stream_structure_usage_and_n(server):
    body = chat_body(repeat_word("banana"), n=2, max_tokens=6, stream_options={"include_usage": True})
    events = stream_post(server, "/v1/chat/completions", body)
    texts, usage = _check_chunks(events, 2, "chat", usage=True)
    plain = post(server, "/v1/chat/completions", dict(body, stream_options=None)).json()
    assert [c["message"]["content"] for c in plain["choices"]] == [texts[0], texts[1]]
    assert usage["completion_tokens"] == plain["usage"]["completion_tokens"]
    assert usage["prompt_tokens"] == plain["usage"]["prompt_tokens"]


def test_completion_stream_without_usage(server):
    body = {"model": MODEL_NAME, "prompt": ["a = [1, 2,", "b ="], "max_tokens": 5, "temperature": 0}
    events = stream_post(server, "/v1/completions", body)
    texts, _ = _check_chunks(events, 2, "text", usage=False)
    plain = post(server, "/v1/completions", body).json()
    assert [c["text"] for c in plain["choices"]] == [texts[0], texts[1]]


def test_openai_client_streams(client):
    stream = client.chat.completions.create(model=MODEL_NAME, messages=repeat_word("cherry"), max_tokens=8,
                                            temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "cherry" in text.lower()
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_seeded_sampling_streamed_equals_non_streamed(server):
    for path, body in (("/v1/chat/completions", chat_body(repeat_word("kiwi"), temperature=1.2, seed=1234,
                                                          max_tokens=8, ignore_eos=True)),
                       ("/v1/completions", {"prompt": "Once upon a time", "temperature": 1.2, "seed": 99,
                                            "max_tokens": 8})):
        a = post(server, path, body).json()["choices"][0]
        b = post(server, path, body).json()["choices"][0]
        key = (lambda c: c["message"]["content"]) if "chat" in path else (lambda c: c["text"])
        assert key(a) == key(b)  # the seed fixes the sample
        events = stream_post(server, path, body)
        streamed = "".join(ch["delta"].get("content", "") if "chat" in path else ch["text"]
                           for _, e in events[:-1] for ch in e["choices"])
        assert streamed == key(a)
    other = post(server, "/v1/completions", {"prompt": "Once upon a time", "temperature": 1.2, "seed": 100,
                                              "max_tokens": 8}).json()["choices"][0]["text"]
    assert other != key(a)  # a different seed samples differently (8 tokens at T=1.2)


def test_stop_strings_end_the_text_before_the_stop(server):
    body = {"prompt": "1, 2, 3, 4,", "max_tokens": 10, "temperature": 0}
    full = post(server, "/v1/completions", body).json()["choices"][0]["text"]
    assert "7" in full, full  # the model counts on
    r = post(server, "/v1/completions", dict(body, stop=["7", "never"])).json()["choices"][0]
    assert r["finish_reason"] == "stop" and r["text"] == full[:full.index("7")]
    events = stream_post(server, "/v1/completions", dict(body, stop="7"))
    assert "".join(ch["text"] for _, e in events[:-1] for ch in e["choices"]) == r["text"]


# ---- logprobs ----------------------------------------------------------------------------
def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=repeat_word("grape"), max_tokens=6,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens  # one entry per sampled token, the eos included
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert [x.logprob for x in t.top_logprobs] == sorted((x.logprob for x in t.top_logprobs), reverse=True)
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == pytest.approx(t.logprob)  # greedy
        assert bytes(t.bytes).decode("utf-8", errors="replace") == t.token
    joined = b"".join(bytes(t.bytes) for t in content).decode("utf-8", errors="replace")
    assert joined.startswith(r.choices[0].message.content)  # the text is the tokens' bytes (eos text aside)


def test_completion_logprobs_legacy_shape(server):
    r = post(server, "/v1/completions", {"prompt": "print(", "max_tokens": 5, "temperature": 0, "logprobs": 2,
                                         "ignore_eos": True}).json()["choices"][0]
    lp = r["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == 5
    assert "".join(lp["tokens"]) == r["text"]
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(5)]
    for tok, top, val in zip(lp["tokens"], lp["top_logprobs"], lp["token_logprobs"]):
        assert len(top) <= 2 and top[tok] == pytest.approx(val) and max(top.values()) == pytest.approx(val)
    none = post(server, "/v1/completions", {"prompt": "print(", "max_tokens": 2}).json()["choices"][0]
    assert none["logprobs"] is None


# ---- embeddings --------------------------------------------------------------------------
def test_embeddings_float_and_base64(client, server):
    texts = ["def add(a, b): return a + b", "The cat sat on the mat.", "def add(a, b): return a + b"]
    r = client.embeddings.create(model=MODEL_NAME, input=texts)  # the client asks for base64 by default
    vecs = [d.embedding for d in r.data]
    assert [d.index for d in r.data] == [0, 1, 2] and len({len(v) for v in vecs}) == 1 and len(vecs[0]) >= 64
    for v in vecs:
        assert sum(x * x for x in v) == pytest.approx(1.0, abs=1e-4)  # L2-normalised
    # the same text, the same vector: up to one f16 step of a K/V value (the default f16 KV cache
    # rounds values that a step of another shape computed ~1e-7 apart to neighbouring f16s)
    assert vecs[0] == pytest.approx(vecs[2], abs=1e-4)
    assert sum(a * b for a, b in zip(vecs[0], vecs[1])) < 0.99
    plain = post(server, "/v1/embeddings", {"model": MODEL_NAME, "input": texts[1], "encoding_format": "float"}).json()
    assert plain["data"][0]["embedding"] == pytest.approx(vecs[1], abs=1e-4)
    n = post(server, "/tokenize", {"prompt": texts[1]}).json()["count"]
    assert plain["usage"] == {"prompt_tokens": n, "total_tokens": n}
    for body, param in (({"input": []}, "input"), ({"input": [""]}, "input"), ({"input": [[1, -1]]}, "input"),
                        ({"input": "x", "encoding_format": "hex"}, "encoding_format"), ({}, "input")):
        e = post(server, "/v1/embeddings", body)
        assert e.status_code == 400 and error_of(e)["param"] == param, e.text


# ---- SSE is not buffered -----------------------------------------------------------------
def test_chunks_arrive_as_they_are_produced(server):
    body = {"prompt": "def quicksort(arr):", "max_tokens": 10, "temperature": 0, "ignore_eos": True}
    with requests.post(server.url + "/v1/completions", json=dict(body, stream=True), stream=True, timeout=300) as r:
        events = sse_events(r)
    times = [t for t, e in events if e != "[DONE]" and e["choices"] and e["choices"][0]["text"]]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # a buffering server delivers everything at the end, within a millisecond or so; each
    # decode step takes well over 5 ms, so most gaps must show it
    assert len(gaps) >= 6 and sum(g > 0.005 for g in gaps) >= len(gaps) // 2, gaps


# ---- cancellation ------------------------------------------------------------------------
def _start_long_stream(server, user="alice"):
    """A raw streaming request that would run for minutes; returns (connection, response, response id)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    body = json.dumps({"model": MODEL_NAME, "prompt": "Write a long story.", "max_tokens": 256, "ignore_eos": True,
                       "stream": True, "user": user})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    first = b""
    while not first.startswith(b"data: "):
        first = resp.readline()
    rid = json.loads(first[6:])["id"]
    return conn, resp, rid


def test_cancel_ends_the_stream_and_frees_blocks(server):
    conn, resp, rid = _start_long_stream(server, user="alice")
    assert metrics_of(server)["num_requests_running"] >= 1
    r = post(server, f"/v1/requests/{rid}/cancel", {"user": "bob"})  # not bob's request
    assert r.status_code == 404 and error_of(r)["code"] == "request_not_found"
    r = post(server, f"/v1/requests/{rid}/cancel", {"user": "alice"})
    assert r.status_code == 200 and r.json()["cancelled"] is True
    rest = resp.read().decode()
    conn.close()
    events = [json.loads(line[6:]) for line in rest.split("\n") if line.startswith("data: {")]
    assert rest.rstrip().endswith("data: [DONE]")
    assert events[-1]["choices"][0]["finish_reason"] == "abort"
    assert not any(e["choices"][0]["finish_reason"] for e in events[:-1])
    assert not any(wait_idle(server, 60).values())


def test_client_disconnect_mid_stream_frees_blocks(server):
    conn, resp, _ = _start_long_stream(server)
    assert metrics_of(server)["num_requests_running"] >= 1
    resp.close()  # the server closes the connection after the response, so the socket lives in resp
    conn.close()
    assert not any(wait_idle(server, 60).values())


def test_client_disconnect_while_waiting_for_a_json_answer_aborts(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    body = json.dumps({"model": MODEL_NAME, "prompt": "Write a long story.", "max_tokens": 256,
                       "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    deadline = time.monotonic() + 60
    while metrics_of(server)["num_requests_running"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metrics_of(server)["num_requests_running"] >= 1
    sock.close()
    assert not any(wait_idle(server, 60).values())


# ---- async client ------------------------------------------------------------------------
def test_async_client_concurrent_requests(server):
    async def main():
        ac = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        words = ["apple", "lemon", "mango"]

        async def one(word, stream):
            if not stream:
                r = await ac.chat.completions.create(model=MODEL_NAME, messages=repeat_word(word), max_tokens=8,
                                                     temperature=0)
                return r.choices[0].message.content
            s = await ac.chat.completions.create(model=MODEL_NAME, messages=repeat_word(word), max_tokens=8,
                                                 temperature=0, stream=True)
            return "".join([c.choices[0].delta.content or "" async for c in s])

        try:
            return words, await asyncio.gather(*(one(w, i % 2 == 1) for i, w in enumerate(words * 2)))
        finally:
            await ac.close()

    words, texts = asyncio.run(main())
    for w, t in zip(words * 2, texts):
        assert w in t.lower(), (w, t)
    assert texts[:3] == texts[3:]  # streamed and not streamed agree


# ---- conversations -----------------------------------------------------------------------
def test_second_turn_reuses_the_first_turns_kv(client):
    history = [{"role": "system", "content": "You are a terse assistant. Answer in one short sentence. " * 3},
               {"role": "user", "content": "Name a fruit that is yellow."}]
    r1 = client.chat.completions.create(model=MODEL_NAME, messages=history, max_tokens=8, temperature=0)
    history += [{"role": "assistant", "content": r1.choices[0].message.content},
                {"role": "user", "content": "Name a fruit that is red."}]
    r2 = client.chat.completions.create(model=MODEL_NAME, messages=history, max_tokens=8, temperature=0)
    assert r2.usage.prompt_tokens > r1.usage.prompt_tokens
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= 16 and cached % 16 == 0 and cached <= r1.usage.prompt_tokens + r1.usage.completion_tokens


def test_server_sessions_hold_history_per_user(server):
    sid = "conv-1"
    r1 = post(server, "/v1/chat/completions", chat_body(repeat_word("peach"), session_id=sid, user="alice"))
    assert r1.status_code == 200, r1.text
    r2 = post(server, "/v1/chat/completions", chat_body([{"role": "user", "content": "Again, the same word."}],
                                                        session_id=sid, user="alice"))
    assert r2.status_code == 200
    assert r2.json()["usage"]["prompt_tokens"] > r1.json()["usage"]["prompt_tokens"] + 5  # history prepended
    assert r2.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    got = requests.get(f"{server.url}/v1/sessions/{sid}", params={"user": "alice"}, timeout=30).json()
    assert [m["role"] for m in got["messages"]] == ["user", "assistant", "user", "assistant"]
    assert got["messages"][1]["content"] == r1.json()["choices"][0]["message"]["content"]
    # another user can neither continue nor read it, and cannot tell it exists
    r = post(server, "/v1/chat/completions", chat_body(repeat_word("x"), session_id=sid, user="mallory"))
    assert r.status_code == 404 and error_of(r)["code"] == "session_not_found"
    assert requests.get(f"{server.url}/v1/sessions/{sid}", params={"user": "mallory"}, timeout=30).status_code == 404
    assert requests.delete(f"{server.url}/v1/sessions/{sid}", params={"user": "mallory"}, timeout=30).status_code == 404
    assert requests.delete(f"{server.url}/v1/sessions/{sid}", params={"user": "alice"}, timeout=30).status_code == 200
    assert requests.get(f"{server.url}/v1/sessions/{sid}", params={"user": "alice"}, timeout=30).status_code == 404


# ---- many users at once ------------------------------------------------------------------
def test_sixteen_clients_three_turns_each(server):
    n_clients, n_turns = 16, 3
    results, errors = {}, []

    def conversation(i):
        try:
            cl = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
            history, replies = [], []
            for t in range(n_turns):
                word = str(1000 + 97 * i + 13 * t)
                history.append({"role": "user", "content": f"Repeat exactly this number and nothing else: {word}"})
                s = cl.chat.completions.create(model=MODEL_NAME, messages=history, max_tokens=8, temperature=0,
                                               stream=True, user=f"user-{i}")
                text = "".join(c.choices[0].delta.content or "" for c in s if c.choices)
                history.append({"role": "assistant", "content": text})
                replies.append((word, text))
            results[i] = replies
        except Exception as e:  # reported below
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=conversation, args=(i,)) for i in range(n_clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(900)
    assert not errors, errors
    assert len(results) == n_clients
    for i, replies in results.items():
        for word, text in replies:
            assert word in text, (i, word, text)  # each user got its own answer
    assert not any(wait_idle(server, 60).values())


# ---- logs --------------------------------------------------------------------------------
def test_one_escaped_log_line_per_request(server):
    r = post(server, "/v1/chat/completions", chat_body(repeat_word("plum"), user="eve\nFORGED 200 OK\x1b[31m"))
    rid = r.json()["id"]
    deadline = time.monotonic() + 10
    while rid not in server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [line for line in server.log().splitlines() if rid in line]
    assert len(lines) == 1, lines
    line = lines[0]
    for field in ("status=200", "user=user:eve\\nFORGED 200 OK\\x1b[31m", f"model={MODEL_NAME}", "prompt_tokens=",
                  "completion_tokens=", "ttft_ms=", "duration_ms=", "finish=stop"):
        assert field in line, (field, line)
    assert not any(x.startswith("FORGED") for x in server.log().splitlines())
