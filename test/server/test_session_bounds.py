"""Sessions and stored responses stay bounded against a real server (the tiny checkpoint,
max_tokens 1): fields no template renders are not stored (300 requests carrying 3.5 MB of
junk each leave the server's RSS where it was), a session's bytes are capped, and one
tenant's traffic cannot evict another tenant's sessions (issue #39, part 5)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from server_helpers import MODEL_NAME, error_of

JUNK_BYTES = 3_500_000  # under the default 4 MiB body limit (--max-body-bytes)
KEY_A, KEY_B = "tenant-a-key", "tenant-b-key"


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def chat(sid: str, **message) -> dict:
    return {"model": MODEL_NAME, "max_tokens": 1, "temperature": 0, "session_id": sid,
            "messages": [dict({"role": "user", "content": "hi"}, **message)]}


def test_rendered_message_keeps_only_rendered_fields():
    from llaisys.server.protocol.messages import rendered_message

    m = {"role": "assistant", "content": None, "refusal": None, "annotations": [], "junk": "x" * 100,
         "reasoning_content": "r", "tool_calls": [{"id": "c1", "type": "function", "junk": 1,
                                                    "function": {"name": "f", "arguments": "{}", "junk": 2}}, 7]}
    assert rendered_message(m) == {"role": "assistant", "content": None, "reasoning_content": "r",
                                   "tool_calls": [{"id": "c1", "type": "function",
                                                   "function": {"name": "f", "arguments": "{}"}}, 7]}
    assert "junk" in m  # the caller's dict is not changed


@pytest.fixture(scope="module")
def server(start_tiny_server):
    return start_tiny_server()


def _junk_request(i: int, junk: str) -> tuple:
    """(path, body) of the i-th junk request: the junk on a message, on a text part, or on a
    /v1/responses input item (stored: store defaults to true)."""
    kind = i % 3
    if kind == 0:
        return "/v1/chat/completions", chat(f"junk-{i}", junk=junk)
    if kind == 1:
        return "/v1/chat/completions", chat(f"junk-{i}", content=[{"type": "text", "text": "hi", "junk": junk}])
    return "/v1/responses", {"model": MODEL_NAME, "max_output_tokens": 1,
                             "input": [{"role": "user", "content": "hi", "junk": junk}]}


def test_unrendered_fields_do_not_grow_memory(server):
    """300 requests with a 3.5 MB unknown field each, every one kept as a session or stored
    response: the server's RSS grows < 100 MB (storing the junk took ~1 GB)."""
    junk = "j" * JUNK_BYTES
    s = requests.Session()

    def send(i):
        path, body = _junk_request(i, junk)
        r = s.post(server.url + path, data=json.dumps(body), headers={"Content-Type": "application/json"},
                   timeout=120)
        assert r.status_code == 200, r.text[:500]
        return r

    for i in range(6):  # warm up: allocator arenas, template and tokenizer caches
        send(1000 + i)
    before = rss_mib(server.proc.pid)
    for i in range(300):
        send(i)
    grown = rss_mib(server.proc.pid) - before
    assert grown < 100, f"RSS grew {grown:.0f} MiB over 300 requests"
    print(f"RSS {before:.0f} MiB -> {before + grown:.0f} MiB over 300 requests")
    stored = s.get(f"{server.url}/v1/sessions/junk-297", timeout=30).json()["messages"]  # (the tenant's
    # quota of 256 has evicted the first ones)
    assert stored[0] == {"role": "user", "content": "hi"} and len(json.dumps(stored)) < 10_000
    assert s.get(f"{server.url}/v1/sessions/junk-298", timeout=30).json()["messages"][0] == \
        {"role": "user", "content": "hi"}  # the text part flattened, its junk key gone


def test_unknown_content_part_types_are_refused(server):
    r = requests.post(server.url + "/v1/chat/completions", timeout=60, json=chat(
        "img", content=[{"type": "image_url", "image_url": {"url": "data:,"}}]))
    assert r.status_code == 400 and error_of(r)["param"] == "messages"
    r = requests.post(server.url + "/v1/responses", timeout=60, json={
        "model": MODEL_NAME, "max_output_tokens": 1,
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]})
    assert r.status_code == 400 and error_of(r)["param"] == "input"


def test_a_session_past_its_byte_cap_is_refused(start_tiny_server):
    srv = start_tiny_server("--max-session-bytes", "3000")
    r = requests.post(srv.url + "/v1/chat/completions", json=chat("big", content="a" * 2000), timeout=60)
    assert r.status_code == 200, r.text
    r = requests.post(srv.url + "/v1/chat/completions", json=chat("big", content="b" * 2000), timeout=60)
    err = error_of(r)
    assert r.status_code == 400 and err["code"] == "session_too_large" and "3000 bytes" in err["message"]
    assert len(requests.get(srv.url + "/v1/sessions/big", timeout=30).json()["messages"]) == 2  # unchanged
    r = requests.post(srv.url + "/v1/chat/completions", json=chat("big", content="small"), timeout=60)
    assert r.status_code == 200, r.text
    # a previous_response_id chain is capped the same way
    r = requests.post(srv.url + "/v1/responses", timeout=60, json={"model": MODEL_NAME, "max_output_tokens": 1,
                                                                   "input": "a" * 1600})
    assert r.status_code == 200, r.text
    r = requests.post(srv.url + "/v1/responses", timeout=60, json={
        "model": MODEL_NAME, "max_output_tokens": 1, "input": "b" * 1600, "previous_response_id": r.json()["id"]})
    assert r.status_code == 400 and error_of(r)["code"] == "session_too_large"


def test_one_tenants_traffic_evicts_none_of_anothers_sessions(start_tiny_server):
    """Default quotas: tenant B's 2,000 sessions and stored responses (past --max-sessions
    1024) leave every one of tenant A's sessions in place."""
    srv = start_tiny_server("--api-key", KEY_A, "--api-key", KEY_B)
    a = {"Authorization": f"Bearer {KEY_A}"}
    for i in range(3):
        r = requests.post(srv.url + "/v1/chat/completions", json=chat(f"a-{i}"), headers=a, timeout=60)
        assert r.status_code == 200, r.text

    def flood(k):
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {KEY_B}"
        for i in range(k, 2000, 4):
            if i % 2:
                r = s.post(srv.url + "/v1/chat/completions", json=chat(f"b-{i}"), timeout=60)
            else:
                r = s.post(srv.url + "/v1/responses", json={"model": MODEL_NAME, "max_output_tokens": 1,
                                                            "input": "hi"}, timeout=60)
            assert r.status_code == 200, r.text

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(flood, range(4)))
    for i in range(3):
        r = requests.get(f"{srv.url}/v1/sessions/a-{i}", headers=a, timeout=30)
        assert r.status_code == 200 and len(r.json()["messages"]) == 2, r.text
    r = requests.get(f"{srv.url}/v1/sessions/b-1", headers={"Authorization": f"Bearer {KEY_B}"}, timeout=30)
    assert r.status_code == 404  # B's oldest went: its own quota


def test_users_without_keys_are_tenants_too(start_tiny_server):
    """The outside tester's case: under --max-sessions 32, another `user`'s 40 stored responses
    evicted a session. Now the global cap evicts from the tenant holding the most: that user."""
    srv = start_tiny_server("--max-sessions", "32")
    r = requests.post(srv.url + "/v1/chat/completions", json=dict(chat("alice-s"), user="alice"), timeout=60)
    assert r.status_code == 200, r.text
    for _ in range(40):
        r = requests.post(srv.url + "/v1/responses", timeout=60, json={"model": MODEL_NAME, "max_output_tokens": 1,
                                                                       "input": "hi", "user": "mallory"})
        assert r.status_code == 200, r.text
    r = requests.get(srv.url + "/v1/sessions/alice-s?user=alice", timeout=30)
    assert r.status_code == 200 and len(r.json()["messages"]) == 2, r.text
