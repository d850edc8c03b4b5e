"""The server's edge (issue 16): the reproducers of the bad requests that got through, each
against a real server over the tiny checkpoint, and the pieces that keep them out: one schema
for validation and /openapi.json, OpenAI's value ranges, application/json only, valid Unicode,
bounded admission state, and the engine's admission check before anything is queued."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from server_helpers import MODEL_NAME, error_of, server_gauge, sse_events

CAP = 96
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(start_tiny_server):
    return start_tiny_server("--max-tokens-cap", str(CAP))


def post(srv, path, body, **kw):
    return requests.post(srv.url + path, json=body, timeout=120, **kw)


def assert_400(r, param, code="invalid_value"):
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert (err["param"], err["type"]) == (param, "invalid_request_error"), err
    if code is not None:
        assert err["code"] == code, err


# ---- OpenAPI: generated from the definitions the server validates with -------------------------
def test_openapi_route_table_names_every_flask_route():
    from llaisys.server.app import ServerState, create_app, web_dir
    from llaisys.server.protocol.openapi import ROUTES
    from llaisys.server.state.registry import ModelSpec, Registry

    app = create_app(ServerState(Registry([ModelSpec("m", "m")])))
    served = {(m, re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)) for rule in app.url_map.iter_rules()
              if rule.endpoint not in ("web_file", "static") for m in rule.methods - {"HEAD", "OPTIONS"}}
    described = {(r.method, r.path) for r in ROUTES if r.path != "/" or web_dir() is not None}
    assert served == described


def test_openapi_is_served_and_carries_the_validating_schemas(server):
    from llaisys.server.protocol.parse import Limits
    from llaisys.server.protocol.request_schemas import request_schemas
    from llaisys.server.protocol.response_schemas import RESPONSE_SCHEMAS

    r = requests.get(server.url + "/openapi.json", timeout=30)
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.1")
    schemas = doc["components"]["schemas"]
    from llaisys.server.anthropic import schema as anthropic_schema

    ours = dict(request_schemas(Limits(max_tokens_cap=CAP)), **RESPONSE_SCHEMAS)
    ours.update(anthropic_schema.request_schemas(Limits().max_stop), **anthropic_schema.RESPONSE_SCHEMAS)
    from llaisys.server.infill import schema as infill_schema

    ours.update(infill_schema.INFILL_RESPONSE_SCHEMAS,
                InfillRequest=infill_schema.infill_request_schema(Limits(max_tokens_cap=CAP)),
                NativeCompletionRequest=infill_schema.completion_request_schema(Limits(max_tokens_cap=CAP)))
    assert json.loads(json.dumps(ours)) == schemas  # the very dicts the validator uses, nothing hand-kept
    chat = schemas["ChatCompletionRequest"]["properties"]
    assert chat["temperature"]["maximum"] == 2 and chat["max_tokens"]["maximum"] == CAP
    refs = re.findall(r"\"\$ref\": ?\"#/components/schemas/(\w+)\"", r.text)
    assert refs and set(refs) <= set(schemas)
    op = doc["paths"]["/v1/chat/completions"]["post"]
    assert set(op["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert {"400", "413", "415", "429", "503"} <= set(op["responses"])
    assert op["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ChatCompletionRequest"}


def test_responses_and_stream_chunks_match_their_schemas(server):
    from llaisys.server.protocol.response_schemas import RESPONSE_SCHEMAS
    from llaisys.server.protocol.schema import validate

    r = post(server, CHAT, {"messages": MSG, "max_tokens": 4, "logprobs": True, "top_logprobs": 2, "n": 2})
    validate(RESPONSE_SCHEMAS["ChatCompletion"], r.json())
    r = post(server, COMP, {"prompt": ["a", [1, 2]], "max_tokens": 4, "logprobs": 2, "echo": False})
    validate(RESPONSE_SCHEMAS["TextCompletion"], r.json())
    for path, body, name in ((CHAT, {"messages": MSG, "logprobs": True}, "ChatCompletionChunk"),
                             (COMP, {"prompt": "a", "logprobs": 1}, "TextCompletionChunk"),
                             (COMP, {"prompt": "a", "echo": True}, "TextCompletionChunk")):
        with requests.post(server.url + path, json=dict(body, max_tokens=4, stream=True,
                                                        stream_options={"include_usage": True}),
                           stream=True, timeout=120) as s:
            events = [e for _, e in sse_events(s)]
        assert events[-1] == "[DONE]" and len(events) > 2
        for e in events[:-1]:
            validate(RESPONSE_SCHEMAS[name], e)
    validate(RESPONSE_SCHEMAS["EmbeddingList"], post(server, "/v1/embeddings", {"input": ["a", "b"]}).json())
    validate(RESPONSE_SCHEMAS["TokenizeResponse"], post(server, "/tokenize", {"messages": MSG}).json())
    validate(RESPONSE_SCHEMAS["DetokenizeResponse"], post(server, "/detokenize", {"tokens": [1, 2]}).json())
    validate(RESPONSE_SCHEMAS["Error"], post(server, CHAT, {"messages": []}).json())
    validate(RESPONSE_SCHEMAS["ModelList"], requests.get(server.url + "/v1/models", timeout=30).json())


# ---- reproducer 6: values OpenAI refuses; text/plain --------------------------------------------
@pytest.mark.parametrize("field,value", [("temperature", 1e9), ("temperature", 2.5), ("top_p", 0.0), ("top_p", 1.5),
                                         ("presence_penalty", 2.5), ("frequency_penalty", -2.5),
                                         ("logit_bias", {"5": 100.5}), ("top_logprobs", 21)])
def test_openai_value_ranges(server, field, value):
    body = {"messages": MSG, "max_tokens": 2, field: value}
    if field == "top_logprobs":
        body["logprobs"] = True
    assert_400(post(server, CHAT, body), field)


def _requests_done(srv) -> float:
    text = requests.get(srv.url + "/metrics", timeout=30).text
    return sum(float(v) for v in re.findall(r'^llaisys:e2e_request_latency_seconds_count\{[^}]*\} (\S+)$', text,
                                            re.MULTILINE))


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
def test_json_routes_need_application_json(server, ctype):
    """A page on any site may POST text/plain without a CORS preflight: it must not run generation."""
    before = _requests_done(server)
    headers = {"Content-Type": ctype} if ctype else {}
    r = requests.post(server.url + COMP, data=json.dumps({"prompt": "hi", "max_tokens": 2}), headers=headers,
                      timeout=60)
    assert r.status_code == 415, r.text
    assert error_of(r)["code"] == "unsupported_media_type"
    assert _requests_done(server) == before  # nothing ran
    ok = requests.post(server.url + COMP, data=json.dumps({"prompt": "hi", "max_tokens": 2}), timeout=60,
                       headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200, ok.text


# ---- reproducer 2: a lone surrogate anywhere --------------------------------------------------
S = "a\ud800b"


@pytest.mark.parametrize("path,body,param", [
    (CHAT, {"messages": [{"role": "user", "content": S}]}, "messages"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "text", "text": S}]}]}, "messages"),
    (CHAT, {"messages": MSG, "session_id": "s1", "user": "u"}, None),  # a session turn for the next case
    (CHAT, {"messages": [{"role": "user", "content": S}], "session_id": "s1", "user": "u"}, "messages"),
    (CHAT, {"messages": MSG, "stop": [S]}, "stop"),
    (CHAT, {"messages": MSG, "user": S}, "user"),
    (COMP, {"prompt": S}, "prompt"),
    (COMP, {"prompt": ["x", S]}, "prompt"),
    ("/v1/embeddings", {"input": S}, "input"),
    ("/v1/embeddings", {"input": [S]}, "input"),
    ("/tokenize", {"prompt": S}, "prompt"),
    ("/tokenize", {"messages": [{"role": "user", "content": S}]}, "messages"),
])
def test_lone_surrogate_is_a_400_naming_the_field(server, path, body, param):
    r = post(server, path, dict(body, max_tokens=2) if path in (CHAT, COMP) else body)
    if param is None:
        assert r.status_code == 200, r.text
        return
    assert_400(r, param)
    assert "surrogate" in error_of(r)["message"]


# ---- reproducer 1 at the edge: the engine's admission check, before anything is queued ---------
POISON = [
    ("logit_bias", {"999999999": 5}), ("logit_bias", {"1180591620717411303424": 5}),
    ("stop_token_ids", [1180591620717411303424]), ("stop_token_ids", [999999999]),
    ("seed", -1), ("seed", 2 ** 64), ("seed", 10 ** 30),
]


@pytest.mark.parametrize("path", [CHAT, COMP])
@pytest.mark.parametrize("field,value", POISON)
def test_values_the_engine_refuses_are_a_400(server, path, field, value):
    body = {"messages": MSG} if path == CHAT else {"prompt": "hi"}
    assert_400(post(server, path, dict(body, max_tokens=2, **{field: value})), field, code=None)


def _streams(srv, prompts: list, out: dict) -> list:
    def run(i, p):
        with requests.post(srv.url + COMP, json={"prompt": p, "max_tokens": CAP, "temperature": 0, "ignore_eos": True,
                                                  "stream": True}, stream=True, timeout=300) as r:
            assert r.status_code == 200, r.text
            events = [e for _, e in sse_events(r)]
        out[i] = ("".join(e["choices"][0]["text"] for e in events if e != "[DONE]" and e.get("choices")),
                  [e["choices"][0]["finish_reason"] for e in events if e != "[DONE]" and e.get("choices")][-1],
                  events[-1])

    threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.slow  # two rounds of 8 streams of 96 tokens
def test_a_poisoned_request_leaves_a_batch_of_streams_untouched(server):
    prompts = [f"stream number {i} says" for i in range(8)]
    clean: dict = {}
    for t in _streams(server, prompts, clean):
        t.join()
    mixed: dict = {}
    threads = _streams(server, prompts, mixed)
    time.sleep(0.2)
    refused = []
    for field, value in POISON:  # while the eight run
        for path, body in ((COMP, {"prompt": "poison"}), (CHAT, {"messages": MSG})):
            r = post(server, path, dict(body, max_tokens=CAP, stream=True, **{field: value}))
            refused.append((field, r.status_code))
    for t in threads:
        t.join()
    assert all(status == 400 for _, status in refused), refused
    assert mixed == clean
    assert all(v[1] == "length" and v[2] == "[DONE]" for v in mixed.values()), mixed


# ---- reproducer 5: admission state is bounded --------------------------------------------------
def test_admission_keeps_no_entry_for_refused_users():
    from llaisys.server.protocol.errors import APIError
    from llaisys.server.state.limits import Admission, ServerLimits

    adm = Admission(ServerLimits(max_concurrent_requests=1, max_queue=0, per_user_concurrency=1))
    holder = adm.acquire("holder", time.monotonic() + 60)
    for i in range(100_000):
        with pytest.raises(APIError) as e:
            adm.acquire(f"user-{i}", time.monotonic() + 60)
        assert e.value.status == 429
    assert adm.num_tracked_users == 1  # the holder only
    assert len(adm._user_inflight) == 1
    holder.release()
    assert adm.num_tracked_users == 0 and len(adm._user_inflight) == 0


def test_token_budgets_are_an_lru_map_with_a_cap_and_expire():
    from llaisys.server.protocol.errors import APIError
    from llaisys.server.state.limits import Admission, ServerLimits

    now = [0.0]
    adm = Admission(ServerLimits(per_user_token_budget=10, token_budget_window_s=60, max_tracked_users=1000),
                    clock=lambda: now[0])
    for i in range(100_000):
        adm.charge(f"user-{i}", 10)
        now[0] += 1e-4  # 100,000 users within 10 s: all inside one window
    assert len(adm._spent) == 1000
    with pytest.raises(APIError) as e:  # a recent spender is still held to its budget
        adm.acquire("user-99999", now[0] + 60)
    assert e.value.code == "token_budget_exceeded"
    assert adm.num_tracked_users == 1000
    now[0] += 61  # the window passed: the next charge forgets everyone idle since
    adm.charge("late", 1)
    assert list(adm._spent) == ["late"]


@pytest.mark.slow  # a server of its own and ~400 requests
def test_admission_state_stays_bounded_through_the_server(start_tiny_server):
    srv = start_tiny_server("--max-concurrent-requests", "1", "--max-queue", "0", "--per-user-token-budget", "1",
                            "--max-tracked-users", "10", "--max-tokens-cap", "400")
    for i in range(40):  # 40 users spend their budget: at most 10 are remembered
        r = post(srv, COMP, {"prompt": [1, 2], "max_tokens": 1, "user": f"spender-{i}"})
        assert r.status_code == 200, r.text
    assert post(srv, COMP, {"prompt": [1], "max_tokens": 1, "user": "spender-39"}).status_code == 429
    assert server_gauge(srv, "admission_tracked_users") == 10
    codes = []
    with ThreadPoolExecutor(8) as pool:
        for round_ in range(8):  # the holder runs; meanwhile every other request is refused at once
            with requests.post(srv.url + COMP, json={"prompt": "x", "max_tokens": 400, "ignore_eos": True,
                                                     "stream": True, "user": "holder"}, stream=True, timeout=300) as h:
                next(h.iter_content(chunk_size=None))
                codes += pool.map(lambda i: post(srv, COMP, {"prompt": [1], "max_tokens": 1,
                                                             "user": f"refused-{round_}-{i}"}).status_code, range(40))
            if codes.count(429) >= 150:
                break
    assert codes.count(429) >= 150, codes
    assert server_gauge(srv, "admission_tracked_users") <= 10  # the spenders (LRU-capped); nothing for the refused users
