"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) through the
official `anthropic` client over loopback: a plain message and its stream reassembled by
the client (`get_final_message()`) equal for greedy decoding, a stop sequence, a tool_use
round trip (tool_use -> tool_result -> text) on the real 0.5B, count_tokens equal to the
message's input_tokens, a timeout mid-stream as an `event: error`; on the tiny checkpoint:
the raw event sequence (ping included), thinking blocks from the reasoning split, a
prefill, and errors in Anthropic's shape (a missing max_tokens, an image block, a wrong
x-api-key, an unknown tool in tool_choice and other bad input: 4xx, never 5xx)."""

import json

import anthropic
import pytest
import requests

from server_helpers import MODEL_NAME

KEY = "test-key"
GREEDY = {"extra_body": {"temperature": 0}}  # this client version no longer has a temperature argument
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                            "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
HELLO = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("--api-key", KEY)


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def tiny(start_tiny_server):
    return start_tiny_server("--reasoning-parser", "deepseek_r1", "--api-key", KEY)


@pytest.fixture(scope="module")
def tiny_client(tiny):
    return anthropic.Anthropic(base_url=tiny.url, api_key=KEY, max_retries=0, timeout=600)


def streamed(client, **kw):
    with client.messages.stream(**kw) as s:
        return s.get_final_message()


def same_message(a, b) -> None:
    """Equal but for the message and tool_use ids (fresh per request)."""
    assert a.id.startswith("msg_") and b.id.startswith("msg_") and a.id != b.id
    da, db = a.model_dump(exclude={"id"}), b.model_dump(exclude={"id"})
    for x in da["content"] + db["content"]:
        if x["type"] == "tool_use":
            assert x.pop("id").startswith("toolu_")
    assert da == db


def test_plain_message_and_its_stream(client):
    kw = dict(model=MODEL_NAME, max_tokens=12, messages=HELLO, **GREEDY)
    m = client.messages.create(**kw)
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL_NAME
    (block,) = m.content
    assert block.type == "text" and "hello" in block.text.lower()
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert 0 < m.usage.output_tokens <= 12
    assert m.usage.input_tokens == client.messages.count_tokens(model=MODEL_NAME, messages=HELLO).input_tokens
    same_message(m, streamed(client, **kw))


def test_stop_sequence_and_max_tokens(client):
    m = client.messages.create(model=MODEL_NAME, max_tokens=12, messages=HELLO, stop_sequences=["!", ","], **GREEDY)
    assert (m.stop_reason, m.stop_sequence) == ("stop_sequence", "!") and m.content[0].text == "Hello"
    assert streamed(client, model=MODEL_NAME, max_tokens=12, messages=HELLO, stop_sequences=["!", ","],
                    **GREEDY).stop_sequence == "!"
    m = client.messages.create(model=MODEL_NAME, max_tokens=1, messages=HELLO, **GREEDY)
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 1


def test_tool_use_round_trip(client):
    kw = dict(model=MODEL_NAME, max_tokens=40, messages=ASK, tools=[WEATHER], **GREEDY,
              tool_choice={"type": "any", "disable_parallel_tool_use": True})
    m = client.messages.create(**kw)
    assert m.stop_reason == "tool_use"
    (call,) = [b for b in m.content if b.type == "tool_use"]
    assert call.id.startswith("toolu_") and call.name == "get_weather" and isinstance(call.input["city"], str)
    same_message(m, streamed(client, **kw))
    msgs = ASK + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": json.dumps({"temperature_c": 18})}]}]
    answer = client.messages.create(model=MODEL_NAME, max_tokens=24, messages=msgs, tools=[WEATHER],
                                    tool_choice={"type": "none"}, **GREEDY)
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text.strip()
    # the tool result reached the prompt: count_tokens counts what /v1/messages ran
    count = client.messages.count_tokens(model=MODEL_NAME, messages=msgs, tools=[WEATHER],
                                         tool_choice={"type": "none"})
    assert count.input_tokens == answer.usage.input_tokens
    without = client.messages.count_tokens(model=MODEL_NAME, messages=msgs[:2] + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": ""}]}],
        tools=[WEATHER], tool_choice={"type": "none"})
    assert without.input_tokens < count.input_tokens


def test_count_tokens_follows_system_and_tools(tiny_client):
    def count(**kw):
        return tiny_client.messages.count_tokens(model=MODEL_NAME, messages=ASK, **kw).input_tokens

    plain = count()
    assert count(system="Answer in French.") != plain
    assert count(system=[{"type": "text", "text": "Answer in French."}]) == count(system="Answer in French.")
    assert count(tools=[WEATHER]) > plain + 20  # the tool's definition is in the prompt


def _raw_events(srv, body) -> list:
    with requests.post(srv.url + "/v1/messages", json=dict(body, stream=True), stream=True, timeout=300,
                       headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events, kind = [], None
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["type"] == kind
                events.append(data)
    return events


def test_event_sequence_and_thinking_blocks(tiny, tiny_client):
    """deepseek_r1 on a model that never writes </think>: the whole answer is reasoning."""
    body = {"model": MODEL_NAME, "max_tokens": 6, "temperature": 0, "messages": HELLO}
    events = _raw_events(tiny, body)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    assert kinds[2] == "content_block_start" and kinds[-3] == "content_block_stop"
    assert events[2]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert {e["delta"]["type"] for e in events if e["type"] == "content_block_delta"} == {"thinking_delta"}
    assert events[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert events[-2]["usage"] == {"output_tokens": 6}
    m = tiny_client.messages.create(model=MODEL_NAME, max_tokens=6, messages=HELLO, **GREEDY)
    (block,) = m.content
    assert block.type == "thinking" and block.thinking == "".join(
        e["delta"]["thinking"] for e in events if e["type"] == "content_block_delta")
    same_message(m, streamed(tiny_client, model=MODEL_NAME, max_tokens=6, messages=HELLO, **GREEDY))


def test_prefill_continues_the_last_assistant_turn(tiny_client):
    msgs = HELLO + [{"role": "assistant", "content": "Hello"}]
    count = tiny_client.messages.count_tokens(model=MODEL_NAME, messages=msgs).input_tokens
    assert count > tiny_client.messages.count_tokens(model=MODEL_NAME, messages=HELLO).input_tokens
    m = tiny_client.messages.create(model=MODEL_NAME, max_tokens=2, messages=msgs, **GREEDY)
    assert m.usage.input_tokens == count


def test_a_failure_mid_stream_is_an_error_event(start_server):
    """The deadline (--request-timeout 1) passes while the 0.5B counts to 1000: the stream ends
    with one `event: error` (no message_stop), the JSON answer is a 504; both timeout_error."""
    srv = start_server("--api-key", KEY, "--request-timeout", "1")
    body = {"model": MODEL_NAME, "max_tokens": 1000, "temperature": 0,
            "messages": [{"role": "user", "content": "Count from 1 to 1000, one number per line."}]}
    events = _raw_events(srv, body)
    assert [e["type"] for e in events[:2]] == ["message_start", "ping"]
    assert events[-1]["type"] == "error" and "message_stop" not in [e["type"] for e in events]
    assert events[-1]["error"]["type"] == "timeout_error" and "timeout" in events[-1]["error"]["message"]
    c = anthropic.Anthropic(base_url=srv.url, api_key=KEY, max_retries=0, timeout=600)
    kw = dict({k: v for k, v in body.items() if k != "temperature"}, **GREEDY)
    with pytest.raises(anthropic.APIStatusError) as e:
        c.messages.create(**kw)
    _assert_error(e.value, 504, "timeout_error", "timeout")
    with pytest.raises(anthropic.APIStatusError) as e:  # the client raises the streamed error
        streamed(c, **kw)
    assert e.value.body["error"]["type"] == "timeout_error"


# ---- errors in Anthropic's shape --------------------------------------------------------------------
def _assert_error(e, status: int, kind: str, words: str) -> None:
    assert e.status_code == status
    assert e.body["type"] == "error" and set(e.body) == {"type", "error"}
    assert e.body["error"]["type"] == kind and words in e.body["error"]["message"]


def test_missing_max_tokens(tiny):
    r = requests.post(tiny.url + "/v1/messages", json={"model": MODEL_NAME, "messages": HELLO}, timeout=60,
                      headers={"x-api-key": KEY})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": "'max_tokens' is a required field"}}


def test_image_block_is_refused(tiny_client):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    for content in ([{"type": "text", "text": "What is this?"}, image],
                    [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [image]}]):
        with pytest.raises(anthropic.BadRequestError) as e:
            tiny_client.messages.create(model=MODEL_NAME, max_tokens=4, messages=[{"role": "user",
                                                                                   "content": content}])
        _assert_error(e.value, 400, "invalid_request_error", "image blocks are not supported")


def test_wrong_api_key(tiny):
    bad = anthropic.Anthropic(base_url=tiny.url, api_key="wrong", max_retries=0)
    for call in (lambda: bad.messages.create(model=MODEL_NAME, max_tokens=4, messages=HELLO),
                 lambda: bad.messages.count_tokens(model=MODEL_NAME, messages=HELLO)):
        with pytest.raises(anthropic.AuthenticationError) as e:
            call()
        _assert_error(e.value, 401, "authentication_error", "API key")
    r = requests.post(tiny.url + "/v1/messages/count_tokens", json={"messages": HELLO}, timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"})  # the Bearer form works too
    assert r.status_code == 200 and r.json()["input_tokens"] > 0


def test_unknown_tool_in_tool_choice(tiny_client):
    with pytest.raises(anthropic.BadRequestError) as e:
        tiny_client.messages.create(model=MODEL_NAME, max_tokens=4, messages=ASK, tools=[WEATHER],
                                    tool_choice={"type": "tool", "name": "get_time"})
    _assert_error(e.value, 400, "invalid_request_error", "'get_time'")


def test_unknown_model(tiny_client):
    with pytest.raises(anthropic.NotFoundError) as e:
        tiny_client.messages.create(model="claude-opus-4", max_tokens=4, messages=HELLO)
    _assert_error(e.value, 404, "not_found_error", "claude-opus-4")


@pytest.mark.parametrize("patch,words", [
    ({"messages": []}, "at least 1"),
    ({"messages": [{"role": "system", "content": "x"}]}, "'messages[0].role'"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "'tool_use' block is not supported in user turns"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "needs its text"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "tool_use_id"),
    ({"messages": HELLO + [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "get_weather",
                                                              "input": {}}]}]}, "prefill"),
    ({"messages": [{"role": "assistant", "content": "Hi"}]}, "user turn"),
    ({"system": 5}, "'system'"),
    ({"max_tokens": 0}, "'max_tokens'"),
    ({"temperature": 1.5}, "'temperature'"),
    ({"stop_sequences": [""]}, "'stop_sequences[0]'"),
    ({"tools": [{"name": "bash", "type": "bash_20250124"}]}, "server tools"),
    ({"tools": [{"name": "f"}]}, "input_schema"),
    ({"tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]}, "'tools[0].name'"),
    ({"tools": [WEATHER, WEATHER]}, "given twice"),
    ({"tool_choice": {"type": "tool"}}, "needs the tool's name"),
    ({"tool_choice": {"type": "any"}}, "needs tools"),
    ({"output_config": {"format": {"type": "json_schema"}}}, "schema"),
    ({"max_tokens": 4000}, "context"),  # the prompt alone is past the 512-token context
])
def test_bad_input_is_a_400_in_anthropic_shape(tiny, patch, words):
    body = dict({"model": MODEL_NAME, "max_tokens": 4, "messages": HELLO}, **patch)
    if words == "context":
        body["messages"] = [{"role": "user", "content": "word " * 600}]
    r = requests.post(tiny.url + "/v1/messages", json=body, timeout=60, headers={"x-api-key": KEY})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error", err
    assert words in err["error"]["message"], err


def test_count_tokens_ignores_the_fields_it_does_not_take(tiny):
    r = requests.post(tiny.url + "/v1/messages/count_tokens", timeout=60, headers={"x-api-key": KEY},
                      json={"messages": HELLO, "max_tokens": "many", "temperature": 7, "stream": "yes"})
    assert r.status_code == 200 and r.json()["input_tokens"] > 0


def test_a_wrong_method_answers_in_anthropic_shape(tiny):
    """Flask raises a 405 before the blueprint's own handlers run: it still gets Anthropic's shape."""
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = requests.get(tiny.url + path, headers={"x-api-key": KEY}, timeout=30)
        assert r.status_code == 405 and r.headers["Allow"]
        assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": f"GET is not allowed on {path}"}}
    r = requests.get(tiny.url + "/v1/models", headers={"x-api-key": KEY}, timeout=30)  # the OpenAI routes keep theirs
    assert r.status_code == 200
    r = requests.put(tiny.url + "/v1/chat/completions", headers={"x-api-key": KEY}, timeout=30)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed" and "type" not in r.json()
